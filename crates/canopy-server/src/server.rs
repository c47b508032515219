//! The server object: its state, start-up (loading the directory table), the
//! dispatcher, and the lookups every operation shares.
//!
//! Concurrency: reads take the table's read lock and no mutation lock; a mutation
//! holds the locks `mutlock.rs` describes (its directory's stripe, or the whole
//! structure) for its whole check-then-write, so checks and writes of one name
//! are atomic while mutations in different directories run at once.

use crate::counters::Counters;
use crate::dirtable::{DirTable, ROOT_ID};
use crate::ids::IdAlloc;
use crate::keys::{self, DIRS, DIRTIMES, ENTRIES, META, META_IDENTITY};
use crate::resolve::{self, Miss};
use canopy_posix::perm::Owner;
use canopy_proto::auth::Identity;
use canopy_proto::msg::{DirLookup, DirTimes, Record, ServerStats};
use canopy_proto::path::NsPath;
use canopy_proto::placement;
use canopy_proto::{Creds, Errno, Reply, Request};
use canopy_store::{Batch, Change, SharedStore};
use crate::mutlock::{MutGuard, MutationLocks};
use parking_lot::{Mutex, RwLock};
use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use canopy_proto::clock::{SharedClock, SystemClock};

/// See [`MetaServer::set_mutation_hook`].
pub type MutationHook = std::sync::Arc<dyn Fn(&[&str]) + Send + Sync>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerConfig {
    /// This server's index in the cluster (0-based).
    pub index: u32,
    /// How many metadata servers the cluster has.
    pub servers: u32,
}

pub struct MetaServer {
    pub(crate) cfg: ServerConfig,
    pub(crate) store: SharedStore,
    pub(crate) table: RwLock<DirTable>,
    locks: MutationLocks,
    /// A test's hook, called with a mutation's paths once its locks are held.
    mutation_hook: RwLock<Option<MutationHook>>,
    pub(crate) ids: Mutex<IdAlloc>,
    counters: Counters,
    /// Subtrees fenced off by non-monotonic transactions in flight, by txn. In
    /// memory only: the lock service's record outlives a restart and its recovery
    /// ends the transaction.
    fences: RwLock<Vec<(u64, NsPath)>>,
    fence_count: AtomicUsize,
    /// Broken invariants met while serving (answered EIO), for fsck.
    problems: Mutex<Vec<String>>,
    /// File and directory times are read from it; tests move it by hand.
    clock: SharedClock,
    /// File entries held here, kept by every write, so `Stats` is O(1) (counted
    /// once at open; fsck counts again).
    entries: AtomicI64,
}

/// Where a path led on this server.
#[derive(Debug, Clone)]
pub(crate) enum Located {
    Root,
    Dir { parent: u64, name: String, id: u64 },
    File { parent: u64, name: String, record: Record },
    Absent { parent: u64, name: String },
}

pub(crate) fn io(e: impl std::fmt::Display) -> Errno {
    eprintln!("canopy-server: store error: {e}");
    Errno::EIO
}


pub(crate) fn parse(path: &str) -> Result<NsPath, Errno> {
    NsPath::parse(path)
}

impl MetaServer {
    /// Opens a server over `store`: checks the store belongs to this server, loads
    /// the directory table, and creates the root on a new store.
    pub fn open(cfg: ServerConfig, store: SharedStore) -> Result<MetaServer, String> {
        MetaServer::open_with_clock(cfg, store, SystemClock::shared())
    }

    /// [`MetaServer::open`], reading time from `clock`.
    pub fn open_with_clock(cfg: ServerConfig, store: SharedStore, clock: SharedClock) -> Result<MetaServer, String> {
        if cfg.servers == 0 || cfg.index >= cfg.servers || cfg.servers > u16::MAX as u32 {
            return Err(format!("server index {} is outside a cluster of {}", cfg.index, cfg.servers));
        }
        let fresh = store.get(META, META_IDENTITY).map_err(|e| e.to_string())?.is_none();
        canopy_store::check_layout(&*store, META, keys::LAYOUT_VERSION, 1, fresh, "this server's data directory")?;
        check_identity(&cfg, &*store)?;
        let table = load_table(&cfg, &*store, &*clock)?;
        let ids = IdAlloc::load(cfg.index, &*store)?;
        let entries = count_entries(&*store)?;
        Ok(MetaServer {
            cfg,
            store,
            table: RwLock::new(table),
            locks: MutationLocks::default(),
            mutation_hook: RwLock::new(None),
            ids: Mutex::new(ids),
            counters: Counters::default(),
            fences: RwLock::new(Vec::new()),
            fence_count: AtomicUsize::new(0),
            problems: Mutex::new(Vec::new()),
            clock,
            entries: AtomicI64::new(entries),
        })
    }

