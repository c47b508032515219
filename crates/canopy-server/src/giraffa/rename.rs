//! A Giraffa directory rename's server steps. The paper's Giraffa renames no
//! directory: a directory's path is in every row key below it, so a rename
//! rewrites the whole subtree. Here the client does that under the lock
//! service (`canopy-client/src/giraffa/rename.rs`): it checks (`GfRenameDirCheck`),
//! freezes the subtree on every server (`GfFreeze`), reads its rows
//! (`GfScan`), writes them under their new keys (`GfPutRows`), deletes the
//! old ones (`GfDeleteRows`) and thaws. Those steps are plain row operations,
//! idempotent, so recovery can redo them.

use super::freeze::FREEZE_MS;
use super::frozen_store;
use super::Giraffa;
use crate::core::{io, Core};
use crate::keys::{self, DIRS, DIRTIMES, ENTRIES};
use crate::mode::{Mode, Target};
use canopy_posix::perm::{self, Owner};
use canopy_proto::attr::access;
use canopy_proto::giraffa::{self, DirProof, DirRow, GfRow, MAX_ROWS, ROW_BYTES};

/// Rows a `GfScan` reads from each column family at most.
const SCAN_ROWS: usize = 64;
use canopy_proto::msg::{DirTimes, Record};
use canopy_proto::path::NsPath;
use canopy_proto::{Creds, Errno, Reply};
use canopy_store::Batch;

impl Giraffa {
    /// The permission checks of renaming directory `src` (its row is here) to
    /// `dst`: write on both parents (their proofs), the sticky bit of the
    /// source's parent, and write on the directory itself when its parent
    /// changes (its ".."). What is at `dst` the client checks by removing it.
    pub(super) fn rename_dir_check(&self, core: &Core, creds: &Creds, src: &str, dst: &str, proofs: &[DirProof]) -> Result<Reply, Errno> {
        let (s, d) = (NsPath::parse(src)?, NsPath::parse(dst)?);
        let (Some((sp, _)), Some((dp, _))) = (s.split(), d.split()) else { return Err(Errno::EBUSY) };
        let row = self.row_of(core, &s)?.ok_or(if self.here(core, giraffa::row_prefix(&s)) { Errno::ENOENT } else { Errno::EREMOTE })?;
        let vouched = |dir: &NsPath| -> Result<Owner, Errno> {
            let p = proofs.iter().find(|p| p.prefix == giraffa::prefix(dir)).ok_or(Errno::EINVAL)?;
            Ok(Owner::of_dir(&self.accept(core, p)?))
        };
        let (src_parent, dst_parent) = (vouched(&sp)?, vouched(&dp)?);
        perm::require_dir_write(creds, src_parent)?;
        perm::check_sticky(creds, src_parent, row.lookup.uid)?;
        perm::require_dir_write(creds, dst_parent)?;
        if sp != dp {
            perm::require(creds, Owner::of_dir(&row.lookup), true, access::W)?;
        }
        Ok(Reply::Dir(row.lookup))
    }

    /// `Request::Revoke`: durable before it answers, once the steps under
    /// way here have ended (each checks and writes holding the structure
    /// lock shared: a rename step, and a file rename's with its entry locks).
    pub(super) fn revoke(&self, core: &Core, txn: u64) -> Result<Reply, Errno> {
        let _g = core.lock_structure();
        self.revoked.add(core, txn)?;
        Ok(Reply::Unit)
    }

    /// Freezes (or thaws; freezing again renews) what a rename names. A
    /// mutation checks the freeze holding its directory's stripe, so once this
    /// has taken and released those stripes, every mutation that got past the
    /// check has written. No proof of a frozen directory is issued, and those
    /// already issued here that may add entries are waited out: after the
    /// rename, none may add an entry under a prefix that is gone.
    pub(super) fn freeze(&self, core: &Core, prefixes: &[u64], paths: &[String], thaw: bool, txn: Option<u64>) -> Result<Reply, Errno> {
        let mut stripes: Vec<u64> = prefixes.to_vec();
        for p in paths {
            stripes.push(giraffa::row_prefix(&NsPath::parse(p)?));
        }
        let mut b = Batch::new();
        {
            // The structure lock, shared (no stripe): a revoke waits for it.
            let _step = core.lock_stripes(Vec::new, false, &[]);
            self.refuse_step(txn)?;
            // Held across the write, so the store and memory change in the
            // same order as concurrent freezes and thaws of one row.
            let mut frozen = self.frozen.lock();
            if thaw {
                frozen.thaw(prefixes, paths);
                frozen_store::delete(&mut b, prefixes, paths);
                core.write(b)?;
                return Ok(Reply::Unit);
            }
            // Durable before it holds (and answers): a restart keeps it.
            frozen_store::put(&mut b, prefixes, paths, core.clock.wall_ms() + FREEZE_MS);
            core.write(b)?;
            frozen.freeze(prefixes, paths, core.clock.now_ms() + FREEZE_MS);
        }
        drop(core.lock_stripes(|| stripes, true, &[]));
        let mut inos = Vec::new();
        for prefix in prefixes {
            let key = self.rows.lock().get(prefix).cloned();
            if let Some(row) = key.map(|k| self.row_at(core, &k)).transpose()?.flatten() {
                inos.push(row.lookup.id);
            }
        }
        let until = {
            let proofs = self.proofs.lock();
            inos.iter().map(|i| proofs.adds_live_until(*i)).max().unwrap_or(0)
        };
        self.wait_until(core, until);
        Ok(Reply::Unit)
    }

