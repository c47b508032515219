//! IndexFS on a server (seed 000 §3.1, seed 001): each directory lives in
//! partitions, the first on its *home* server (`giga::home(id)`), chosen when it
//! is made; a directory's entry (its name, id, mode and owner) lives in its
//! parent's partition, its attributes and a copy of its lookup state in the
//! header of each of its own partitions. Clients resolve a path one component at
//! a time (`IxLookup`) and cache each answer under a lease; the server keeps only
//! the latest expiry per entry and makes a mutation of the entry wait it out
//! (`lease.rs`).
//!
//! Keys (column families of `keys.rs`, values postcard):
//! - `entries` (files) and `dirs` (subdirectory entries): directory id ‖
//!   `giga::hash_key(name)` ‖ name, so a partition is one key range;
//! - `parts`: directory id ‖ partition (u32 BE) → [`Header`];
//! - `dirtimes`: directory id → times, on its home.
//!
//! A partition holding more than the split threshold of entries splits half
//! of its hash range to the server of its GIGA+ child (`split.rs`); a request
//! for a name whose partition is not here is answered with this server's
//! bitmap of the directory (`parts.rs`), which the client merges and resends.

mod bulk;
mod dirs;
pub mod lease;
mod parts;
mod readdir;
mod split;
pub use split::{SplitHook, SplitStep, DEFAULT_SPLIT_THRESHOLD};

use crate::revoked::Revoked;
use crate::core::{io, Core};
use crate::keys::{self, DIRS, DIRTIMES, ENTRIES, PARTS};
use crate::mode::{Located, Mode, Named, Target};
use crate::ROOT_ID;
use canopy_posix::perm::{self, Owner};
use canopy_proto::attr::access;
use canopy_proto::giga::{self, PartMap};
use canopy_proto::msg::{DirLookup, FsckReport};
use canopy_proto::{Creds, DirEntry, Errno, FileKind, Reply, Request};
use canopy_store::Batch;
use lease::{LeasePolicy, Leases};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

/// One partition of a directory, on the server holding it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Header {
    /// The directory's lookup state (a copy of its entry's, kept by chmod/chown).
    pub lookup: DirLookup,
    /// Its parent's id (0 for the root) and depth below the root (root: 0).
    pub parent: u64,
    pub depth: u32,
    /// Subdirectories whose entries this partition holds.
    pub subdirs: u64,
    /// Set by an rmdir in progress: no new name enters.
    pub sealed: bool,
    /// Which partition this is, and the partitions of the directory it knows
    /// (its ancestors, itself, and every child it split off).
    pub part: u32,
    pub parts: PartMap,
    /// A split of this partition into `splitting` is under way: its durable
    /// record. Until it ends, the moving half is served only by the split.
    pub splitting: Option<u32>,
}

/// A subdirectory's entry in its parent's partition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirEntryValue {
    pub lookup: DirLookup,
    pub depth: u32,
}

pub fn ix_key(dir: u64, name: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(16 + name.len());
    k.extend_from_slice(&dir.to_be_bytes());
    k.extend_from_slice(&giga::hash_key(name).to_be_bytes());
    k.extend_from_slice(name.as_bytes());
    k
}

pub fn ix_name(key: &[u8]) -> Option<String> {
    String::from_utf8(key.get(16..)?.to_vec()).ok()
}

pub(crate) fn part_key(dir: u64, part: u32) -> Vec<u8> {
    let mut k = dir.to_be_bytes().to_vec();
    k.extend_from_slice(&part.to_be_bytes());
    k
}

/// The version of IndexFS's own values in a store (`Header`); bump it when
/// they change. Version 1 headers had no partition bitmap.
const LAYOUT: u32 = 2;
const LAYOUT_KEY: &[u8] = b"indexfs_layout";

