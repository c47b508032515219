//! The per-server key-value store behind a narrow trait.
//!
//! [`Store`] is all the metadata logic sees: point reads, atomic write batches
//! (puts, deletes and range deletes), ordered prefix scans over named column
//! families, consistent snapshots ([`View`]), and bulk loading: sorted pairs
//! written as a table file and ingested whole (what IndexFS's bulk insertion and
//! GIGA+ splits and BatchFS need). [`RocksStore`] is the real one (RocksDB on
//! disk, every write in the write-ahead log before it returns; table files are
//! SST files); [`MemStore`] is an in-memory twin for tests and simulated clusters
//! (its table files are its own simple format: a table file is ingested by a
//! store of the kind that wrote it).
//!
//! Each store records the version of the key layout written into it
//! ([`check_layout`]); a daemon refuses a store of another layout rather than
//! misread it.
//!
//! Hard rule: nothing outside this crate names RocksDB, so the server and lock
//! service run unchanged over either store.

mod cached;
mod deferred;
mod mem;
mod rocks;

pub use cached::{CacheCounts, CachedStore};
pub use rocks::LogCounts;
pub use deferred::{deferring, in_pass, log_deferred};
pub use mem::MemStore;
pub use rocks::{rocksdb_build, RocksStore};

use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The store has no such column family.
    #[error("store: unknown column family {0}")]
    UnknownFamily(String),
    /// Another process, or another handle in this one, has the store open.
    #[error("store: in use by another process or handle: {0}")]
    InUse(String),
    /// A table file to write or ingest is not one: keys out of order, none at
    /// all, a file of something else, or a name already taken.
    #[error("store: table: {0}")]
    Table(String),
    #[error("store: I/O: {0}")]
    Io(#[from] std::io::Error),
    /// What the engine (RocksDB) reported otherwise.
    #[error("store: {0}")]
    Engine(String),
}

pub type Result<T> = std::result::Result<T, StoreError>;

/// When an acknowledged write becomes durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// Each write reaches the write-ahead log (the OS) before it returns, or,
    /// inside [`in_pass`], before the pass ends: survives a
    /// process crash (`kill -9`), not a power failure. The default.
    Wal,
    /// Each write is fsynced: survives a power failure too.
    Fsync,
    /// Group commit: writes are buffered and the log is written and synced every
    /// `ms` milliseconds (seed 000 used 5 s); a crash loses at most that window.
    Group { ms: u64 },
}

impl std::str::FromStr for Durability {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Durability, String> {
        match s {
            "wal" => Ok(Durability::Wal),
            "fsync" => Ok(Durability::Fsync),
            _ => s
                .strip_prefix("group:")
                .and_then(|ms| ms.parse().ok())
                .filter(|ms| *ms > 0)
                .map(|ms| Durability::Group { ms })
                .ok_or_else(|| format!("durability must be wal, fsync or group:MS, not {s:?}")),
        }
    }
}

