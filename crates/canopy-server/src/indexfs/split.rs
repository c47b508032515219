//! GIGA+ splits (seed 000 §3.1): a partition holding more than the threshold
//! of entries gives the upper half of its hash range to its child partition,
//! on the child's server, until the directory is spread over every server.
//!
//! A split is a two-server transaction whose durable record is the source's
//! header (`splitting`):
//! 1. the source, holding its directory's stripe (so no mutation of that
//!    directory runs here meanwhile), records the split in the header;
//! 2. it writes the moving range as tables and sends them, chunk by chunk, to
//!    the destination (`IxSplitIn`), which clears the range on chunk 0,
//!    ingests each, and writes the child's header with the last: from then on
//!    the child is the destination's, and a repeat does nothing;
//! 3. the source deletes the range (one range delete per column family) and
//!    records the child in its bitmap, ending the split, in one batch.
//!
//! While a split is recorded and not running, its moving half is refused:
//! with `EINPROGRESS` (the client pauses and resends) until the split has
//! been failing for [`STUCK_AFTER`], then with `EAGAIN` (passed on to the
//! caller: its destination is down). A retry, from the background loop or
//! after a restart, finishes the split. Either server may die at any step: the source
//! resends the whole range, which the destination replaces unless it already
//! wrote the child's header. Other directories are served throughout.

use super::{DirEntryValue, Header, IndexFs};
use crate::tables;
use crate::core::{io, Core};
use crate::doorbell::Doorbell;
use crate::keys::{self, DIRS, ENTRIES};
use crate::mode::Target;
use canopy_proto::giga::{self, PartMap, MAX_DEPTH};
use canopy_proto::msg::DirLookup;
use canopy_proto::{Errno, Reply, Request};
use canopy_rpc::BlockingCaller;
use canopy_store::Batch;
use parking_lot::Mutex;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use canopy_proto::clock::SharedClock;
use std::time::Duration;

pub use canopy_proto::modes::DEFAULT_SPLIT_THRESHOLD;

/// Entries (and subdirectories) per table sent: well inside a frame.
const CHUNK: usize = 8_000;

/// How often a split whose destination did not answer is tried again.
const RETRY_EVERY: Duration = Duration::from_millis(500);

/// How long a split may keep failing before its moving half is refused as
/// unavailable (`EAGAIN`) rather than as about to move (`EINPROGRESS`):
/// several retries, so a peer that was only slow does not fail callers.
pub(crate) const STUCK_AFTER: Duration = Duration::from_secs(2);

/// A step of a split, for fault injection (tests kill a server at each).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SplitStep {
    /// Source: the split is recorded in the header, nothing sent.
    Recorded,
    /// Source: the destination took chunk `n`.
    Sent(u32),
    /// Source: the destination wrote the child's header; the range is not
    /// yet deleted here.
    Installed,
    /// Destination: the range is cleared, chunk 0 not yet ingested.
    Cleared,
    /// Destination: chunk `n` is ingested.
    Ingested(u32),
}

/// Called at each step; `false`: the server dies there (the source abandons
/// the split, the destination answers `EIO` with what it did so far).
pub type SplitHook = Arc<dyn Fn(SplitStep) -> bool + Send + Sync>;

/// The split bookkeeping of one server.
pub(crate) struct Splits {
    threshold: u64,
    /// Names added per directory since it was last checked.
    grown: Mutex<HashMap<u64, u64>>,
    /// Directories to check, in order, each once.
    queue: Mutex<(VecDeque<u64>, HashSet<u64>)>,
    /// Splits recorded and not finished (a destination did not answer).
    unfinished: Mutex<Vec<(u64, u32)>>,
    /// Since when each split that failed (or was found unfinished at start)
    /// has been failing; gone when it ends.
    failing: Mutex<HashMap<(u64, u32), u64>>,
    /// Requests refused because their name's split was pending.
    refused: AtomicU64,
    last_retry: Mutex<Option<u64>>,
    /// Splits this server is running now (their moving half is served here
    /// until they end).
    running: Mutex<HashSet<(u64, u32)>>,
    /// Background passes under way: a directory taken off the queue, or a
    /// split off the unfinished list, is pending until its pass ends.
    working: AtomicU64,
    done: AtomicU64,
    hook: Mutex<Option<SplitHook>>,
    /// The background thread's: rung when a directory is queued.
    doorbell: Arc<Doorbell>,
    /// The server's: retries and stuck splits are timed by it (milliseconds).
    clock: SharedClock,
}