/// Refuses a store whose IndexFS values this release cannot read, and records
/// the version in a new one.
fn check_layout(core: &Core) -> Result<(), String> {
    let found = match core.store.get(keys::META, LAYOUT_KEY).map_err(|e| e.to_string())? {
        Some(v) => <[u8; 4]>::try_from(&v[..]).map(u32::from_be_bytes).map_err(|_| "corrupt IndexFS layout record".to_string())?,
        None if core.fresh => LAYOUT,
        None => 1,
    };
    if found != LAYOUT {
        return Err(format!("this server's data directory holds IndexFS layout version {found}, but this program reads version {LAYOUT}: run the Canopy release that wrote it, or start from an empty data directory"));
    }
    let mut b = Batch::new();
    b.put(keys::META, LAYOUT_KEY.to_vec(), LAYOUT.to_be_bytes().to_vec());
    core.store.write(b).map_err(|e| e.to_string())
}

pub(crate) struct IndexFs {
    leases: Mutex<Leases>,
    /// Headers held here (for `Stats`).
    headers: AtomicI64,
    /// Mutations that waited for a lease, and their total wait.
    lease_waits: AtomicU64,
    lease_wait_ms: AtomicU64,
    /// Requests answered with a redirect (`IxMoved`).
    redirects: AtomicU64,
    splits: split::Splits,
    cache: parts::HeaderCache,
    /// Transactions recovery took over (`crate::revoked`): a link's steps
    /// naming one are refused.
    revoked: Revoked,
}

/// The registry's way in: IndexFS's server (`canopy_proto::for_each_mode!`).
pub(crate) fn open(o: &canopy_proto::modes::IndexFsOptions, at: &crate::mode::Opening) -> Result<Box<dyn Mode>, String> {
    Ok(Box::new(IndexFs::open(at.core, o.lease, o.split_threshold)?))
}

impl IndexFs {
    pub(crate) fn open(core: &Core, policy: LeasePolicy, split_threshold: u64) -> Result<IndexFs, String> {
        check_layout(core)?;
        let mut headers = 0i64;
        let mut unfinished = Vec::new();
        core.store
            .for_each(PARTS, b"", &mut |_, v| {
                headers += 1;
                if let Some(h) = keys::decode::<Header>(v).filter(|h| h.splitting.is_some()) {
                    unfinished.push((h.lookup.id, h.part));
                }
                true
            })
            .map_err(|e| e.to_string())?;
        let me = IndexFs {
            leases: Mutex::new(Leases::new(policy, core.clock.now_ms(), core.fresh)),
            headers: AtomicI64::new(headers),
            lease_waits: AtomicU64::new(0),
            lease_wait_ms: AtomicU64::new(0),
            redirects: AtomicU64::new(0),
            splits: split::Splits::new(split_threshold, unfinished, core.doorbell.clone(), core.clock.clone()),
            cache: parts::HeaderCache::default(),
            revoked: Revoked::of(crate::revoked::load(core)?),
        };
        if giga::home(ROOT_ID, core.cfg.servers) == core.cfg.index && me.header(core, ROOT_ID).map_err(|e| e.to_string())?.is_none() {
            let root = DirLookup { id: ROOT_ID, mode: 0o755, uid: 0, gid: 0 };
            me.make_header(core, root, 0, 0).map_err(|e| format!("cannot make the root: {e}"))?;
        }
        Ok(me)
    }

    /// The header of partition 0 of `dir` (on its home), if held here.
    pub(crate) fn header(&self, core: &Core, dir: u64) -> Result<Option<Header>, Errno> {
        self.part_header(core, dir, 0)
    }

    pub(crate) fn part_header(&self, core: &Core, dir: u64, part: u32) -> Result<Option<Header>, Errno> {
        match core.store.get(PARTS, &part_key(dir, part)).map_err(io)? {
            Some(v) => keys::decode(&v).map(Some).ok_or(Errno::EIO),
            None => Ok(None),
        }
    }

    fn put_header(&self, b: &mut Batch, h: &Header) {
        b.put(PARTS, part_key(h.lookup.id, h.part), keys::encode(h));
    }

    /// The header of partition 0 of `dir` here, or `ENXIO`: the client named a
    /// directory this server does not hold (gone, or not made yet: it retries
    /// under locks).
    fn header_here(&self, core: &Core, dir: u64) -> Result<Header, Errno> {
        self.header(core, dir)?.ok_or(Errno::ENXIO)
    }

