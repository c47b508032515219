//! Distributed transactions under the lock service, as any mode runs them: take
//! locks (recovering a dead coordinator's transaction the service hands over),
//! renew the lease during long work, and end the transaction, unlocking it only
//! when its outcome is certain. Also the named [`Step`]s where tests stop or kill
//! a coordinator.

use crate::core::{unexpected, ClientCore};
use crate::namespace::Res;
use canopy_proto::msg::{Intent, LockMode};
use canopy_proto::{Creds, Errno, Reply, Request};
use canopy_rpc::Daemon;
use futures::future::BoxFuture;
use std::sync::atomic::Ordering;

/// Longest wait asked of the lock service for a grant.
const LOCK_WAIT_MS: u32 = 30_000;

/// How many of the recoveries a lock request is handed may be taken over by
/// other recoverers before the request gives up (`EIO`). Each costs at least
/// a lease (the one that ran out), so a cause that keeps recurring ends the
/// caller's wait rather than holding it for good.
const MAX_TAKEOVERS: u32 = 3;

/// A transaction granted by the lock service: its id (which fences carry) and the
/// ticket that proves ownership to `Renew` and `Unlock`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Txn {
    pub id: u64,
    ticket: u64,
}

/// Named points of a directory transaction, where tests can stop or kill the
/// coordinator. Which server is "primary" is per intent: the path's primary for
/// mkdir, rmdir and setattr; the destination's primary for a rename, whose step
/// there is its commit point.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Locks held and logged, nothing applied.
    Locked(Intent),
    /// The primary applied the change.
    PrimaryDone(Intent),
    /// One non-primary server applied the change; with a hook installed the
    /// replicas are applied one at a time, so a kill here leaves some done and
    /// some not (any partial state of the parallel fan-out).
    ReplicaDone(Intent, u32),
    /// Every non-primary server applied the change (before the primary in
    /// Procedure 2, after it in Procedure 1 and in a directory rename).
    ReplicasDone(Intent),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepAction {
    Continue,
    /// The coordinator dies here: no further RPC, no unlock.
    Die,
}

/// Called at each [`Step`]; the transaction waits for the returned action.
pub trait StepHook: Send + Sync + 'static {
    fn reached(&self, step: Step) -> BoxFuture<'_, StepAction>;
}

/// True when a request may or may not have been applied: its reply was lost (the
/// peer died or did not answer in time), or a transaction step already reported
/// so (EIO). `ECONNREFUSED` is certain: the request was never sent.
pub(crate) fn outcome_unknown(e: &Errno) -> bool {
    matches!(e, Errno::EIO | Errno::ENOTCONN | Errno::ETIMEDOUT)
}

/// Whether a ShardFS transaction step's error leaves the transaction to
/// recovery: its outcome unknown, or refused `ESTALE` because recovery has
/// taken the transaction over there (revoked it, or lifted its fence): the
/// coordinator neither goes on nor undoes anything, since recovery decides
/// from what it read.
pub(crate) fn left_to_recovery(e: &Errno) -> bool {
    outcome_unknown(e) || *e == Errno::ESTALE
}

/// The first answer among `results` that leaves the transaction to recovery
/// ([`left_to_recovery`]).
pub(crate) fn first_unknown(results: &[(u32, Res<Reply>)]) -> Option<(u32, Errno)> {
    results.iter().find_map(|(i, r)| r.as_ref().err().filter(|e| left_to_recovery(e)).map(|e| (*i, *e)))
}

/// What a recovery may read as "not there": `None` only when a server said so
/// (`ENOENT`, or `ENOTDIR` for a path through a file). Any other failure (a
/// server down, a split under way, a lease wait cut short) is passed on, so the
/// transaction stays with the lock service and is recovered again later, not
/// declared done on a guess.
pub(crate) fn unless_absent<T>(r: Res<T>) -> Res<Option<T>> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(Errno::ENOENT | Errno::ENOTDIR) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The inode number in a `RecoveryStat` answer, if a file is there: `None` when
/// the server says none is (`EREMOTE`: a directory, named away from its home).
/// Other failures are passed on, as [`unless_absent`] does.
pub(crate) fn file_ino(r: Res<Reply>) -> Res<Option<u64>> {
    match r {
        Ok(Reply::Attr(a)) => Ok(Some(a.ino)),
        Ok(Reply::Redirect { ino, .. }) => Ok(Some(ino)),
        Ok(_) => Err(Errno::EPROTO),
        Err(Errno::EREMOTE) => Ok(None),
        r => unless_absent(r).map(|_| None),
    }
}

