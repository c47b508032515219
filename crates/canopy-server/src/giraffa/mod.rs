//! Giraffa on a server (seed 000 §3.2, Table 1): the table-partitioned
//! baseline. Every object is one row keyed by its parent's path prefix, depth
//! and name (`canopy_proto::giraffa`), on the server holding that key's
//! region. Nothing resolves a path: a request names its object by full path,
//! the server holding the row answers, and only the parent's permissions are
//! checked (the paper's relaxed semantics), through a signed proof from the
//! server holding the parent's row (`proofs.rs`).
//!
//! Keys (column families of `keys.rs`, values postcard):
//! - `entries` (files, symlinks, special files): prefix(parent) ‖ name → `Record`;
//! - `dirs` (directories): prefix(parent) ‖ name → [`DirRow`]; the root's row is
//!   prefix 0 and the empty name, on the server of region 0;
//! - `dirtimes`: directory ino → times, beside its row.
//!
//! A directory is named inside the generic operations by its entries' prefix
//! (`Located::Dir { id }`), which `dir` maps back to its row (kept in memory:
//! prefix → row key) or to the directory a live proof vouched for.

mod dirs;
mod freeze;
mod frozen_store;

pub use freeze::FREEZE_MS;
mod proofs;
mod regions;
mod rename;

use crate::core::{io, Core};
use crate::keys::{self, DIRS, ENTRIES};
use crate::mode::{Held, Located, Mode, Target};
use crate::ROOT_ID;
use canopy_proto::auth::Key;
use canopy_proto::giraffa::{self, DirProof, DirRow, PREFIX_BIT, PROOF_LIFE_MS, ROOT_ROW_PREFIX};
use canopy_proto::msg::{DirLookup, FsckReport};
use canopy_proto::path::NsPath;
use canopy_proto::{Creds, DirEntry, Errno, FileKind, Reply, Request};
use canopy_store::Batch;
use crate::revoked::Revoked;
use parking_lot::Mutex;
use proofs::Proofs;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

pub(crate) struct Giraffa {
    /// Entries prefix → row key, for the directory rows held here.
    rows: Mutex<HashMap<u64, Vec<u8>>>,
    proofs: Mutex<Proofs>,
    /// What directory renames in progress hold still here.
    frozen: Mutex<freeze::Frozen>,
    /// This server's regions of the table and their sizes.
    regions: Mutex<regions::Regions>,
    /// The server's clock (freezes lapse by it).
    clock: canopy_proto::clock::SharedClock,
    /// Transactions recovery took over (`crate::revoked`), whose rename
    /// steps are refused (checked under the structure lock, shared, which a
    /// revoke takes exclusively, so one under way ends first).
    revoked: Revoked,
    issued: AtomicU64,
    refused: AtomicU64,
    proof_waits: AtomicU64,
    proof_wait_ms: AtomicU64,
}

fn row_err(e: String) -> String {
    format!("giraffa: {e}")
}

/// The registry's way in: Giraffa's server (`canopy_proto::for_each_mode!`).
pub(crate) fn open(o: &canopy_proto::modes::GiraffaOptions, at: &crate::mode::Opening) -> Result<Box<dyn Mode>, String> {
    Ok(Box::new(Giraffa::open(at.core, Key::from_bytes(at.proof_key), o.region_rows)?))
}