/// One change in a [`Batch`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    Put(&'static str, Vec<u8>, Vec<u8>),
    Delete(&'static str, Vec<u8>),
    /// Every key in `[from, to)`.
    DeleteRange(&'static str, Vec<u8>, Vec<u8>),
}

/// Changes applied atomically by [`Store::write`].
#[derive(Debug, Default, Clone)]
pub struct Batch {
    pub changes: Vec<Change>,
}

impl Batch {
    pub fn new() -> Batch {
        Batch::default()
    }

    pub fn put(&mut self, cf: &'static str, key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) {
        self.changes.push(Change::Put(cf, key.into(), value.into()));
    }

    pub fn delete(&mut self, cf: &'static str, key: impl Into<Vec<u8>>) {
        self.changes.push(Change::Delete(cf, key.into()));
    }

    /// Deletes every key in `[from, to)`.
    pub fn delete_range(&mut self, cf: &'static str, from: impl Into<Vec<u8>>, to: impl Into<Vec<u8>>) {
        self.changes.push(Change::DeleteRange(cf, from.into(), to.into()));
    }

    pub fn is_empty(&self) -> bool {
        self.changes.is_empty()
    }
}

pub type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

/// A consistent read-only view of a store at one moment: writes made after it
/// was taken are not seen.
pub trait View {
    fn get(&self, cf: &'static str, key: &[u8]) -> Result<Option<Vec<u8>>>;
    /// As [`Store::for_each`], at the view's moment.
    fn for_each(&self, cf: &'static str, prefix: &[u8], f: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> Result<()>;
}

pub trait Store: Send + Sync {
    fn get(&self, cf: &'static str, key: &[u8]) -> Result<Option<Vec<u8>>>;

    /// Whether each of `keys` is present in `cf`, in their order. One call
    /// answers many keys at less cost than a `get` each (a bulk insertion's
    /// collision check).
    fn contains_each(&self, cf: &'static str, keys: &[&[u8]]) -> Result<Vec<bool>> {
        keys.iter().map(|k| self.get(cf, k).map(|v| v.is_some())).collect()
    }

    /// Applies the batch atomically, durable as the store's [`Durability`] says
    /// (inside [`in_pass`], once the pass has ended).
    fn write(&self, batch: Batch) -> Result<()>;

    /// Makes the writes left buffered inside [`in_pass`] as durable as
    /// the store's [`Durability`] makes a write: every write made before the
    /// call, on any thread. An error means they may not be.
    fn flush_log(&self) -> Result<()> {
        Ok(())
    }

    /// Up to `limit` pairs whose key starts with `prefix` and is strictly greater than
    /// `after` (if given), in key order.
    fn scan(&self, cf: &'static str, prefix: &[u8], after: Option<&[u8]>, limit: usize) -> Result<Pairs>;

    /// Calls `f` on every pair whose key starts with `prefix`, in key order, until it
    /// returns false.
    fn for_each(&self, cf: &'static str, prefix: &[u8], f: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> Result<()>;

    /// A consistent view of the whole store as it is now.
    fn snapshot(&self) -> Box<dyn View + '_>;

    /// Whether each write waits for the disk (fsync), which can take
    /// milliseconds; otherwise a write returns in microseconds.
    fn syncs_each_write(&self) -> bool {
        false
    }

    /// Writes `pairs`, whose keys must be strictly increasing, as a table file at
    /// `path` (which must not exist) for [`Store::ingest`]; returns how many pairs.
    /// An unordered or empty input is an error and leaves no file.
    fn write_table(&self, path: &Path, pairs: &mut dyn Iterator<Item = (Vec<u8>, Vec<u8>)>) -> Result<u64>;

    /// Adds the pairs of table files (written by a store of this kind) to `cf`,
    /// all at once; a key already present takes the table's value. The store
    /// may take the files over (move them in); the caller removes any left.
    fn ingest(&self, cf: &'static str, paths: &[PathBuf]) -> Result<()>;

    /// Hits and misses of the store's read cache, if it has one.
    fn cache_counts(&self) -> Option<CacheCounts> {
        None
    }

    /// Writes applied and the times the log was written out for them, if
    /// the store writes it out itself ([`Durability::Wal`] or
    /// [`Durability::Fsync`]).
    fn log_counts(&self) -> Option<LogCounts> {
        None
    }

    /// A directory for table files on their way into this store (on its own
    /// file system where it has one, so an ingest need not copy across disks).
    fn scratch_dir(&self) -> PathBuf {
        std::env::temp_dir()
    }
}

pub type SharedStore = Arc<dyn Store>;

/// The key under which [`check_layout`] records a store's layout version.
pub const LAYOUT_KEY: &[u8] = b"layout_version";

/// Checks that `store` holds key layout `expected` (recorded in `cf` under
/// [`LAYOUT_KEY`]) and records it in a store that has none. A store written
/// before versions were recorded counts as `unrecorded`; `is_empty` says whether
/// the store holds nothing yet (then any layout may begin). The error names both
/// versions and what to do.
pub fn check_layout(store: &dyn Store, cf: &'static str, expected: u32, unrecorded: u32, is_empty: bool, what: &str) -> std::result::Result<(), String> {
    let found = match store.get(cf, LAYOUT_KEY).map_err(|e| e.to_string())? {
        Some(v) => <[u8; 4]>::try_from(&v[..]).map(u32::from_be_bytes).map_err(|_| format!("{what}: corrupt layout record"))?,
        None if is_empty => expected,
        None => unrecorded,
    };
    if found != expected {
        return Err(format!(
            "{what} holds key layout version {found}, but this program reads version {expected}: run the Canopy release that wrote it, or start from an empty data directory"
        ));
    }
    let mut b = Batch::new();
    b.put(cf, LAYOUT_KEY.to_vec(), expected.to_be_bytes().to_vec());
    store.write(b).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const CF: &str = "t";

    #[test]
    fn errors_say_what_failed() {
        let dir = tempfile::tempdir().unwrap();
        let first = RocksStore::open(dir.path(), &[CF], Durability::Wal).unwrap();
        assert!(matches!(RocksStore::open(dir.path(), &[CF], Durability::Wal), Err(StoreError::InUse(_))), "a second open of one store");
        assert!(matches!(first.get("nope", b"k"), Err(StoreError::UnknownFamily(f)) if f == "nope"));
        let mem = MemStore::new(&[CF]);
        assert!(matches!(mem.get("nope", b"k"), Err(StoreError::UnknownFamily(_))));
    }

    fn exercise(store: &dyn Store) {
        let mut b = Batch::new();
        b.put(CF, b"a/1".to_vec(), b"x".to_vec());
        b.put(CF, b"a/2".to_vec(), b"y".to_vec());
        b.put(CF, b"a/3".to_vec(), b"z".to_vec());
        b.put(CF, b"b/1".to_vec(), b"w".to_vec());
        store.write(b).unwrap();
        assert_eq!(store.get(CF, b"a/2").unwrap(), Some(b"y".to_vec()));
        let page = store.scan(CF, b"a/", Some(b"a/1"), 10).unwrap();
        assert_eq!(page.iter().map(|p| p.0.clone()).collect::<Vec<_>>(), vec![b"a/2".to_vec(), b"a/3".to_vec()]);
        assert_eq!(store.scan(CF, b"a/", None, 1).unwrap().len(), 1);
        let mut b = Batch::new();
        b.delete(CF, b"a/2".to_vec());
        store.write(b).unwrap();
        assert_eq!(store.get(CF, b"a/2").unwrap(), None);
        let asked: [&[u8]; 4] = [b"b/1", b"a/2", b"a/1", b"zz"];
        assert_eq!(store.contains_each(CF, &asked).unwrap(), vec![true, false, true, false], "answers in the order asked");
        let mut seen = Vec::new();
        store
            .for_each(CF, b"", &mut |k, _| {
                seen.push(k.to_vec());
                true
            })
            .unwrap();
        assert_eq!(seen, vec![b"a/1".to_vec(), b"a/3".to_vec(), b"b/1".to_vec()]);
    }

    fn keys_in(v: &dyn View, prefix: &[u8]) -> Vec<Vec<u8>> {
        let mut seen = Vec::new();
        v.for_each(CF, prefix, &mut |k, _| {
            seen.push(k.to_vec());
            true
        })
        .unwrap();
        seen
    }

    fn all_keys(store: &dyn Store) -> Vec<Vec<u8>> {
        keys_in(&*store.snapshot(), b"")
    }

    fn pairs(keys: &[&str]) -> Vec<(Vec<u8>, Vec<u8>)> {
        keys.iter().map(|k| (k.as_bytes().to_vec(), format!("v{k}").into_bytes())).collect()
    }

    /// Table files, ingestion, range deletion and snapshots, the same on both stores.
    fn bulk(store: &dyn Store, dir: &Path) {
        let mut b = Batch::new();
        b.put(CF, b"k/0".to_vec(), b"old".to_vec());
        store.write(b).unwrap();
        let snap = store.snapshot();
        let t1 = dir.join("one.table");
        assert_eq!(store.write_table(&t1, &mut pairs(&["k/0", "k/1", "k/2"]).into_iter()).unwrap(), 3);
        let t2 = dir.join("two.table");
        store.write_table(&t2, &mut pairs(&["m/1", "m/2"]).into_iter()).unwrap();
        assert!(store.write_table(&dir.join("bad.table"), &mut pairs(&["b", "a"]).into_iter()).is_err(), "unordered");
        assert!(store.write_table(&dir.join("dup.table"), &mut pairs(&["a", "a"]).into_iter()).is_err(), "repeated");
        assert!(store.write_table(&dir.join("none.table"), &mut std::iter::empty()).is_err(), "empty");
        assert!(!dir.join("bad.table").exists() && !dir.join("none.table").exists());
        store.ingest(CF, &[t1, t2]).unwrap();
        assert_eq!(store.get(CF, b"k/0").unwrap(), Some(b"vk/0".to_vec()), "the table's value wins");
        assert_eq!(all_keys(store).len(), 5);
        // The snapshot still sees the store as it was.
        assert_eq!(keys_in(&*snap, b""), vec![b"k/0".to_vec()]);
        assert_eq!(snap.get(CF, b"k/0").unwrap(), Some(b"old".to_vec()));
        assert_eq!(snap.get(CF, b"m/1").unwrap(), None);
        drop(snap);
        let mut b = Batch::new();
        b.delete_range(CF, b"k/1".to_vec(), b"m/2".to_vec());
        b.put(CF, b"z".to_vec(), b"z".to_vec());
        store.write(b).unwrap();
        assert_eq!(all_keys(store), vec![b"k/0".to_vec(), b"m/2".to_vec(), b"z".to_vec()]);
    }

    #[test]
    fn mem_store_semantics() {
        exercise(&MemStore::new(&[CF]));
        let dir = tempfile::tempdir().unwrap();
        bulk(&MemStore::new(&[CF]), dir.path());
    }

    #[test]
    fn rocks_store_bulk_loading_and_snapshots() {
        let dir = tempfile::tempdir().unwrap();
        let store = RocksStore::open(&dir.path().join("db"), &[CF], Durability::Wal).unwrap();
        bulk(&store, dir.path());
    }

    #[test]
    fn layout_versions_are_recorded_and_checked() {
        let store = MemStore::new(&[CF]);
        check_layout(&store, CF, 2, 1, true, "test store").unwrap();
        check_layout(&store, CF, 2, 1, false, "test store").unwrap();
        let err = check_layout(&store, CF, 3, 1, false, "test store").unwrap_err();
        assert!(err.contains("layout version 2, but this program reads version 3"), "{err}");
        let old = MemStore::new(&[CF]);
        assert!(check_layout(&old, CF, 2, 1, false, "old store").unwrap_err().contains("version 1"));
        check_layout(&old, CF, 1, 1, false, "old store").unwrap();
    }

    #[test]
    fn rocks_store_semantics_and_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = RocksStore::open(dir.path(), &[CF], Durability::Wal).unwrap();
            exercise(&store);
        }
        let store = RocksStore::open(dir.path(), &[CF], Durability::Wal).unwrap();
        assert_eq!(store.get(CF, b"a/3").unwrap(), Some(b"z".to_vec()));
    }

    #[test]
    fn durability_parses() {
        assert_eq!("wal".parse::<Durability>(), Ok(Durability::Wal));
        assert_eq!("group:5000".parse::<Durability>(), Ok(Durability::Group { ms: 5000 }));
        assert!("group:0".parse::<Durability>().is_err());
        assert!("often".parse::<Durability>().is_err());
    }
}
