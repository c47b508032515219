//! One server's consistency report: every file entry under a known directory and on
//! its primary, directory times only on their primary, hard-link references listed
//! for the cluster-wide nlink check, and a digest of the replicated table.

use crate::keys::{self, DIRTIMES, ENTRIES, INODES};
use crate::server::{io, MetaServer};
use canopy_proto::msg::{FsckReport, Inode, Record};
use canopy_proto::{Errno, Reply};

impl MetaServer {
    pub(crate) fn fsck(&self) -> Result<Reply, Errno> {
        let _g = self.lock_structure();
        let table = self.table.read();
        let me = self.cfg.index;
        let mut r = FsckReport { server: me, dir_digest: table.digest(), dirs: table.len() as u64, ..FsckReport::default() };
        let mut problems = self.problems();
        self.store
            .for_each(ENTRIES, b"", &mut |k, v| {
                r.files += 1;
                let Some(((parent, name), record)) = keys::split_entry_key(k).zip(keys::decode::<Record>(v)) else {
                    problems.push(format!("server {me}: undecodable entry {k:?}"));
                    return true;
                };
                let Some(path) = table.path_of(parent).and_then(|p| p.join(&name).ok()) else {
                    problems.push(format!("server {me}: entry {name:?} in missing directory {parent:#x}"));
                    return true;
                };
                if self.primary_of(&path) != me {
                    problems.push(format!("server {me}: {path} belongs on server {}", self.primary_of(&path)));
                }
                if table.child(parent, &name).is_some() {
                    problems.push(format!("server {me}: {path} is both a file and a directory"));
                }
                if let Record::Linked { ino, home } = record {
                    r.links.push((ino, home));
                }
                true
            })
            .map_err(io)?;
        self.store
            .for_each(DIRTIMES, b"", &mut |k, _| {
                let id = k.try_into().map(u64::from_be_bytes).unwrap_or(0);
                match table.path_of(id) {
                    None => problems.push(format!("server {me}: times of missing directory {id:#x}")),
                    Some(p) if self.primary_of(&p) != me => {
                        problems.push(format!("server {me}: times of {p} belong on server {}", self.primary_of(&p)))
                    }
                    Some(_) => {}
                }
                true
            })
            .map_err(io)?;
        for id in table.ids() {
            if let Some(p) = table.path_of(id) {
                if self.primary_of(&p) == me && self.load_dir_times(id)?.is_none() {
                    problems.push(format!("server {me}: directory {p} has no times on its primary"));
                }
            }
        }
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
        let kept = self.stats().files;
        if kept != r.files {
            problems.push(format!("server {me}: Stats counts {kept} files, the store holds {}", r.files));
        }
        r.problems = problems;
        Ok(Reply::Fsck(r))
    }
}