    /// Rows under `prefix` here, in name order (files and directories merged).
    pub(super) fn scan(&self, core: &Core, prefix: u64, after: Option<&str>, limit: u32) -> Result<Reply, Errno> {
        // Rows may carry up to 1 MiB of inline contents: few at a time.
        let limit = (limit as usize).clamp(1, SCAN_ROWS);
        let after_key = after.map(|a| giraffa::row_key(prefix, a));
        let mut rows = Vec::new();
        let mut more = false;
        for cf in [ENTRIES, DIRS] {
            let found = core.store.scan(cf, &prefix.to_be_bytes(), after_key.as_deref(), limit).map_err(io)?;
            more |= found.len() == limit;
            for (k, v) in found {
                let name = String::from_utf8(k.get(8..).ok_or(Errno::EIO)?.to_vec()).map_err(|_| Errno::EIO)?;
                rows.push(if cf == ENTRIES {
                    GfRow::File { name, record: keys::decode::<Record>(&v).ok_or(Errno::EIO)? }
                } else {
                    let row: DirRow = keys::decode(&v).ok_or(Errno::EIO)?;
                    let times = core.load_dir_times(row.lookup.id)?.unwrap_or(crate::core::NO_TIMES);
                    GfRow::Dir { name, row, times }
                });
            }
        }
        rows.sort_by(|a, b| a.name().cmp(b.name()));
        if rows.len() > limit {
            rows.truncate(limit);
            more = true;
        }
        // At least one row, then no more than the byte budget.
        let mut bytes = 0;
        if let Some(cut) = rows.iter().skip(1).position(|r| {
            bytes += giraffa::row_bytes(r);
            bytes > ROW_BYTES
        }) {
            rows.truncate(cut + 1);
            more = true;
        }
        Ok(Reply::GfRows { rows, more })
    }

    /// Writes `rows` under `prefix` (replacing what is there).
    /// `fresh`: the rows must not exist yet (a rename's commit: `EEXIST`).
    pub(super) fn put_rows(&self, core: &Core, prefix: u64, rows: Vec<GfRow>, fresh: bool, txn: Option<u64>) -> Result<Reply, Errno> {
        if rows.len() > MAX_ROWS || !self.here(core, prefix) {
            return Err(Errno::EINVAL);
        }
        let _g = core.lock_stripes(|| vec![prefix], true, &[]);
        self.refuse_step(txn)?;
        let mut b = Batch::new();
        let mut index = Vec::new();
        for row in rows {
            canopy_proto::path::check_name(row.name())?;
            let key = giraffa::row_key(prefix, row.name());
            if fresh && (self.row_at(core, &key)?.is_some() || core.load_record(&key)?.is_some()) {
                return Err(Errno::EEXIST);
            }
            match row {
                GfRow::File { record, .. } => b.put(ENTRIES, key, keys::encode(&record)),
                GfRow::Dir { name, row, times } => {
                    let path = NsPath::parse(&row.path)?;
                    if giraffa::row_prefix(&path) != prefix || path.name() != Some(name.as_str()) {
                        return Err(Errno::EINVAL);
                    }
                    b.put(DIRTIMES, keys::id_key(row.lookup.id).to_vec(), keys::encode::<DirTimes>(&times));
                    b.put(DIRS, key.clone(), keys::encode(&row));
                    index.push((giraffa::prefix(&path), key));
                }
            }
        }
        core.write(b)?;
        self.rows.lock().extend(index);
        Ok(Reply::Unit)
    }

    /// Deletes the rows `names` under `prefix` (a directory's with its times,
    /// unless `keep_times`).
    pub(super) fn delete_rows(&self, core: &Core, prefix: u64, names: &[String], keep_times: bool, txn: Option<u64>) -> Result<Reply, Errno> {
        if names.len() > MAX_ROWS || !self.here(core, prefix) {
            return Err(Errno::EINVAL);
        }
        let _g = core.lock_stripes(|| vec![prefix], true, &[]);
        self.refuse_step(txn)?;
        let mut b = Batch::new();
        let mut gone = Vec::new();
        for name in names {
            let key = giraffa::row_key(prefix, name);
            if let Some(row) = self.row_at(core, &key)? {
                if !keep_times {
                    b.delete(DIRTIMES, keys::id_key(row.lookup.id).to_vec());
                }
                gone.push(giraffa::prefix(&NsPath::parse(&row.path)?));
            }
            b.delete(DIRS, key.clone());
            b.delete(ENTRIES, key);
        }
        core.write(b)?;
        let mut rows = self.rows.lock();
        for p in gone {
            rows.remove(&p);
        }
        Ok(Reply::Unit)
    }

    /// Directory `path` (its row is here) gained or lost a subdirectory.
    pub(super) fn count_subdirs(&self, core: &Core, path: &str, delta: i32) -> Result<Reply, Errno> {
        self.update_row(core, path, |row| row.subdirs = row.subdirs.saturating_add_signed(delta as i64))
    }

    pub(super) fn set_subdirs(&self, core: &Core, path: &str, subdirs: u64) -> Result<Reply, Errno> {
        self.update_row(core, path, |row| row.subdirs = subdirs)
    }

    /// Applies `change` to directory `path`'s row, held here.
    pub(super) fn update_row(&self, core: &Core, path: &str, change: impl FnOnce(&mut DirRow)) -> Result<Reply, Errno> {
        let p = NsPath::parse(path)?;
        let key = super::row_key_of(&p);
        let prefix = giraffa::row_prefix(&p);
        let _g = core.lock_stripes(|| vec![prefix], false, &[&Target::Path(p.clone())]);
        self.admit_row(prefix, p.as_str())?;
        let Some(mut row) = self.row_at(core, &key)? else { return Err(if self.here(core, prefix) { Errno::ENOENT } else { Errno::EREMOTE }) };
        change(&mut row);
        let mut b = Batch::new();
        b.put(DIRS, key, keys::encode(&row));
        core.write(b)?;
        Ok(Reply::Unit)
    }
}
