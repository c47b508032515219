//! A store whose writes its group applies: what a leader's server or lock
//! service runs over, in place of its local store.
//!
//! A write goes into the [`Overlay`] at once (the leader's next reads see
//! it) and is proposed to the group in the order written; the local store
//! changes only when the group applies it. Inside a request
//! ([`ReplicatedStore::begin_request`]) a request's writes are proposed
//! together with what [`ReplicatedStore::end_request`] adds (its session
//! record), as one entry, so they are applied together or not at all. The
//! entry keeps the place in the log order of the request's first write: a
//! write another thread makes after it (under the same locks, once the
//! request let them go) is applied after it, as the leader saw them.
//! [`Store::flush_log`] waits until every proposal made before it is
//! applied: a daemon's read pass answers only then, so nothing is
//! acknowledged that a majority has not logged. A write outside a pass
//! waits for itself.
//!
//! A proposal the group refuses or does not apply in [`COMMIT_WAIT`]
//! deposes the store: its writes and waits fail from then on (their
//! outcome unknown to the caller), and the daemon opens a new one when it
//! leads again.

use crate::overlay::{Overlay, Seen};
use crate::proposal::Edit;
use crate::{Proposal, Raft};
use canopy_store::{Batch, CacheCounts, LogCounts, Pairs, Result, SharedStore, Store, StoreError, View};
use parking_lot::{Condvar, Mutex};
use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// How long a daemon's proposal may take to be applied before its store
/// gives up on leading.
pub const COMMIT_WAIT: Duration = Duration::from_secs(10);

struct Pending {
    seq: u64,
    writes: Vec<u64>,
    proposal: Proposal,
}

#[derive(Default)]
struct Progress {
    /// Proposals submitted, and the last applied (in order, so every one
    /// up to it is).
    proposed: u64,
    applied: u64,
    deposed: Option<String>,
}

struct Shared {
    overlay: Mutex<(Overlay, u64)>,
    progress: Mutex<Progress>,
    /// Wakes threads and tasks waiting for progress.
    moved: Condvar,
    moved_async: tokio::sync::Notify,
}

impl Shared {
    fn depose(&self, why: String) {
        self.overlay.lock().0 = Overlay::default();
        let mut p = self.progress.lock();
        p.deposed.get_or_insert(why);
        self.wake();
    }

    fn wake(&self) {
        self.moved.notify_all();
        self.moved_async.notify_waiters();
    }

    /// Whether proposal `seq` is applied (`Some(Ok)`), never will be by this
    /// store (`Some(Err)`), or not yet (`None`).
    fn applied(&self, seq: u64) -> Option<Result<()>> {
        let p = self.progress.lock();
        if p.applied >= seq {
            return Some(Ok(()));
        }
        p.deposed.as_ref().map(|why| Err(not_leading(why)))
    }
}

pub struct ReplicatedStore {
    inner: SharedStore,
    shared: Arc<Shared>,
    /// Submits proposals in order; holds the progress lock while sending, so
    /// sequence numbers and submission order agree.
    submit: mpsc::UnboundedSender<Pending>,
    commit_wait: Duration,
}

/// The writes of the request a thread is serving not yet proposed: their
/// ids and changes, and whether it proposed any already (an ingest does).
#[derive(Default)]
struct InRequest {
    writes: Vec<u64>,
    batch: Batch,
    /// The place in the log order its writes hold, once it wrote.
    slot: Option<u64>,
    proposed: bool,
}

thread_local! {
    static REQUEST: RefCell<Option<InRequest>> = const { RefCell::new(None) };
}

fn not_leading(why: &str) -> StoreError {
    StoreError::Engine(format!("this member no longer leads its group: {why}"))
}

impl ReplicatedStore {
    /// A store over `inner` (the member's own, which the group's state
    /// machine writes) proposing through `raft`, whose proposer runs on `rt`.
    /// A proposal not applied within `commit_wait` deposes it.
    pub fn new(inner: SharedStore, raft: Raft, rt: &tokio::runtime::Handle, commit_wait: Duration) -> Arc<ReplicatedStore> {
        let shared = Arc::new(Shared { overlay: Mutex::default(), progress: Mutex::default(), moved: Condvar::new(), moved_async: tokio::sync::Notify::new() });
        let (submit, rx) = mpsc::unbounded_channel();
        rt.spawn(propose_in_order(raft, rx, shared.clone()));
        Arc::new(ReplicatedStore { inner, shared, submit, commit_wait })
    }

