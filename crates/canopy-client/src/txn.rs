//! Distributed transactions under the lock service, as any mode runs them: take
//! locks (recovering a dead coordinator's transaction the service hands over),
//! renew the lease during long work, and end the transaction, unlocking it only
//! when its outcome is certain. Also the named [`Step`]s where tests stop or kill
//! a coordinator.

use crate::core::{unexpected, ClientCore};
use crate::namespace::Res;
use canopy_proto::msg::{Intent, LockMode};
use canopy_proto::{Creds, Errno, Reply, Request};
use canopy_rpc::Target;
use futures::future::BoxFuture;
use std::sync::atomic::Ordering;

/// Longest wait asked of the lock service for a grant.
const LOCK_WAIT_MS: u32 = 30_000;

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

/// The first answer among `results` whose outcome is unknown.
pub(crate) fn first_unknown(results: &[(u32, Res<Reply>)]) -> Option<(u32, Errno)> {
    results.iter().find_map(|(i, r)| r.as_ref().err().filter(|e| outcome_unknown(e)).map(|e| (*i, *e)))
}

/// The error of a transaction step that failed after its commit point: the
/// change is decided but not everywhere, so the transaction is left to recovery
/// (EIO). `ESTALE` says another client already took the transaction over.
pub(crate) fn after_commit(what: &str, e: Errno) -> Errno {
    if e == Errno::ESTALE {
        return e;
    }
    eprintln!("canopy-client: {what} committed but did not finish: {e}; left to recovery");
    Errno::EIO
}

/// How a mode repairs a transaction the lock service hands over: it now holds it
/// as `txn`; `was` is the id the dead coordinator's fences carry.
pub(crate) type Recover<'a> = &'a (dyn Fn(Txn, u64, Intent) -> BoxFuture<'a, Res<()>> + Sync);

impl ClientCore {
    /// Reports reaching `step` to the test hook, if any; a hook that kills the
    /// coordinator here makes every later request fail, as a crash would.
    pub(crate) async fn step(&self, step: impl FnOnce() -> Step) -> Res<()> {
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
    /// first.
    pub(crate) async fn lock_with<'a>(&'a self, locks: Vec<(String, LockMode)>, intent: Intent, recover: Recover<'a>) -> Res<Txn> {
        loop {
            if self.is_dead() {
                return Err(Errno::ENOTCONN);
            }
            self.counters.sent_to_lockd();
            let req = Request::Lock { locks: locks.clone(), intent: intent.clone(), lease_ms: self.lease_ms, wait_ms: LOCK_WAIT_MS };
            match self.t.call(Target::Lockd, &Creds::root(), req).await? {
                Reply::Locked { txn, ticket, waited } => {
                    if waited {
                        self.counters.waited_for_lock();
                    }
                    return Ok(Txn { id: txn, ticket });
                }
                Reply::Recover { txn, ticket, was, intent: failed } => {
                    self.counters.recovered();
                    let txn = Txn { id: txn, ticket };
                    recover(txn, was, failed).await?;
                    self.unlock(txn).await;
                }
                other => return Err(unexpected(other)),
            }
        }
    }

    pub(crate) async fn unlock(&self, txn: Txn) {
        if self.is_dead() {
            return;
        }
        self.counters.sent_to_lockd();
        if let Err(e) = self.t.call(Target::Lockd, &Creds::root(), Request::Unlock { txn: txn.id, ticket: txn.ticket }).await {
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
            Err(e) if outcome_unknown(e) => eprintln!("canopy-client: transaction {} left for recovery after {e}", txn.id),
            _ => self.unlock(txn).await,
        }
    }

    /// Extends transaction `txn`'s lease before more long work. ESTALE: the lease
    /// ran out and another client may be recovering it, so stop.
    pub(crate) async fn renew(&self, txn: Txn) -> Res<()> {
        self.counters.sent_to_lockd();
        let req = Request::Renew { txn: txn.id, ticket: txn.ticket, lease_ms: self.lease_ms };
        self.t.call(Target::Lockd, &Creds::root(), req).await.map(|_| ())
    }
}