/// The error of a transaction step that failed after its commit point: the
/// change is decided but not everywhere, so the transaction is left to recovery
/// (EIO), never unlocked. So is a lease found lost (`ESTALE`): the lock
/// service answers that both for a transaction another client took over and
/// for one whose lease only ran out, and unlocking the latter would drop the
/// record of a change half made.
pub(crate) fn after_commit(what: &str, e: Errno) -> Errno {
    eprintln!("canopy-client: {what} committed but did not finish: {e}; left to recovery");
    Errno::EIO
}

/// The ids a transaction the lock service hands over was held under.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Handed {
    /// The coordinator's: its fences carry it.
    pub was: u64,
    /// The one whose lease ran out: `was`, or a recoverer's that died in turn
    /// (its migration's steps carry it).
    pub lapsed: u64,
}

impl Handed {
    /// Every id whose late steps recovery must refuse.
    pub fn ids(self) -> impl Iterator<Item = u64> {
        std::iter::once(self.was).chain((self.lapsed != self.was).then_some(self.lapsed))
    }
}

/// A transaction body's outcome as its caller sees it: a step refused
/// `ESTALE` (recovery revoked the transaction, or its lease was found lost)
/// leaves the outcome to recovery, so it is `EIO`, which is neither
/// unlocked nor reported done or refused (not `ESTALE`, which the kernel
/// would retry).
pub(crate) fn stopped_for_recovery<T>(txn: Txn, r: Res<T>) -> Res<T> {
    match r {
        Err(Errno::ESTALE) => {
            eprintln!("canopy-client: transaction {} was taken over by recovery, or its lease ran out; its outcome is recovery's", txn.id);
            Err(Errno::EIO)
        }
        r => r,
    }
}

