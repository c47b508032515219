//! readdir: each server lists the entries it holds in a directory; the mode adds
//! the subdirectories it lists (ShardFS: the directory's primary, from the table).

use crate::core::io;
use crate::keys::{self, ENTRIES};
use crate::mode::{Located, Target};
use crate::server::MetaServer;
use canopy_posix::perm;
use canopy_proto::attr::access;
use canopy_proto::msg::Record;
use canopy_proto::{Creds, DirEntry, Errno, FileKind, Reply};

/// The largest readdir page a server returns.
pub const MAX_PAGE: u32 = 4096;

impl MetaServer {
    /// The id of the directory `at` names.
    pub(crate) fn dir_id(&self, creds: &Creds, at: &Target) -> Result<u64, Errno> {
        match self.locate(creds, at)? {
            Located::Root => Ok(crate::ROOT_ID),
            Located::Dir { id, .. } => Ok(id),
            Located::File { .. } => Err(Errno::ENOTDIR),
            Located::Absent { .. } => Err(Errno::ENOENT),
        }
    }

    /// One page of this server's part of a directory, names after `after`.
    pub(crate) fn read_dir(&self, creds: &Creds, at: &Target, after: Option<&str>, limit: u32, with_dirs: bool) -> Result<Reply, Errno> {
        let id = self.dir_id(creds, at)?;
        perm::require(creds, self.dir_owner(id)?, true, access::R)?;
        let limit = limit.clamp(1, MAX_PAGE) as usize;
        let prefix = id.to_be_bytes();
        let after_key = after.map(|a| keys::entry_key(id, a));
        let files = self.store.scan(ENTRIES, &prefix, after_key.as_deref(), limit).map_err(io)?;
        let mut entries: Vec<DirEntry> = Vec::with_capacity(files.len());
        for (k, v) in &files {
            let (_, name) = keys::split_entry_key(k).ok_or(Errno::EIO)?;
            let record: Record = keys::decode(v).ok_or(Errno::EIO)?;
            let (ino, kind) = match &record {
                Record::Inode(i) => (i.attr.ino, i.attr.kind),
                Record::Linked { ino, .. } => (*ino, FileKind::File),
            };
            entries.push(DirEntry { name, ino, kind });
        }
        let mut more = files.len() == limit;
        if with_dirs {
            let dirs = self.mode().subdirs(id, after, limit)?;
            more |= dirs.len() == limit;
            entries.extend(dirs);
            entries.sort_by(|a, b| a.name.cmp(&b.name));
            if entries.len() > limit {
                entries.truncate(limit);
                more = true;
            }
        }
        Ok(Reply::Entries { entries, more })
    }
}
