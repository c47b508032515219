//! The lock service daemon logic.
//!
//! A `Lock` request is recorded in the store (`txns` column family: txn id →
//! intent and locks) before it is granted, and the record is deleted by `Unlock`:
//! at any time the store holds every directory mutation that may be half done. A
//! restarted service re-grants the locks of recorded transactions with a fresh
//! lease of the length each asked for, so live coordinators can finish and dead
//! ones are recovered once it runs out.
//!
//! Recovery (seed 000 §3.3: "later lock acquisition on the same path will trigger
//! a recovery process"): a transaction whose lease ran out keeps its locks. The
//! next request that conflicts with it is answered `Recover` instead of waiting:
//! the transaction's lease is renewed for the requester, who repairs the intent,
//! unlocks it, and asks again. If that requester dies too, the lease runs out again
//! and the next one recovers. A pessimistic retry's transaction (`Intent::Retry`)
//! changes nothing, so an expired one is simply released.

use crate::locktable::LockTable;
use crate::waiters::{Place, Waiters};
use canopy_proto::auth::Identity;
use canopy_proto::msg::{Intent, LockMode, TxnInfo};
use canopy_proto::{Creds, Errno, Reply, Request};
use canopy_rpc::{Handled, RpcResult, Service};
use canopy_store::{Batch, SharedStore};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use canopy_proto::clock::{SharedClock, SystemClock};
use std::time::Duration;
use tokio::sync::Notify;

pub const TXNS: &str = "txns";
pub const META: &str = "meta";
pub const CFS: &[&str] = &[TXNS, META];
const NEXT_TXN: &[u8] = b"next_txn";
/// The layout of the `txns` records. 2: records carry the grant's ticket (1 did
/// not, and a record that does not decode would be lost, so such a store is
/// refused rather than opened). 3: an intent may be `RenameOver`, which a
/// program of layout 2 cannot decode (it skipped such a record, losing the
/// transaction); every record of 2 is one of 3, so a store of 2 is taken as
/// it is and recorded as 3.
const LAYOUT_VERSION: u32 = 3;
const UPGRADES_FROM: u32 = 2;
/// Bounds on what a client may ask for.
const MAX_LEASE_MS: u32 = 10 * 60 * 1000;
const MAX_WAIT_MS: u32 = 60 * 1000;
/// A client locks at most two paths (a rename); recovery hands back what it was given.
const MAX_LOCKS: usize = 64;

#[derive(Debug, Clone, Serialize, Deserialize)]
struct TxnRecord {
    intent: Intent,
    locks: Vec<(String, LockMode)>,
    /// The lease its coordinator asked for; a restarted service grants it again.
    lease_ms: u32,
    /// The id it was first granted under (it changes at each handover); fences on
    /// the servers carry this one.
    origin: u64,
    /// What its holder shows to renew or unlock it (kept, so a live coordinator
    /// can still finish after a restart of the service).
    ticket: u64,
}

/// What the service keeps in memory of a transaction in the table (the store
/// has it too).
#[derive(Debug, Clone)]
struct Meta {
    intent: Intent,
    origin: u64,
    ticket: u64,
    /// The lease its coordinator asked for (kept for an amended record).
    lease_ms: u32,
}

struct State {
    table: LockTable,
    /// Requests waiting for their locks, first come first served.
    waiters: Waiters,
    next_txn: u64,
    meta: std::collections::HashMap<u64, Meta>,
}

pub struct LockService {
    store: SharedStore,
    state: Mutex<State>,
    released: Notify,
    /// Leases are read from it; tests move it by hand.
    clock: SharedClock,
}

impl LockService {
    pub fn open(store: SharedStore) -> Result<Arc<LockService>, String> {
        LockService::open_with_clock(store, SystemClock::shared())
    }