impl Splits {
    pub(crate) fn new(threshold: u64, unfinished: Vec<(u64, u32)>, doorbell: Arc<Doorbell>, clock: SharedClock) -> Splits {
        let now = clock.now_ms();
        Splits {
            threshold: threshold.max(1),
            grown: Mutex::new(HashMap::new()),
            queue: Mutex::new((VecDeque::new(), HashSet::new())),
            failing: Mutex::new(unfinished.iter().map(|s| (*s, now)).collect()),
            unfinished: Mutex::new(unfinished),
            refused: AtomicU64::new(0),
            last_retry: Mutex::new(None),
            running: Mutex::new(HashSet::new()),
            working: AtomicU64::new(0),
            done: AtomicU64::new(0),
            hook: Mutex::new(None),
            doorbell,
            clock,
        }
    }

    pub(crate) fn running(&self, dir: u64, part: u32) -> bool {
        self.running.lock().contains(&(dir, part))
    }

    /// The refusal of a name in the moving half of partition `part` of
    /// `dir`, whose split is recorded but not running: `EINPROGRESS` while it
    /// is about to run (or be retried), `EAGAIN` once it has been failing for
    /// [`STUCK_AFTER`].
    pub(crate) fn refusal(&self, dir: u64, part: u32) -> Errno {
        let since = self.failing.lock().get(&(dir, part)).copied();
        match since {
            Some(t) if self.since(t) >= STUCK_AFTER => Errno::EAGAIN,
            _ => Errno::EINPROGRESS,
        }
    }

    /// Counts a request refused because its name's split was pending.
    pub(crate) fn count_refusal(&self) {
        self.refused.fetch_add(1, Ordering::Relaxed);
    }

    /// Requests refused so far because their name's split was pending.
    pub(crate) fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Counts `n` names added to `dir`; every quarter threshold, queues it to
    /// be checked and rings for the background thread.
    pub(crate) fn grew(&self, dir: u64, n: u64) {
        let due = {
            let mut g = self.grown.lock();
            let c = g.entry(dir).or_default();
            *c += n;
            if *c >= (self.threshold / 4).max(1) {
                g.remove(&dir);
                true
            } else {
                false
            }
        };
        if !due {
            return;
        }
        let queued = {
            let mut q = self.queue.lock();
            let fresh = q.1.insert(dir);
            if fresh {
                q.0.push_back(dir);
            }
            fresh
        };
        if queued {
            self.doorbell.ring();
        }
    }

    /// How long until the next retry of an unfinished split may run
    /// (`RETRY_EVERY` after the last); `None` with none unfinished.
    pub(crate) fn retry_due(&self) -> Option<Duration> {
        if self.unfinished.lock().is_empty() {
            return None;
        }
        let last = *self.last_retry.lock();
        Some(last.map_or(Duration::ZERO, |t| RETRY_EVERY.saturating_sub(self.since(t))))
    }

    /// How long ago clock reading `t` was.
    fn since(&self, t: u64) -> Duration {
        Duration::from_millis(self.clock.now_ms().saturating_sub(t))
    }

    fn next(&self) -> Option<u64> {
        let mut q = self.queue.lock();
        let dir = q.0.pop_front()?;
        q.1.remove(&dir);
        Some(dir)
    }

    fn step(&self, s: SplitStep) -> Result<(), Errno> {
        let hook = self.hook.lock().clone();
        match hook {
            Some(h) if !h(s) => Err(Errno::EIO),
            _ => Ok(()),
        }
    }

    pub(crate) fn set_hook(&self, hook: Option<SplitHook>) {
        *self.hook.lock() = hook;
    }

    /// (splits finished here, splits recorded and unfinished, directories
    /// waiting to be checked or splitting now).
    pub(crate) fn counts(&self) -> (u64, u64, u64) {
        let pending = self.queue.lock().0.len() + self.running.lock().len() + self.working.load(Ordering::Acquire) as usize;
        (self.done.load(Ordering::Relaxed), self.unfinished.lock().len() as u64, pending as u64)
    }
}

/// Counts a background pass as pending work while it lives, so the counters
/// never show none between taking work off a list and recording its end.
struct Working<'a>(&'a Splits);

impl<'a> Working<'a> {
    fn begin(s: &'a Splits) -> Working<'a> {
        s.working.fetch_add(1, Ordering::AcqRel);
        Working(s)
    }
}

impl Drop for Working<'_> {
    fn drop(&mut self) {
        self.0.working.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Ends `running` for a split when dropped, however it ended.
struct Running<'a>(&'a Splits, (u64, u32));

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.running.lock().remove(&self.1);
    }
}