    fn dir_entry(&self, core: &Core, dir: u64, name: &str) -> Result<Option<DirEntryValue>, Errno> {
        match core.store.get(DIRS, &ix_key(dir, name)).map_err(io)? {
            Some(v) => keys::decode(&v).map(Some).ok_or(Errno::EIO),
            None => Ok(None),
        }
    }

    fn make_header(&self, core: &Core, lookup: DirLookup, parent: u64, depth: u32) -> Result<(), Errno> {
        let id = lookup.id;
        let mut b = Batch::new();
        self.put_header(&mut b, &Header { lookup, parent, depth, subdirs: 0, sealed: false, part: 0, parts: PartMap::new(), splitting: None });
        b.put(DIRTIMES, keys::id_key(id).to_vec(), keys::encode(&core.fresh_dir_times()));
        self.commit(core, b)?;
        self.headers.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    /// Marks a mutation of directory entry `id` and waits until no lease
    /// granted on it is live; the returned guard ends the mutation.
    fn wait_leases<'a>(&'a self, core: &'a Core, id: u64, client: u64) -> LeaseGuard<'a> {
        let until = self.leases.lock().begin(id, client);
        let start = core.clock.now_ms();
        if until > start {
            self.lease_waits.fetch_add(1, Ordering::Relaxed);
            core.clock.wait_until_ms(until);
            self.lease_wait_ms.fetch_add(core.clock.now_ms() - start, Ordering::Relaxed);
        }
        LeaseGuard { fs: self, id }
    }
}

struct LeaseGuard<'a> {
    fs: &'a IndexFs,
    id: u64,
}

impl Drop for LeaseGuard<'_> {
    fn drop(&mut self) {
        self.fs.leases.lock().end(self.id);
    }
}

