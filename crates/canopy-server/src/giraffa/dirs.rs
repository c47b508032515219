//! Giraffa's directory mutations, each on the server holding the directory's
//! row. mkdir is one row written with the parent's proof (2 RPCs with the
//! proof, as the paper counts it). rmdir must not race a create in the
//! directory, whose entries live on another server: it stops proofs of the
//! directory and waits out the live ones (`GfRmdirBegin`), so once the
//! entries' server finds none (`GfEmpty`) none can appear, then removes the
//! row (`GfRmdirEnd`). A permission change rewrites the row and waits out the
//! proofs of the old permissions, unless it takes nothing from anyone.

use super::{proofs, row_key_of, Giraffa};
use crate::core::{dir_attr_of, io, Core, NO_TIMES};
use crate::keys::{self, DIRS, DIRTIMES, ENTRIES};
use crate::mode::{Mode, Target};
use canopy_posix::perm::{self, Owner};
use canopy_posix::setattr;
use canopy_proto::attr::S_ISGID;
use canopy_proto::giraffa::{self, DirProof, DirRow};
use canopy_proto::msg::{DirLookup, DirTimes};
use canopy_proto::path::NsPath;
use canopy_proto::{Creds, Errno, Reply, SetAttr};
use canopy_store::Batch;

/// How long a begun rmdir holds its directory closed to proofs: a client
/// that stalls longer finds its rmdir lapsed (`ESTALE`) and starts again.
const REMOVAL_HOLD_MS: u64 = 10_000;

impl Giraffa {
    /// `path` split into its parent's entries prefix and its name, checked to
    /// be held here; `EBUSY` for the root.
    fn placed(&self, core: &Core, path: &str) -> Result<(NsPath, u64, String), Errno> {
        let p = NsPath::parse(path)?;
        let Some((parent, name)) = p.split() else { return Err(Errno::EBUSY) };
        let (prefix, name) = (giraffa::prefix(&parent), name.to_string());
        if !self.here(core, prefix) {
            return Err(Errno::EREMOTE);
        }
        Ok((p, prefix, name))
    }

    /// The parent `proof` vouches for, which must be `prefix`'s directory.
    fn parent_by_proof(&self, core: &Core, proof: &DirProof, prefix: u64) -> Result<Owner, Errno> {
        if proof.prefix != prefix {
            return Err(Errno::EINVAL);
        }
        Ok(Owner::of_dir(&self.accept(core, proof)?))
    }

    pub(super) fn mkdir(&self, core: &Core, creds: &Creds, path: &str, mode: u32, proof: &DirProof) -> Result<Reply, Errno> {
        let (p, prefix, name) = self.placed(core, path)?;
        if !proof.adds {
            return Err(Errno::EINVAL);
        }
        let parent = self.parent_by_proof(core, proof, prefix)?;
        let target = Target::Path(p.clone());
        let _g = core.lock_stripes(|| vec![prefix], false, &[&target]);
        self.admit_row(prefix, p.as_str())?;
        let key = giraffa::row_key(prefix, &name);
        if self.row_at(core, &key)?.is_some() || core.load_record(&key)?.is_some() {
            return Err(Errno::EEXIST);
        }
        perm::require_dir_write(creds, parent)?;
        let (gid, setgid) = if parent.mode & S_ISGID != 0 { (parent.gid, S_ISGID) } else { (creds.gid, 0) };
        let lookup = DirLookup { id: core.new_id()?, mode: (mode & 0o7777) | setgid, uid: creds.uid, gid };
        let row = DirRow { lookup: lookup.clone(), path: p.to_string(), subdirs: 0 };
        self.put_new_row(core, &key, &row)?;
        self.grew(core, prefix, 1);
        core.dir_attr(&lookup, 2).map(Reply::Attr)
    }

    pub(super) fn rmdir_begin(&self, core: &Core, creds: &Creds, path: &str, proof: &DirProof) -> Result<Reply, Errno> {
        let (p, prefix, name) = self.placed(core, path)?;
        let parent = self.parent_by_proof(core, proof, prefix)?;
        let key = giraffa::row_key(prefix, &name);
        let (lookup, until) = {
            let target = Target::Path(p);
            let _g = core.lock_stripes(|| vec![prefix], false, &[&target]);
            self.admit_row(prefix, path)?;
            let Some(row) = self.row_at(core, &key)? else {
                return Err(if core.load_record(&key)?.is_some() { Errno::ENOTDIR } else { Errno::ENOENT });
            };
            perm::require_dir_write(creds, parent)?;
            perm::check_sticky(creds, parent, row.lookup.uid)?;
            let now = core.clock.wall_ms();
            let mut proofs = self.proofs.lock();
            if !proofs.close(row.lookup.id, now, now + REMOVAL_HOLD_MS) {
                return Err(Errno::EAGAIN); // another rmdir of it is under way
            }
            let until = proofs.adds_live_until(row.lookup.id);
            (row.lookup, until)
        };
        self.wait_until(core, until);
        Ok(Reply::Dir(lookup))
    }