    pub fn open_with_clock(store: SharedStore, clock: SharedClock) -> Result<Arc<LockService>, String> {
        let no_txns = store.scan(TXNS, b"", None, 1).map_err(|e| e.to_string())?.is_empty();
        upgrade_layout(&*store)?;
        canopy_store::check_layout(&*store, META, LAYOUT_VERSION, 1, no_txns, "the lock service's data directory")?;
        let mut records = Vec::new();
        let mut undecodable = None;
        store
            .for_each(TXNS, b"", &mut |k, v| {
                match (<[u8; 8]>::try_from(k).map(u64::from_be_bytes), postcard::from_bytes::<TxnRecord>(v)) {
                    (Ok(id), Ok(rec)) => records.push((id, rec)),
                    _ => undecodable = Some(k.to_vec()),
                }
                undecodable.is_none()
            })
            .map_err(|e| e.to_string())?;
        // Skipped, it would be a transaction lost: its locks granted to others
        // and what it left half done never recovered.
        if let Some(k) = undecodable {
            return Err(format!("the lock service's data directory holds a transaction record it cannot read (key {k:02x?}): run the Canopy release that wrote it"));
        }
        let max_txn = records.iter().map(|(id, _)| *id).max().unwrap_or(0);
        let stored_next = match store.get(META, NEXT_TXN).map_err(|e| e.to_string())? {
            Some(v) => postcard::from_bytes::<u64>(&v).map_err(|e| e.to_string())?,
            None => 1,
        };
        let svc = LockService {
            store,
            state: Mutex::new(State {
                table: LockTable::default(),
                waiters: Waiters::default(),
                next_txn: stored_next.max(max_txn + 1),
                meta: std::collections::HashMap::new(),
            }),
            released: Notify::new(),
            clock,
        };
        {
            let mut st = svc.state.lock();
            for (id, rec) in records {
                st.table.try_grant(id, &rec.locks, svc.now_ms() + rec.lease_ms as u64);
                st.meta.insert(id, Meta { intent: rec.intent, origin: rec.origin, ticket: rec.ticket, lease_ms: rec.lease_ms });
            }
        }
        Ok(Arc::new(svc))
    }

    fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    fn delete_record(&self, txn: u64) -> Result<(), Errno> {
        let mut b = Batch::new();
        b.delete(TXNS, txn.to_be_bytes().to_vec());
        self.persist(b)
    }

    /// Writes `b` to the store; a failure is logged and answered `EIO`.
    fn persist(&self, b: Batch) -> Result<(), Errno> {
        self.store.write(b).map_err(|e| {
            eprintln!("canopy-lockd: store error: {e}");
            Errno::EIO
        })
    }

    /// A conflicting transaction whose lease ran out, handed to the caller for
    /// recovery (its lease renewed), or released if it changed nothing.
    fn expired_conflict(&self, st: &mut State, locks: &[(String, LockMode)], lease_ms: u32) -> Option<RpcResult> {
        let now = self.now_ms();
        let conflicting = st.table.conflicts(locks);
        let expired: Vec<u64> = st.table.expired(now).into_iter().filter(|t| conflicting.contains(t)).collect();
        for txn in expired {
            match st.meta.get(&txn).cloned() {
                Some(Meta { intent: Intent::Retry { .. }, .. }) | None => {
                    if let Err(e) = self.delete_record(txn) {
                        return Some(Err(e));
                    }
                    st.table.release(txn);
                    st.meta.remove(&txn);
                    self.released.notify_waiters();
                }
                Some(m) => return Some(self.hand_over(st, txn, m.intent, m.origin, now + lease_ms as u64)),
            }
        }
        None
    }

    /// Moves expired transaction `txn` to a new id owned by the recoverer, so the
    /// old holder, if only slow and not dead, can no longer renew or unlock it.
    fn hand_over(&self, st: &mut State, txn: u64, intent: Intent, origin: u64, expires_at: u64) -> RpcResult {
        let held = st.table.locks_of(txn);
        let lease_ms = (expires_at - self.now_ms()) as u32;
        let new_txn = st.next_txn;
        let ticket = new_ticket()?;
        let mut b = Batch::new();
        b.delete(TXNS, txn.to_be_bytes().to_vec());
        put_record(&mut b, new_txn, &TxnRecord { intent: intent.clone(), locks: held.clone(), lease_ms, origin, ticket });
        b.put(META, NEXT_TXN.to_vec(), postcard::to_stdvec(&(new_txn + 1)).expect("u64 serialises"));
        self.persist(b)?;
        st.next_txn = new_txn + 1;
        st.table.release(txn);
        st.meta.remove(&txn);
        st.table.try_grant(new_txn, &held, expires_at);
        st.meta.insert(new_txn, Meta { intent: intent.clone(), origin, ticket, lease_ms });
        Ok(Reply::Recover { txn: new_txn, ticket, was: origin, lapsed: txn, intent })
    }