    pub fn index(&self) -> u32 {
        self.cfg.index
    }

    /// Now, for file and directory times (nanoseconds since the epoch).
    pub(crate) fn now_ns(&self) -> i64 {
        self.clock.wall_ns()
    }

    /// Executes one request. Never panics on input: every path is parsed and every
    /// precondition checked, and failures are errnos.
    pub fn handle(&self, creds: &Creds, req: Request) -> Result<Reply, Errno> {
        self.counters.count(&req);
        match req {
            Request::Ping => Ok(Reply::Pong { server: self.cfg.index, servers: self.cfg.servers }),
            Request::Stat { path } => self.stat(creds, &self.unfenced(&path)?),
            Request::Create { path, mode, kind, if_exists } => self.create(creds, &self.unfenced(&path)?, mode, kind, if_exists),
            Request::Unlink { path } => self.unlink(creds, &self.unfenced(&path)?),
            Request::SetAttr { path, set } => self.set_attr(creds, &self.unfenced(&path)?, &set),
            Request::Readlink { path } => self.readlink(creds, &self.unfenced(&path)?),
            Request::Access { path, mask } => self.access(creds, &self.unfenced(&path)?, mask),
            Request::ReadDir { path, after, limit, with_dirs } => {
                self.read_dir(creds, &self.unfenced(&path)?, after.as_deref(), limit, with_dirs)
            }
            Request::LinkShare { path } => self.link_share(creds, &self.unfenced(&path)?),
            Request::LinkInsert { path, ino, home } => self.link_insert(creds, &self.unfenced(&path)?, ino, home),
            Request::Fence { txn, paths } => self.fence(txn, &paths),
            Request::Unfence { txn } => self.unfence(txn),
            Request::InodeStat { ino } => self.inode_stat(ino),
            Request::InodeSetAttr { ino, set } => self.inode_set_attr(creds, ino, &set),
            Request::InodeLinkDelta { ino, delta } => self.inode_link_delta(ino, delta),
            Request::RenameLocal { src, dst } => self.rename_local(creds, &parse(&src)?, &parse(&dst)?),
            Request::RenameOut { src, dst } => self.rename_out(creds, &parse(&src)?, &parse(&dst)?),
            Request::RenameIn { src, dst, record } => self.rename_in(creds, &parse(&src)?, &parse(&dst)?, record),
            Request::RenameOutCommit { src, ino } => self.rename_out_commit(&parse(&src)?, ino),
            Request::Mkdir { path, mode, assign } => self.mkdir(creds, &parse(&path)?, mode, assign),
            Request::Rmdir { path } => self.rmdir(creds, &parse(&path)?),
            Request::DirSetAttr { path, set } => self.dir_set_attr(creds, &parse(&path)?, &set),
            Request::RenameDir { src, dst, check_only } => {
                self.rename_dir(creds, &parse(&src)?, &parse(&dst)?, check_only)
            }
            Request::DirProbe { path } => self.dir_probe(&parse(&path)?),
            Request::RecoveryStat { path } => self.stat(&Creds::root(), &parse(&path)?),
            Request::DirSync { path, want } => self.dir_sync(&parse(&path)?, want),
            Request::Migrate { root, limit } => self.migrate(&parse(&root)?, limit),
            Request::Adopt { items } => self.adopt(items),
            Request::Release { items } => self.release(items),
            Request::ReadData { at, offset, len } => self.read_data(creds, &at, offset, len),
            Request::WriteData { at, offset, data, inline_max, kill_suid } => {
                self.write_data(creds, &at, offset, &data, inline_max, kill_suid)
            }
            Request::Spilled { at, len, digest } => self.spilled(creds, &at, len, digest),
            Request::Extend { at, end, kill_suid } => self.extend(creds, &at, end, kill_suid),
            Request::TouchDir { path } => self.touch_dir(creds, &self.unfenced(&path)?),
            Request::Stats => Ok(Reply::Stats(self.stats())),
            Request::Fsck => self.fsck(),
            // The lock service's, and what a delegating wrapper runs (the daemon's).
            Request::Lock { .. } | Request::Renew { .. } | Request::Unlock { .. } | Request::ListTxns | Request::Delegate { .. } => {
                Err(Errno::ENOSYS)
            }
        }
    }

