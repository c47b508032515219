//! Rename. A file rename is one RPC when both names have the same primary, else
//! three steps the client drives under the lock service: `RenameOut` (check on the
//! source's primary), `RenameIn` (check, replace and insert on the destination's),
//! `RenameOutCommit` (drop the source). A directory rename changes the replicated
//! table on every server (`RenameDir`, first as a check on all, then applied), then
//! `Migrate`/`Adopt`/`Release` move the objects below it whose primary changed.

use crate::keys::{self, DIRS, DIRTIMES, ENTRIES};
use crate::ops_link::DroppedName;
use crate::server::{io, Located, MetaServer};
use canopy_posix::perm;
use canopy_proto::attr::access;
use canopy_proto::msg::{DirTimes, Moved, MovedItem, Record};
use canopy_proto::path::{NsPath, NS_PATH_MAX};
use canopy_proto::{Creds, Errno, Reply};
use canopy_store::Batch;

fn record_ino(r: &Record) -> u64 {
    match r {
        Record::Inode(i) => i.attr.ino,
        Record::Linked { ino, .. } => *ino,
    }
}

/// What the destination side of a file rename decided.
enum InOutcome {
    /// Source and destination are the same file: nothing to do.
    SameFile,
    /// Inserted; what replacing a name left for the client to finish.
    Inserted(DroppedName),
}

impl MetaServer {
    /// Source-side checks of a file rename; returns the source's location and record.
    fn rename_out_check(&self, creds: &Creds, src: &NsPath, dst: &NsPath) -> Result<(u64, String, Record), Errno> {
        let (sp, sname, record) = match self.locate(creds, src)? {
            Located::Root => return Err(Errno::EBUSY),
            Located::Dir { .. } => return Err(Errno::EISDIR),
            Located::Absent { .. } => return Err(Errno::ENOENT),
            Located::File { parent, name, record } => (parent, name, record),
        };
        let dst_parent = {
            let table = self.table.read();
            let (dp, dname) = crate::resolve::resolve_parent(&table, creds, dst).map_err(|m| self.miss(&table, m))?;
            if table.child(dp, dname).is_some() {
                return Err(Errno::EISDIR);
            }
            dp
        };
        let sdir = self.dir_owner(sp)?;
        perm::require_dir_write(creds, sdir)?;
        perm::require_dir_write(creds, self.dir_owner(dst_parent)?)?;
        perm::check_sticky(creds, sdir, self.record_uid(&record))?;
        Ok((sp, sname, record))
    }

    /// Destination-side checks and writes of a file rename, into `b`.
    fn rename_in_apply(&self, b: &mut Batch, creds: &Creds, dst: &NsPath, mut record: Record) -> Result<InOutcome, Errno> {
        let (dp, dname, replaced) = match self.locate(creds, dst)? {
            Located::Root | Located::Dir { .. } => return Err(Errno::EISDIR),
            Located::Absent { parent, name } => (parent, name, None),
            Located::File { parent, name, record: existing } => (parent, name, Some(existing)),
        };
        let ddir = self.dir_owner(dp)?;
        perm::require_dir_write(creds, ddir)?;
        let mut dropped = DroppedName::default();
        if let Some(existing) = replaced {
            if record_ino(&existing) == record_ino(&record) {
                return Ok(InOutcome::SameFile);
            }
            perm::check_sticky(creds, ddir, self.record_uid(&existing))?;
            dropped = self.drop_link(b, &existing)?;
        }
        if let Record::Inode(i) = &mut record {
            i.attr.ctime = self.now_ns();
        }
        b.put(ENTRIES, keys::entry_key(dp, &dname), keys::encode(&record));
        Ok(InOutcome::Inserted(dropped))
    }

    pub(crate) fn rename_local(&self, creds: &Creds, src: &NsPath, dst: &NsPath) -> Result<Reply, Errno> {
        let _g = self.lock_entries(&[src, dst], true);
        let (sp, sname, record) = self.rename_out_check(creds, src, dst)?;
        let mut b = Batch::new();
        match self.rename_in_apply(&mut b, creds, dst, record)? {
            InOutcome::SameFile => Ok(DroppedName::default().into_reply()),
            InOutcome::Inserted(dropped) => {
                b.delete(ENTRIES, keys::entry_key(sp, &sname));
                self.write(b)?;
                Ok(dropped.into_reply())
            }
        }
    }