impl Giraffa {
    pub(crate) fn open(core: &Core, proof_key: Key, region_rows: u64) -> Result<Giraffa, String> {
        let recorded = match core.store.get(crate::keys::META, META_REGIONS).map_err(|e| row_err(e.to_string()))? {
            Some(v) => Some(keys::decode::<Vec<(u64, Option<u64>)>>(&v).ok_or_else(|| row_err("undecodable region list".into()))?),
            None => None,
        };
        let mut regions = regions::Regions::new(core.cfg.index, core.cfg.servers, region_rows, recorded);
        core.store
            .for_each(ENTRIES, b"", &mut |k, _| {
                let _ = regions.grew(prefix_of(k), 1);
                true
            })
            .map_err(|e| row_err(e.to_string()))?;
        let mut rows = HashMap::new();
        let mut bad = None;
        core.store
            .for_each(DIRS, b"", &mut |k, v| {
                let _ = regions.grew(prefix_of(k), 1);
                match keys::decode::<DirRow>(v).and_then(|r| NsPath::parse(&r.path).ok()) {
                    Some(p) => {
                        rows.insert(giraffa::prefix(&p), k.to_vec());
                    }
                    None => bad = Some(format!("undecodable directory row {k:?}")),
                }
                true
            })
            .map_err(|e| row_err(e.to_string()))?;
        if let Some(e) = bad {
            return Err(row_err(e));
        }
        let me = Giraffa {
            rows: Mutex::new(rows),
            proofs: Mutex::new(Proofs::new(proof_key, core.clock.wall_ms(), core.fresh)),
            frozen: Mutex::new(freeze::Frozen::default()),
            regions: Mutex::new(regions),
            clock: core.clock.clone(),
            revoked: Revoked::of(crate::revoked::load(core).map_err(row_err)?),
            issued: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            proof_waits: AtomicU64::new(0),
            proof_wait_ms: AtomicU64::new(0),
        };
        me.freeze_again(core).map_err(|e| row_err(format!("cannot read the stored freezes: {e}")))?;
        if giraffa::region_server(ROOT_ROW_PREFIX, core.cfg.servers) == core.cfg.index && me.row_at(core, &root_key()).map_err(|e| e.to_string())?.is_none() {
            let root = DirRow { lookup: DirLookup { id: ROOT_ID, mode: 0o755, uid: 0, gid: 0 }, path: "/".into(), subdirs: 0 };
            me.put_new_row(core, &root_key(), &root).map_err(|e| format!("cannot make the root: {e}"))?;
        }
        Ok(me)
    }

    /// At a start: holds again what a rename under way froze before it, for
    /// what is left of each freeze's lapse (`frozen_store.rs`).
    fn freeze_again(&self, core: &Core) -> Result<(), Errno> {
        let now = core.clock.now_ms();
        let mut frozen = self.frozen.lock();
        // At most a whole lapse: a wall clock set back since must not hold
        // rows longer than a freeze ever does.
        for (held, left) in frozen_store::load(core, core.clock.wall_ms())? {
            let left = left.min(FREEZE_MS);
            match held {
                frozen_store::Held::Prefix(p) => frozen.freeze(&[p], &[], now + left),
                frozen_store::Held::Path(p) => frozen.freeze(&[], &[p], now + left),
            }
        }
        Ok(())
    }

    fn here(&self, core: &Core, row_prefix: u64) -> bool {
        giraffa::region_server(row_prefix, core.cfg.servers) == core.cfg.index
    }

    fn row_at(&self, core: &Core, key: &[u8]) -> Result<Option<DirRow>, Errno> {
        match core.store.get(DIRS, key).map_err(io)? {
            Some(v) => keys::decode(&v).map(Some).ok_or(Errno::EIO),
            None => Ok(None),
        }
    }

    /// The row of directory `path`, if held here.
    fn row_of(&self, core: &Core, path: &NsPath) -> Result<Option<DirRow>, Errno> {
        self.row_at(core, &row_key_of(path))
    }

    /// Writes a new directory's `row` at `key` with fresh times, and keeps
    /// the prefix index.
    fn put_new_row(&self, core: &Core, key: &[u8], row: &DirRow) -> Result<(), Errno> {
        let path = NsPath::parse(&row.path)?;
        let mut b = Batch::new();
        b.put(DIRS, key.to_vec(), keys::encode(row));
        let times = core.fresh_dir_times();
        b.put(crate::keys::DIRTIMES, keys::id_key(row.lookup.id).to_vec(), keys::encode(&times));
        core.write(b)?;
        self.rows.lock().insert(giraffa::prefix(&path), key.to_vec());
        Ok(())
    }

