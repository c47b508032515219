//! Directory operations. mkdir, rmdir and changes of a directory's mode or owner
//! are applied on every server (the replicated lookup state); each server runs the
//! same checks, so they agree. readdir runs on every server for its own entries.

use crate::dirtable::ROOT_ID;
use crate::keys::{self, DIRS, DIRTIMES, ENTRIES};
use crate::server::{Located, MetaServer};
use canopy_posix::perm;
use canopy_posix::setattr;
use canopy_proto::attr::{access, S_ISGID};
use canopy_proto::msg::{DirLookup, DirTimes, Record};
use canopy_proto::path::NsPath;
use canopy_proto::{Creds, DirEntry, Errno, FileKind, Reply, SetAttr};
use canopy_store::Batch;

/// The largest readdir page a server returns.
pub const MAX_PAGE: u32 = 4096;

impl MetaServer {
    pub(crate) fn mkdir(&self, creds: &Creds, path: &NsPath, mode: u32, assign: Option<DirLookup>) -> Result<Reply, Errno> {
        let _g = self.lock_structure();
        let (parent, name) = match self.locate(creds, path)? {
            Located::Dir { id, .. } if assign.as_ref().is_some_and(|a| a.id == id) => {
                // A replayed replica step: already applied.
                return self.dir_lookup(id).map(Reply::Dir);
            }
            Located::Root | Located::Dir { .. } | Located::File { .. } => return Err(Errno::EEXIST),
            Located::Absent { parent, name } => (parent, name),
        };
        let dir = self.dir_owner(parent)?;
        perm::require_dir_write(creds, dir)?;
        let lookup = match assign {
            Some(l) if !self.table.read().can_insert(parent, &name, l.id) => return Err(Errno::EEXIST),
            Some(l) => l,
            None => {
                let id = self.ids.lock().allocate(&*self.store).map_err(crate::server::io)?;
                let (gid, setgid) = if dir.mode & S_ISGID != 0 { (dir.gid, S_ISGID) } else { (creds.gid, 0) };
                DirLookup { id, mode: (mode & 0o7777) | setgid, uid: creds.uid, gid }
            }
        };
        let mut b = Batch::new();
        b.put(DIRS, keys::entry_key(parent, &name), keys::encode(&lookup));
        if self.is_primary(path) {
            let now = self.now_ns();
            b.put(DIRTIMES, keys::id_key(lookup.id).to_vec(), keys::encode(&DirTimes { atime: now, mtime: now, ctime: now }));
        }
        self.write(b)?;
        self.table.write().insert(parent, &name, lookup.clone());
        Ok(Reply::Dir(lookup))
    }

    pub(crate) fn rmdir(&self, creds: &Creds, path: &NsPath) -> Result<Reply, Errno> {
        let _g = self.lock_structure();
        let (parent, name, id) = match self.locate(creds, path)? {
            Located::Root => return Err(Errno::EBUSY),
            Located::File { .. } => return Err(Errno::ENOTDIR),
            Located::Absent { .. } => return Err(Errno::ENOENT),
            Located::Dir { parent, name, id } => (parent, name, id),
        };
        let dir = self.dir_owner(parent)?;
        perm::require_dir_write(creds, dir)?;
        let lookup = self.dir_lookup(id)?;
        perm::check_sticky(creds, dir, lookup.uid)?;
        let has_subdirs = self.table.read().get(id).is_some_and(|n| !n.subdirs.is_empty());
        if has_subdirs || !self.no_local_entries(id)? {
            return Err(Errno::ENOTEMPTY);
        }
        let mut b = Batch::new();
        b.delete(DIRS, keys::entry_key(parent, &name));
        b.delete(DIRTIMES, keys::id_key(id).to_vec());
        self.write(b)?;
        self.table.write().remove(id);
        Ok(Reply::Dir(lookup))
    }

    /// chmod/chown of a directory, applied to the replicated lookup state.
    pub(crate) fn dir_set_attr(&self, creds: &Creds, path: &NsPath, set: &SetAttr) -> Result<Reply, Errno> {
        if set.size.is_some() {
            return Err(Errno::EISDIR);
        }
        let _g = self.lock_structure();
        let (key, id) = match self.locate(creds, path)? {
            Located::Root => (keys::entry_key(0, ""), ROOT_ID),
            Located::Dir { parent, name, id } => (keys::entry_key(parent, &name), id),
            Located::File { .. } => return Err(Errno::ENOTDIR),
            Located::Absent { .. } => return Err(Errno::ENOENT),
        };
        let had_times = self.load_dir_times(id)?.is_some();
        let mut attr = self.dir_attr(id)?;
        setattr::apply(creds, &mut attr, set, self.now_ns())?;
        let lookup = DirLookup { id, mode: attr.mode, uid: attr.uid, gid: attr.gid };
        let mut b = Batch::new();
        b.put(DIRS, key, keys::encode(&lookup));
        if had_times {
            let times = DirTimes { atime: attr.atime, mtime: attr.mtime, ctime: attr.ctime };
            b.put(DIRTIMES, keys::id_key(id).to_vec(), keys::encode(&times));
        }
        self.write(b)?;
        self.table.write().set_lookup(id, attr.mode, attr.uid, attr.gid);
        Ok(Reply::Attr(attr))
    }

