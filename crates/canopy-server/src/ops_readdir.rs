//! readdir: each server lists the entries it holds in a directory; the mode adds
//! the subdirectories it lists (ShardFS: the directory's primary, from the table).
//! A page is in the mode's key order; `after` names the last entry of the page
//! before.

use crate::core::{io, Core};
use crate::keys::{self, ENTRIES};
use crate::mode::{Located, Target};
use crate::server::MetaServer;
use canopy_posix::perm;
use canopy_proto::attr::access;
use canopy_proto::msg::Record;
use canopy_proto::{Creds, DirEntry, Errno, FileKind, Reply};

/// How a file entry appears in a listing: a shared (hard-linked) inode is a
/// regular file.
fn listed(name: String, record: &Record) -> DirEntry {
    let (ino, kind) = match record {
        Record::Inode(i) => (i.attr.ino, i.attr.kind),
        Record::Linked { ino, .. } => (*ino, FileKind::File),
    };
    DirEntry { name, ino, kind }
}

/// A page for a mode whose keys do not sort by name (IndexFS: by name hash):
/// every file entry of directory `id` here, and `dirs`, are read and the page
/// cut from them in name order. O(entries here) per page.
pub(crate) fn sorted_page(core: &Core, entry_name: &dyn Fn(&[u8]) -> Option<String>, id: u64, after: Option<&str>, limit: usize, dirs: Vec<DirEntry>) -> Result<(Vec<DirEntry>, bool), Errno> {
    let mut all: Vec<DirEntry> = Vec::new();
    let mut failed = None;
    core.store
        .for_each(ENTRIES, &id.to_be_bytes(), &mut |k, v| {
            match (entry_name(k), keys::decode::<Record>(v)) {
                (Some(name), Some(record)) if after.is_none_or(|a| name.as_str() > a) => all.push(listed(name, &record)),
                (Some(_), Some(_)) => {}
                _ => failed = Some(Errno::EIO),
            }
            true
        })
        .map_err(io)?;
    if let Some(e) = failed {
        return Err(e);
    }
    all.extend(dirs.into_iter().filter(|d| after.is_none_or(|a| d.name.as_str() > a)));
    all.sort_by(|a, b| a.name.cmp(&b.name));
    let more = all.len() > limit;
    all.truncate(limit);
    Ok((all, more))
}

/// The largest readdir page a server returns.
pub use canopy_proto::msg::MAX_PAGE;

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

    /// One page of this server's part of a directory, names after `after`, in
    /// name order.
    pub(crate) fn read_dir(&self, creds: &Creds, at: &Target, after: Option<&str>, limit: u32, with_dirs: bool) -> Result<Reply, Errno> {
        let id = self.dir_id(creds, at)?;
        perm::require(creds, self.dir_owner(id)?, true, access::R)?;
        let limit = limit.clamp(1, MAX_PAGE) as usize;
        if !self.mode().keys_in_name_order() {
            let dirs = if with_dirs { self.mode().subdirs(self, id, None, usize::MAX)? } else { Vec::new() };
            let (entries, more) = sorted_page(self, &|k| self.mode().entry_name(k), id, after, limit, dirs)?;
            return Ok(Reply::Entries { entries, more });
        }
        let prefix = id.to_be_bytes();
        let after_key = after.map(|a| self.entry_key(id, a));
        let files = self.store.scan(ENTRIES, &prefix, after_key.as_deref(), limit).map_err(io)?;
        let mut entries: Vec<DirEntry> = Vec::with_capacity(files.len());
        for (k, v) in &files {
            let name = self.mode().entry_name(k).ok_or(Errno::EIO)?;
            let record: Record = keys::decode(v).ok_or(Errno::EIO)?;
            entries.push(listed(name, &record));
        }
        let mut more = files.len() == limit;
        if with_dirs {
            let dirs = self.mode().subdirs(self, id, after, limit)?;
            more |= dirs.len() == limit;
            entries.extend(dirs);
            // In the mode's key order (ShardFS: by name; IndexFS: by name hash),
            // which `after` pages through.
            entries.sort_by_cached_key(|e| self.entry_key(id, &e.name));
            if entries.len() > limit {
                entries.truncate(limit);
                more = true;
            }
        }
        Ok(Reply::Entries { entries, more })
    }
}