impl Mode for IndexFs {
    fn name(&self) -> &'static str {
        "indexfs"
    }

    /// Checks search permission on the entry's directory only: the client
    /// checked its ancestors from its lease cache.
    fn locate(&self, core: &Core, creds: &Creds, at: &Target) -> Result<Located, Errno> {
        match at {
            Target::Path(_) => Err(Errno::EINVAL),
            Target::Dir(id) => {
                if self.parts_here(core, *id)?.is_empty() {
                    return Err(Errno::ENXIO);
                }
                if *id == ROOT_ID {
                    return Ok(Located::Root);
                }
                Ok(Located::Dir { parent: 0, name: String::new(), id: *id })
            }
            Target::Entry { dir, name } => {
                let h = self.part_for(core, *dir, name)?;
                if !perm::allows(creds, Owner::of_dir(&h.lookup), true, access::X) {
                    return Err(Errno::EACCES);
                }
                if let Some(d) = self.dir_entry(core, *dir, name)? {
                    return Ok(Located::Dir { parent: *dir, name: name.clone(), id: d.lookup.id });
                }
                match core.load_record(&ix_key(*dir, name))? {
                    Some(record) => Ok(Located::File { parent: *dir, name: name.clone(), record }),
                    // An rmdir of the directory is under way: the client retries
                    // under its locks, after which the directory is gone or back.
                    None if h.sealed => Err(Errno::EAGAIN),
                    // A split may have moved the name since the header was read
                    // (reads hold no lock): then ask again.
                    None => match self.absent(core, &h) {
                        Errno::ENOENT => Ok(Located::Absent { parent: *dir, name: name.clone() }),
                        e => Err(e),
                    },
                }
            }
        }
    }

    fn entry_key(&self, dir: u64, name: &str) -> Vec<u8> {
        ix_key(dir, name)
    }

    fn entry_name(&self, key: &[u8]) -> Option<String> {
        ix_name(key)
    }

    fn checks_ancestors(&self) -> bool {
        false
    }

    fn keys_in_name_order(&self) -> bool {
        false
    }

    /// Directories with a partition here; their attributes only on their
    /// home (elsewhere the caller answers `EREMOTE`).
    fn dir(&self, core: &Core, id: u64) -> Result<Option<(DirLookup, Option<u32>)>, Errno> {
        let parts = self.parts_here(core, id)?;
        let Some(first) = parts.first() else { return Ok(None) };
        let Some(home) = parts.iter().find(|h| h.part == 0) else { return Ok(Some((first.lookup.clone(), None))) };
        // Split: its subdirectories are counted in partitions on other
        // servers, so it says "not counted" (tools such as find then look).
        let nlink = match home.parts.len() > 1 {
            true => 1,
            false => 2 + home.subdirs.min(u32::MAX as u64 - 2) as u32,
        };
        Ok(Some((first.lookup.clone(), Some(nlink))))
    }

    fn blocks(&self, req: &Request) -> bool {
        IndexFs::blocks(req)
    }

    fn waits(&self, req: &Request) -> bool {
        IndexFs::waits(req)
    }

    fn parent_ids(&self, targets: &[&Target]) -> Vec<u64> {
        targets
            .iter()
            .map(|t| match t {
                Target::Entry { dir, .. } => *dir,
                Target::Dir(id) => *id,
                Target::Path(_) => 0,
            })
            .collect()
    }

    fn subdirs(&self, core: &Core, id: u64, after: Option<&str>, limit: usize) -> Result<Vec<DirEntry>, Errno> {
        let after_key = after.map(|a| ix_key(id, a));
        let found = core.store.scan(DIRS, &id.to_be_bytes(), after_key.as_deref(), limit).map_err(io)?;
        found
            .iter()
            .map(|(k, v)| {
                let name = ix_name(k).ok_or(Errno::EIO)?;
                let d: DirEntryValue = keys::decode(v).ok_or(Errno::EIO)?;
                Ok(DirEntry { name, ino: d.lookup.id, kind: FileKind::Dir })
            })
            .collect()
    }

    /// Lease waits (how many mutations waited, and for how long in all),
    /// redirects answered, splits finished and unfinished, requests refused
    /// while their name's split was pending.
    fn counters(&self) -> Vec<(String, u64)> {
        let (waits, ms) = self.lease_wait_counts();
        let (splits, unfinished, pending) = self.splits.counts();
        vec![
            ("lease_waits".into(), waits),
            ("lease_wait_ms".into(), ms),
            ("redirects".into(), self.redirects.load(Ordering::Relaxed)),
            ("splits".into(), splits),
            ("splits_unfinished".into(), unfinished),
            ("splits_pending".into(), pending),
            ("split_refusals".into(), self.splits.refused()),
        ]
    }

    fn grew(&self, _core: &Core, dir: u64, n: u64) {
        self.splits.grew(dir, n);
    }

    fn partitioned(&self) -> bool {
        true
    }

    fn moved(&self, core: &Core, named: &[Option<Named>]) -> Option<Reply> {
        let r = named.iter().flatten().find_map(|n| self.redirect(core, n.dir, n.hash));
        if r.is_some() {
            self.redirects.fetch_add(1, Ordering::Relaxed);
        }
        r
    }

    fn background(&self, core: &Core, peers: &canopy_rpc::BlockingCaller) -> bool {
        self.split_work(core, peers)
    }

    fn background_due(&self) -> Option<std::time::Duration> {
        self.splits.retry_due()
    }

    /// IndexFS's requests name entries by directory id and name.
    fn named(&self, req: &Request) -> [Option<Named>; 2] {
        match req {
            Request::IxRenameDirIn { dst: at, .. } | Request::IxRenameDirOut { src: at, .. } | Request::IxRenameDirCommit { src: at, .. } => [Named::at(at), None],
            Request::IxRenameDir { src, dst, .. } => [Named::at(src), Named::at(dst)],
            Request::IxLookup { dir, name, .. } | Request::IxMkdir { dir, name, .. } | Request::IxRmdir { dir, name, .. } | Request::IxDirSetAttr { dir, name, .. } => {
                [Named::entry(*dir, name), None]
            }
            Request::IxBulkInsert { dir, .. } => [Some(Named { dir: *dir, hash: None }), None],
            _ => [None, None],
        }
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn dirs(&self) -> u64 {
        self.headers.load(Ordering::Acquire).max(0) as u64
    }

    fn handle(&self, core: &Core, creds: &Creds, req: Request) -> Result<Reply, Errno> {
        match req {
            Request::IxLookup { dir, name, depth, client } => self.lookup(core, creds, dir, &name, depth, client),
            Request::IxMkdir { dir, name, mode, txn } => self.mkdir(core, creds, dir, &name, mode, txn),
            Request::IxMkHeader { lookup, parent, depth, txn } => self.mk_header(core, lookup, parent, depth, txn),
            Request::IxSeal { dir, seal, txn } => self.seal(core, dir, seal, txn),
            Request::IxRmdir { dir, name, check_only, client, txn } => self.rmdir(core, creds, dir, &name, check_only, client, txn),
            Request::IxDropHeader { dir, txn } => self.drop_header(core, dir, txn),
            Request::IxDirSetAttr { dir, name, set, client, txn } => self.dir_set_attr(core, creds, dir, &name, &set, client, txn),
            Request::IxHeaderSet { lookup, txn } => self.header_set(core, lookup, txn),
            Request::IxRenameDir { src, dst, client, txn } => self.rename_dir(core, creds, &Target::parse(&src)?, &Target::parse(&dst)?, client, txn),
            Request::IxRenameDirOut { src, dst } => self.rename_dir_out(core, creds, &Target::parse(&src)?, &Target::parse(&dst)?),
            Request::IxRenameDirIn { dst, lookup, txn } => self.rename_dir_in(core, creds, &Target::parse(&dst)?, lookup, txn),
            Request::IxRenameDirCommit { src, id, client, txn } => self.rename_dir_commit(core, &Target::parse(&src)?, id, client, txn),
            Request::IxBulkInsert { dir, names, mode } => self.bulk_insert(core, creds, dir, names, mode),
            Request::IxSplitIn { dir, part, lookup, parent, depth, subdirs, parts, chunk, last, entries, dirs } => {
                self.split_in(core, dir, part, lookup, parent, depth, subdirs, parts, chunk, last, &entries, &dirs)
            }
            Request::IxReadDir { dir, after, limit } => self.read_dir(core, creds, dir, after.as_deref(), limit),
            Request::IxRenew { items, client } => self.renew(core, creds, &items, client),
            // Under the structure lock, which every transaction step holds
            // shared (with its entry locks): one under way ends first.
            Request::Revoke { txn } => {
                let _g = core.lock_structure();
                self.revoked.add(core, txn).map(|()| Reply::Unit)
            }
            _ => Err(Errno::ENOSYS),
        }
    }

    /// A transaction's steps (a link's, a file rename's, and the directory
    /// steps of `dirs.rs`), checked under their entry locks: refused once
    /// recovery revoked their transaction.
    fn refuse_step(&self, txn: Option<u64>) -> Result<(), Errno> {
        self.revoked.refuse(txn, Errno::ESTALE)
    }

    fn fsck(&self, core: &Core, r: &mut FsckReport) -> Result<(), Errno> {
        self.check(core, r)
    }
}

