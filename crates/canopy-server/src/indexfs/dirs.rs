//! IndexFS's directory requests on one server: lookups under leases, and the
//! steps of mkdir, rmdir, chmod/chown and rename of a directory, which the
//! client drives under the lock service (its redo record lets recovery finish
//! or undo them).

use super::parts::known;
use super::{ix_key, DirEntryValue, Header, IndexFs};
use crate::core::{lookup_attr, Core};
use crate::keys::{self, DIRS, DIRTIMES, PARTS};
use crate::mode::{Located, Mode, Target};
use crate::ROOT_ID;
use canopy_posix::perm::{self, Owner};
use canopy_posix::setattr;
use canopy_proto::attr::{access, S_ISGID};
use canopy_proto::giga::{self, PartMap};
use canopy_proto::msg::{DirLookup, DirTimes};
use canopy_proto::{Creds, Errno, Reply, SetAttr};
use canopy_store::Batch;
use std::sync::atomic::Ordering;

impl IndexFs {
    fn is_home(&self, core: &Core, dir: u64) -> bool {
        giga::home(dir, core.cfg.servers) == core.cfg.index
    }

    /// The partition of directory `dir` holding `name` here, checked for the
    /// caller's search permission.
    fn searchable(&self, core: &Core, creds: &Creds, dir: u64, name: &str) -> Result<Header, Errno> {
        let h = self.part_for(core, dir, name)?;
        perm::require(creds, Owner::of_dir(&h.lookup), true, access::X)?;
        Ok(h)
    }

    pub(crate) fn lookup(&self, core: &Core, creds: &Creds, dir: u64, name: &str, depth: u32, client: u64) -> Result<Reply, Errno> {
        let (lookup, depth) = if dir == 0 && name.is_empty() {
            let h = self.header_here(core, ROOT_ID)?;
            (h.lookup, 0)
        } else {
            canopy_proto::path::check_name(name)?;
            let h = self.searchable(core, creds, dir, name)?;
            match self.dir_entry(core, dir, name)? {
                Some(d) => (d.lookup, d.depth.max(depth.min(d.depth))),
                None if core.load_record(&ix_key(dir, name))?.is_some() => return Err(Errno::ENOTDIR),
                None => return Err(self.absent(core, &h)),
            }
        };
        let lease_ms = self.leases.lock().grant(lookup.id, depth.max(1), core.clock.now_ms(), client);
        Ok(Reply::IxEntry { lookup, depth, parts: PartMap::new(), lease_ms })
    }

    /// `lookup` of each item, answered one by one.
    pub(crate) fn renew(&self, core: &Core, creds: &Creds, items: &[(u64, String, u32)], client: u64) -> Result<Reply, Errno> {
        if items.len() > canopy_proto::msg::MAX_RENEW {
            return Err(Errno::EMSGSIZE);
        }
        let answers = items
            .iter()
            .map(|(dir, name, depth)| match self.lookup(core, creds, *dir, name, *depth, client)? {
                Reply::IxEntry { lookup, depth, lease_ms, .. } => Ok((lookup, depth, lease_ms)),
                _ => Err(Errno::EIO),
            })
            .collect();
        Ok(Reply::IxRenewed(answers))
    }

    pub(crate) fn mkdir(&self, core: &Core, creds: &Creds, dir: u64, name: &str, mode: u32, txn: Option<u64>) -> Result<Reply, Errno> {
        canopy_proto::path::check_name(name)?;
        let at = Target::Entry { dir, name: name.to_string() };
        let _g = core.lock_stripes(|| vec![dir], false, &[&at]);
        self.refuse_step(txn)?;
        let mut parent = self.searchable(core, creds, dir, name)?;
        match self.locate(core, creds, &at)? {
            Located::Absent { .. } => {}
            _ => return Err(Errno::EEXIST),
        }
        let owner = Owner::of_dir(&parent.lookup);
        perm::require_dir_write(creds, owner)?;
        let id = core.new_id()?;
        let (gid, setgid) = if owner.mode & S_ISGID != 0 { (owner.gid, S_ISGID) } else { (creds.gid, 0) };
        let lookup = DirLookup { id, mode: (mode & 0o7777) | setgid, uid: creds.uid, gid };
        let mut b = Batch::new();
        b.put(DIRS, ix_key(dir, name), keys::encode(&DirEntryValue { lookup: lookup.clone(), depth: parent.depth + 1 }));
        parent.subdirs += 1;
        self.put_header(&mut b, &parent);
        self.commit(core, b)?;
        self.splits.grew(dir, 1);
        Ok(Reply::Dir(lookup))
    }

