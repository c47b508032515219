//! RocksDB on disk. One database per server; one column family per kind of state.
//!
//! Debian's librocksdb is built with assertions on, so nothing here configures a
//! prefix extractor (a key shorter than it would abort the process): prefix scans
//! are plain seeks bounded by a key comparison.

use crate::{Batch, Change, Durability, Pairs, Result, Store, StoreError, View};
use rocksdb::{ColumnFamilyDescriptor, Direction, IteratorMode, Options, SstFileWriter, WriteBatch, DB};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub struct RocksStore {
    db: Arc<DB>,
    log: LogWrites,
    /// This store among others on the thread-local books of `deferred.rs`.
    id: u64,
    /// Writes begun whose writer has not yet seen the log written out (and
    /// synced) after them: counted before a write is applied, so a pass
    /// that may have read one sees it here and writes the log out before it
    /// answers; while there is none, a pass that wrote nothing skips that.
    unflushed: AtomicU64,
    /// Writes applied, and times the log was written out (and synced).
    writes: AtomicU64,
    log_writes: AtomicU64,
    stop_flusher: Arc<AtomicBool>,
}

/// Writes a store applied and the times it wrote its log out (and synced it)
/// for them: with a server's writes deferred to the end of each read pass,
/// more writes than log writes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LogCounts {
    pub writes: u64,
    pub log_writes: u64,
}

/// Ids for [`RocksStore::id`].
static NEXT_STORE: AtomicU64 = AtomicU64::new(1);

/// When the write-ahead log's buffer is written out (RocksDB's manual WAL
/// flush keeps records in the process until `FlushWAL`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum LogWrites {
    /// Right after each write, or at [`Store::flush_log`] for the writes made
    /// inside [`crate::in_pass`]; and synced then if `sync`
    /// ([`Durability::Wal`], [`Durability::Fsync`]).
    Each { sync: bool },
    /// By the group-commit thread ([`Durability::Group`]).
    Grouped,
}

/// How the RocksDB under this binary was built, for reports. The rocksdb
/// crate compiles RocksDB from its own copy of the source, without
/// assertions, when `ROCKSDB_COMPILE` is set or `ROCKSDB_LIB_DIR` is not
/// (`scripts/build-production`); otherwise it links the library in
/// `ROCKSDB_LIB_DIR` (`.cargo/config.toml`: Debian's, which is built with
/// assertions on and makes a create about a third dearer:
/// docs/performance.md, "RocksDB builds").
pub fn rocksdb_build() -> &'static str {
    let asked = option_env!("ROCKSDB_COMPILE").is_some_and(|v| v == "1" || v.eq_ignore_ascii_case("true"));
    if asked || option_env!("ROCKSDB_LIB_DIR").is_none() {
        "RocksDB compiled from source"
    } else {
        "system librocksdb (Debian's has assertions on; scripts/build-production compiles RocksDB without)"
    }
}

fn err(e: rocksdb::Error) -> StoreError {
    // RocksDB refuses a second open of one store on its LOCK file.
    let held = e.kind() == rocksdb::ErrorKind::IOError && e.as_ref().contains("lock");
    if held {
        StoreError::InUse(e.into_string())
    } else {
        StoreError::Engine(e.into_string())
    }
}