    /// Whether the store has given up leading, and why.
    pub fn deposed(&self) -> Option<String> {
        self.shared.progress.lock().deposed.clone()
    }

    /// Gives up leading: pending writes fail.
    pub fn depose(&self, why: &str) {
        self.shared.depose(why.to_string());
    }

    /// From now until [`ReplicatedStore::end_request`], this thread's writes
    /// form one proposal.
    pub fn begin_request(&self) {
        // A request that never ended (its handler panicked) gives up its
        // place with what it wrote, so later proposals are not held behind it.
        let left = REQUEST.with(|r| r.borrow_mut().replace(InRequest::default()));
        if let Some(InRequest { writes, batch, slot: Some(slot), .. }) = left {
            let _ = self.fill(slot, writes, Proposal::from_batch(batch));
        }
    }

    /// Proposes the request's writes with `extra` appended (if it wrote
    /// anything): one entry. Answers whether the request wrote anything.
    pub fn end_request(&self, extra: impl FnOnce() -> Batch) -> Result<bool> {
        let Some(InRequest { mut writes, mut batch, slot, proposed }) = REQUEST.with(|r| r.borrow_mut().take()) else { return Ok(false) };
        if slot.is_none() && !proposed {
            return Ok(false);
        }
        let slot = match slot {
            Some(s) => s,
            None => self.reserve()?,
        };
        let more = extra();
        match self.add_to_overlay(&more) {
            Ok(id) => writes.push(id),
            Err(e) => {
                let _ = self.fill(slot, writes, Proposal::from_batch(batch));
                return Err(e);
            }
        }
        batch.changes.extend(more.changes);
        self.fill(slot, writes, Proposal::from_batch(batch))?;
        Ok(true)
    }

    fn add_to_overlay(&self, batch: &Batch) -> Result<u64> {
        if let Some(why) = self.deposed() {
            return Err(not_leading(&why));
        }
        let mut o = self.shared.overlay.lock();
        o.1 += 1;
        let id = o.1;
        o.0.add(id, batch);
        Ok(id)
    }

    /// Submits a proposal; answers its sequence number.
    fn propose(&self, writes: Vec<u64>, proposal: Proposal) -> Result<u64> {
        let seq = self.reserve()?;
        self.fill(seq, writes, proposal)?;
        Ok(seq)
    }

    /// A place in the order of proposals, filled later ([`Self::fill`]):
    /// none after it is sent to the group before it is.
    fn reserve(&self) -> Result<u64> {
        let mut p = self.shared.progress.lock();
        if let Some(why) = &p.deposed {
            return Err(not_leading(why));
        }
        p.proposed += 1;
        Ok(p.proposed)
    }

    fn fill(&self, seq: u64, writes: Vec<u64>, proposal: Proposal) -> Result<()> {
        self.submit.send(Pending { seq, writes, proposal }).map_err(|_| not_leading("its proposer stopped"))
    }

    /// Waits until proposal `seq` (and every one before it) is applied.
    fn wait_applied(&self, seq: u64) -> Result<()> {
        let deadline = Instant::now() + self.commit_wait;
        let mut p = self.shared.progress.lock();
        loop {
            if p.applied >= seq {
                return Ok(());
            }
            if let Some(why) = &p.deposed {
                return Err(not_leading(why));
            }
            if self.shared.moved.wait_until(&mut p, deadline).timed_out() {
                drop(p);
                self.shared.depose(format!("a proposal was not applied within {:?}", self.commit_wait));
                return Err(not_leading("timed out"));
            }
        }
    }

    /// When every proposal made so far is applied: `None` if it is now, else
    /// a future that ends then (an error if this store is deposed first, or
    /// the wait runs out, which deposes it).
    pub fn applied_later(&self) -> Option<futures::future::BoxFuture<'static, Result<()>>> {
        let seq = self.shared.progress.lock().proposed;
        if matches!(self.shared.applied(seq), Some(Ok(()))) {
            return None;
        }
        let (shared, wait) = (self.shared.clone(), self.commit_wait);
        Some(Box::pin(async move {
            let deadline = tokio::time::Instant::now() + wait;
            loop {
                let moved = shared.moved_async.notified();
                tokio::pin!(moved);
                moved.as_mut().enable();
                if let Some(done) = shared.applied(seq) {
                    return done;
                }
                if tokio::time::timeout_at(deadline, moved).await.is_err() {
                    shared.depose(format!("a proposal was not applied within {wait:?}"));
                    return Err(not_leading("timed out"));
                }
            }
        }))
    }

    fn overlay(&self) -> Option<Overlay> {
        let o = self.shared.overlay.lock();
        (!o.0.is_empty()).then(|| o.0.clone())
    }
}