    /// Whether the directory whose entries have `prefix` has none here.
    pub(super) fn empty(&self, core: &Core, prefix: u64) -> Result<Reply, Errno> {
        if prefix & giraffa::PREFIX_BIT == 0 || !self.here(core, prefix) {
            return Err(Errno::EINVAL);
        }
        let _g = core.lock_stripes(|| vec![prefix], false, &[]);
        for cf in [ENTRIES, DIRS] {
            if !core.store.scan(cf, &prefix.to_be_bytes(), None, 1).map_err(io)?.is_empty() {
                return Err(Errno::ENOTEMPTY);
            }
        }
        Ok(Reply::Unit)
    }

    pub(super) fn rmdir_end(&self, core: &Core, path: &str, ino: u64, commit: bool) -> Result<Reply, Errno> {
        let (p, prefix, name) = self.placed(core, path)?;
        let target = Target::Path(p.clone());
        let _g = core.lock_stripes(|| vec![prefix], false, &[&target]);
        let mut proofs = self.proofs.lock();
        if !commit {
            proofs.reopen(ino);
            return Ok(Reply::Unit);
        }
        if let Err(e) = self.admit_row(prefix, path) {
            proofs.reopen(ino); // a directory rename holds it: start again after
            return Err(e);
        }
        if !proofs.is_closed(ino, core.clock.wall_ms()) {
            return Err(Errno::ESTALE); // lapsed: proofs may have been issued since
        }
        let key = giraffa::row_key(prefix, &name);
        match self.row_at(core, &key)? {
            Some(row) if row.lookup.id == ino => {}
            _ => return Err(Errno::ENOENT),
        }
        let mut b = Batch::new();
        b.delete(DIRS, key);
        b.delete(DIRTIMES, keys::id_key(ino).to_vec());
        core.write(b)?;
        self.rows.lock().remove(&giraffa::prefix(&p));
        proofs.reopen(ino);
        Ok(Reply::Unit)
    }

    /// chmod, chown or utimes of directory `path`, whose row is here. Only the
    /// directory's own attributes are checked (its owner, for mode and owner).
    pub(super) fn dir_setattr(&self, core: &Core, creds: &Creds, path: &str, set: &SetAttr) -> Result<Reply, Errno> {
        let p = NsPath::parse(path)?;
        let key = row_key_of(&p);
        let prefix = giraffa::row_prefix(&p);
        let target = Target::Path(p.clone());
        let (attr, until) = {
            let _g = core.lock_stripes(|| vec![prefix], false, &[&target]);
            self.admit_row(prefix, p.as_str())?;
            let Some(mut row) = self.row_at(core, &key)? else {
                return Err(if core.load_record(&key)?.is_some() { Errno::ENOTDIR } else if self.here(core, prefix) { Errno::ENOENT } else { Errno::EREMOTE });
            };
            if set.size.is_some() {
                return Err(Errno::EISDIR);
            }
            let times = core.load_dir_times(row.lookup.id)?.unwrap_or(NO_TIMES);
            let mut attr = dir_attr_of(&row.lookup, 2 + row.subdirs.min(u32::MAX as u64 - 2) as u32, times);
            setattr::apply(creds, &mut attr, set, core.now_ns())?;
            let changed = DirLookup { id: row.lookup.id, mode: attr.mode, uid: attr.uid, gid: attr.gid };
            let narrowed = !proofs::widens(&row.lookup, &changed);
            row.lookup = changed;
            let mut b = Batch::new();
            b.put(DIRS, key, keys::encode(&row));
            b.put(DIRTIMES, keys::id_key(row.lookup.id).to_vec(), keys::encode(&DirTimes { atime: attr.atime, mtime: attr.mtime, ctime: attr.ctime }));
            // Under the proofs' lock: a proof issued from here on carries the
            // new permissions, every earlier one is waited out below unless
            // the change only widens them.
            let proofs = self.proofs.lock();
            core.write(b)?;
            (attr, if narrowed { proofs.live_until(row.lookup.id) } else { 0 })
        };
        self.wait_until(core, until);
        Ok(Reply::Attr(attr))
    }
}
