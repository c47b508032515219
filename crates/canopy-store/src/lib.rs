//! The per-server key-value store behind a narrow trait.
//!
//! [`Store`] is all the metadata logic sees: point reads, atomic write batches, and
//! ordered prefix scans over named column families. [`RocksStore`] is the real one
//! (RocksDB on disk, every write in the write-ahead log before it returns);
//! [`MemStore`] is an in-memory twin for tests and simulated clusters.
//!
//! Hard rule: nothing outside this crate names RocksDB, so the server and lock
//! service run unchanged over either store.

mod mem;
mod rocks;

pub use mem::MemStore;
pub use rocks::RocksStore;

use std::sync::Arc;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreError(pub String);

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "store: {}", self.0)
    }
}

impl std::error::Error for StoreError {}

pub type Result<T> = std::result::Result<T, StoreError>;

/// When an acknowledged write becomes durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// Each write reaches the write-ahead log (the OS) before it returns: survives a
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

    pub fn is_empty(&self) -> bool {
        self.changes.is_empty()
    }
}

pub type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

pub trait Store: Send + Sync {
    fn get(&self, cf: &'static str, key: &[u8]) -> Result<Option<Vec<u8>>>;

    /// Applies the batch atomically, durable as the store's [`Durability`] says.
    fn write(&self, batch: Batch) -> Result<()>;

    /// Up to `limit` pairs whose key starts with `prefix` and is strictly greater than
    /// `after` (if given), in key order.
    fn scan(&self, cf: &'static str, prefix: &[u8], after: Option<&[u8]>, limit: usize) -> Result<Pairs>;

    /// Calls `f` on every pair whose key starts with `prefix`, in key order, until it
    /// returns false.
    fn for_each(&self, cf: &'static str, prefix: &[u8], f: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> Result<()>;
}

pub type SharedStore = Arc<dyn Store>;

#[cfg(test)]
mod tests {
    use super::*;

    const CF: &str = "t";

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
        let mut seen = Vec::new();
        store
            .for_each(CF, b"", &mut |k, _| {
                seen.push(k.to_vec());
                true
            })
            .unwrap();
        assert_eq!(seen, vec![b"a/1".to_vec(), b"a/3".to_vec(), b"b/1".to_vec()]);
    }

    #[test]
    fn mem_store_semantics() {
        exercise(&MemStore::new(&[CF]));
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