/// Proposals sent to the group as one entry: the last place it fills, and
/// the overlay's writes it carries.
struct Sent {
    last: u64,
    writes: Vec<u64>,
}

/// Sends proposals to Raft in order, and hears each applied in order.
/// Proposals arrive as their places are filled; each is sent once every
/// place before it has been. Those ready together go as one entry (a read
/// pass's requests, mostly): one round of the log, not one each.
async fn propose_in_order(raft: Raft, mut rx: mpsc::UnboundedReceiver<Pending>, shared: Arc<Shared>) {
    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<Heard>();
    let hearing = shared.clone();
    tokio::spawn(async move {
        while let Some((sent, answer)) = done_rx.recv().await {
            match heard(answer).await {
                Ok(_) => {
                    hearing.overlay.lock().0.forget(&sent.writes);
                    let mut p = hearing.progress.lock();
                    p.applied = p.applied.max(sent.last);
                    drop(p);
                    hearing.wake();
                }
                Err(why) => hearing.depose(why),
            }
        }
    });
    let mut next = 1;
    let mut waiting = std::collections::BTreeMap::new();
    while let Some(pending) = rx.recv().await {
        waiting.insert(pending.seq, pending);
        while let Ok(more) = rx.try_recv() {
            waiting.insert(more.seq, more);
        }
        let mut entry = Proposal::default();
        let mut sent = Sent { last: 0, writes: Vec::new() };
        while let Some(p) = waiting.remove(&next) {
            next += 1;
            // A table is ingested before its entry's other edits: it goes
            // in an entry of its own, after what came before it.
            let alone = p.proposal.tables().next().is_some();
            if alone && sent.last != 0 && !send(&raft, &done_tx, std::mem::take(&mut entry), std::mem::replace(&mut sent, Sent { last: 0, writes: Vec::new() })).await {
                return;
            }
            entry.edits.extend(p.proposal.edits);
            sent.writes.extend(p.writes);
            sent.last = p.seq;
            if alone && !send(&raft, &done_tx, std::mem::take(&mut entry), std::mem::replace(&mut sent, Sent { last: 0, writes: Vec::new() })).await {
                return;
            }
        }
        if sent.last != 0 && !send(&raft, &done_tx, entry, sent).await {
            return;
        }
    }
}

type Heard = (Sent, std::result::Result<Answer, String>);

/// Sends one entry; false once nobody hears the outcomes any more.
async fn send(raft: &Raft, done_tx: &mpsc::UnboundedSender<Heard>, mut entry: Proposal, sent: Sent) -> bool {
    entry.drop_replaced();
    let answer = raft.client_write_ff(entry).await.map_err(|e| e.to_string());
    done_tx.send((sent, answer)).is_ok()
}

type Answer = <openraft::impls::OneshotResponder<crate::GroupConfig> as openraft::raft::responder::Responder<crate::GroupConfig>>::Receiver;

/// Whether a submitted proposal was applied, and if not why.
async fn heard(answer: std::result::Result<Answer, String>) -> std::result::Result<(), String> {
    match answer?.await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(e) => Err(e.to_string()),
    }
}

impl Store for ReplicatedStore {
    fn get(&self, cf: &'static str, key: &[u8]) -> Result<Option<Vec<u8>>> {
        {
            let o = self.shared.overlay.lock();
            if !o.0.is_empty() {
                match o.0.get(cf, key) {
                    Seen::Put(v) => return Ok(Some(v)),
                    Seen::Deleted => return Ok(None),
                    Seen::Store => {}
                }
            }
        }
        self.inner.get(cf, key)
    }