    /// One attempt: record and grant, hand over an expired conflicting transaction,
    /// or `None` if something live conflicts or an earlier waiter (ahead of
    /// `place`, the request's place in the queue if it waits already) wants a
    /// conflicting lock.
    fn try_lock(&self, locks: &[(String, LockMode)], intent: &Intent, lease_ms: u32, place: Option<Place>) -> Option<RpcResult> {
        let mut st = self.state.lock();
        if let Some(handover) = self.expired_conflict(&mut st, locks, lease_ms) {
            return Some(handover);
        }
        if st.waiters.behind_a_conflict(place, locks) || !st.table.conflicts(locks).is_empty() {
            return None;
        }
        let waited = place.is_some();
        let txn = st.next_txn;
        let ticket = match new_ticket() {
            Ok(t) => t,
            Err(e) => return Some(Err(e)),
        };
        let mut b = Batch::new();
        put_record(&mut b, txn, &TxnRecord { intent: intent.clone(), locks: locks.to_vec(), lease_ms, origin: txn, ticket });
        b.put(META, NEXT_TXN.to_vec(), postcard::to_stdvec(&(txn + 1)).expect("u64 serialises"));
        if let Err(e) = self.persist(b) {
            return Some(Err(e));
        }
        st.next_txn = txn + 1;
        let granted = st.table.try_grant(txn, locks, self.now_ms() + lease_ms as u64);
        debug_assert!(granted);
        st.meta.insert(txn, Meta { intent: intent.clone(), origin: txn, ticket, lease_ms });
        Some(Ok(Reply::Locked { txn, ticket, waited }))
    }

    async fn lock(self: Arc<Self>, locks: Vec<(String, LockMode)>, intent: Intent, lease_ms: u32, wait_ms: u32) -> RpcResult {
        let deadline = tokio::time::Instant::now() + Duration::from_millis(wait_ms.min(MAX_WAIT_MS) as u64);
        // Its place in the queue once it waits; left when it is granted, gives
        // up, or its caller goes away (the future is dropped).
        let mut queued = Queued { svc: &self, place: None };
        loop {
            let released = self.released.notified();
            tokio::pin!(released);
            released.as_mut().enable();
            if let Some(result) = self.try_lock(&locks, &intent, lease_ms, queued.place) {
                return result;
            }
            // Wake on a release, or periodically: a lease running out wakes no one.
            let tick = tokio::time::Instant::now() + Duration::from_millis(100);
            if tokio::time::Instant::now() >= deadline {
                return Err(Errno::EAGAIN);
            }
            if queued.place.is_none() {
                queued.place = Some(self.state.lock().waiters.join(&locks));
            }
            let _ = tokio::time::timeout_at(tick.min(deadline), released).await;
        }
    }

    /// Requests waiting for their locks now.
    pub fn waiting(&self) -> usize {
        self.state.lock().waiters.len()
    }

    /// Extends a live lease. One that already ran out may have been handed to a
    /// recoverer, so it is not revived: the caller must stop (`ESTALE`).
    fn renew(&self, txn: u64, ticket: u64, lease_ms: u32) -> RpcResult {
        let mut st = self.state.lock();
        check_ticket(&st, txn, ticket)?;
        let now = self.now_ms();
        match st.table.expires_at(txn) {
            Some(at) if at > now => {
                st.table.renew(txn, now + lease_ms as u64);
                Ok(Reply::Unit)
            }
            _ => Err(Errno::ESTALE),
        }
    }

    /// Replaces live transaction `txn`'s intent, in its record first: a
    /// recoverer is handed the new one. Unlike an unlock, one that is gone or
    /// whose lease ran out is refused (`ESTALE`): it may be in a recoverer's
    /// hands, with the intent it was handed.
    fn amend(&self, txn: u64, ticket: u64, intent: Intent) -> RpcResult {
        let mut st = self.state.lock();
        let Some(meta) = st.meta.get(&txn).cloned() else { return Err(Errno::ESTALE) };
        check_ticket(&st, txn, ticket)?;
        if st.table.expires_at(txn).is_none_or(|at| at <= self.now_ms()) {
            return Err(Errno::ESTALE);
        }
        let mut b = Batch::new();
        put_record(&mut b, txn, &TxnRecord { intent: intent.clone(), locks: st.table.locks_of(txn), lease_ms: meta.lease_ms, origin: meta.origin, ticket });
        self.persist(b)?;
        st.meta.insert(txn, Meta { intent, ..meta });
        Ok(Reply::Unit)
    }

