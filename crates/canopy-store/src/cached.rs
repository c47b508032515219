//! A bounded cache of point lookups in front of any [`Store`], for the
//! families a server reads by key on every request (a stat reads one file
//! record). RocksDB answers such a read from its memtable's skip list, a walk
//! of a dozen or more cache misses: `perf` put it at 40% of a server's time
//! in the bench's stat phase, with the namespace in the memtables. A hit here
//! is one hash lookup.
//!
//! Every write goes to the inner store first and to the cache after, so the
//! cache never holds what the store does not. The races between a read that
//! missed (and fills the cache with what it read) and a write are settled by
//! an epoch that every write advances: a read fills the cache only if no
//! write began or ended while it read. A write puts its own values in the
//! cache only if no other write overlapped it (so the store's order of the
//! two is not in doubt); otherwise it drops the keys it touched.

use crate::{Batch, Change, Pairs, Result, SharedStore, Store, View};
use hashbrown::{DefaultHashBuilder, HashTable};
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::hash::BuildHasher;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// What an entry costs beyond its key and value (map slot, the eviction
/// queue's copy of the key, allocation headers), for the byte budget.
const ENTRY_OVERHEAD: usize = 96;

pub struct CachedStore {
    inner: SharedStore,
    cached: Vec<&'static str>,
    budget: usize,
    state: Mutex<State>,
    hits: AtomicU64,
    misses: AtomicU64,
}

/// A cached family's place in [`CachedStore::cached`].
type Family = u8;

/// A cached key and its value in one allocation, the key first: a hit's
/// comparison and copy read one place in memory. With the namespace's
/// entries spread over a large table, a hit is a few cache misses (the
/// table's slot, then the entry), and a separate key and value were one
/// more (`perf`, the bench's stat phase: the key's comparison alone 7% of a
/// server's samples).
struct Entry {
    bytes: Box<[u8]>,
    key_len: usize,
}

impl Entry {
    fn new(key: &[u8], value: &[u8]) -> Entry {
        Entry { bytes: [key, value].concat().into_boxed_slice(), key_len: key.len() }
    }

    fn key(&self) -> &[u8] {
        &self.bytes[..self.key_len]
    }

    fn value(&self) -> &[u8] {
        &self.bytes[self.key_len..]
    }

    fn cost(&self) -> usize {
        cost(self.key(), self.value())
    }
}

struct State {
    /// Seeded at random per process (the keys are names callers choose).
    hasher: DefaultHashBuilder,
    /// For each cached family, its entries.
    maps: Vec<HashTable<Entry>>,
    /// Insertion order, for eviction (first in, first out); may name keys
    /// already gone from `maps`.
    order: VecDeque<(Family, Vec<u8>)>,
    bytes: usize,
    /// Advanced as each write begins and as it ends.
    epoch: u64,
    writing: u32,
}

/// Hits and misses of a [`CachedStore`] since it was made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheCounts {
    pub hits: u64,
    pub misses: u64,
}

fn cost(key: &[u8], value: &[u8]) -> usize {
    2 * key.len() + value.len() + ENTRY_OVERHEAD
}

/// A change a write made to a cached family.
enum Touched {
    Key(Family, Vec<u8>, Option<Vec<u8>>),
    Range(Family, Vec<u8>, Vec<u8>),
}

impl State {
    fn new(families: usize) -> State {
        let maps = (0..families).map(|_| HashTable::new()).collect();
        State { hasher: DefaultHashBuilder::default(), maps, order: VecDeque::new(), bytes: 0, epoch: 0, writing: 0 }
    }

    fn len(&self) -> usize {
        self.maps.iter().map(HashTable::len).sum()
    }