    /// Parses the path of a single-RPC operation; `EAGAIN` if a non-monotonic
    /// transaction fenced it off (the client retries it under locks, which waits
    /// for that transaction to end).
    fn unfenced(&self, raw: &str) -> Result<NsPath, Errno> {
        let path = parse(raw)?;
        if self.fence_count.load(Ordering::Acquire) > 0 && self.fences.read().iter().any(|(_, f)| path.is_within(f)) {
            return Err(Errno::EAGAIN);
        }
        Ok(path)
    }

    fn fence(&self, txn: u64, paths: &[String]) -> Result<Reply, Errno> {
        let parsed = paths.iter().map(|p| parse(p)).collect::<Result<Vec<_>, _>>()?;
        let mut fences = self.fences.write();
        for p in parsed {
            if !fences.iter().any(|(t, f)| *t == txn && *f == p) {
                fences.push((txn, p));
            }
        }
        self.fence_count.store(fences.len(), Ordering::Release);
        Ok(Reply::Unit)
    }

    fn unfence(&self, txn: u64) -> Result<Reply, Errno> {
        let mut fences = self.fences.write();
        fences.retain(|(t, _)| *t != txn);
        self.fence_count.store(fences.len(), Ordering::Release);
        Ok(Reply::Unit)
    }

    /// O(1): counters, the table's size and the entry count kept by `write`.
    pub fn stats(&self) -> ServerStats {
        let dirs = self.table.read().len() as u64;
        let files = self.entries.load(Ordering::Acquire).max(0) as u64;
        ServerStats { server: self.cfg.index, rpcs: self.counters.snapshot(), dirs, files }
    }