    /// Ends transaction `txn`. Unlocking one that is gone (already unlocked, or
    /// handed over under a new id) is a no-op, so a retried unlock is harmless.
    fn unlock(&self, txn: u64, ticket: u64) -> RpcResult {
        let mut st = self.state.lock();
        check_ticket(&st, txn, ticket)?;
        self.delete_record(txn)?;
        st.table.release(txn);
        st.meta.remove(&txn);
        self.released.notify_waiters();
        Ok(Reply::Unit)
    }

    /// The transactions in flight; a negative `expires_in_ms` means the lease ran
    /// out and the transaction waits for recovery.
    fn list(&self) -> RpcResult {
        Ok(Reply::Txns(self.transactions()))
    }

    /// The transactions in flight, by id.
    pub fn transactions(&self) -> Vec<TxnInfo> {
        let st = self.state.lock();
        let now = self.now_ms() as i64;
        let mut out: Vec<TxnInfo> = st
            .table
            .held()
            .map(|(txn, h)| TxnInfo {
                txn,
                origin: st.meta.get(&txn).map_or(txn, |m| m.origin),
                intent: st.meta.get(&txn).map(|m| m.intent.clone()).unwrap_or(Intent::Retry { path: "/".into() }),
                locks: h.locks.clone(),
                expires_in_ms: h.expires_at as i64 - now,
            })
            .collect();
        out.sort_by_key(|t| t.txn);
        out
    }
}

/// Adds transaction `txn`'s record to `b`.
fn put_record(b: &mut Batch, txn: u64, rec: &TxnRecord) {
    b.put(TXNS, txn.to_be_bytes().to_vec(), postcard::to_stdvec(rec).expect("records serialise"));
}