    /// A proof of directory `path`, whose row is here. The row is read under
    /// the proofs' lock, so a permission change (which writes under it) is
    /// either in the proof or waits for it.
    fn proof(&self, core: &Core, path: &str, adds: bool) -> Result<Reply, Errno> {
        let p = NsPath::parse(path)?;
        if let Err(e) = self.admit_row(giraffa::row_prefix(&p), p.as_str()) {
            self.refused.fetch_add(1, Ordering::Relaxed);
            return Err(e); // a directory rename holds it: its path is about to change
        }
        let mut proofs = self.proofs.lock();
        let row = match self.row_of(core, &p)? {
            Some(r) => r,
            None if core.load_record(&row_key_of(&p))?.is_some() => return Err(Errno::ENOTDIR),
            None if self.here(core, giraffa::row_prefix(&p)) => return Err(Errno::ENOENT),
            None => return Err(Errno::EREMOTE),
        };
        match proofs.issue(giraffa::prefix(&p), &row.lookup, adds, core.clock.wall_ms()) {
            Ok(proof) => {
                self.issued.fetch_add(1, Ordering::Relaxed);
                Ok(Reply::GfProof(proof))
            }
            Err(e) => {
                self.refused.fetch_add(1, Ordering::Relaxed);
                Err(e)
            }
        }
    }

    /// Waits (counted) until `until` (proof time, see `proofs.rs`): until no
    /// proof issued before a change is live. The wait is counted on the
    /// monotonic clock and is never longer than a verifier honours a proof
    /// (two lives), however the wall clock is set meanwhile.
    fn wait_until(&self, core: &Core, until: u64) {
        let wait = until.saturating_sub(core.clock.wall_ms()).min(2 * PROOF_LIFE_MS);
        if wait == 0 {
            return;
        }
        self.proof_waits.fetch_add(1, Ordering::Relaxed);
        let start = core.clock.now_ms();
        core.clock.wait_until_ms(start + wait);
        self.proof_wait_ms.fetch_add(core.clock.now_ms() - start, Ordering::Relaxed);
    }

    /// `EAGAIN` if a directory rename holds the row of `path` (kept under
    /// `prefix`) frozen.
    fn admit_row(&self, prefix: u64, path: &str) -> Result<(), Errno> {
        let frozen = self.frozen.lock();
        if frozen.holds(prefix, path, self.clock.now_ms()) {
            return Err(Errno::EAGAIN);
        }
        Ok(())
    }

    /// Checks the directory proofs of a vouched request (good for adding
    /// entries if `adds`) and holds what they vouch for while this thread
    /// serves it ([`Vouching`] forgets them).
    fn vouch(&self, core: &Core, proofs: &[DirProof], adds: bool) -> Result<(), Errno> {
        if proofs.is_empty() || proofs.len() > giraffa::MAX_PROOFS {
            return Err(Errno::EINVAL);
        }
        let mut checked = Vec::with_capacity(proofs.len());
        for p in proofs {
            let lookup = self.accept(core, p)?;
            if adds && !p.adds {
                return Err(Errno::EINVAL); // a proof for removals only
            }
            checked.push((p.prefix, lookup, p.expires));
        }
        VOUCHED.with(|v| *v.borrow_mut() = checked);
        Ok(())
    }

    fn accept(&self, core: &Core, proof: &DirProof) -> Result<DirLookup, Errno> {
        self.proofs.lock().verify(proof, core.clock.wall_ms())
    }
}

