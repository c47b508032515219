//! What a metadata server holds whatever its mode: its place in the cluster, the
//! store and the reads and writes every operation shares, the mutation locks, the
//! id allocator, counters, the clock, and the broken invariants fsck reports.

use crate::counters::Counters;
use crate::doorbell::Doorbell;
use crate::ids::IdAlloc;
use crate::keys::{self, DIRTIMES, ENTRIES, INODES, META, META_FID_SALT, META_IDENTITY};
use crate::mutlock::{MutGuard, MutationLocks};
use canopy_proto::clock::SharedClock;
use canopy_proto::msg::{DirLookup, DirTimes, Inode, Record};
use canopy_proto::{Attr, Errno, Fid, FileKind};
use canopy_store::{Batch, Change, SharedStore, Store};
use parking_lot::{Mutex, RwLock};
use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

/// See [`crate::MetaServer::set_mutation_hook`].
pub type MutationHook = std::sync::Arc<dyn Fn(&[String]) + Send + Sync>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerConfig {
    /// This server's index in the cluster (0-based).
    pub index: u32,
    /// How many metadata servers the cluster has.
    pub servers: u32,
}

pub struct Core {
    pub(crate) cfg: ServerConfig,
    pub(crate) store: SharedStore,
    locks: MutationLocks,
    /// A test's hook, called with a mutation's targets once its locks are held.
    mutation_hook: RwLock<Option<MutationHook>>,
    ids: Mutex<IdAlloc>,
    pub(crate) counters: Counters,
    /// Broken invariants met while serving (answered EIO), for fsck.
    problems: Mutex<Vec<String>>,
    /// File and directory times are read from it; tests move it by hand.
    pub(crate) clock: SharedClock,
    /// File entries held here, kept by every write, so `Stats` is O(1) (counted
    /// once at open; fsck counts again).
    entries: AtomicI64,
    /// The store was new at open: nothing was served from it before.
    pub(crate) fresh: bool,
    /// Rung when the mode queues background work (IndexFS: a directory to
    /// check for a split).
    pub(crate) doorbell: Arc<Doorbell>,
    /// The high half of every FID this server issues (`canopy_proto::fid`):
    /// drawn at random once, kept in `meta`.
    fid_salt: u64,
}

pub(crate) fn io(e: impl std::fmt::Display) -> Errno {
    eprintln!("canopy-server: store error: {e}");
    Errno::EIO
}

impl Core {
    /// Checks that `store` belongs to this server and this mode, and loads what
    /// every mode keeps (ids, the entry count).
    pub(crate) fn open(cfg: ServerConfig, store: SharedStore, clock: SharedClock, mode: &str) -> Result<Core, String> {
        if cfg.servers == 0 || cfg.index >= cfg.servers || cfg.servers > u16::MAX as u32 {
            return Err(format!("server index {} is outside a cluster of {}", cfg.index, cfg.servers));
        }
        let fresh = store.get(META, META_IDENTITY).map_err(|e| e.to_string())?.is_none();
        canopy_store::check_layout(&*store, META, keys::LAYOUT_VERSION, 1, fresh, "this server's data directory")?;
        check_identity(&cfg, &*store, mode, fresh)?;
        let ids = IdAlloc::load(cfg.index, &*store)?;
        let entries = count_entries(&*store)?;
        let fid_salt = load_fid_salt(&*store)?;
        Ok(Core {
            cfg,
            store,
            locks: MutationLocks::default(),
            mutation_hook: RwLock::new(None),
            ids: Mutex::new(ids),
            counters: Counters::default(),
            problems: Mutex::new(Vec::new()),
            clock,
            entries: AtomicI64::new(entries),
            fresh,
            doorbell: Arc::default(),
            fid_salt,
        })
    }

    /// The FID of the file this server makes as inode `ino`: unique in the
    /// cluster, and never one a client chose.
    pub(crate) fn fid_of(&self, ino: u64) -> Fid {
        Fid::new(self.fid_salt, ino)
    }

    pub fn index(&self) -> u32 {
        self.cfg.index
    }

    /// Now, for file and directory times (nanoseconds since the epoch).
    pub(crate) fn now_ns(&self) -> i64 {
        self.clock.wall_ns()
    }

    /// A new directory's times: all now.
    pub(crate) fn fresh_dir_times(&self) -> DirTimes {
        let now = self.now_ns();
        DirTimes { atime: now, mtime: now, ctime: now }
    }

    /// A new inode or directory id, unique in the cluster.
    pub(crate) fn new_id(&self) -> Result<u64, Errno> {
        self.ids.lock().allocate(&*self.store).map_err(io)
    }

    /// File entries held here.
    pub(crate) fn entry_count(&self) -> u64 {
        self.entries.load(Ordering::Acquire).max(0) as u64
    }