/// The key range `[start, end)` of hash range `range` of directory `dir`.
fn key_range(dir: u64, range: (u64, Option<u64>)) -> (Vec<u8>, Vec<u8>) {
    let mut start = dir.to_be_bytes().to_vec();
    start.extend_from_slice(&range.0.to_be_bytes());
    let mut end = dir.to_be_bytes().to_vec();
    match range.1 {
        Some(e) => end.extend_from_slice(&e.to_be_bytes()),
        // Past every name: a name is UTF-8, which never holds the byte 0xff.
        None => end.extend_from_slice(&[0xff; 9]),
    }
    (start, end)
}

type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

/// Visits the pairs of `cf` in `[start, end)` in chunks of at most `CHUNK`,
/// until `f` answers false.
fn for_chunks(core: &Core, cf: &'static str, start: &[u8], end: &[u8], f: &mut dyn FnMut(Pairs) -> Result<bool, Errno>) -> Result<(), Errno> {
    let prefix = &start[..8];
    let mut cursor = start.to_vec();
    loop {
        let mut page = core.store.scan(cf, prefix, Some(&cursor), CHUNK).map_err(io)?;
        let full = page.len() == CHUNK;
        page.retain(|(k, _)| k.as_slice() < end);
        let Some((last, _)) = page.last() else { return Ok(()) };
        cursor = last.clone();
        let ended = !full || cursor.as_slice() >= end;
        if !f(page)? || ended {
            return Ok(());
        }
    }
}

/// How many keys of `cf` lie in `[start, end)`; past `cap`, a count that is
/// only known to be larger.
fn count_range(core: &Core, cf: &'static str, start: &[u8], end: &[u8], cap: u64) -> Result<u64, Errno> {
    let mut n = 0u64;
    for_chunks(core, cf, start, end, &mut |page| {
        n += page.len() as u64;
        Ok(n <= cap)
    })?;
    Ok(n)
}

/// Whether partition `part` (whose header knows `parts`) may split on a cluster
/// of `servers`: while its children land on servers its depth has not reached.
fn may_split(parts: &PartMap, part: u32, servers: u32) -> bool {
    let d = parts.depth(part);
    // Below 2^d < N, the child (part + 2^d) is on another server than `part`.
    d < MAX_DEPTH && (1u64 << d) < servers as u64
}

impl IndexFs {
    /// One round of background work: an unfinished split (every so often), or
    /// a directory that grew. False when there was nothing to do.
    pub(crate) fn split_work(&self, core: &Core, peers: &BlockingCaller) -> bool {
        let _working = Working::begin(&self.splits);
        if let Some((dir, part)) = self.due_retry() {
            self.try_split(core, peers, dir, part);
            return true;
        }
        let Some(dir) = self.splits.next() else { return false };
        let parts = match self.parts_here(core, dir) {
            Ok(p) => p,
            Err(e) => {
                core.problem(format!("cannot read the partitions of directory {dir:#x}: {e}"));
                return true;
            }
        };
        for h in parts.iter().filter(|h| may_split(&h.parts, h.part, core.cfg.servers) && !h.sealed) {
            self.try_split(core, peers, dir, h.part);
        }
        true
    }

    /// [`IndexFs::split`], noting how it ended.
    fn try_split(&self, core: &Core, peers: &BlockingCaller, dir: u64, part: u32) {
        match self.split(core, peers, dir, part) {
            Ok(()) => {
                self.splits.failing.lock().remove(&(dir, part));
            }
            Err(e) => self.split_failed(core, dir, part, e),
        }
    }

    /// The unfinished split to retry now, if one is due ([`Splits::retry_due`]).
    fn due_retry(&self) -> Option<(u64, u32)> {
        if self.splits.retry_due() != Some(Duration::ZERO) {
            return None;
        }
        let next = self.splits.unfinished.lock().first().copied()?;
        *self.splits.last_retry.lock() = Some(self.splits.clock.now_ms());
        self.splits.unfinished.lock().retain(|s| *s != next);
        Some(next)
    }

    fn split_failed(&self, core: &Core, dir: u64, part: u32, e: Errno) {
        // Still recorded (or never begun): a retry decides from the header.
        if matches!(self.part_header(core, dir, part), Ok(Some(h)) if h.splitting.is_some()) {
            self.splits.failing.lock().entry((dir, part)).or_insert(core.clock.now_ms());
            let mut u = self.splits.unfinished.lock();
            if !u.contains(&(dir, part)) {
                u.push((dir, part));
            }
        }
        // A peer that is down or did not answer: the retry will tell. Anything
        // else is a broken invariant.
        if !matches!(e, Errno::EIO | Errno::ENOTCONN | Errno::ETIMEDOUT | Errno::ECONNREFUSED | Errno::EAGAIN) {
            core.problem(format!("split of directory {dir:#x} partition {part}: {e}"));
        }
    }