/// Records a store of layout [`UPGRADES_FROM`] as [`LAYOUT_VERSION`]: its
/// records are read as they are.
fn upgrade_layout(store: &dyn canopy_store::Store) -> Result<(), String> {
    let found = store.get(META, canopy_store::LAYOUT_KEY).map_err(|e| e.to_string())?;
    if found.as_deref() == Some(&UPGRADES_FROM.to_be_bytes()[..]) {
        let mut b = Batch::new();
        b.put(META, canopy_store::LAYOUT_KEY.to_vec(), LAYOUT_VERSION.to_be_bytes().to_vec());
        store.write(b).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// EPERM unless `ticket` is the one `txn` was granted with (a transaction that is
/// gone passes: there is nothing left to protect).
fn check_ticket(st: &State, txn: u64, ticket: u64) -> Result<(), Errno> {
    match st.meta.get(&txn) {
        Some(m) if m.ticket != ticket => Err(Errno::EPERM),
        _ => Ok(()),
    }
}

fn new_ticket() -> Result<u64, Errno> {
    canopy_rpc::random::u64().map_err(|e| {
        eprintln!("canopy-lockd: no randomness for a ticket: {e}");
        Errno::EIO
    })
}

fn validate_lock(locks: &[(String, LockMode)], intent: &Intent, lease_ms: u32) -> Result<(), Errno> {
    if locks.is_empty() || locks.len() > MAX_LOCKS || lease_ms == 0 || lease_ms > MAX_LEASE_MS {
        return Err(Errno::EINVAL);
    }
    for (p, _) in locks {
        canopy_proto::path::NsPath::parse(p)?;
    }
    validate_intent(intent)
}

/// An intent is recorded only if its paths are paths: what a recoverer reads
/// back must parse, and no record is larger than its paths allow.
fn validate_intent(intent: &Intent) -> Result<(), Errno> {
    intent.paths().into_iter().try_for_each(|p| canopy_proto::path::NsPath::parse(p).map(drop))
}

/// The service as the transport sees it.
pub struct LockDaemon(pub Arc<LockService>);

impl Service for LockDaemon {
    /// Only holders of the cluster key (servers, mounts, the administrator's
    /// tools, delegating servers) take locks: a user's transactions run on a
    /// server on the user's behalf.
    fn call(&self, peer: &Identity, _creds: Creds, req: Request) -> Handled {
        if !peer.is_cluster() && req != Request::Ping {
            return Handled::Now(Err(Errno::EPERM));
        }
        match req {
            Request::Ping => Handled::Now(Ok(Reply::Pong { server: u32::MAX, servers: 0 })),
            Request::Lock { locks, intent, lease_ms, wait_ms } => match validate_lock(&locks, &intent, lease_ms) {
                Err(e) => Handled::Now(Err(e)),
                Ok(()) => Handled::Later(Box::pin(self.0.clone().lock(locks, intent, lease_ms, wait_ms))),
            },
            Request::Renew { txn, ticket, lease_ms } if lease_ms > 0 && lease_ms <= MAX_LEASE_MS => Handled::Now(self.0.renew(txn, ticket, lease_ms)),
            Request::Renew { .. } => Handled::Now(Err(Errno::EINVAL)),
            Request::Unlock { txn, ticket } => Handled::Now(self.0.unlock(txn, ticket)),
            Request::Amend { txn, ticket, intent } => Handled::Now(validate_intent(&intent).and_then(|()| self.0.amend(txn, ticket, intent))),
            Request::ListTxns => Handled::Now(self.0.list()),
            _ => Handled::Now(Err(Errno::ENOSYS)),
        }
    }

    /// The records a pass's unlocks, renewals and amendments write reach the
    /// log in one system call before any answer (a lock's own record is
    /// written when it is granted, outside the pass, and reaches the log
    /// before the grant is sent).
    fn in_pass(&self, handlers: &mut dyn FnMut()) -> Result<(), Errno> {
        canopy_store::in_pass(&*self.0.store, handlers).map_err(|e| {
            eprintln!("canopy-lockd: store error writing the log: {e}");
            Errno::EIO
        })
    }
}

/// A lock request's place in the queue, given up when it is dropped; the
/// requests behind it then look again.
struct Queued<'a> {
    svc: &'a LockService,
    place: Option<Place>,
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        if let Some(place) = self.place {
            self.svc.state.lock().waiters.leave(place);
            self.svc.released.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use canopy_proto::clock::ManualClock;
    use canopy_store::{MemStore, Store};

    fn lock_req(path: &str, lease_ms: u32) -> Request {
        Request::Lock {
            locks: vec![(path.to_string(), LockMode::Write)],
            intent: Intent::Mkdir { path: path.to_string() },
            lease_ms,
            wait_ms: 1000,
        }
    }

    async fn call(d: &LockDaemon, req: Request) -> RpcResult {
        match d.call(&Identity::Cluster, Creds::root(), req) {
            Handled::Now(r) => r,
            Handled::Later(f) => f.await,
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_waiting_writer_is_not_overtaken_by_later_locks_below_it() {
        let clock = ManualClock::new();
        let d = Arc::new(LockDaemon(LockService::open_with_clock(Arc::new(MemStore::new(CFS)), clock.clone()).unwrap()));
        let Ok(Reply::Locked { txn, ticket, .. }) = call(&d, lock_req("/d/a", 60_000)).await else { panic!("not granted") };
        let writer = {
            let d = d.clone();
            tokio::spawn(async move { call(&d, lock_req("/d", 60_000)).await })
        };
        while d.0.waiting() == 0 {
            tokio::task::yield_now().await;
        }
        // /d/b conflicts with nothing held, but the writer of /d came first.
        let later = Request::Lock { locks: vec![("/d/b".into(), LockMode::Write)], intent: Intent::Mkdir { path: "/d/b".into() }, lease_ms: 60_000, wait_ms: 300 };
        assert_eq!(call(&d, later).await, Err(Errno::EAGAIN));
        // Elsewhere is not held up.
        assert!(matches!(call(&d, lock_req("/e", 60_000)).await, Ok(Reply::Locked { .. })));
        assert_eq!(call(&d, Request::Unlock { txn, ticket }).await, Ok(Reply::Unit));
        assert!(matches!(writer.await.unwrap(), Ok(Reply::Locked { waited: true, .. })));
        assert_eq!(d.0.waiting(), 0, "the granted writer left the queue");
    }

    #[tokio::test]
    async fn only_the_cluster_key_takes_locks() {
        let d = LockDaemon(LockService::open(Arc::new(MemStore::new(CFS))).unwrap());
        let user = Identity::User(Creds::user(1000, 1000));
        let amend = Request::Amend { txn: 1, ticket: 0, intent: Intent::Retry { path: "/".into() } };
        for req in [lock_req("/a", 100), Request::Unlock { txn: 1, ticket: 0 }, Request::Renew { txn: 1, ticket: 0, lease_ms: 10 }, Request::ListTxns, amend] {
            let Handled::Now(r) = d.call(&user, Creds::root(), req.clone()) else { panic!("{req:?} answered later") };
            assert_eq!(r, Err(Errno::EPERM), "{req:?}");
        }
        assert!(d.0.transactions().is_empty());
    }

    #[tokio::test]
    async fn renewal_keeps_a_live_lease_and_refuses_an_expired_one() {
        // Leases expire on a manual clock: no sleeping, no timing races.
        let clock = ManualClock::new();
        let d = LockDaemon(LockService::open_with_clock(Arc::new(MemStore::new(CFS)), clock.clone()).unwrap());
        let Ok(Reply::Locked { txn, ticket, .. }) = call(&d, lock_req("/a", 100)).await else { panic!("not granted") };
        assert_eq!(call(&d, Request::Renew { txn, ticket, lease_ms: 100 }).await, Ok(Reply::Unit));
        clock.advance(99);
        assert_eq!(call(&d, Request::Renew { txn, ticket, lease_ms: 100 }).await, Ok(Reply::Unit), "still live at 99 ms");
        let Ok(Reply::Txns(open)) = call(&d, Request::ListTxns).await else { panic!() };
        assert_eq!(open[0].expires_in_ms, 100);
        clock.advance(150);
        assert_eq!(call(&d, Request::Renew { txn, ticket, lease_ms: 100 }).await, Err(Errno::ESTALE));
        // The expired transaction is handed to the next conflicting request.
        let Ok(Reply::Recover { txn: taken, ticket: taken_ticket, was, lapsed, intent }) = call(&d, lock_req("/a", 100)).await else { panic!("not handed over") };
        assert_eq!((was, lapsed), (txn, txn));
        assert_eq!(intent, Intent::Mkdir { path: "/a".into() });
        assert_ne!(taken, txn, "the recoverer owns it under a new id");
        // The old holder can no longer renew it, nor release the recoverer's locks.
        assert_eq!(call(&d, Request::Renew { txn, ticket, lease_ms: 100 }).await, Err(Errno::ESTALE));
        call(&d, Request::Unlock { txn, ticket }).await.unwrap();
        // Nor can anyone who only knows the new id.
        assert_eq!(call(&d, Request::Renew { txn: taken, ticket, lease_ms: 100 }).await, Err(Errno::EPERM));
        assert_eq!(call(&d, Request::Unlock { txn: taken, ticket }).await, Err(Errno::EPERM));
        assert_eq!(call(&d, Request::Renew { txn: taken, ticket: taken_ticket, lease_ms: 100 }).await, Ok(Reply::Unit));
        let Ok(Reply::Txns(open)) = call(&d, Request::ListTxns).await else { panic!() };
        assert_eq!(open.iter().map(|t| t.txn).collect::<Vec<_>>(), vec![taken]);
        assert_eq!(call(&d, Request::Renew { txn: 999, ticket, lease_ms: 100 }).await, Err(Errno::ESTALE));
        assert_eq!(call(&d, Request::Renew { txn, ticket, lease_ms: 0 }).await, Err(Errno::EINVAL));
        // The recoverer dies too: the next handover still names the original id.
        clock.advance(150);
        let Ok(Reply::Recover { txn: again, was, lapsed, .. }) = call(&d, lock_req("/a", 100)).await else { panic!("not handed over") };
        assert_ne!(again, taken);
        assert_eq!(was, txn, "fences carry the first id");
        assert_eq!(lapsed, taken, "the dead recoverer's own id, which its migration's steps carry");
    }

    /// An intent whose paths are not paths (too long, relative, with a NUL)
    /// is refused before anything is locked or recorded, as a lock, as an
    /// amendment.
    #[tokio::test]
    async fn an_intent_that_is_not_paths_is_never_recorded() {
        let d = LockDaemon(LockService::open(Arc::new(MemStore::new(CFS))).unwrap());
        let long = format!("/{}", "d/".repeat(canopy_proto::path::NS_PATH_MAX));
        let bad = [
            (Intent::Mkdir { path: long.clone() }, Errno::ENAMETOOLONG),
            (Intent::Rename { src: "/a".into(), dst: "relative".into() }, Errno::EINVAL),
            (Intent::RenameOver { src: "/a\0b".into(), dst: "/b".into(), replaced: 1 }, Errno::EINVAL),
        ];
        for (intent, errno) in &bad {
            let lock = Request::Lock { locks: vec![("/a".into(), LockMode::Write)], intent: intent.clone(), lease_ms: 100, wait_ms: 0 };
            assert_eq!(call(&d, lock).await, Err(*errno), "{intent}");
        }
        assert!(d.0.transactions().is_empty(), "nothing locked or recorded");
        let Ok(Reply::Locked { txn, ticket, .. }) = call(&d, lock_req("/a", 100)).await else { panic!("not granted") };
        for (intent, errno) in bad {
            assert_eq!(call(&d, Request::Amend { txn, ticket, intent: intent.clone() }).await, Err(errno), "{intent}");
        }
        let Ok(Reply::Txns(open)) = call(&d, Request::ListTxns).await else { panic!() };
        assert_eq!(open[0].intent, Intent::Mkdir { path: "/a".into() }, "the recorded intent unchanged");
    }

    /// An amended intent is what a restarted service and a recoverer are
    /// handed; only the holder may amend, and only while its lease is live.
    #[tokio::test]
    async fn an_amended_intent_is_kept_and_handed_over() {
        let clock = ManualClock::new();
        let store: canopy_store::SharedStore = Arc::new(MemStore::new(CFS));
        let d = LockDaemon(LockService::open_with_clock(store.clone(), clock.clone()).unwrap());
        let Ok(Reply::Locked { txn, ticket, .. }) = call(&d, lock_req("/a", 100)).await else { panic!("not granted") };
        let over = Intent::RenameOver { src: "/a".into(), dst: "/b".into(), replaced: 77 };
        let amend = |ticket| Request::Amend { txn, ticket, intent: over.clone() };
        assert_eq!(call(&d, amend(ticket ^ 1)).await, Err(Errno::EPERM), "another's ticket");
        assert_eq!(call(&d, Request::Amend { txn: txn + 9, ticket, intent: over.clone() }).await, Err(Errno::ESTALE), "unknown");
        assert_eq!(call(&d, amend(ticket)).await, Ok(Reply::Unit));
        let Ok(Reply::Txns(open)) = call(&d, Request::ListTxns).await else { panic!() };
        assert_eq!(open[0].intent, over);
        // A restarted service reads the amended record.
        drop(d);
        let d = LockDaemon(LockService::open_with_clock(store, clock.clone()).unwrap());
        clock.advance(150);
        assert_eq!(call(&d, amend(ticket)).await, Err(Errno::ESTALE), "its lease ran out");
        let Ok(Reply::Recover { was, intent, .. }) = call(&d, lock_req("/a", 100)).await else { panic!("not handed over") };
        assert_eq!((was, intent), (txn, over));
    }

    /// A store of layout 2 opens and its records are kept (they decode as
    /// layout 3's); a record that does not decode refuses the open instead
    /// of being skipped, and so does a layout this program does not read.
    #[test]
    fn an_older_store_is_upgraded_and_an_unreadable_record_refused() {
        let layout = |store: &MemStore, v: u32| {
            let mut b = Batch::new();
            b.put(META, canopy_store::LAYOUT_KEY.to_vec(), v.to_be_bytes().to_vec());
            store.write(b).unwrap();
        };
        let store = Arc::new(MemStore::new(CFS));
        layout(&store, 2);
        let rec = TxnRecord { intent: Intent::Mkdir { path: "/a".into() }, locks: vec![("/a".into(), LockMode::Write)], lease_ms: 100, origin: 7, ticket: 9 };
        let mut b = Batch::new();
        put_record(&mut b, 7, &rec);
        store.write(b).unwrap();
        let svc = LockService::open(store.clone()).unwrap();
        assert_eq!(svc.transactions().iter().map(|t| t.txn).collect::<Vec<_>>(), vec![7]);
        assert_eq!(store.get(META, canopy_store::LAYOUT_KEY).unwrap(), Some(LAYOUT_VERSION.to_be_bytes().to_vec()));

        let mut b = Batch::new();
        b.put(TXNS, 8u64.to_be_bytes().to_vec(), vec![0xff; 3]);
        store.write(b).unwrap();
        let Err(e) = LockService::open(store.clone()) else { panic!("an unreadable record was skipped") };
        assert!(e.contains("cannot read"), "{e}");

        let old = Arc::new(MemStore::new(CFS));
        layout(&old, 1);
        let mut b = Batch::new();
        put_record(&mut b, 7, &rec);
        old.write(b).unwrap();
        assert!(LockService::open(old).is_err(), "layout 1 is not read");
    }
}
