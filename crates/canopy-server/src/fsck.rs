//! One server's consistency report. What every mode checks: every file entry
//! decodes, hard-link references are listed for the cluster-wide nlink check, the
//! entry count `Stats` keeps is right. The mode adds its own (ShardFS: the
//! table's digest, and every object on its primary).

use crate::core::io;
use crate::keys::{self, ENTRIES, INODES};
use crate::server::MetaServer;
use canopy_proto::msg::{FsckReport, Inode, Record};
use canopy_proto::{Errno, Reply};

impl MetaServer {
    pub(crate) fn fsck(&self) -> Result<Reply, Errno> {
        let _g = self.lock_structure();
        let me = self.cfg.index;
        let mut r = FsckReport { server: me, ..FsckReport::default() };
        let mut problems = self.problems();
        self.store
            .for_each(ENTRIES, b"", &mut |k, v| {
                r.files += 1;
                match keys::decode::<Record>(v) {
                    None => problems.push(format!("server {me}: undecodable entry {k:?}")),
                    Some(Record::Linked { ino, home }) => r.links.push((ino, home)),
                    Some(_) => {}
                }
                true
            })
            .map_err(io)?;
        self.store
            .for_each(INODES, b"", &mut |k, v| {
                let ino = k.try_into().map(u64::from_be_bytes).unwrap_or(0);
                match keys::decode::<Inode>(v) {
                    Some(i) => r.inodes.push((ino, i.attr.nlink)),
                    None => problems.push(format!("server {me}: undecodable inode {ino:#x}")),
                }
                true
            })
            .map_err(io)?;
        let kept = self.entry_count();
        if kept != r.files {
            problems.push(format!("server {me}: Stats counts {kept} files, the store holds {}", r.files));
        }
        r.problems = problems;
        self.mode().fsck(self, &mut r)?;
        Ok(Reply::Fsck(r))
    }
}