    fn hash(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key)
    }

    fn get(&self, f: Family, key: &[u8]) -> Option<&[u8]> {
        self.maps[f as usize].find(self.hash(key), |e| e.key() == key).map(Entry::value)
    }

    fn insert(&mut self, f: Family, key: &[u8], value: &[u8], budget: usize) {
        let added = cost(key, value);
        if added > budget {
            // Too large to keep: an older value must not stay in its place.
            self.remove(f, key);
            return;
        }
        let hash = self.hash(key);
        let hasher = &self.hasher;
        match self.maps[f as usize].entry(hash, |e| e.key() == key, |e| hasher.hash_one(e.key())) {
            hashbrown::hash_table::Entry::Occupied(mut o) => {
                self.bytes -= o.get().cost();
                *o.get_mut() = Entry::new(key, value);
            }
            hashbrown::hash_table::Entry::Vacant(v) => {
                v.insert(Entry::new(key, value));
                self.order.push_back((f, key.to_vec()));
                self.compact_order();
            }
        }
        self.bytes += added;
        while self.bytes > budget {
            let Some((vf, victim)) = self.order.pop_front() else { break };
            self.remove(vf, &victim);
        }
    }

    /// Keys removed and put back leave stale copies in `order`: rebuilt when
    /// they outnumber the live ones, so it stays within twice the maps.
    fn compact_order(&mut self) {
        let live = self.len();
        if self.order.len() > 2 * live + 1024 {
            self.order = self.maps.iter().enumerate().flat_map(|(f, m)| m.iter().map(move |e| (f as Family, e.key().to_vec()))).collect();
        }
    }

    fn remove(&mut self, f: Family, key: &[u8]) {
        let hash = self.hash(key);
        if let Ok(found) = self.maps[f as usize].find_entry(hash, |e| e.key() == key) {
            let (gone, _) = found.remove();
            self.bytes -= gone.cost();
        }
    }

    /// Forgets the keys of family `f` that `doomed` picks.
    fn remove_where(&mut self, f: Family, doomed: impl Fn(&[u8]) -> bool) {
        let mut freed = 0;
        self.maps[f as usize].retain(|e| {
            let go = doomed(e.key());
            if go {
                freed += e.cost();
            }
            !go
        });
        self.bytes -= freed;
    }

    /// Applies a write's changes: its values when it is known to be the
    /// store's latest (`trusted`), else forgets the keys.
    fn apply(&mut self, touched: Vec<Touched>, trusted: bool, budget: usize) {
        for t in touched {
            match t {
                Touched::Key(f, key, Some(v)) if trusted => self.insert(f, &key, &v, budget),
                Touched::Key(f, key, _) => self.remove(f, &key),
                Touched::Range(f, from, to) => self.remove_where(f, |k| k >= &from[..] && k < &to[..]),
            }
        }
    }
}