    fn write(&self, mut batch: Batch) -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        let id = self.add_to_overlay(&batch)?;
        let in_request = REQUEST.with(|r| -> Result<bool> {
            match r.borrow_mut().as_mut() {
            Some(req) => {
                if req.slot.is_none() {
                    req.slot = Some(self.reserve()?);
                }
                req.writes.push(id);
                req.batch.changes.append(&mut batch.changes);
                Ok(true)
            }
            None => Ok(false),
            }
        })?;
        if in_request {
            return Ok(());
        }
        let seq = self.propose(vec![id], Proposal::from_batch(batch))?;
        if canopy_store::deferring() {
            Ok(())
        } else {
            self.wait_applied(seq)
        }
    }

    fn flush_log(&self) -> Result<()> {
        let seq = self.shared.progress.lock().proposed;
        self.wait_applied(seq)
    }

    fn scan(&self, cf: &'static str, prefix: &[u8], after: Option<&[u8]>, limit: usize) -> Result<Pairs> {
        let Some(overlay) = self.overlay() else { return self.inner.scan(cf, prefix, after, limit) };
        let mut out = Vec::new();
        merged_for_each(&overlay, &*self.inner, cf, prefix, &mut |k, v| {
            if after.is_none_or(|a| k > a) {
                out.push((k.to_vec(), v.to_vec()));
            }
            out.len() < limit
        })?;
        Ok(out)
    }

    fn for_each(&self, cf: &'static str, prefix: &[u8], f: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> Result<()> {
        match self.overlay() {
            None => self.inner.for_each(cf, prefix, f),
            Some(overlay) => merged_for_each(&overlay, &*self.inner, cf, prefix, f),
        }
    }

    fn snapshot(&self) -> Box<dyn View + '_> {
        // The overlay first: a write applied between the two is then in both.
        let overlay = self.overlay().unwrap_or_default();
        Box::new(MergedView { overlay, view: self.inner.snapshot() })
    }

    fn write_table(&self, path: &Path, pairs: &mut dyn Iterator<Item = (Vec<u8>, Vec<u8>)>) -> Result<u64> {
        self.inner.write_table(path, pairs)
    }

    /// The tables' bytes travel in one proposal, which every member ingests;
    /// this waits for it to be applied.
    fn ingest(&self, cf: &'static str, paths: &[PathBuf]) -> Result<()> {
        let mut edits = Vec::new();
        for p in paths {
            edits.push(Edit::Table(cf.to_string(), std::fs::read(p)?));
        }
        // What the request wrote before comes first, as it would locally: it
        // is proposed now, on its own; the request's later writes go with its
        // session record.
        let before = REQUEST.with(|r| {
            r.borrow_mut().as_mut().and_then(|req| {
                req.proposed = true;
                Some((req.slot.take()?, std::mem::take(&mut req.writes), std::mem::take(&mut req.batch)))
            })
        });
        if let Some((slot, writes, batch)) = before {
            self.fill(slot, writes, Proposal::from_batch(batch))?;
        }
        let seq = self.propose(Vec::new(), Proposal { edits })?;
        self.wait_applied(seq)?;
        for p in paths {
            let _ = std::fs::remove_file(p);
        }
        Ok(())
    }

    fn cache_counts(&self) -> Option<CacheCounts> {
        self.inner.cache_counts()
    }

    fn log_counts(&self) -> Option<LogCounts> {
        self.inner.log_counts()
    }

    fn scratch_dir(&self) -> PathBuf {
        self.inner.scratch_dir()
    }
}

fn merged_for_each(overlay: &Overlay, inner: &dyn Store, cf: &'static str, prefix: &[u8], f: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> Result<()> {
    let mut res = Ok(());
    overlay.merge(cf, prefix, &mut |g| res = inner.for_each(cf, prefix, g), f);
    res
}

struct MergedView<'a> {
    overlay: Overlay,
    view: Box<dyn View + 'a>,
}

impl View for MergedView<'_> {
    fn get(&self, cf: &'static str, key: &[u8]) -> Result<Option<Vec<u8>>> {
        match self.overlay.get(cf, key) {
            Seen::Put(v) => Ok(Some(v)),
            Seen::Deleted => Ok(None),
            Seen::Store => self.view.get(cf, key),
        }
    }

    fn for_each(&self, cf: &'static str, prefix: &[u8], f: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> Result<()> {
        let mut res = Ok(());
        self.overlay.merge(cf, prefix, &mut |g| res = self.view.for_each(cf, prefix, g), f);
        res
    }
}
