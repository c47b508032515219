//! Directory mutations, applied on every server (the replicated lookup state):
//! each server runs the same checks, so they agree. `DirSync` is recovery's
//! idempotent "make this directory's state equal that".

use super::dirtable::ROOT_ID;
use super::ShardFs;
use crate::core::{dir_attr_of, Core};
use crate::keys::{self, DIRS, DIRTIMES};
use crate::mode::Located;
use canopy_posix::perm;
use canopy_posix::setattr;
use canopy_proto::attr::S_ISGID;
use canopy_proto::msg::{is_txn_dir_id, DirLookup, DirTimes};
use canopy_proto::path::NsPath;
use canopy_proto::{Creds, Errno, Reply, SetAttr};
use canopy_store::Batch;

impl ShardFs {
    /// A mkdir's step here (see `Request::Mkdir`). A replica's fence goes up
    /// before the directory appears, once every operation admitted earlier has
    /// ended; if nothing was applied, there is nothing to guard, so it comes
    /// down again at once.
    pub(crate) fn mkdir(&self, core: &Core, creds: &Creds, path: &NsPath, mode: u32, id: u64, fence: Option<u64>) -> Result<Reply, Errno> {
        if !is_txn_dir_id(id) {
            return Err(Errno::EINVAL);
        }
        self.refuse_revoked_mkdir(id)?;
        if let Some(txn) = fence {
            self.fences.fence(txn, &[path.to_string()])?;
        }
        let made = self.make_dir(core, creds, path, mode, id);
        // Refused as revoked: recovery has the transaction, and lifts its fences.
        if let (Err(e), Some(txn)) = (&made, fence) {
            if *e != Errno::ESTALE {
                self.fences.unfence(txn);
            }
        }
        made
    }

    /// Inserts directory `path` as `id`, its owner, group and mode derived from
    /// this server's replica of the parent (the same on every server).
    fn make_dir(&self, core: &Core, creds: &Creds, path: &NsPath, mode: u32, id: u64) -> Result<Reply, Errno> {
        let _g = core.lock_structure();
        self.refuse_revoked_mkdir(id)?;
        let primary = self.is_primary(core, path);
        let (parent, name) = match self.locate_path(core, creds, path)? {
            // A step sent again: already applied.
            Located::Dir { id: have, .. } if have == id => {
                let times = if primary { Some(core.load_dir_times(id)?.unwrap_or_else(|| core.fresh_dir_times())) } else { None };
                return Ok(made_reply(self.dir_lookup(id)?, times));
            }
            Located::Root | Located::Dir { .. } | Located::File { .. } => return Err(Errno::EEXIST),
            Located::Absent { parent, name } => (parent, name),
        };
        let dir = self.dir_owner(parent)?;
        perm::require_dir_write(creds, dir)?;
        if !self.table.read().can_insert(parent, &name, id) {
            eprintln!("canopy-server: mkdir {path}: id {id:#x} already names a directory; was the lock service's state lost?");
            return Err(Errno::EIO);
        }
        let (gid, setgid) = if dir.mode & S_ISGID != 0 { (dir.gid, S_ISGID) } else { (creds.gid, 0) };
        let lookup = DirLookup { id, mode: (mode & 0o7777) | setgid, uid: creds.uid, gid };
        let mut b = Batch::new();
        b.put(DIRS, keys::entry_key(parent, &name), keys::encode(&lookup));
        let times = primary.then(|| core.fresh_dir_times());
        if let Some(t) = &times {
            b.put(DIRTIMES, keys::id_key(lookup.id).to_vec(), keys::encode(t));
        }
        core.write(b)?;
        self.table.write().insert(parent, &name, lookup.clone());
        Ok(made_reply(lookup, times))
    }

    pub(crate) fn rmdir(&self, core: &Core, creds: &Creds, path: &NsPath, txn: u64) -> Result<Reply, Errno> {
        let _g = core.lock_structure();
        self.refuse_revoked(Some(txn))?;
        let (parent, name, id) = match self.locate_path(core, creds, path)? {
            Located::Root => return Err(Errno::EBUSY),
            Located::File { .. } => return Err(Errno::ENOTDIR),
            Located::Absent { .. } => return Err(Errno::ENOENT),
            Located::Dir { parent, name, id } => (parent, name, id),
        };
        let dir = self.dir_owner(parent)?;
        perm::require_dir_write(creds, dir)?;
        let lookup = self.dir_lookup(id)?;
        perm::check_sticky(creds, dir, lookup.uid)?;
        if self.has_subdirs(id) || !core.no_local_entries(id)? {
            return Err(Errno::ENOTEMPTY);
        }
        let mut b = Batch::new();
        b.delete(DIRS, keys::entry_key(parent, &name));
        b.delete(DIRTIMES, keys::id_key(id).to_vec());
        core.write(b)?;
        self.table.write().remove(id);
        Ok(Reply::Dir(lookup))
    }

