//! Directory rename: the replicated table changes on every server (`RenameDir`,
//! first a check on all that also fences both names and says whether the
//! source is a file after all, then applied); the client
//! then migrates the objects below whose primary changed (`migrate.rs`). A
//! directory with nothing below it anywhere (a leaf without files) needs no
//! migration: its own times move with the apply step (the source's primary
//! parks what it drops until the transaction ends, `parked.rs`), and the
//! destination's primary lifts its fence as it applies (the others keep
//! theirs until the client knows the rename committed).

use super::ShardFs;
use crate::core::{io, Core};
use crate::keys::{self, DIRS, DIRTIMES, ENTRIES};
use crate::mode::Located;
use canopy_posix::perm;
use canopy_proto::attr::access;
use canopy_proto::path::{NsPath, NS_PATH_MAX};
use canopy_proto::msg::{DirTimes, RenameDirStep};
use canopy_proto::{Creds, Errno, Reply};
use canopy_store::Batch;

/// A directory rename as this server sees it once both names resolved: the
/// source's parent, name and id, the destination's parent and name, the
/// directory it replaces, and the moved directory's lookup state.
struct Renaming {
    sp: u64,
    sname: String,
    sid: u64,
    dp: u64,
    dname: String,
    replaced: Option<u64>,
    moved: canopy_proto::msg::DirLookup,
}

impl ShardFs {
    pub(crate) fn rename_dir(&self, core: &Core, creds: &Creds, src: &NsPath, dst: &NsPath, step: RenameDirStep) -> Result<Reply, Errno> {
        if src.is_root() || dst.is_root() {
            return Err(Errno::EBUSY);
        }
        if let RenameDirStep::Check { txn } = step {
            // Up before the check: what it finds below both names stays so
            // until the transaction lifts the fences.
            self.fences.fence(txn, &[src.to_string(), dst.to_string()])?;
        }
        let _g = core.lock_structure();
        // The coordinator's steps; recovery's undo is let through.
        match step {
            RenameDirStep::Check { txn } => self.refuse_revoked(Some(txn))?,
            RenameDirStep::Apply { txn, .. } => self.refuse_revoked(txn)?,
            RenameDirStep::Undo { .. } | RenameDirStep::Redo { .. } => {}
        }
        let r = match self.resolve_rename(core, creds, src, dst, &step)? {
            Ok(r) => r,
            Err(answer) => return Ok(answer),
        };
        self.check_rename(core, creds, src, dst, &r)?;
        // `txn`: whose parked times move; `fenced`: whose fence must be up.
        let (times, unfence, txn, fenced) = match step {
            RenameDirStep::Check { .. } => {
                return Ok(Reply::RenameChecked { below: self.anything_below(core, r.sid)?, times: core.load_dir_times(r.sid)? });
            }
            RenameDirStep::Apply { times, unfence, txn } => (times, unfence, txn, txn),
            RenameDirStep::Undo { txn } => (None, None, Some(txn), Some(txn)),
            RenameDirStep::Redo { txn } => (None, None, None, Some(txn)),
        };
        // A step that comes after recovery lifted its transaction's fence
        // (the coordinator's lease ran out meanwhile, or a recoverer's) must
        // not land: recovery has decided the outcome from what it found.
        if fenced.is_some_and(|t| !self.fences.is_up(t)) {
            return Err(Errno::ESTALE);
        }
        self.apply_rename(core, &r, times, txn, src, dst)?;
        let below = self.anything_below(core, r.sid)?;
        if let (Some(txn), false) = (unfence, below) {
            self.fences.unfence(txn);
        }
        Ok(Reply::RenameChecked { below, times: None })
    }

    /// Both names of a directory rename, resolved here; `Err(answer)` when
    /// the step ends before anything is checked (a source that is a file,
    /// met by the check step; a destination that already names the moved
    /// directory).
    fn resolve_rename(&self, core: &Core, creds: &Creds, src: &NsPath, dst: &NsPath, step: &RenameDirStep) -> Result<Result<Renaming, Reply>, Errno> {
        let (sp, sname, sid) = match self.locate_path(core, creds, src)? {
            Located::Dir { parent, name, id } => (parent, name, id),
            // The client checks before it knows what it renames: a file is
            // renamed as one, under the fences just put up.
            Located::File { .. } if matches!(step, RenameDirStep::Check { .. }) => return Ok(Err(Reply::RenameOfFile)),
            Located::File { .. } => return Err(Errno::ENOTDIR),
            _ => return Err(Errno::ENOENT),
        };
        let dst_at = self.locate_path(core, creds, dst)?;
        // Only once both paths resolved (a missing or non-directory ancestor of the
        // destination reports first, as on Linux).
        if dst.is_within(src) && dst != src {
            return Err(Errno::EINVAL);
        }
        let (dp, dname, replaced) = match dst_at {
            Located::Dir { id, .. } if id == sid => return Ok(Err(Reply::Unit)),
            Located::Dir { parent, name, id } => (parent, name, Some(id)),
            Located::File { .. } => return Err(Errno::ENOTDIR),
            Located::Absent { parent, name } => (parent, name, None),
            Located::Root => return Err(Errno::EBUSY),
        };
        let moved = self.dir_lookup(sid)?;
        Ok(Ok(Renaming { sp, sname, sid, dp, dname, replaced, moved }))
    }