impl IndexFs {
    /// Mutations that wait for leases, and table ingests, run off the reactor.
    pub(crate) fn blocks(req: &Request) -> bool {
        IndexFs::waits(req) || matches!(req, Request::IxBulkInsert { .. } | Request::IxSplitIn { .. })
    }

    /// Mutations that wait until no lease on their entry is live.
    pub(crate) fn waits(req: &Request) -> bool {
        matches!(
            req,
            Request::IxRmdir { check_only: false, .. } | Request::IxDirSetAttr { .. } | Request::IxRenameDir { .. } | Request::IxRenameDirCommit { .. }
        )
    }

    /// (waits, total wait ms) of mutations that waited for a lease.
    pub(crate) fn lease_wait_counts(&self) -> (u64, u64) {
        (self.lease_waits.load(Ordering::Relaxed), self.lease_wait_ms.load(Ordering::Relaxed))
    }

    fn check(&self, core: &Core, r: &mut FsckReport) -> Result<(), Errno> {
        let me = core.cfg.index;
        let mut headers: std::collections::HashMap<(u64, u32), Header> = std::collections::HashMap::new();
        core.store
            .for_each(PARTS, b"", &mut |k, v| {
                match keys::decode::<Header>(v) {
                    Some(h) => {
                        if giga::server_of(h.lookup.id, h.part, core.cfg.servers) != me {
                            r.problems.push(format!("server {me}: directory {:#x} has partition {} away from its server", h.lookup.id, h.part));
                        }
                        headers.insert((h.lookup.id, h.part), h);
                    }
                    None => r.problems.push(format!("server {me}: undecodable header {k:?}")),
                }
                true
            })
            .map_err(io)?;
        r.dirs = headers.keys().filter(|(_, p)| *p == 0).count() as u64;
        r.dir_homes = headers.keys().filter(|(id, p)| *p == 0 && *id != ROOT_ID).map(|(id, _)| *id).collect();
        // Per directory: the partitions held here and the bitmap they know.
        let mut by_dir: std::collections::HashMap<u64, (Vec<Header>, PartMap)> = std::collections::HashMap::new();
        for ((dir, _), h) in &headers {
            by_dir.entry(*dir).or_insert_with(|| (Vec::new(), PartMap::new())).0.push(h.clone());
        }
        for (here, map) in by_dir.values_mut() {
            *map = parts::known(here);
        }
        let mut subdirs: std::collections::HashMap<(u64, u32), u64> = std::collections::HashMap::new();
        for cf in [ENTRIES, DIRS] {
            core.store
                .for_each(cf, b"", &mut |k, v| {
                    let dir = k.get(..8).map_or(0, |b| u64::from_be_bytes(b.try_into().unwrap_or_default()));
                    let name = ix_name(k).unwrap_or_default();
                    let Some((here, map)) = by_dir.get(&dir) else {
                        r.problems.push(format!("server {me}: entry {name:?} in directory {dir:#x} that has no partition here"));
                        return true;
                    };
                    if cf == DIRS {
                        match keys::decode::<DirEntryValue>(v) {
                            Some(e) => r.dir_names.push(e.lookup.id),
                            None => r.problems.push(format!("server {me}: undecodable subdirectory {name:?} in directory {dir:#x}")),
                        }
                    }
                    let part = map.part_of(giga::name_hash(&name));
                    if here.iter().any(|h| h.part == part) {
                        if cf == DIRS {
                            *subdirs.entry((dir, part)).or_default() += 1;
                        }
                    } else if here.iter().any(|h| h.splitting.is_some()) {
                        r.problems.push(format!("server {me}: {name:?} in directory {dir:#x} waits for an unfinished split"));
                    } else {
                        r.problems.push(format!("server {me}: {name:?} in directory {dir:#x} belongs to partition {part}, which is not here"));
                    }
                    true
                })
                .map_err(io)?;
        }
        for ((id, part), h) in &headers {
            let n = subdirs.get(&(*id, *part)).copied().unwrap_or(0);
            if h.subdirs != n {
                r.problems.push(format!("server {me}: directory {id:#x} partition {part} counts {} subdirectories, holds {n}", h.subdirs));
            }
            if h.sealed {
                r.problems.push(format!("server {me}: directory {id:#x} is sealed by an rmdir that has not finished"));
            }
            if let Some(c) = h.splitting {
                r.problems.push(format!("server {me}: directory {id:#x} partition {part} has an unfinished split into {c}"));
            }
        }
        Ok(())
    }
}

impl crate::MetaServer {
    /// Tests: call `hook` at each step of a split (IndexFS; no other mode
    /// splits); `false` kills this server's part of the split there.
    pub fn set_split_hook(&self, hook: Option<SplitHook>) {
        if let Some(ix) = self.mode_as::<IndexFs>() {
            ix.splits.set_hook(hook);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_group_a_directory_and_order_by_name_hash() {
        let a = ix_key(7, "a");
        let b = ix_key(7, "b");
        assert_eq!(&a[..8], &7u64.to_be_bytes());
        assert_eq!(ix_name(&a).as_deref(), Some("a"));
        assert_eq!(a < b, giga::hash_key("a") < giga::hash_key("b"));
        assert!(ix_key(7, "zzz") < ix_key(8, ""));
        assert_eq!(ix_name(b"short"), None);
    }
}