impl CachedStore {
    /// Caches point reads of the families `cached` of `inner`, at most about
    /// `budget` bytes of keys and values.
    pub fn new(inner: SharedStore, cached: &[&'static str], budget: usize) -> CachedStore {
        assert!(cached.len() < Family::MAX as usize, "at most 254 cached families");
        let state = Mutex::new(State::new(cached.len()));
        CachedStore { inner, cached: cached.to_vec(), budget, state, hits: AtomicU64::new(0), misses: AtomicU64::new(0) }
    }

    fn family(&self, cf: &str) -> Option<Family> {
        self.cached.iter().position(|c| *c == cf).map(|i| i as Family)
    }

    /// Marks a write as begun; returns the epoch it began at.
    fn begin_write(&self) -> u64 {
        let mut s = self.state.lock();
        s.epoch += 1;
        s.writing += 1;
        s.epoch
    }

    /// Ends a write that began at `began`, then lets `update` bring the cache
    /// up to date, told whether no other write overlapped this one.
    fn end_write(&self, began: u64, update: impl FnOnce(&mut State, bool)) {
        let mut s = self.state.lock();
        let alone = s.writing == 1 && s.epoch == began;
        s.writing -= 1;
        s.epoch += 1;
        update(&mut s, alone);
    }

    /// The changes of `batch` to cached families.
    fn touched(&self, batch: &Batch) -> Vec<Touched> {
        let mut out = Vec::new();
        for change in &batch.changes {
            match change {
                Change::Put(cf, k, v) => out.extend(self.family(cf).map(|f| Touched::Key(f, k.clone(), Some(v.clone())))),
                Change::Delete(cf, k) => out.extend(self.family(cf).map(|f| Touched::Key(f, k.clone(), None))),
                Change::DeleteRange(cf, from, to) => out.extend(self.family(cf).map(|f| Touched::Range(f, from.clone(), to.clone()))),
            }
        }
        out
    }
}

impl Store for CachedStore {
    fn get(&self, cf: &'static str, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let Some(f) = self.family(cf) else { return self.inner.get(cf, key) };
        let epoch = {
            let s = self.state.lock();
            if let Some(v) = s.get(f, key) {
                self.hits.fetch_add(1, Ordering::Relaxed);
                return Ok(Some(v.to_vec()));
            }
            s.epoch
        };
        self.misses.fetch_add(1, Ordering::Relaxed);
        let found = self.inner.get(cf, key)?;
        // A write that began or ended meanwhile may have made `found` stale;
        // one still under way will set the key as it ends.
        if let Some(v) = &found {
            let mut s = self.state.lock();
            if s.epoch == epoch {
                s.insert(f, key, v, self.budget);
            }
        }
        Ok(found)
    }

    fn contains_each(&self, cf: &'static str, keys: &[&[u8]]) -> Result<Vec<bool>> {
        self.inner.contains_each(cf, keys)
    }

    fn write(&self, batch: Batch) -> Result<()> {
        let touched = self.touched(&batch);
        let began = self.begin_write();
        let done = self.inner.write(batch);
        let trusted = done.is_ok();
        self.end_write(began, |s, alone| s.apply(touched, trusted && alone, self.budget));
        done
    }

    fn flush_log(&self) -> Result<()> {
        self.inner.flush_log()
    }

    fn scan(&self, cf: &'static str, prefix: &[u8], after: Option<&[u8]>, limit: usize) -> Result<Pairs> {
        self.inner.scan(cf, prefix, after, limit)
    }

    fn for_each(&self, cf: &'static str, prefix: &[u8], f: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> Result<()> {
        self.inner.for_each(cf, prefix, f)
    }

    fn snapshot(&self) -> Box<dyn View + '_> {
        self.inner.snapshot()
    }

    fn syncs_each_write(&self) -> bool {
        self.inner.syncs_each_write()
    }

    fn write_table(&self, path: &Path, pairs: &mut dyn Iterator<Item = (Vec<u8>, Vec<u8>)>) -> Result<u64> {
        self.inner.write_table(path, pairs)
    }

    /// An ingest may replace any key of `cf`: the family's entries are
    /// forgotten (ingests are bulk insertions and splits, not the hot path).
    fn ingest(&self, cf: &'static str, paths: &[PathBuf]) -> Result<()> {
        let began = self.begin_write();
        let done = self.inner.ingest(cf, paths);
        let family = self.family(cf);
        self.end_write(began, |s, _| {
            if let Some(f) = family {
                s.remove_where(f, |_| true);
            }
        });
        done
    }

    fn scratch_dir(&self) -> PathBuf {
        self.inner.scratch_dir()
    }

    fn log_counts(&self) -> Option<crate::LogCounts> {
        self.inner.log_counts()
    }