thread_local! {
    /// The directories the proofs of the request this thread is serving vouch
    /// for (prefix, lookup state, expiry): set by `vouch`, cleared after it.
    static VOUCHED: std::cell::RefCell<Vec<(u64, DirLookup, u64)>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Held while a vouched request is served: its proofs are forgotten after.
struct Vouching;

impl Drop for Vouching {
    fn drop(&mut self) {
        VOUCHED.with(|v| v.borrow_mut().clear());
    }
}

/// The directory with entries prefix `prefix` the current request's proofs
/// vouch for, while they are live.
fn vouched(prefix: u64, now: u64) -> Option<DirLookup> {
    VOUCHED.with(|v| v.borrow().iter().find(|(p, _, e)| *p == prefix && *e > now).map(|(_, l, _)| l.clone()))
}

pub use canopy_proto::modes::DEFAULT_REGION_ROWS;

/// Where a server records its regions once one has split.
const META_REGIONS: &[u8] = b"giraffa_regions";

/// The prefix of a row key (`u64::MAX` for a key too short to have one).
fn prefix_of(key: &[u8]) -> u64 {
    key.get(..8).map_or(u64::MAX, |b| u64::from_be_bytes(b.try_into().unwrap_or([0xff; 8])))
}

/// The root's row key.
fn root_key() -> Vec<u8> {
    giraffa::row_key(ROOT_ROW_PREFIX, "")
}

/// The key of `path`'s own row.
fn row_key_of(path: &NsPath) -> Vec<u8> {
    match path.split() {
        Some((parent, name)) => giraffa::row_key(giraffa::prefix(&parent), name),
        None => root_key(),
    }
}

impl Mode for Giraffa {
    fn name(&self) -> &'static str {
        "giraffa"
    }

    /// A path only (nothing is named by id); no search checks on the way.
    fn locate(&self, core: &Core, _creds: &Creds, at: &Target) -> Result<Located, Errno> {
        let Target::Path(p) = at else { return Err(Errno::EINVAL) };
        let (parent, name) = match p.split() {
            Some((parent, name)) => (giraffa::prefix(&parent), name.to_string()),
            None => (ROOT_ROW_PREFIX, String::new()),
        };
        let key = giraffa::row_key(parent, &name);
        if !name.is_empty() {
            if let Some(record) = core.load_record(&key)? {
                return Ok(Located::File { parent, name, record });
            }
        }
        let dir = Located::Dir { parent, name: name.clone(), id: giraffa::prefix(p) };
        if self.row_at(core, &key)?.is_some() {
            return Ok(dir);
        }
        if vouched(giraffa::prefix(p), core.clock.wall_ms()).is_some() {
            return Ok(dir); // its entries are here, and the request's proof says it exists
        }
        if self.here(core, parent) && !name.is_empty() {
            return Ok(Located::Absent { parent, name });
        }
        Err(Errno::EREMOTE)
    }

    fn entry_key(&self, dir: u64, name: &str) -> Vec<u8> {
        giraffa::row_key(dir, name)
    }

    fn entry_name(&self, key: &[u8]) -> Option<String> {
        String::from_utf8(key.get(8..)?.to_vec()).ok()
    }

    fn keys_in_name_order(&self) -> bool {
        true
    }

    /// It checks none (the relaxed semantics); clients name entries by path.
    fn checks_ancestors(&self) -> bool {
        false
    }

    /// `EAGAIN` for a mutation of a row a directory rename holds frozen.
    /// Reads go on during the rename (its rows are held still), so Giraffa
    /// keeps the default `admit`, which turns nothing away.
    fn admit_locked(&self, targets: &[&Target]) -> Result<(), Errno> {
        for t in targets {
            if let Target::Path(p) = t {
                self.admit_row(giraffa::row_prefix(p), p.as_str())?;
            }
        }
        Ok(())
    }

    /// Only what a request's proofs vouch for is checked: a user key could
    /// send requests without them, so users are served through delegation.
    fn serves_users_directly(&self) -> bool {
        false
    }

    fn takes_batches(&self) -> bool {
        false
    }

    /// `id` is a directory's entries prefix: its row if held here (with its
    /// attributes), else what a live proof vouched for.
    fn dir(&self, core: &Core, id: u64) -> Result<Option<(DirLookup, Option<u32>)>, Errno> {
        if id & PREFIX_BIT == 0 {
            return Ok(None);
        }
        let key = self.rows.lock().get(&id).cloned();
        if let Some(key) = key {
            if let Some(row) = self.row_at(core, &key)? {
                let nlink = 2 + row.subdirs.min(u32::MAX as u64 - 2) as u32;
                return Ok(Some((row.lookup, Some(nlink))));
            }
        }
        Ok(vouched(id, core.clock.wall_ms()).map(|l| (l, None)))
    }

    fn parent_ids(&self, targets: &[&Target]) -> Vec<u64> {
        targets
            .iter()
            .map(|t| match t {
                Target::Path(p) => giraffa::row_prefix(p),
                Target::Entry { dir, .. } => *dir,
                Target::Dir(id) => *id,
            })
            .collect()
    }

    fn subdirs(&self, core: &Core, id: u64, after: Option<&str>, limit: usize) -> Result<Vec<DirEntry>, Errno> {
        let after_key = after.map(|a| giraffa::row_key(id, a));
        let found = core.store.scan(DIRS, &id.to_be_bytes(), after_key.as_deref(), limit).map_err(io)?;
        found
            .iter()
            .map(|(k, v)| {
                let name = self.entry_name(k).ok_or(Errno::EIO)?;
                let row: DirRow = keys::decode(v).ok_or(Errno::EIO)?;
                Ok(DirEntry { name, ino: row.lookup.id, kind: FileKind::Dir })
            })
            .collect()
    }

    fn blocks(&self, req: &Request) -> bool {
        self.waits(req)
    }

    /// Removals and permission changes wait out the proofs already issued.
    fn waits(&self, req: &Request) -> bool {
        matches!(req, Request::GfRmdirBegin { .. } | Request::GfDirSetAttr { .. } | Request::GfFreeze { thaw: false, .. })
    }

    fn dirs(&self) -> u64 {
        self.rows.lock().len() as u64
    }

    /// Proofs issued and refused (a directory being removed), and how many
    /// removals or permission changes waited for proofs to expire, how long.
    fn counters(&self) -> Vec<(String, u64)> {
        let (regions, splits) = self.regions.lock().counts();
        vec![
            ("regions".into(), regions),
            ("region_splits".into(), splits),
            ("proofs_issued".into(), self.issued.load(Ordering::Relaxed)),
            ("proofs_refused".into(), self.refused.load(Ordering::Relaxed)),
            ("proof_waits".into(), self.proof_waits.load(Ordering::Relaxed)),
            ("proof_wait_ms".into(), self.proof_wait_ms.load(Ordering::Relaxed)),
        ]
    }

    /// Rows were written under `dir` (a prefix): the region may split.
    fn grew(&self, core: &Core, dir: u64, n: u64) {
        let split = self.regions.lock().grew(dir, n);
        if let Some(bounds) = split {
            // Only how this server cuts its share is recorded; routing stays.
            let mut b = Batch::new();
            b.put(crate::keys::META, META_REGIONS.to_vec(), keys::encode(&bounds));
            if let Err(e) = core.store.write(b) {
                eprintln!("giraffa: cannot record a region split: {e}");
            }
        }
    }

    /// `GfVouched`: the request it carries, with its proofs checked and held
    /// for this thread until the returned guard drops. Only requests about
    /// entries may come so, never another `GfVouched`.
    fn unwrap(&self, core: &Core, req: Request) -> Result<(Request, Option<Held>), Errno> {
        let Request::GfVouched { proofs, inner } = req else { return Ok((req, None)) };
        let req: Request = postcard::from_bytes(&inner).map_err(|_| Errno::EPROTO)?;
        let adds = giraffa::adds_entry(&req);
        if !adds && !matches!(req, Request::Unlink { .. } | Request::ReadDir { .. } | Request::RenameOut { .. }) {
            return Err(Errno::EINVAL);
        }
        self.vouch(core, &proofs, adds)?;
        Ok((req, Some(Box::new(Vouching))))
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    /// A file rename's steps (`RenameLocal`, `RenameIn`), under the entry
    /// locks, which hold the structure lock shared: a revoke waits them out.
    /// `ECANCELED`, not ShardFS's `ESTALE`: a Giraffa client asks again on
    /// `ESTALE` (a proof that expired on its way).
    fn refuse_step(&self, txn: Option<u64>) -> Result<(), Errno> {
        self.revoked.refuse(txn, Errno::ECANCELED)
    }

    fn handle(&self, core: &Core, creds: &Creds, req: Request) -> Result<Reply, Errno> {
        match req {
            Request::GfProof { path, adds } => self.proof(core, &path, adds),
            Request::GfMkdir { path, mode, proof } => self.mkdir(core, creds, &path, mode, &proof),
            Request::GfRmdirBegin { path, proof } => self.rmdir_begin(core, creds, &path, &proof),
            Request::GfEmpty { prefix } => self.empty(core, prefix),
            Request::GfRmdirEnd { path, ino, commit } => self.rmdir_end(core, &path, ino, commit),
            Request::GfDirSetAttr { path, set } => self.dir_setattr(core, creds, &path, &set),
            Request::GfSubdirs { path, delta } => self.count_subdirs(core, &path, delta),
            Request::GfRenameDirCheck { src, dst, proofs } => self.rename_dir_check(core, creds, &src, &dst, &proofs),
            Request::GfFreeze { prefixes, paths, thaw, txn } => self.freeze(core, &prefixes, &paths, thaw, txn),
            Request::GfScan { prefix, after, limit } => self.scan(core, prefix, after.as_deref(), limit),
            Request::GfPutRows { prefix, rows, fresh, txn } => self.put_rows(core, prefix, rows, fresh, txn),
            Request::GfDeleteRows { prefix, names, keep_times, txn } => self.delete_rows(core, prefix, &names, keep_times, txn),
            Request::GfSetSubdirs { path, subdirs } => self.set_subdirs(core, &path, subdirs),
            Request::Revoke { txn } => self.revoke(core, txn),
            _ => Err(Errno::ENOSYS),
        }
    }

    fn fsck(&self, core: &Core, r: &mut FsckReport) -> Result<(), Errno> {
        self.check(core, r)
    }
}

impl Giraffa {
    /// Every row on its region's server; every directory row at the key its
    /// path gives and in the prefix index.
    fn check(&self, core: &Core, r: &mut FsckReport) -> Result<(), Errno> {
        let me = core.cfg.index;
        let index = self.rows.lock().clone();
        let mut dirs = 0u64;
        for cf in [ENTRIES, DIRS] {
            core.store
                .for_each(cf, b"", &mut |k, v| {
                    let prefix = k.get(..8).map_or(u64::MAX, |b| u64::from_be_bytes(b.try_into().unwrap_or_default()));
                    if !self.here(core, prefix) {
                        r.problems.push(format!("server {me}: row {k:?} belongs to server {}", giraffa::region_server(prefix, core.cfg.servers)));
                    }
                    if cf == DIRS {
                        dirs += 1;
                        match keys::decode::<DirRow>(v).and_then(|row| NsPath::parse(&row.path).ok()) {
                            Some(p) if row_key_of(&p) == k && index.get(&giraffa::prefix(&p)).is_some_and(|i| i == k) => {}
                            Some(p) => r.problems.push(format!("server {me}: directory row of {p} is at the wrong key or not indexed")),
                            None => r.problems.push(format!("server {me}: undecodable directory row {k:?}")),
                        }
                    }
                    true
                })
                .map_err(io)?;
        }
        if dirs != index.len() as u64 {
            r.problems.push(format!("server {me}: {dirs} directory rows, {} indexed", index.len()));
        }
        r.dirs = dirs;
        Ok(())
    }
}