/// How a mode repairs a transaction the lock service hands over: it now holds it
/// as `txn`, handed from the ids in [`Handed`].
pub(crate) type Recover<'a> = &'a (dyn Fn(Txn, Handed, Intent) -> BoxFuture<'a, Res<()>> + Sync);

impl ClientCore {
    /// Reports reaching `step` of transaction `txn` to the test hook, if any
    /// (a hook that kills the coordinator here makes every later request
    /// fail, as a crash would); then, before the transaction's next request,
    /// makes sure it is still this client's ([`ClientCore::keep_alive`]: no
    /// RPC unless a third of the lease has passed). A coordinator held up
    /// between steps past its lease so stops instead of acting on what a
    /// recoverer may now decide, and leaves the transaction to recovery
    /// (EIO, so it is not unlocked: see [`after_commit`]).
    pub(crate) async fn step(&self, txn: Txn, step: impl FnOnce() -> Step) -> Res<()> {
        self.last_step(step).await?;
        self.keep_alive(txn).await.map_err(|e| {
            eprintln!("canopy-client: transaction {} could not renew its lease between steps ({e}); left to recovery", txn.id);
            Errno::EIO
        })
    }

    /// [`ClientCore::step`] at a transaction's last step, after which it
    /// changes nothing on a server (posts aside, and a migration, which
    /// renews its lease itself): the test hook only, so an operation done
    /// everywhere is not reported failed for a lease lost after it.
    pub(crate) async fn last_step(&self, step: impl FnOnce() -> Step) -> Res<()> {
        if let Some(h) = &self.hook {
            if h.reached(step()).await == StepAction::Die {
                self.dead.store(true, Ordering::Release);
                return Err(Errno::ENOTCONN);
            }
        }
        Ok(())
    }

    /// Takes `locks` for a transaction doing `intent`. When the lock service hands
    /// over a conflicting transaction whose coordinator died, `recover` repairs it
    /// first. A recovery refused `ESTALE` whose lease this client no longer
    /// holds was taken over by another recoverer: the locks are asked for
    /// again, behind it (at most [`MAX_TAKEOVERS`] times, then `EIO`), since
    /// that error says nothing of the caller's paths.
    pub(crate) async fn lock_with<'a>(&'a self, locks: Vec<(String, LockMode)>, intent: Intent, recover: Recover<'a>) -> Res<Txn> {
        let mut taken_over = 0;
        loop {
            if self.is_dead() {
                return Err(Errno::ENOTCONN);
            }
            self.counters.sent_to_lockd();
            let req = Request::Lock { locks: locks.clone(), intent: intent.clone(), lease_ms: self.lease_ms, wait_ms: LOCK_WAIT_MS };
            let asked = self.clock.now_ms();
            match self.t.call(Daemon::Lockd, &Creds::root(), req).await? {
                Reply::Locked { txn, ticket, waited } => {
                    if waited {
                        self.counters.waited_for_lock();
                    }
                    self.lease_granted(txn, asked);
                    return Ok(Txn { id: txn, ticket });
                }
                Reply::Recover { txn, ticket, was, lapsed, intent: failed } => {
                    let txn = Txn { id: txn, ticket };
                    self.lease_granted(txn.id, asked);
                    match recover(txn, Handed { was, lapsed }, failed).await {
                        Ok(()) => {
                            self.counters.recovered();
                            self.unlock(txn).await;
                        }
                        Err(Errno::ESTALE) if taken_over < MAX_TAKEOVERS && self.lost_to_another(txn).await => {
                            // Another recoverer took it over (this one's lease
                            // ran out, or it was revoked): it is theirs to
                            // finish and unlock, and the caller's own work has
                            // not begun, so ask again, behind them.
                            self.forget_lease(txn.id);
                            taken_over += 1;
                            eprintln!("canopy-client: the recovery of transaction {} was taken over by another; asking for the locks again", txn.id);
                        }
                        // Not about the caller's paths: the transaction stays
                        // with the lock service for the next recoverer, and a
                        // stale answer this recovery met while it still held
                        // the lease (now cut short) is not asked again: it
                        // would meet it again.
                        Err(e) => {
                            self.forget_lease(txn.id);
                            return Err(if e == Errno::ESTALE { Errno::EIO } else { e });
                        }
                    }
                }
                other => return Err(unexpected(other)),
            }
        }
    }

    /// Whether this client's lease on `txn`, a recovery it is giving up,
    /// had run out (another recoverer may hold it): it asks the lock service
    /// to cut the lease to 1 ms, which is refused `ESTALE` if it already ran
    /// out. A lease it still held so ends at once, and the next conflicting
    /// request or sweep recovers the transaction without waiting it out. Any
    /// other failure (the lock service unreachable) answers `false`, so the
    /// caller does not take it for a takeover and ask again.
    async fn lost_to_another(&self, txn: Txn) -> bool {
        if self.is_dead() {
            return false;
        }
        self.counters.sent_to_lockd();
        let req = Request::Renew { txn: txn.id, ticket: txn.ticket, lease_ms: 1 };
        matches!(self.t.call(Daemon::Lockd, &Creds::root(), req).await, Err(Errno::ESTALE))
    }

    /// Replaces `txn`'s intent at the lock service with `intent`, which says
    /// more of what it does (learnt under its locks), before the step that
    /// needs it: a recoverer is handed this one. ESTALE: the lease ran out
    /// and the transaction may be in a recoverer's hands, so stop.
    pub(crate) async fn amend(&self, txn: Txn, intent: Intent) -> Res<()> {
        if self.is_dead() {
            return Err(Errno::ENOTCONN);
        }
        self.counters.sent_to_lockd();
        match self.t.call(Daemon::Lockd, &Creds::root(), Request::Amend { txn: txn.id, ticket: txn.ticket, intent }).await? {
            Reply::Unit => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    /// Unlocks `txn` without waiting for the lock service's answer (one round
    /// trip less per directory mutation), perhaps a little late: where the
    /// transport owes posts (a mount), it goes with this client's next request
    /// to the lock service or within a few milliseconds
    /// (`Transport::post_soon`). This client's later lock requests are served
    /// after it. A conflicting transaction of another client is granted as
    /// soon as the service reads it. An unlock lost with
    /// its connection, or refused (a lease that ran out), is what a dead
    /// coordinator leaves: the lease expires and recovery decides from what
    /// the servers hold, which is the complete transaction.
    pub(crate) async fn unlock(&self, txn: Txn) {
        self.forget_lease(txn.id);
        if self.is_dead() {
            return;
        }
        self.counters.sent_to_lockd();
        if let Err(e) = self.t.post_soon(Daemon::Lockd, &Creds::root(), Request::Unlock { txn: txn.id, ticket: txn.ticket }).await {
            eprintln!("canopy-client: unlock of transaction {} failed: {e}; its lease will expire", txn.id);
        }
    }

    /// Ends transaction `txn`: unlocks it when its outcome is certain (done, or
    /// refused, or failed before anything was sent, or fully rolled back). When it
    /// is not ([`outcome_unknown`]: a server may or may not have applied a step),
    /// its locks and record stay: the lock service's sweep, or the next
    /// conflicting client, recovers it from what the servers durably hold.
    pub(crate) async fn finish<T>(&self, txn: Txn, r: &Res<T>) {
        match r {
            Err(e) if outcome_unknown(e) => {
                self.forget_lease(txn.id);
                eprintln!("canopy-client: transaction {} left for recovery after {e}", txn.id)
            }
            _ => self.unlock(txn).await,
        }
    }

    /// Before more long work under transaction `txn`: renews its lease once a
    /// third of it has passed since it was granted or last renewed (by this
    /// client's clock), so a renewal is always well ahead of expiry and a fast
    /// job sends none. ESTALE: the lease ran out and another client may be
    /// recovering it, so stop.
    pub(crate) async fn keep_alive(&self, txn: Txn) -> Res<()> {
        let now = self.clock.now_ms();
        let due = match self.renewed.lock().unwrap_or_else(|p| p.into_inner()).get(&txn.id) {
            Some(at) => now.saturating_sub(*at) >= renew_after_ms(self.lease_ms),
            None => true,
        };
        if !due {
            return Ok(());
        }
        self.counters.sent_to_lockd();
        let req = Request::Renew { txn: txn.id, ticket: txn.ticket, lease_ms: self.lease_ms };
        self.t.call(Daemon::Lockd, &Creds::root(), req).await?;
        self.lease_granted(txn.id, now);
        Ok(())
    }

    /// Records that `txn`'s lease runs from no earlier than `asked` (when the
    /// request that granted it was sent).
    fn lease_granted(&self, txn: u64, asked: u64) {
        self.renewed.lock().unwrap_or_else(|p| p.into_inner()).insert(txn, asked);
    }

    fn forget_lease(&self, txn: u64) {
        self.renewed.lock().unwrap_or_else(|p| p.into_inner()).remove(&txn);
    }
}

/// How long after a grant a lease of `lease_ms` is renewed.
fn renew_after_ms(lease_ms: u32) -> u64 {
    lease_ms as u64 / 3
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::{ClientCore, NsOptions};
    use canopy_proto::clock::ManualClock;
    use canopy_rpc::RpcResult;
    use futures::future::BoxFuture;
    use std::sync::atomic::AtomicU32;
    use std::sync::Arc;

    /// A lock service that grants every lock and counts renewals.
    #[derive(Default)]
    struct Lockd {
        renews: AtomicU32,
    }

    impl canopy_rpc::Transport for Lockd {
        fn servers(&self) -> u32 {
            1
        }

        fn call<'a>(&'a self, _: Daemon, _: &'a Creds, req: Request) -> BoxFuture<'a, RpcResult> {
            let reply = match req {
                Request::Lock { .. } => Ok(Reply::Locked { txn: 9, ticket: 1, waited: false }),
                Request::Renew { .. } => {
                    self.renews.fetch_add(1, Ordering::SeqCst);
                    Ok(Reply::Unit)
                }
                _ => Ok(Reply::Unit),
            };
            Box::pin(async move { reply })
        }
    }

    #[tokio::test]
    async fn long_work_renews_a_lease_by_the_clients_clock_only_when_due() {
        let lockd = Arc::new(Lockd::default());
        let clock = ManualClock::new();
        let opts = NsOptions { lease_ms: Some(3_000), clock: Some(clock.clone()), ..NsOptions::default() };
        let core = ClientCore::new(lockd.clone(), &opts);
        let recover: Recover<'_> = &|_, _, _| Box::pin(async { Ok(()) });
        let txn = core.lock_with(vec![("/a".into(), LockMode::Write)], Intent::Retry { path: "/a".into() }, recover).await.unwrap();
        let renews = || lockd.renews.load(Ordering::SeqCst);
        core.keep_alive(txn).await.unwrap();
        assert_eq!(renews(), 0, "just granted");
        clock.advance(999);
        core.keep_alive(txn).await.unwrap();
        assert_eq!(renews(), 0, "a third of the lease has not passed");
        clock.advance(1);
        core.keep_alive(txn).await.unwrap();
        assert_eq!(renews(), 1, "due");
        core.keep_alive(txn).await.unwrap();
        assert_eq!(renews(), 1, "the renewal restarted the lease");
        clock.advance(5_000);
        core.keep_alive(txn).await.unwrap();
        assert_eq!(renews(), 2);
        core.unlock(txn).await;
        assert!(core.renewed.lock().unwrap().is_empty(), "an ended transaction is forgotten");
    }
}