    /// For mutations that change directories or move objects between them:
    /// excludes every other mutation.
    pub(crate) fn lock_structure(&self) -> MutGuard<'_> {
        self.locks.structure()
    }

    /// For a mutation of entries in the directories `dirs` (ids, from the mode;
    /// `targets` name them for the test hook): their stripes, and the
    /// shared-inode lock if `inodes`.
    pub(crate) fn lock_stripes(&self, dirs: impl FnOnce() -> Vec<u64>, inodes: bool, targets: &[&crate::Target]) -> MutGuard<'_> {
        let g = self.locks.entries(dirs, inodes);
        if let Some(hook) = self.mutation_hook.read().clone() {
            hook(&targets.iter().map(|t| describe(t)).collect::<Vec<_>>());
        }
        g
    }

    /// For a mutation of shared inodes only.
    pub(crate) fn lock_inodes(&self) -> MutGuard<'_> {
        self.locks.entries(Vec::new, true)
    }

    pub(crate) fn set_mutation_hook(&self, hook: Option<MutationHook>) {
        *self.mutation_hook.write() = hook;
    }

    /// The file entry stored at `key` (a mode's entry key).
    pub(crate) fn load_record(&self, key: &[u8]) -> Result<Option<Record>, Errno> {
        match self.store.get(ENTRIES, key).map_err(io)? {
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

    pub(crate) fn load_inode(&self, ino: u64) -> Result<Inode, Errno> {
        let v = self.store.get(INODES, &keys::id_key(ino)).map_err(io)?.ok_or(Errno::ESTALE)?;
        keys::decode(&v).ok_or(Errno::EIO)
    }

    /// True if this server holds no file entry in directory `id`.
    pub(crate) fn no_local_entries(&self, id: u64) -> Result<bool, Errno> {
        Ok(self.store.scan(ENTRIES, &id.to_be_bytes(), None, 1).map_err(io)?.is_empty())
    }

    /// A directory's attributes from its lookup state, its link count (2 +
    /// subdirectories, or 1 where they are not counted) and the times this
    /// server keeps of it (zero where it keeps none).
    pub(crate) fn dir_attr(&self, lookup: &DirLookup, nlink: u32) -> Result<Attr, Errno> {
        let times = self.load_dir_times(lookup.id)?.unwrap_or(NO_TIMES);
        Ok(dir_attr_of(lookup, nlink, times))
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

    /// Writes `batch`, which removes exactly `n` file entries (a range delete
    /// whose keys the caller counted under its lock).
    pub(crate) fn write_removing(&self, batch: Batch, n: u64) -> Result<(), Errno> {
        self.store.write(batch).map_err(io)?;
        self.entries.fetch_sub(n as i64, Ordering::AcqRel);
        Ok(())
    }

    /// Counts `n` file entries added outside `write` (an ingested table whose
    /// names the caller found free under its lock).
    pub(crate) fn added_entries(&self, n: u64) {
        self.entries.fetch_add(n as i64, Ordering::AcqRel);
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
}

pub(crate) const NO_TIMES: DirTimes = DirTimes { atime: 0, mtime: 0, ctime: 0 };

/// A directory's attributes from its lookup state, link count and times.
pub(crate) fn dir_attr_of(lookup: &DirLookup, nlink: u32, times: DirTimes) -> Attr {
    Attr {
        ino: lookup.id,
        kind: FileKind::Dir,
        mode: lookup.mode,
        uid: lookup.uid,
        gid: lookup.gid,
        size: 0,
        nlink,
        rdev: 0,
        atime: times.atime,
        mtime: times.mtime,
        ctime: times.ctime,
    }
}

/// A directory's attributes from its lookup state alone (what a setattr of
/// mode or owner is checked against).
pub(crate) fn lookup_attr(lookup: &DirLookup) -> Attr {
    dir_attr_of(lookup, 2, NO_TIMES)
}

fn describe(t: &crate::Target) -> String {
    match t {
        crate::Target::Path(p) => p.to_string(),
        crate::Target::Entry { dir, name } => format!("{dir:#x}/{name}"),
        crate::Target::Dir(id) => format!("{id:#x}"),
    }
}

fn count_entries(store: &dyn Store) -> Result<i64, String> {
    let mut n = 0i64;
    store
        .for_each(ENTRIES, b"", &mut |_, _| {
            n += 1;
            true
        })
        .map_err(|e| e.to_string())?;
    Ok(n)
}

/// The store records which server of which cluster, in which mode, made it; a
/// server refuses another's.
fn check_identity(cfg: &ServerConfig, store: &dyn Store, mode: &str, fresh: bool) -> Result<(), String> {
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
        }
        None => {
            let mut b = Batch::new();
            b.put(META, META_IDENTITY.to_vec(), keys::encode(&mine));
            store.write(b).map_err(|e| e.to_string())?;
        }
    }
    match store.get(META, keys::META_MODE).map_err(|e| e.to_string())? {
        // Stores made before the mode was recorded are ShardFS's.
        None if fresh || mode == "shardfs" => {
            let mut b = Batch::new();
            b.put(META, keys::META_MODE.to_vec(), mode.as_bytes().to_vec());
            store.write(b).map_err(|e| e.to_string())
        }
        None => Err(format!("this data directory was made by a server of mode shardfs, not {mode}")),
        Some(v) if v == mode.as_bytes() => Ok(()),
        Some(v) => Err(format!(
            "this data directory was made by a server of mode {}, not {mode}: a cluster keeps the mode it was created with",
            String::from_utf8_lossy(&v)
        )),
    }
}

/// The store's FID salt, drawn and kept on first use.
fn load_fid_salt(store: &dyn Store) -> Result<u64, String> {
    if let Some(v) = store.get(META, META_FID_SALT).map_err(|e| e.to_string())? {
        return keys::decode::<u64>(&v).ok_or_else(|| "corrupt FID salt".to_string());
    }
    let salt = canopy_rpc::random::u64().map_err(|e| format!("random bytes for the FID salt: {e}"))?;
    let mut b = Batch::new();
    b.put(META, META_FID_SALT.to_vec(), keys::encode(&salt));
    store.write(b).map_err(|e| e.to_string())?;
    Ok(salt)
}