    pub(crate) fn rename_out(&self, creds: &Creds, src: &NsPath, dst: &NsPath) -> Result<Reply, Errno> {
        let _g = self.lock_entries(&[src, dst], false);
        let (_, _, record) = self.rename_out_check(creds, src, dst)?;
        Ok(Reply::Record(record))
    }

    /// Answers `Unit` when source and destination are one file (the client must
    /// then leave the source alone), `Dropped` when inserted.
    pub(crate) fn rename_in(&self, creds: &Creds, _src: &NsPath, dst: &NsPath, record: Record) -> Result<Reply, Errno> {
        let _g = self.lock_entries(&[dst], true);
        let mut b = Batch::new();
        match self.rename_in_apply(&mut b, creds, dst, record)? {
            InOutcome::SameFile => Ok(Reply::Unit),
            InOutcome::Inserted(dropped) => {
                self.write(b)?;
                Ok(dropped.into_reply())
            }
        }
    }

    pub(crate) fn rename_out_commit(&self, src: &NsPath, ino: u64) -> Result<Reply, Errno> {
        let _g = self.lock_entries(&[src], true);
        if let Located::File { parent, name, record } = self.locate(&Creds::root(), src)? {
            if record_ino(&record) == ino {
                let mut b = Batch::new();
                b.delete(ENTRIES, keys::entry_key(parent, &name));
                self.write(b)?;
            }
        }
        Ok(Reply::Unit)
    }

    pub(crate) fn rename_dir(&self, creds: &Creds, src: &NsPath, dst: &NsPath, check_only: bool) -> Result<Reply, Errno> {
        if src.is_root() || dst.is_root() {
            return Err(Errno::EBUSY);
        }
        let _g = self.lock_structure();
        let (sp, sname, sid) = match self.locate(creds, src)? {
            Located::Dir { parent, name, id } => (parent, name, id),
            Located::File { .. } => return Err(Errno::ENOTDIR),
            _ => return Err(Errno::ENOENT),
        };
        let dst_at = self.locate(creds, dst)?;
        // Only once both paths resolved (a missing or non-directory ancestor of the
        // destination reports first, as on Linux).
        if dst.is_within(src) && dst != src {
            return Err(Errno::EINVAL);
        }
        let (dp, dname, replaced) = match dst_at {
            Located::Dir { id, .. } if id == sid => return Ok(Reply::Unit),
            Located::Dir { parent, name, id } => (parent, name, Some(id)),
            Located::File { .. } => return Err(Errno::ENOTDIR),
            Located::Absent { parent, name } => (parent, name, None),
            Located::Root => return Err(Errno::EBUSY),
        };
        let sdir = self.dir_owner(sp)?;
        let ddir = self.dir_owner(dp)?;
        let moved = self.dir_lookup(sid)?;
        perm::require_dir_write(creds, sdir)?;
        perm::require_dir_write(creds, ddir)?;
        perm::check_sticky(creds, sdir, moved.uid)?;
        if sp != dp {
            // Its ".." changes: POSIX asks for write permission on the moved directory.
            perm::require(creds, perm::Owner::of_dir(&moved), true, access::W)?;
        }
        if let Some(did) = replaced {
            let victim = self.dir_lookup(did)?;
            perm::check_sticky(creds, ddir, victim.uid)?;
            let has_subdirs = self.table.read().get(did).is_some_and(|n| !n.subdirs.is_empty());
            if has_subdirs || !self.no_local_entries(did)? {
                return Err(Errno::ENOTEMPTY);
            }
        }
        // Objects are named and placed by their full path: one made longer than
        // NS_PATH_MAX could be neither reached nor migrated.
        let grows = dst.as_str().len().saturating_sub(src.as_str().len());
        if grows > 0 && self.longest_below(sid)? + grows > NS_PATH_MAX {
            return Err(Errno::ENAMETOOLONG);
        }
        if check_only {
            return Ok(Reply::Unit);
        }
        let mut b = Batch::new();
        b.delete(DIRS, keys::entry_key(sp, &sname));
        if let Some(did) = replaced {
            b.delete(DIRTIMES, keys::id_key(did).to_vec());
        }
        b.put(DIRS, keys::entry_key(dp, &dname), keys::encode(&moved));
        self.write(b)?;
        let mut table = self.table.write();
        if let Some(did) = replaced {
            table.remove(did);
        }
        table.move_dir(sid, dp, &dname);
        Ok(Reply::Unit)
    }