    /// For mutations that change the directory table or move objects between
    /// directories: excludes every other mutation.
    pub(crate) fn lock_structure(&self) -> MutGuard<'_> {
        self.locks.structure()
    }

    /// For a mutation of the entries at `paths`: their parents' stripes (and the
    /// shared-inode lock if `inodes`).
    pub(crate) fn lock_entries(&self, paths: &[&NsPath], inodes: bool) -> MutGuard<'_> {
        let g = self.locks.entries(|| self.parent_ids(paths), inodes);
        if let Some(hook) = self.mutation_hook.read().clone() {
            hook(&paths.iter().map(|p| p.as_str()).collect::<Vec<_>>());
        }
        g
    }

    /// For a mutation of shared inodes only.
    pub(crate) fn lock_inodes(&self) -> MutGuard<'_> {
        self.locks.entries(Vec::new, true)
    }

    /// The directory ids of `paths`' parents, as far as they resolve (0 where
    /// not: the operation will fail, and any stripe will do for that).
    fn parent_ids(&self, paths: &[&NsPath]) -> Vec<u64> {
        let table = self.table.read();
        paths
            .iter()
            .map(|p| p.split().and_then(|(parent, _)| resolve::resolve_dir(&table, &Creds::root(), &parent).ok()).unwrap_or(0))
            .collect()
    }

    /// Tests: call `hook` with a mutation's paths each time one holds its locks
    /// (it may block, holding them).
    pub fn set_mutation_hook(&self, hook: Option<MutationHook>) {
        *self.mutation_hook.write() = hook;
    }

    pub(crate) fn is_primary(&self, path: &NsPath) -> bool {
        placement::primary(path, self.cfg.servers) == self.cfg.index
    }

    pub(crate) fn primary_of(&self, path: &NsPath) -> u32 {
        placement::primary(path, self.cfg.servers)
    }

    pub(crate) fn load_entry(&self, parent: u64, name: &str) -> Result<Option<Record>, Errno> {
        match self.store.get(ENTRIES, &keys::entry_key(parent, name)).map_err(io)? {
            Some(v) => keys::decode(&v).map(Some).ok_or(Errno::EIO),
            None => Ok(None),
        }
    }

    pub(crate) fn load_dir_times(&self, id: u64) -> Result<Option<DirTimes>, Errno> {
        match self.store.get(DIRTIMES, &keys::id_key(id)).map_err(io)? {
            Some(v) => keys::decode(&v).map(Some).ok_or(Errno::EIO),
            None => Ok(None),
        }
    }

    /// Writes `batch` atomically, keeping the entry count. Callers hold the
    /// mutation lock of what they change, so the count's reads see no race.
    pub(crate) fn write(&self, batch: Batch) -> Result<(), Errno> {
        let delta = self.entry_delta(&batch)?;
        self.store.write(batch).map_err(io)?;
        self.entries.fetch_add(delta, Ordering::AcqRel);
        Ok(())
    }

    /// Writes `batch`, which adds exactly one file entry that this mutation found
    /// absent under its lock: the count needs no look-up (the hot path of a
    /// create; fsck checks the count, so a wrong caller shows).
    pub(crate) fn write_new_entry(&self, batch: Batch) -> Result<(), Errno> {
        self.store.write(batch).map_err(io)?;
        self.entries.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    /// How many file entries `batch` adds (negative: removes), from what each
    /// key it changes holds now and will hold after.
    fn entry_delta(&self, batch: &Batch) -> Result<i64, Errno> {
        let mut after: HashMap<&[u8], bool> = HashMap::new();
        for change in &batch.changes {
            match change {
                Change::Put(cf, k, _) if *cf == ENTRIES => after.insert(k, true),
                Change::Delete(cf, k) if *cf == ENTRIES => after.insert(k, false),
                Change::DeleteRange(cf, ..) if *cf == ENTRIES => {
                    // No operation deletes entry ranges yet; count them if one does.
                    self.problem("an entry range delete left the entry count stale".into());
                    None
                }
                _ => None,
            };
        }
        let mut delta = 0i64;
        for (k, present) in after {
            let was = self.store.get(ENTRIES, k).map_err(io)?.is_some();
            delta += present as i64 - was as i64;
        }
        Ok(delta)
    }

    /// Turns a resolution miss into an errno: a missing intermediate component is
    /// `ENOTDIR` if this server holds a file of that name, `ENOENT` if this server
    /// is that name's primary and holds nothing, else `EREMOTE` (only its primary
    /// can tell). Callers pass the table they resolved against and still hold: a
    /// second read lock could wait behind a queued writer and deadlock.
    pub(crate) fn miss(&self, table: &DirTable, miss: Miss) -> Errno {
        if let Miss::Broken { id } = &miss {
            self.problem(format!("directory {id:#x} is listed but missing from the table"));
        }
        if let Miss::NotADir { parent, name } = &miss {
            if let Ok(Some(_)) = self.load_entry(*parent, name) {
                return Errno::ENOTDIR;
            }
            let path = table.path_of(*parent).and_then(|p| p.join(name).ok());
            if path.is_some_and(|p| self.is_primary(&p)) {
                return Errno::ENOENT;
            }
        }
        resolve::miss_errno(&miss)
    }

    /// Records a broken invariant for fsck (the request that met it is answered
    /// EIO). Bounded: the first few say what went wrong.
    pub(crate) fn problem(&self, what: String) {
        eprintln!("canopy-server {}: {what}", self.cfg.index);
        let mut p = self.problems.lock();
        if p.len() < 100 {
            p.push(format!("server {}: {what}", self.cfg.index));
        }
    }

    pub(crate) fn problems(&self) -> Vec<String> {
        self.problems.lock().clone()
    }

    /// Resolves `path` to what this server knows of it.
    pub(crate) fn locate(&self, creds: &Creds, path: &NsPath) -> Result<Located, Errno> {
        if path.is_root() {
            return Ok(Located::Root);
        }
        let (parent, name) = {
            let table = self.table.read();
            let (parent, name) = resolve::resolve_parent(&table, creds, path).map_err(|m| self.miss(&table, m))?;
            if let Some(id) = table.child(parent, name) {
                return Ok(Located::Dir { parent, name: name.to_string(), id });
            }
            (parent, name.to_string())
        };
        match self.load_entry(parent, &name)? {
            Some(record) => Ok(Located::File { parent, name, record }),
            None => Ok(Located::Absent { parent, name }),
        }
    }

    pub(crate) fn dir_owner(&self, id: u64) -> Result<Owner, Errno> {
        let table = self.table.read();
        table.get(id).map(resolve::owner).ok_or(Errno::ENOENT)
    }

    pub(crate) fn dir_lookup(&self, id: u64) -> Result<DirLookup, Errno> {
        self.table.read().get(id).map(|n| n.lookup.clone()).ok_or(Errno::ENOENT)
    }

    /// True if this server holds no file entry in directory `id`.
    pub(crate) fn no_local_entries(&self, id: u64) -> Result<bool, Errno> {
        Ok(self.store.scan(ENTRIES, &id.to_be_bytes(), None, 1).map_err(io)?.is_empty())
    }
}