    fn cache_counts(&self) -> Option<CacheCounts> {
        Some(CacheCounts { hits: self.hits.load(Ordering::Relaxed), misses: self.misses.load(Ordering::Relaxed) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemStore;
    use std::sync::Arc;

    const CF: &str = "e";
    const OTHER: &str = "o";

    /// A small deterministic generator (xorshift), so a failure replays.
    struct Gen(u64);
    impl Gen {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % n
        }
    }

    fn key(i: u64) -> Vec<u8> {
        format!("k{i:03}").into_bytes()
    }

    /// Random writes, range deletes, ingests and reads through a cache small
    /// enough to evict, checked read by read against a store without one.
    #[test]
    fn reads_through_the_cache_match_the_store_without_one() {
        let model = MemStore::new(&[CF, OTHER]);
        let cached = CachedStore::new(Arc::new(MemStore::new(&[CF, OTHER])), &[CF], 40 * (ENTRY_OVERHEAD + 16));
        let dir = tempfile::tempdir().unwrap();
        let mut g = Gen(0x9e37_79b9_7f4a_7c15);
        for step in 0..20_000 {
            let mut b = Batch::new();
            match g.below(10) {
                0..=3 => {
                    let value = format!("v{step}").into_bytes();
                    b.put(if g.below(5) == 0 { OTHER } else { CF }, key(g.below(100)), value);
                }
                4 => b.delete(CF, key(g.below(100))),
                5 if g.below(20) == 0 => {
                    let from = g.below(100);
                    b.delete_range(CF, key(from), key(from + g.below(10)));
                }
                6 if g.below(50) == 0 => {
                    let pairs = vec![(key(g.below(50)), b"ingested".to_vec()), (key(50 + g.below(50)), b"ingested".to_vec())];
                    for (i, store) in [&model as &dyn Store, &cached].into_iter().enumerate() {
                        let path = dir.path().join(format!("t{step}-{i}"));
                        store.write_table(&path, &mut pairs.clone().into_iter()).unwrap();
                        store.ingest(CF, &[path]).unwrap();
                    }
                }
                _ => {
                    let (cf, k) = (if g.below(5) == 0 { OTHER } else { CF }, key(g.below(100)));
                    assert_eq!(cached.get(cf, &k).unwrap(), model.get(cf, &k).unwrap(), "step {step}: {cf} {k:?}");
                }
            }
            model.write(b.clone()).unwrap();
            cached.write(b).unwrap();
            let s = cached.state.lock();
            assert!(s.bytes <= cached.budget, "step {step}: {} bytes cached of {}", s.bytes, cached.budget);
            assert_eq!(s.bytes, s.maps.iter().flat_map(|m| m.iter()).map(Entry::cost).sum::<usize>(), "step {step}: bytes counted");
            assert!(s.order.len() <= 2 * s.len() + 1024);
        }
        let c = cached.cache_counts().unwrap();
        assert!(c.hits > 1000 && c.misses > 1000, "{c:?}");
    }

    /// A value too large for the cache, written over a cached one, is read
    /// back from the store, not the old value left cached.
    #[test]
    fn a_value_too_large_to_cache_replaces_the_cached_one() {
        let cached = CachedStore::new(Arc::new(MemStore::new(&[CF])), &[CF], 4 * (ENTRY_OVERHEAD + 16));
        let mut b = Batch::new();
        b.put(CF, key(1), b"small".to_vec());
        cached.write(b).unwrap();
        assert_eq!(cached.get(CF, &key(1)).unwrap(), Some(b"small".to_vec()));
        let large = vec![7u8; 8 * (ENTRY_OVERHEAD + 16)];
        let mut b = Batch::new();
        b.put(CF, key(1), large.clone());
        cached.write(b).unwrap();
        assert_eq!(cached.get(CF, &key(1)).unwrap(), Some(large));
    }

    /// A store that, when armed, pauses its next read or write just after
    /// doing it: a test then runs another operation in that window.
    struct Paused {
        store: MemStore,
        armed: Mutex<Option<(std::sync::mpsc::Sender<()>, std::sync::mpsc::Receiver<()>)>>,
    }

    impl Paused {
        fn pause_if_armed(&self) {
            let taken = self.armed.lock().take();
            if let Some((reached, release)) = taken {
                reached.send(()).unwrap();
                release.recv().unwrap();
            }
        }
    }

    impl Store for Paused {
        fn get(&self, cf: &'static str, key: &[u8]) -> Result<Option<Vec<u8>>> {
            let v = self.store.get(cf, key);
            self.pause_if_armed();
            v
        }
        fn write(&self, batch: Batch) -> Result<()> {
            let done = self.store.write(batch);
            self.pause_if_armed();
            done
        }
        fn scan(&self, cf: &'static str, prefix: &[u8], after: Option<&[u8]>, limit: usize) -> Result<Pairs> {
            self.store.scan(cf, prefix, after, limit)
        }
        fn for_each(&self, cf: &'static str, prefix: &[u8], f: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> Result<()> {
            self.store.for_each(cf, prefix, f)
        }
        fn snapshot(&self) -> Box<dyn View + '_> {
            self.store.snapshot()
        }
        fn write_table(&self, path: &Path, pairs: &mut dyn Iterator<Item = (Vec<u8>, Vec<u8>)>) -> Result<u64> {
            self.store.write_table(path, pairs)
        }
        fn ingest(&self, cf: &'static str, paths: &[PathBuf]) -> Result<()> {
            self.store.ingest(cf, paths)
        }
    }

    fn put(value: &str) -> Batch {
        let mut b = Batch::new();
        b.put(CF, key(0), value.as_bytes().to_vec());
        b
    }

    /// Runs `first` on a thread until the inner store has done its step and
    /// paused, then `second` here to its end, then lets `first` finish;
    /// returns what a read through the cache and the store itself then hold.
    fn interleave(first: impl FnOnce(&CachedStore) + Send + 'static, second: impl FnOnce(&CachedStore)) -> (Option<Vec<u8>>, Option<Vec<u8>>) {
        let inner = Arc::new(Paused { store: MemStore::new(&[CF]), armed: Mutex::new(None) });
        let cached = Arc::new(CachedStore::new(inner.clone(), &[CF], 1 << 20));
        // In the store, not yet in the cache: a read must reach the store.
        inner.store.write(put("old")).unwrap();
        let (reached_tx, reached) = std::sync::mpsc::channel();
        let (release, release_rx) = std::sync::mpsc::channel();
        *inner.armed.lock() = Some((reached_tx, release_rx));
        let c = cached.clone();
        let t = std::thread::spawn(move || first(&c));
        reached.recv().unwrap();
        second(&cached);
        release.send(()).unwrap();
        t.join().unwrap();
        (cached.get(CF, &key(0)).unwrap(), inner.store.get(CF, &key(0)).unwrap())
    }

    /// A read that missed and read the old value, overtaken by a write,
    /// must not fill the cache with what it read.
    #[test]
    fn a_read_overtaken_by_a_write_does_not_fill_the_cache() {
        let (through_cache, stored) = interleave(
            |c| assert_eq!(c.get(CF, &key(0)).unwrap(), Some(b"old".to_vec())),
            |c| c.write(put("new")).unwrap(),
        );
        assert_eq!(stored, Some(b"new".to_vec()));
        assert_eq!(through_cache, stored);
    }

    /// Two writes of one key that overlap: the store's order of the two is
    /// not known, so neither may put its value in the cache.
    #[test]
    fn overlapping_writes_leave_the_key_to_the_store() {
        let (through_cache, stored) = interleave(|c| c.write(put("first")).unwrap(), |c| c.write(put("second")).unwrap());
        assert_eq!(stored, Some(b"second".to_vec()));
        assert_eq!(through_cache, stored);
    }

    /// A delete overtaking a read: the read's old value must not come back.
    #[test]
    fn a_read_overtaken_by_a_delete_does_not_bring_the_key_back() {
        let (through_cache, stored) = interleave(
            |c| {
                c.get(CF, &key(0)).unwrap();
            },
            |c| {
                let mut b = Batch::new();
                b.delete(CF, key(0));
                c.write(b).unwrap()
            },
        );
        assert_eq!((through_cache, stored), (None, None));
    }
}