    /// The length of the longest path this server holds at or below directory
    /// `id`: its subdirectories and its own file entries.
    fn longest_below(&self, id: u64) -> Result<usize, Errno> {
        let table = self.table.read();
        let mut longest = 0;
        for dir in table.subtree(id) {
            let dir_len = table.path_of(dir).ok_or(Errno::EIO)?.as_str().len();
            let mut name_max = None;
            self.store
                .for_each(ENTRIES, &dir.to_be_bytes(), &mut |k, _| {
                    name_max = name_max.max(Some(k.len() - 8));
                    true
                })
                .map_err(io)?;
            longest = longest.max(name_max.map_or(dir_len, |n| dir_len + 1 + n));
        }
        Ok(longest)
    }

    /// Up to `limit` objects below directory `root` (its current path) held here
    /// whose primary is now another server.
    pub(crate) fn migrate(&self, root: &NsPath, limit: u32) -> Result<Reply, Errno> {
        let _g = self.lock_structure();
        let limit = limit.clamp(1, crate::ops_dir::MAX_PAGE) as usize;
        let table = self.table.read();
        let root_id = crate::resolve::resolve_dir(&table, &Creds::root(), root).map_err(|_| Errno::ENOENT)?;
        let mut out = Vec::new();
        for id in table.subtree(root_id) {
            let dir_path = table.path_of(id).ok_or(Errno::EIO)?;
            if let Some(times) = self.load_dir_times(id)? {
                let target = self.primary_of(&dir_path);
                if target != self.cfg.index {
                    out.push(Moved { target, item: MovedItem::DirTimes { id, times } });
                }
            }
            let mut failed = None;
            self.store
                .for_each(ENTRIES, &id.to_be_bytes(), &mut |k, v| {
                    if out.len() >= limit {
                        return false;
                    }
                    let parsed = keys::split_entry_key(k).zip(keys::decode::<Record>(v));
                    let Some(((_, name), record)) = parsed else {
                        failed = Some(Errno::EIO);
                        return false;
                    };
                    match dir_path.join(&name) {
                        Ok(p) => {
                            let target = self.primary_of(&p);
                            if target != self.cfg.index {
                                out.push(Moved { target, item: MovedItem::File { parent: id, name, record } });
                            }
                        }
                        Err(e) => failed = Some(e),
                    }
                    failed.is_none()
                })
                .map_err(io)?;
            if let Some(e) = failed {
                return Err(e);
            }
            if out.len() >= limit {
                break;
            }
        }
        Ok(Reply::Moved(out))
    }

    pub(crate) fn adopt(&self, items: Vec<MovedItem>) -> Result<Reply, Errno> {
        let _g = self.lock_structure();
        let mut b = Batch::new();
        for item in items {
            match item {
                MovedItem::File { parent, name, record } => b.put(ENTRIES, keys::entry_key(parent, &name), keys::encode(&record)),
                MovedItem::DirTimes { id, times } => b.put(DIRTIMES, keys::id_key(id).to_vec(), keys::encode::<DirTimes>(&times)),
            }
        }
        self.write(b)?;
        Ok(Reply::Unit)
    }

    pub(crate) fn release(&self, items: Vec<MovedItem>) -> Result<Reply, Errno> {
        let _g = self.lock_structure();
        let mut b = Batch::new();
        for item in items {
            match item {
                MovedItem::File { parent, name, .. } => b.delete(ENTRIES, keys::entry_key(parent, &name)),
                MovedItem::DirTimes { id, .. } => b.delete(DIRTIMES, keys::id_key(id).to_vec()),
            }
        }
        self.write(b)?;
        Ok(Reply::Unit)
    }
}