    /// One page of this server's part of a directory, names after `after`.
    pub(crate) fn read_dir(&self, creds: &Creds, path: &NsPath, after: Option<&str>, limit: u32, with_dirs: bool) -> Result<Reply, Errno> {
        let id = match self.locate(creds, path)? {
            Located::Root => ROOT_ID,
            Located::Dir { id, .. } => id,
            Located::File { .. } => return Err(Errno::ENOTDIR),
            Located::Absent { .. } => return Err(Errno::ENOENT),
        };
        let owner = self.dir_owner(id)?;
        perm::require(creds, owner, true, access::R)?;
        let limit = limit.clamp(1, MAX_PAGE) as usize;
        let prefix = id.to_be_bytes();
        let after_key = after.map(|a| keys::entry_key(id, a));
        let files = self.store.scan(ENTRIES, &prefix, after_key.as_deref(), limit).map_err(crate::server::io)?;
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
            let table = self.table.read();
            let node = table.get(id).ok_or(Errno::ENOENT)?;
            let range = match after {
                Some(a) => node.subdirs.range::<str, _>((std::ops::Bound::Excluded(a), std::ops::Bound::Unbounded)),
                None => node.subdirs.range::<str, _>(..),
            };
            let dirs: Vec<DirEntry> =
                range.take(limit).map(|(n, id)| DirEntry { name: n.clone(), ino: *id, kind: FileKind::Dir }).collect();
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

impl MetaServer {
    /// The directory at `path` here, without permission checks.
    pub(crate) fn dir_probe(&self, path: &NsPath) -> Result<Reply, Errno> {
        let table = self.table.read();
        let found = crate::resolve::resolve_dir(&table, &Creds::root(), path).ok();
        Ok(Reply::Probe(found.and_then(|id| table.get(id)).map(|n| n.lookup.clone())))
    }

    /// Makes this server's directory state at `path` equal `want`: insert, update
    /// or remove. Idempotent, so recovery can run it any number of times.
    pub(crate) fn dir_sync(&self, path: &NsPath, want: Option<DirLookup>) -> Result<Reply, Errno> {
        let _g = self.lock_structure();
        let (parent, name, current) = match path.split() {
            None => (0, String::new(), Some(ROOT_ID)),
            Some((parent_path, name)) => {
                let table = self.table.read();
                match crate::resolve::resolve_dir(&table, &Creds::root(), &parent_path) {
                    Ok(parent) => (parent, name.to_string(), table.child(parent, name)),
                    Err(_) if want.is_none() => return Ok(Reply::Unit),
                    Err(_) => return Err(Errno::ENOENT),
                }
            }
        };
        let key = keys::entry_key(parent, &name);
        let mut b = Batch::new();
        match (current, want) {
            (None, None) => return Ok(Reply::Unit),
            (Some(id), None) => {
                let has_subdirs = self.table.read().get(id).is_some_and(|n| !n.subdirs.is_empty());
                if id == ROOT_ID || has_subdirs || !self.no_local_entries(id)? {
                    return Err(Errno::ENOTEMPTY);
                }
                b.delete(DIRS, key);
                b.delete(DIRTIMES, keys::id_key(id).to_vec());
                self.write(b)?;
                self.table.write().remove(id);
            }
            (None, Some(l)) => {
                if self.load_entry(parent, &name)?.is_some() || !self.table.read().can_insert(parent, &name, l.id) {
                    return Err(Errno::EEXIST);
                }
                b.put(DIRS, key, keys::encode(&l));
                if self.is_primary(path) && self.load_dir_times(l.id)?.is_none() {
                    let now = self.now_ns();
                    b.put(DIRTIMES, keys::id_key(l.id).to_vec(), keys::encode(&DirTimes { atime: now, mtime: now, ctime: now }));
                }
                self.write(b)?;
                self.table.write().insert(parent, &name, l);
            }
            (Some(id), Some(l)) if id == l.id => {
                b.put(DIRS, key, keys::encode(&l));
                self.write(b)?;
                self.table.write().set_lookup(id, l.mode, l.uid, l.gid);
            }
            (Some(_), Some(_)) => return Err(Errno::EEXIST),
        }
        Ok(Reply::Unit)
    }
}