    /// Splits partition `part` of `dir` if it is over the threshold (or
    /// finishes its recorded split). Holds the directory's stripe throughout.
    fn split(&self, core: &Core, peers: &BlockingCaller, dir: u64, part: u32) -> Result<(), Errno> {
        let _g = core.lock_stripes(|| vec![dir], false, &[&Target::Dir(dir)]);
        let Some(mut h) = self.part_header(core, dir, part)? else { return Ok(()) };
        let child = match h.splitting {
            Some(c) => c,
            None => {
                if h.sealed || !may_split(&h.parts, part, core.cfg.servers) || self.part_size(core, &h)? <= self.splits.threshold {
                    return Ok(());
                }
                let c = h.parts.split_child(part).ok_or(Errno::EINVAL)?;
                h.splitting = Some(c);
                let mut b = Batch::new();
                self.put_header(&mut b, &h);
                self.commit(core, b)?;
                c
            }
        };
        self.splits.running.lock().insert((dir, part));
        let _running = Running(&self.splits, (dir, part));
        self.splits.step(SplitStep::Recorded)?;
        let depth = h.parts.depth(part) + 1;
        let (start, end) = key_range(dir, giga::part_range(child, depth));
        let mut child_parts = h.parts.clone();
        child_parts.insert(child);
        // A child lands on another server: `may_split` stops at 2^depth
        // partitions below the server count.
        let dest = giga::server_of(dir, child, core.cfg.servers);
        let moved_dirs = self.send_range(core, peers, &h, child, &child_parts, dest, &start, &end)?;
        self.splits.step(SplitStep::Installed)?;
        let moved_files = count_range(core, ENTRIES, &start, &end, u64::MAX)?;
        let mut b = Batch::new();
        b.delete_range(ENTRIES, start.clone(), end.clone());
        b.delete_range(DIRS, start, end);
        h.parts = child_parts;
        h.subdirs = h.subdirs.saturating_sub(moved_dirs);
        h.splitting = None;
        self.put_header(&mut b, &h);
        self.commit_removing(core, b, moved_files)?;
        self.splits.done.fetch_add(1, Ordering::Relaxed);
        // The halves may still be over the threshold (a bulk insertion).
        self.splits.grew(dir, self.splits.threshold);
        Ok(())
    }

    /// Entries and subdirectories in partition `h`, counted until past the
    /// threshold.
    fn part_size(&self, core: &Core, h: &Header) -> Result<u64, Errno> {
        let (start, end) = key_range(h.lookup.id, giga::part_range(h.part, h.parts.depth(h.part)));
        let cap = self.splits.threshold;
        let files = count_range(core, ENTRIES, &start, &end, cap)?;
        if files > cap {
            return Ok(files);
        }
        Ok(files + count_range(core, DIRS, &start, &end, cap)?)
    }

    /// Sends `[start, end)` of both column families to `dest` as the new
    /// partition `child`; answers how many subdirectories moved.
    #[allow(clippy::too_many_arguments)]
    fn send_range(&self, core: &Core, peers: &BlockingCaller, h: &Header, child: u32, parts: &PartMap, dest: u32, start: &[u8], end: &[u8]) -> Result<u64, Errno> {
        let mut files: Vec<Vec<u8>> = Vec::new();
        for_chunks(core, ENTRIES, start, end, &mut |pairs| {
            files.push(tables::table_bytes(core, pairs)?);
            Ok(true)
        })?;
        let mut dirs: Vec<Vec<u8>> = Vec::new();
        let mut moved_dirs = 0u64;
        for_chunks(core, DIRS, start, end, &mut |pairs| {
            moved_dirs += pairs.len() as u64;
            dirs.push(tables::table_bytes(core, pairs)?);
            Ok(true)
        })?;
        let chunks = files.len().max(dirs.len()).max(1);
        let (mut files, mut dirs) = (files.into_iter(), dirs.into_iter());
        for n in 0..chunks {
            let req = Request::IxSplitIn {
                dir: h.lookup.id,
                part: child,
                lookup: h.lookup.clone(),
                parent: h.parent,
                depth: h.depth,
                subdirs: moved_dirs,
                parts: parts.clone(),
                chunk: n as u32,
                last: n + 1 == chunks,
                entries: files.next().unwrap_or_default(),
                dirs: dirs.next().unwrap_or_default(),
            };
            match peers.call(dest, req)? {
                Reply::Unit => {}
                _ => return Err(Errno::EPROTO),
            }
            self.splits.step(SplitStep::Sent(n as u32))?;
        }
        Ok(moved_dirs)
    }