fn count_entries(store: &dyn canopy_store::Store) -> Result<i64, String> {
    let mut n = 0i64;
    store
        .for_each(ENTRIES, b"", &mut |_, _| {
            n += 1;
            true
        })
        .map_err(|e| e.to_string())?;
    Ok(n)
}

fn check_identity(cfg: &ServerConfig, store: &dyn canopy_store::Store) -> Result<(), String> {
    let mine = (cfg.index, cfg.servers);
    match store.get(META, META_IDENTITY).map_err(|e| e.to_string())? {
        Some(v) => {
            let theirs: (u32, u32) = keys::decode(&v).ok_or("corrupt identity record")?;
            if theirs != mine {
                return Err(format!(
                    "this data directory belongs to server {} of {}, not server {} of {}",
                    theirs.0, theirs.1, mine.0, mine.1
                ));
            }
            Ok(())
        }
        None => {
            let mut b = Batch::new();
            b.put(META, META_IDENTITY.to_vec(), keys::encode(&mine));
            store.write(b).map_err(|e| e.to_string())
        }
    }
}

/// Loads the replicated directory table, parents before children; creates the
/// root on an empty store.
fn load_table(cfg: &ServerConfig, store: &dyn canopy_store::Store, clock: &dyn canopy_proto::clock::Clock) -> Result<DirTable, String> {
    let mut by_parent: HashMap<u64, Vec<(String, DirLookup)>> = HashMap::new();
    let mut root = None;
    let mut corrupt = None;
    store
        .for_each(DIRS, b"", &mut |k, v| {
            match (keys::split_entry_key(k), keys::decode::<DirLookup>(v)) {
                (Some((0, name)), Some(l)) if name.is_empty() => root = Some(l),
                (Some((parent, name)), Some(l)) => by_parent.entry(parent).or_default().push((name, l)),
                _ => corrupt = Some(k.to_vec()),
            }
            true
        })
        .map_err(|e| e.to_string())?;
    if let Some(k) = corrupt {
        return Err(format!("corrupt directory record {k:?}"));
    }
    let root = match root {
        Some(r) => r,
        None => init_root(cfg, store, clock.wall_ns())?,
    };
    let mut table = DirTable::new(root);
    let mut pending = vec![ROOT_ID];
    while let Some(parent) = pending.pop() {
        for (name, lookup) in by_parent.remove(&parent).unwrap_or_default() {
            pending.push(lookup.id);
            table.insert(parent, &name, lookup);
        }
    }
    if !by_parent.is_empty() {
        return Err(format!("{} directory records have no parent", by_parent.values().map(Vec::len).sum::<usize>()));
    }
    Ok(table)
}

fn init_root(cfg: &ServerConfig, store: &dyn canopy_store::Store, now: i64) -> Result<DirLookup, String> {
    let root = DirLookup { id: ROOT_ID, mode: 0o755, uid: 0, gid: 0 };
    let mut b = Batch::new();
    b.put(DIRS, keys::entry_key(0, ""), keys::encode(&root));
    if placement::primary(&NsPath::root(), cfg.servers) == cfg.index {
        b.put(DIRTIMES, keys::id_key(ROOT_ID).to_vec(), keys::encode(&DirTimes { atime: now, mtime: now, ctime: now }));
    }
    store.write(b).map_err(|e| e.to_string())?;
    Ok(root)
}

impl canopy_rpc::Service for MetaServer {
    fn call(&self, peer: &Identity, creds: Creds, req: Request) -> canopy_rpc::Handled {
        if !peer.is_cluster() && !req.user_may_send() {
            return canopy_rpc::Handled::Now(Err(Errno::EPERM));
        }
        canopy_rpc::Handled::Now(self.handle(&creds, req))
    }

    /// fsck scans the whole store; with fsync durability every write waits for
    /// the disk (milliseconds). Both then run off the reactor. Without fsync a
    /// write takes microseconds, less than the hand-off to another thread: the
    /// create rate fell from about 60K/s to 20K/s when every pass with a
    /// mutation was handed off.
    fn blocks(&self, req: &Request) -> bool {
        if matches!(req, Request::Fsck) {
            return true;
        }
        self.store.syncs_each_write()
            && !matches!(
            req,
            Request::Ping
                | Request::Stat { .. }
                | Request::Readlink { .. }
                | Request::Access { .. }
                | Request::ReadDir { .. }
                | Request::InodeStat { .. }
                | Request::DirProbe { .. }
                | Request::RecoveryStat { .. }
                | Request::ReadData { .. }
                | Request::Stats
        )
    }
}