impl RocksStore {
    pub fn open(path: &Path, cfs: &[&'static str], durability: Durability) -> Result<RocksStore> {
        let mut opts = Options::default();
        opts.create_if_missing(true);
        opts.create_missing_column_families(true);
        opts.increase_parallelism(2);
        let log = match durability {
            Durability::Wal => LogWrites::Each { sync: false },
            Durability::Fsync => LogWrites::Each { sync: true },
            Durability::Group { .. } => LogWrites::Grouped,
        };
        opts.set_manual_wal_flush(true);
        // A librocksdb built with assertions (Debian's) defaults to debug
        // lines, one for every write of the log out: a formatted line and a
        // write(2) each time a server answers.
        opts.set_log_level(rocksdb::LogLevel::Info);
        let descriptors = cfs.iter().map(|cf| ColumnFamilyDescriptor::new(*cf, cf_options()));
        let db = Arc::new(DB::open_cf_descriptors(&opts, path, descriptors).map_err(err)?);
        let stop_flusher = Arc::new(AtomicBool::new(false));
        if let Durability::Group { ms } = durability {
            spawn_group_flusher(db.clone(), ms, stop_flusher.clone());
        }
        let id = NEXT_STORE.fetch_add(1, Ordering::Relaxed);
        Ok(RocksStore { db, log, id, unflushed: AtomicU64::new(0), writes: AtomicU64::new(0), log_writes: AtomicU64::new(0), stop_flusher })
    }

    /// Writes the log's buffer out, synced with [`Durability::Fsync`]: every
    /// write made before, on any thread (RocksDB appends a write's record to
    /// the log before it applies the write, so one another thread could
    /// already read is in it).
    fn write_out_log(&self, sync: bool) -> Result<()> {
        self.db.flush_wal(sync).map_err(err)?;
        self.log_writes.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn cf(&self, name: &str) -> Result<&rocksdb::ColumnFamily> {
        self.db.cf_handle(name).ok_or_else(|| StoreError::UnknownFamily(name.to_string()))
    }
}

/// Per column family: a Bloom filter (10 bits a key) on every table, so a point
/// lookup of an absent key (a create's existence check, a bulk insertion's
/// collision check) skips the tables that cannot hold it instead of reading a
/// block of each. Measured with bulk insertion into one directory, whose
/// ingested tables all overlap: 50,000-name batches slowed from 0.12 s to 2 s
/// by the sixth without filters. Index and filter blocks stay with their table
/// rather than compete in the block cache: 1M names in-process in 4.3 s when
/// cached, 3.2 s kept.
///
/// And a Bloom filter on the whole keys of each memtable (5% of its size), so
/// a lookup of a key not there (every create's existence check) skips the
/// memtable's skip list, where a server spent a quarter of its time during
/// the bench's stat phase (`perf`). `canopy bench --phases mkdir,create`,
/// three runs each, alternating: 49,779 · 52,125 · 56,734 creates/s without,
/// 54,852 · 61,066 · 68,355 with; stats unchanged. Tried and not kept: an
/// 8 MB write buffer (the default 64 MB holds the bench's files; from tables
/// instead, stats fell 10-25%).
fn cf_options() -> Options {
    let mut table = rocksdb::BlockBasedOptions::default();
    table.set_bloom_filter(10.0, false);
    table.set_cache_index_and_filter_blocks(false);
    let mut o = Options::default();
    o.set_block_based_table_factory(&table);
    o.set_memtable_whole_key_filtering(true);
    o.set_memtable_prefix_bloom_ratio(0.05);
    o
}

/// Group commit: write and sync the buffered log every `ms` milliseconds.
fn spawn_group_flusher(db: Arc<DB>, ms: u64, stop: Arc<AtomicBool>) {
    std::thread::Builder::new()
        .name("wal-group-commit".into())
        .spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(ms));
                let _ = db.flush_wal(true);
            }
        })
        .expect("spawn group commit thread");
}

impl Drop for RocksStore {
    fn drop(&mut self) {
        self.stop_flusher.store(true, Ordering::Relaxed);
        let _ = self.db.flush_wal(true);
    }
}

impl Store for RocksStore {
    fn get(&self, cf: &'static str, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.db.get_cf(self.cf(cf)?, key).map_err(err)
    }

    /// RocksDB's batched lookup: the keys go through each table together, so
    /// filters and index blocks are consulted once per table per batch rather
    /// than once per key.
    fn contains_each(&self, cf: &'static str, keys: &[&[u8]]) -> Result<Vec<bool>> {
        let found = self.db.batched_multi_get_cf(self.cf(cf)?, keys, keys.is_sorted());
        found.into_iter().map(|v| v.map(|v| v.is_some()).map_err(err)).collect()
    }

    fn write(&self, batch: Batch) -> Result<()> {
        let mut wb = WriteBatch::default();
        for change in &batch.changes {
            match change {
                Change::Put(cf, k, v) => wb.put_cf(self.cf(cf)?, k, v),
                Change::Delete(cf, k) => wb.delete_cf(self.cf(cf)?, k),
                Change::DeleteRange(cf, from, to) => wb.delete_range_cf(self.cf(cf)?, from, to),
            }
        }
        let LogWrites::Each { sync } = self.log else {
            return self.db.write(wb).map_err(err);
        };
        self.unflushed.fetch_add(1, Ordering::SeqCst);
        if let Err(e) = self.db.write(wb) {
            self.unflushed.fetch_sub(1, Ordering::SeqCst);
            return Err(err(e));
        }
        self.writes.fetch_add(1, Ordering::Relaxed);
        if crate::deferred::deferring() {
            crate::deferred::left_one(self.id);
            return Ok(());
        }
        // If this fails the write is applied but not in the log: the caller
        // answers EIO (outcome unknown), and every later pass tries again
        // (`unflushed` stays up) and fails as RocksDB's failed log does.
        self.write_out_log(sync)?;
        self.unflushed.fetch_sub(1, Ordering::SeqCst);
        Ok(())
    }

    /// Writes the log out if this thread left writes in it or another
    /// thread's write may not be out yet (one this pass may have read);
    /// otherwise nothing, not even an fsync.
    fn flush_log(&self) -> Result<()> {
        let LogWrites::Each { sync } = self.log else { return Ok(()) };
        let mine = crate::deferred::take_left(self.id);
        if mine == 0 && self.unflushed.load(Ordering::SeqCst) == 0 {
            return Ok(());
        }
        self.write_out_log(sync)?;
        self.unflushed.fetch_sub(mine, Ordering::SeqCst);
        Ok(())
    }