    /// chmod/chown of a directory, applied to the replicated lookup state.
    pub(crate) fn dir_set_attr(&self, core: &Core, creds: &Creds, path: &NsPath, set: &SetAttr, txn: u64) -> Result<Reply, Errno> {
        if set.size.is_some() {
            return Err(Errno::EISDIR);
        }
        let _g = core.lock_structure();
        self.refuse_revoked(Some(txn))?;
        let (key, id) = match self.locate_path(core, creds, path)? {
            Located::Root => (keys::entry_key(0, ""), ROOT_ID),
            Located::Dir { parent, name, id } => (keys::entry_key(parent, &name), id),
            Located::File { .. } => return Err(Errno::ENOTDIR),
            Located::Absent { .. } => return Err(Errno::ENOENT),
        };
        let had_times = core.load_dir_times(id)?.is_some();
        let (lookup, nlink) = crate::mode::Mode::dir(self, core, id)?.ok_or(Errno::ENOENT)?;
        let mut attr = core.dir_attr(&lookup, nlink.ok_or(Errno::EIO)?)?;
        setattr::apply(creds, &mut attr, set, core.now_ns())?;
        let lookup = DirLookup { id, mode: attr.mode, uid: attr.uid, gid: attr.gid };
        let mut b = Batch::new();
        b.put(DIRS, key, keys::encode(&lookup));
        if had_times {
            let times = DirTimes { atime: attr.atime, mtime: attr.mtime, ctime: attr.ctime };
            b.put(DIRTIMES, keys::id_key(id).to_vec(), keys::encode(&times));
        }
        core.write(b)?;
        self.table.write().set_lookup(id, attr.mode, attr.uid, attr.gid);
        Ok(Reply::Attr(attr))
    }

    /// The directory at `path` here, without permission checks.
    pub(crate) fn dir_probe(&self, path: &NsPath) -> Result<Reply, Errno> {
        let table = self.table.read();
        let found = super::resolve::resolve_dir(&table, &Creds::root(), path).ok();
        Ok(Reply::Probe(found.and_then(|id| table.get(id)).map(|n| n.lookup.clone())))
    }

    /// Makes this server's directory state at `path` equal `want`: insert, update
    /// or remove. Idempotent, so recovery can run it any number of times. A
    /// coordinator's rollback names its transaction (`txn`), refused once
    /// recovery has revoked it.
    pub(crate) fn dir_sync(&self, core: &Core, path: &NsPath, want: Option<DirLookup>, txn: Option<u64>) -> Result<Reply, Errno> {
        let _g = core.lock_structure();
        self.refuse_revoked(txn)?;
        let (parent, name, current) = match path.split() {
            None => (0, String::new(), Some(ROOT_ID)),
            Some((parent_path, name)) => {
                let table = self.table.read();
                match super::resolve::resolve_dir(&table, &Creds::root(), &parent_path) {
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
                if id == ROOT_ID || self.has_subdirs(id) || !core.no_local_entries(id)? {
                    return Err(Errno::ENOTEMPTY);
                }
                b.delete(DIRS, key);
                b.delete(DIRTIMES, keys::id_key(id).to_vec());
                core.write(b)?;
                self.table.write().remove(id);
            }
            (None, Some(l)) => {
                if core.load_record(&keys::entry_key(parent, &name))?.is_some() || !self.table.read().can_insert(parent, &name, l.id) {
                    return Err(Errno::EEXIST);
                }
                b.put(DIRS, key, keys::encode(&l));
                if self.is_primary(core, path) && core.load_dir_times(l.id)?.is_none() {
                    b.put(DIRTIMES, keys::id_key(l.id).to_vec(), keys::encode(&core.fresh_dir_times()));
                }
                core.write(b)?;
                self.table.write().insert(parent, &name, l);
            }
            (Some(id), Some(l)) if id == l.id => {
                b.put(DIRS, key, keys::encode(&l));
                core.write(b)?;
                self.table.write().set_lookup(id, l.mode, l.uid, l.gid);
            }
            (Some(_), Some(_)) => return Err(Errno::EEXIST),
        }
        Ok(Reply::Unit)
    }
}

/// A mkdir step's answer: the primary's (given its times) is the whole new directory, times
/// included (they live only there), so the caller needs no stat after.
fn made_reply(lookup: DirLookup, primary_times: Option<DirTimes>) -> Reply {
    match primary_times {
        Some(times) => Reply::Attr(dir_attr_of(&lookup, 2, times)),
        None => Reply::Dir(lookup),
    }
}