    pub(crate) fn mk_header(&self, core: &Core, lookup: DirLookup, parent: u64, depth: u32, txn: Option<u64>) -> Result<Reply, Errno> {
        if !self.is_home(core, lookup.id) || lookup.id == ROOT_ID {
            return Err(Errno::EINVAL);
        }
        let _g = core.lock_stripes(|| vec![lookup.id], false, &[&Target::Dir(lookup.id)]);
        self.refuse_step(txn)?;
        if self.header(core, lookup.id)?.is_none() {
            self.make_header(core, lookup.clone(), parent, depth)?;
        }
        // The new directory whole, times included (they live here), so a
        // mkdir needs no stat after.
        core.dir_attr(&lookup, 2).map(Reply::Attr)
    }

    /// Seals (or unseals) every partition of `dir` here; answers the
    /// partitions this server knows, so the client finds every one.
    pub(crate) fn seal(&self, core: &Core, dir: u64, seal: bool, txn: Option<u64>) -> Result<Reply, Errno> {
        let _g = core.lock_stripes(|| vec![dir], false, &[&Target::Dir(dir)]);
        self.refuse_step(txn)?;
        let parts = self.parts_here(core, dir)?;
        if parts.is_empty() {
            return if seal { Err(Errno::ENOENT) } else { Ok(Reply::IxParts(PartMap::new())) };
        }
        if seal && (parts.iter().any(|h| h.subdirs > 0) || !core.no_local_entries(dir)?) {
            return Err(Errno::ENOTEMPTY);
        }
        let mut b = Batch::new();
        for h in parts.iter().filter(|h| h.sealed != seal) {
            self.put_header(&mut b, &Header { sealed: seal, ..h.clone() });
        }
        if !b.is_empty() {
            self.commit(core, b)?;
        }
        Ok(Reply::IxParts(known(&parts)))
    }

    /// The subdirectory `name` of `dir` that a mutation changes, with the
    /// caller's rights to change its name checked.
    fn child_for_change(&self, core: &Core, creds: &Creds, dir: u64, name: &str) -> Result<(Header, DirEntryValue), Errno> {
        let h = self.searchable(core, creds, dir, name)?;
        let child = match self.dir_entry(core, dir, name)? {
            Some(d) => d,
            None if core.load_record(&ix_key(dir, name))?.is_some() => return Err(Errno::ENOTDIR),
            None => return Err(self.absent(core, &h)),
        };
        let owner = Owner::of_dir(&h.lookup);
        perm::require_dir_write(creds, owner)?;
        perm::check_sticky(creds, owner, child.lookup.uid)?;
        Ok((h, child))
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn rmdir(&self, core: &Core, creds: &Creds, dir: u64, name: &str, check_only: bool, client: u64, txn: Option<u64>) -> Result<Reply, Errno> {
        canopy_proto::path::check_name(name)?;
        let (_, child) = self.child_for_change(core, creds, dir, name)?;
        if check_only {
            return Ok(Reply::Dir(child.lookup));
        }
        let _lease = self.wait_leases(core, child.lookup.id, client);
        let at = Target::Entry { dir, name: name.to_string() };
        let _g = core.lock_stripes(|| vec![dir], false, &[&at]);
        self.refuse_step(txn)?;
        let (mut h, now) = self.child_for_change(core, creds, dir, name)?;
        if now.lookup.id != child.lookup.id {
            return Err(Errno::ENOENT);
        }
        let mut b = Batch::new();
        b.delete(DIRS, ix_key(dir, name));
        h.subdirs = h.subdirs.saturating_sub(1);
        self.put_header(&mut b, &h);
        self.commit(core, b)?;
        Ok(Reply::Dir(now.lookup))
    }

    /// Drops every partition of `dir` here (each sealed beforehand) and its
    /// times.
    pub(crate) fn drop_header(&self, core: &Core, dir: u64, txn: Option<u64>) -> Result<Reply, Errno> {
        if dir == ROOT_ID {
            return Err(Errno::EBUSY);
        }
        let _g = core.lock_stripes(|| vec![dir], false, &[&Target::Dir(dir)]);
        self.refuse_step(txn)?;
        let parts = self.parts_here(core, dir)?;
        if parts.iter().any(|h| !h.sealed) {
            return Err(Errno::EBUSY);
        }
        let mut b = Batch::new();
        for h in parts.iter() {
            b.delete(PARTS, super::part_key(dir, h.part));
        }
        b.delete(DIRTIMES, keys::id_key(dir).to_vec());
        self.commit(core, b)?;
        self.headers.fetch_sub(parts.len() as i64, Ordering::AcqRel);
        Ok(Reply::Unit)
    }

    /// chmod/chown of a directory's entry (the root's: its header), after the
    /// leases on it ran out. The client copies the answer to its home's header.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn dir_set_attr(&self, core: &Core, creds: &Creds, dir: u64, name: &str, set: &SetAttr, client: u64, txn: Option<u64>) -> Result<Reply, Errno> {
        if set.size.is_some() {
            return Err(Errno::EISDIR);
        }
        if dir == 0 && name.is_empty() {
            let _lease = self.wait_leases(core, ROOT_ID, client);
            let _g = core.lock_stripes(|| vec![ROOT_ID], false, &[&Target::Dir(ROOT_ID)]);
            self.refuse_step(txn)?;
            let mut h = self.header_here(core, ROOT_ID)?;
            let mut attr = lookup_attr(&h.lookup);
            setattr::apply(creds, &mut attr, set, core.now_ns())?;
            h.lookup = DirLookup { id: ROOT_ID, mode: attr.mode, uid: attr.uid, gid: attr.gid };
            let mut b = Batch::new();
            self.put_header(&mut b, &h);
            self.commit(core, b)?;
            return Ok(Reply::Attr(attr));
        }
        canopy_proto::path::check_name(name)?;
        let h = self.part_for(core, dir, name)?;
        let id = match self.dir_entry(core, dir, name)? {
            Some(d) => d.lookup.id,
            None if core.load_record(&ix_key(dir, name))?.is_some() => return Err(Errno::ENOTDIR),
            None => return Err(self.absent(core, &h)),
        };
        let _lease = self.wait_leases(core, id, client);
        let at = Target::Entry { dir, name: name.to_string() };
        let _g = core.lock_stripes(|| vec![dir], false, &[&at]);
        self.refuse_step(txn)?;
        self.searchable(core, creds, dir, name)?;
        let mut entry = self.dir_entry(core, dir, name)?.filter(|d| d.lookup.id == id).ok_or(Errno::ENOENT)?;
        let mut attr = lookup_attr(&entry.lookup);
        setattr::apply(creds, &mut attr, set, core.now_ns())?;
        entry.lookup = DirLookup { id, mode: attr.mode, uid: attr.uid, gid: attr.gid };
        let mut b = Batch::new();
        b.put(DIRS, ix_key(dir, name), keys::encode(&entry));
        self.commit(core, b)?;
        Ok(Reply::Attr(attr))
    }