    fn scan(&self, cf: &'static str, prefix: &[u8], after: Option<&[u8]>, limit: usize) -> Result<Pairs> {
        let mut out = Vec::new();
        let start = match after {
            Some(a) if a >= prefix => a,
            _ => prefix,
        };
        let iter = self.db.iterator_cf(self.cf(cf)?, IteratorMode::From(start, Direction::Forward));
        for item in iter {
            let (k, v) = item.map_err(err)?;
            if !k.starts_with(prefix) || out.len() >= limit {
                break;
            }
            if after.is_some_and(|a| &k[..] <= a) {
                continue;
            }
            out.push((k.to_vec(), v.to_vec()));
        }
        Ok(out)
    }

    fn for_each(&self, cf: &'static str, prefix: &[u8], f: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> Result<()> {
        let iter = self.db.iterator_cf(self.cf(cf)?, IteratorMode::From(prefix, Direction::Forward));
        visit(iter, prefix, f)
    }

    fn log_counts(&self) -> Option<LogCounts> {
        let counted = LogCounts { writes: self.writes.load(Ordering::Relaxed), log_writes: self.log_writes.load(Ordering::Relaxed) };
        matches!(self.log, LogWrites::Each { .. }).then_some(counted)
    }

    fn syncs_each_write(&self) -> bool {
        self.log == LogWrites::Each { sync: true }
    }

    fn snapshot(&self) -> Box<dyn View + '_> {
        Box::new(RocksView { store: self, snap: self.db.snapshot() })
    }

    fn write_table(&self, path: &Path, pairs: &mut dyn Iterator<Item = (Vec<u8>, Vec<u8>)>) -> Result<u64> {
        let written = write_sst(path, pairs);
        if written.is_err() {
            let _ = std::fs::remove_file(path);
        }
        written
    }

    fn ingest(&self, cf: &'static str, paths: &[PathBuf]) -> Result<()> {
        // An ingested table is durable at once, and may rest on writes made
        // before it (the ids its entries took): those reach the log first.
        self.flush_log()?;
        // Linked in rather than copied: tables are written in `scratch_dir`, on
        // the database's own file system (a copy cost a tenth of an ingest).
        let mut opts = rocksdb::IngestExternalFileOptions::default();
        opts.set_move_files(true);
        self.db.ingest_external_file_cf_opts(self.cf(cf)?, &opts, paths.to_vec()).map_err(err)
    }

    fn scratch_dir(&self) -> PathBuf {
        self.db.path().join("ingest")
    }
}

/// Visits `iter`'s pairs while their keys start with `prefix` and `f` says go on.
fn visit(iter: impl Iterator<Item = std::result::Result<(Box<[u8]>, Box<[u8]>), rocksdb::Error>>, prefix: &[u8], f: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> Result<()> {
    for item in iter {
        let (k, v) = item.map_err(err)?;
        if !k.starts_with(prefix) || !f(&k, &v) {
            break;
        }
    }
    Ok(())
}

/// One SST file from strictly increasing pairs (SstFileWriter refuses others).
fn write_sst(path: &Path, pairs: &mut dyn Iterator<Item = (Vec<u8>, Vec<u8>)>) -> Result<u64> {
    if path.exists() {
        return Err(StoreError::Table(format!("{} exists", path.display())));
    }
    // The tables' own options: an ingested table gets the Bloom filter too.
    // Uncompressed: it is written once, read soon, and compacted (compressed)
    // later; compressing it cost a fifth of a bulk insertion's CPU.
    let mut opts = cf_options();
    opts.set_compression_type(rocksdb::DBCompressionType::None);
    let mut w = SstFileWriter::create(&opts);
    w.open(path).map_err(err)?;
    let mut n = 0u64;
    for (k, v) in pairs {
        w.put(&k, &v).map_err(err)?;
        n += 1;
    }
    if n == 0 {
        return Err(StoreError::Table("a table needs at least one pair".into()));
    }
    w.finish().map_err(err)?;
    Ok(n)
}

/// A RocksDB snapshot: reads see the database as it was when it was taken.
struct RocksView<'a> {
    store: &'a RocksStore,
    snap: rocksdb::Snapshot<'a>,
}

impl View for RocksView<'_> {
    fn get(&self, cf: &'static str, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.snap.get_cf(self.store.cf(cf)?, key).map_err(err)
    }

    fn for_each(&self, cf: &'static str, prefix: &[u8], f: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> Result<()> {
        let iter = self.snap.iterator_cf(self.store.cf(cf)?, IteratorMode::From(prefix, Direction::Forward));
        visit(iter, prefix, f)
    }
}