    /// The caller's rights to the rename, an empty directory it replaces,
    /// and the length of every path it makes.
    fn check_rename(&self, core: &Core, creds: &Creds, src: &NsPath, dst: &NsPath, r: &Renaming) -> Result<(), Errno> {
        let sdir = self.dir_owner(r.sp)?;
        let ddir = self.dir_owner(r.dp)?;
        perm::require_dir_write(creds, sdir)?;
        perm::require_dir_write(creds, ddir)?;
        perm::check_sticky(creds, sdir, r.moved.uid)?;
        if r.sp != r.dp {
            // Its ".." changes: POSIX asks for write permission on the moved directory.
            perm::require(creds, perm::Owner::of_dir(&r.moved), true, access::W)?;
        }
        if let Some(did) = r.replaced {
            let victim = self.dir_lookup(did)?;
            perm::check_sticky(creds, ddir, victim.uid)?;
            if self.has_subdirs(did) || !core.no_local_entries(did)? {
                return Err(Errno::ENOTEMPTY);
            }
        }
        // Objects are named and placed by their full path: one made longer than
        // NS_PATH_MAX could be neither reached nor migrated.
        let grows = dst.as_str().len().saturating_sub(src.as_str().len());
        if grows > 0 && self.longest_below(core, r.sid)? + grows > NS_PATH_MAX {
            return Err(Errno::ENAMETOOLONG);
        }
        Ok(())
    }

    /// Writes the rename here (the moved directory's times as
    /// [`ShardFs::move_times`] says) and makes the table follow.
    fn apply_rename(&self, core: &Core, r: &Renaming, times: Option<DirTimes>, txn: Option<u64>, src: &NsPath, dst: &NsPath) -> Result<(), Errno> {
        let mut b = Batch::new();
        b.delete(DIRS, keys::entry_key(r.sp, &r.sname));
        if let Some(did) = r.replaced {
            b.delete(DIRTIMES, keys::id_key(did).to_vec());
        }
        b.put(DIRS, keys::entry_key(r.dp, &r.dname), keys::encode(&r.moved));
        let parked = self.move_times(core, &mut b, r.sid, times, txn, src, dst)?;
        core.write(b)?;
        if let Some(txn) = parked {
            self.parked.written(txn, r.sid);
            // An unfence that lifted the fence since the check above, without
            // the structure lock, may have found nothing parked yet.
            if !self.fences.is_up(txn) {
                self.parked.drop_ended(core, &[txn])?;
            }
        }
        let mut table = self.table.write();
        if let Some(did) = r.replaced {
            table.remove(did);
        }
        table.move_dir(r.sid, r.dp, &r.dname);
        Ok(())
    }

    /// Whether this server may hold objects below directory `id` that a
    /// rename of it would migrate: any subdirectory (whose times or entries
    /// may live here), or a file entry of its own here. Two lookups, whatever
    /// the directory holds.
    fn anything_below(&self, core: &Core, id: u64) -> Result<bool, Errno> {
        Ok(self.has_subdirs(id) || !core.no_local_entries(id)?)
    }

    /// The moved directory `id`'s times, carried by the apply step rather than
    /// migrated (`times`; none from recovery, whose migration moves them):
    /// its new primary keeps them, with the rename's ctime (as ext4 gives a
    /// renamed directory), or, given none, takes back what `txn` parked (an
    /// undo); its old one drops them, parked for `txn` (`parked.rs`). Answers
    /// the transaction it parked them for.
    #[allow(clippy::too_many_arguments)]
    fn move_times(&self, core: &Core, b: &mut Batch, id: u64, times: Option<DirTimes>, txn: Option<u64>, src: &NsPath, dst: &NsPath) -> Result<Option<u64>, Errno> {
        let key = keys::id_key(id).to_vec();
        let renamed = |t: DirTimes| DirTimes { ctime: core.now_ns(), ..t };
        match (self.is_primary(core, src), self.is_primary(core, dst)) {
            (false, true) => {
                let times = match (times, txn) {
                    (Some(t), _) => Some(renamed(t)),
                    (None, Some(txn)) => self.parked.take_back(core, b, txn, id)?,
                    (None, None) => None,
                };
                if let Some(t) = times {
                    b.put(DIRTIMES, key, keys::encode(&t));
                }
            }
            (true, true) if times.is_some() => {
                if let Some(t) = core.load_dir_times(id)?.or(times) {
                    b.put(DIRTIMES, key, keys::encode(&renamed(t)));
                }
            }
            (true, false) if times.is_some() => {
                let kept = core.load_dir_times(id)?;
                b.delete(DIRTIMES, key);
                if let (Some(txn), Some(kept)) = (txn, kept) {
                    self.parked.park(b, txn, id, &kept);
                    return Ok(Some(txn));
                }
            }
            _ => {}
        }
        Ok(None)
    }

    /// The length of the longest path this server holds at or below directory
    /// `id`: its subdirectories and its own file entries.
    fn longest_below(&self, core: &Core, id: u64) -> Result<usize, Errno> {
        let table = self.table.read();
        let mut longest = 0;
        for dir in table.subtree(id) {
            let dir_len = table.path_of(dir).ok_or(Errno::EIO)?.as_str().len();
            let mut name_max = None;
            core.store
                .for_each(ENTRIES, &dir.to_be_bytes(), &mut |k, _| {
                    name_max = name_max.max(Some(k.len() - 8));
                    true
                })
                .map_err(io)?;
            longest = longest.max(name_max.map_or(dir_len, |n| dir_len + 1 + n));
        }
        Ok(longest)
    }
}