    /// Copies a directory's lookup state into the headers of its partitions
    /// here, and on its home sets its ctime. Idempotent; answers the
    /// partitions this server knows.
    pub(crate) fn header_set(&self, core: &Core, lookup: DirLookup, txn: Option<u64>) -> Result<Reply, Errno> {
        let id = lookup.id;
        let _g = core.lock_stripes(|| vec![id], false, &[&Target::Dir(id)]);
        self.refuse_step(txn)?;
        let (parts, map) = self.known_here(core, id)?;
        if parts.iter().all(|h| h.lookup == lookup) {
            return Ok(Reply::IxParts(map));
        }
        let mut b = Batch::new();
        for h in parts.iter() {
            self.put_header(&mut b, &Header { lookup: lookup.clone(), ..h.clone() });
        }
        if self.is_home(core, id) {
            let fresh = core.fresh_dir_times();
            let times = core.load_dir_times(id)?.map_or(fresh, |t| DirTimes { ctime: fresh.ctime, ..t });
            b.put(DIRTIMES, keys::id_key(id).to_vec(), keys::encode(&times));
        }
        self.commit(core, b)?;
        Ok(Reply::IxParts(map))
    }

    /// Renames a subdirectory within this server (both names' partitions are
    /// here): only its entry moves, its children are keyed by its id. A
    /// replaced directory must be sealed (empty) on its home first.
    pub(crate) fn rename_dir(&self, core: &Core, creds: &Creds, src: &Target, dst: &Target, client: u64, txn: Option<u64>) -> Result<Reply, Errno> {
        let (Target::Entry { dir: sd, name: sn }, Target::Entry { dir: dd, name: dn }) = (src, dst) else {
            return Err(Errno::EINVAL);
        };
        let (_, moving) = self.child_for_change(core, creds, *sd, sn)?;
        let _lease = self.wait_leases(core, moving.lookup.id, client);
        let _g = core.lock_stripes(|| vec![*sd, *dd], false, &[src, dst]);
        self.refuse_step(txn)?;
        let (mut sh, moving) = self.child_for_change(core, creds, *sd, sn)?;
        let mut dh = self.searchable(core, creds, *dd, dn)?;
        perm::require_dir_write(creds, Owner::of_dir(&dh.lookup))?;
        if sd != dd {
            // Its ".." changes: POSIX asks for write permission on the moved directory.
            perm::require(creds, Owner::of_dir(&moving.lookup), true, access::W)?;
        }
        let replaced = self.dir_entry(core, *dd, dn)?;
        if core.load_record(&ix_key(*dd, dn))?.is_some() {
            return Err(Errno::ENOTDIR);
        }
        if let Some(r) = &replaced {
            if r.lookup.id == moving.lookup.id {
                return Ok(Reply::Unit);
            }
            perm::check_sticky(creds, Owner::of_dir(&dh.lookup), r.lookup.uid)?;
        }
        let mut b = Batch::new();
        b.delete(DIRS, ix_key(*sd, sn));
        b.put(DIRS, ix_key(*dd, dn), keys::encode(&DirEntryValue { lookup: moving.lookup.clone(), depth: dh.depth + 1 }));
        if (sh.lookup.id, sh.part) == (dh.lookup.id, dh.part) {
            if replaced.is_some() {
                sh.subdirs = sh.subdirs.saturating_sub(1);
            }
            self.put_header(&mut b, &sh);
        } else {
            sh.subdirs = sh.subdirs.saturating_sub(1);
            if replaced.is_none() {
                dh.subdirs += 1;
            }
            self.put_header(&mut b, &sh);
            self.put_header(&mut b, &dh);
        }
        self.commit(core, b)?;
        Ok(match replaced {
            Some(r) => Reply::Dir(r.lookup),
            None => Reply::Unit,
        })
    }