    /// Records the subdirectory entries in `[start, end)` of `DIRS` as
    /// leased for the longest lease (see [`super::lease::Leases::adopt`]).
    fn adopt_leases(&self, core: &Core, start: &[u8], end: &[u8]) -> Result<(), Errno> {
        let now = core.clock.now_ms();
        let mut ids = Vec::new();
        for_chunks(core, DIRS, start, end, &mut |pairs| {
            ids.extend(pairs.iter().filter_map(|(_, v)| keys::decode::<DirEntryValue>(v)).map(|d| d.lookup.id));
            Ok(true)
        })?;
        let mut leases = self.leases.lock();
        for id in ids {
            leases.adopt(id, now);
        }
        Ok(())
    }

    /// The destination's side of a split: see `Request::IxSplitIn`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn split_in(&self, core: &Core, dir: u64, part: u32, lookup: DirLookup, parent: u64, depth: u32, subdirs: u64, parts: PartMap, chunk: u32, last: bool, entries: &[u8], dirs: &[u8]) -> Result<Reply, Errno> {
        if !parts.contains(part) || part == 0 || lookup.id != dir || giga::server_of(dir, part, core.cfg.servers) != core.cfg.index {
            return Err(Errno::EINVAL);
        }
        let _g = core.lock_stripes(|| vec![dir], false, &[&Target::Dir(dir)]);
        if self.part_header(core, dir, part)?.is_some() {
            return Ok(Reply::Unit);
        }
        let (start, end) = key_range(dir, giga::part_range(part, parts.depth(part)));
        if chunk == 0 {
            let stale = count_range(core, ENTRIES, &start, &end, u64::MAX)?;
            let mut b = Batch::new();
            b.delete_range(ENTRIES, start.clone(), end.clone());
            b.delete_range(DIRS, start.clone(), end.clone());
            self.commit_removing(core, b, stale)?;
            self.splits.step(SplitStep::Cleared)?;
        }
        for (cf, table) in [(ENTRIES, entries), (DIRS, dirs)] {
            if !table.is_empty() {
                tables::ingest_bytes(core, cf, table)?;
            }
        }
        self.splits.step(SplitStep::Ingested(chunk))?;
        if last {
            // The source granted leases on the subdirectories moved here;
            // their mutations here wait those out.
            self.adopt_leases(core, &start, &end)?;
            let files = count_range(core, ENTRIES, &start, &end, u64::MAX)?;
            let h = Header { lookup, parent, depth, subdirs, sealed: false, part, parts, splitting: None };
            let mut b = Batch::new();
            self.put_header(&mut b, &h);
            self.commit(core, b)?;
            core.added_entries(files);
            self.headers.fetch_add(1, Ordering::AcqRel);
            // The new partition may be over the threshold already (its half
            // of a directory that grew while the split ran, or of a bulk
            // insertion), and nothing else would check it until its next name.
            self.splits.grew(dir, self.splits.threshold);
        }
        Ok(Reply::Unit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partition_splits_until_its_children_reach_every_server() {
        let mut m = PartMap::new();
        assert!(may_split(&m, 0, 4));
        m.insert(1);
        assert!(may_split(&m, 0, 4) && may_split(&m, 1, 4));
        m.insert(2);
        m.insert(3);
        assert!(!may_split(&m, 0, 4) && !may_split(&m, 1, 4) && !may_split(&m, 2, 4));
        assert!(!may_split(&PartMap::new(), 0, 1), "one server: nowhere to go");
        assert!(may_split(&m, 0, 5), "five servers: depth 3");
    }

    #[test]
    fn a_childs_key_range_is_inside_its_directory_and_holds_its_names() {
        let (s, e) = key_range(7, giga::part_range(1, 1));
        assert!(s.starts_with(&7u64.to_be_bytes()) && e.starts_with(&7u64.to_be_bytes()));
        for i in 0..500 {
            let name = format!("n{i}");
            let k = super::super::ix_key(7, &name);
            let inside = k.as_slice() >= s.as_slice() && k.as_slice() < e.as_slice();
            assert_eq!(inside, giga::name_hash(&name) & 1 == 1, "{name}");
        }
        let (s0, e0) = key_range(7, giga::part_range(0, 0));
        assert!(s0.as_slice() <= super::super::ix_key(7, "").as_slice() && e0.as_slice() > super::super::ix_key(7, &"\u{10ffff}".repeat(60)).as_slice());
    }
}