    /// The source side of a directory rename, checked: the caller may move the
    /// subdirectory (write on its directory, the sticky bit, and, to another
    /// directory, write on it: its ".." changes).
    pub(crate) fn rename_dir_out(&self, core: &Core, creds: &Creds, src: &Target, dst: &Target) -> Result<Reply, Errno> {
        let (Target::Entry { dir, name }, Target::Entry { dir: to, .. }) = (src, dst) else { return Err(Errno::EINVAL) };
        let (_, moving) = self.child_for_change(core, creds, *dir, name)?;
        if to != dir {
            perm::require(creds, Owner::of_dir(&moving.lookup), true, access::W)?;
        }
        Ok(Reply::Dir(moving.lookup))
    }

    /// The destination side: inserts `lookup` at `dst`. A directory there must
    /// have been sealed (emptied of new names) on its home; it is replaced and
    /// answered so the client drops its header.
    pub(crate) fn rename_dir_in(&self, core: &Core, creds: &Creds, dst: &Target, lookup: DirLookup, txn: Option<u64>) -> Result<Reply, Errno> {
        let Target::Entry { dir, name } = dst else { return Err(Errno::EINVAL) };
        let _g = core.lock_stripes(|| vec![*dir], false, &[dst]);
        self.refuse_step(txn)?;
        let mut h = self.searchable(core, creds, *dir, name)?;
        let owner = Owner::of_dir(&h.lookup);
        perm::require_dir_write(creds, owner)?;
        if core.load_record(&ix_key(*dir, name))?.is_some() {
            return Err(Errno::ENOTDIR);
        }
        let replaced = self.dir_entry(core, *dir, name)?;
        if let Some(r) = &replaced {
            if r.lookup.id == lookup.id {
                return Ok(Reply::Unit);
            }
            perm::check_sticky(creds, owner, r.lookup.uid)?;
        }
        let mut b = Batch::new();
        b.put(DIRS, ix_key(*dir, name), keys::encode(&DirEntryValue { lookup, depth: h.depth + 1 }));
        if replaced.is_none() {
            h.subdirs += 1;
            self.put_header(&mut b, &h);
        }
        self.commit(core, b)?;
        Ok(match replaced {
            Some(r) => Reply::Dir(r.lookup),
            None => Reply::Unit,
        })
    }

    /// The end of a rename between servers: once no lease on the old name is
    /// live, its entry goes (if it still names directory `id`).
    pub(crate) fn rename_dir_commit(&self, core: &Core, src: &Target, id: u64, client: u64, txn: Option<u64>) -> Result<Reply, Errno> {
        let Target::Entry { dir, name } = src else { return Err(Errno::EINVAL) };
        // A split may have moved the name: the client follows the redirect.
        self.part_for(core, *dir, name)?;
        let _lease = self.wait_leases(core, id, client);
        let _g = core.lock_stripes(|| vec![*dir], false, &[src]);
        self.refuse_step(txn)?;
        let mut h = self.part_for(core, *dir, name)?;
        if self.dir_entry(core, *dir, name)?.is_some_and(|d| d.lookup.id == id) {
            h.subdirs = h.subdirs.saturating_sub(1);
            let mut b = Batch::new();
            b.delete(DIRS, ix_key(*dir, name));
            self.put_header(&mut b, &h);
            self.commit(core, b)?;
        }
        Ok(Reply::Unit)
    }
}
