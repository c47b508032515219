//! Fences: subtrees a non-monotonic transaction (rmdir, a removing chmod, a
//! directory rename) has fenced off while it runs, so a single-RPC operation
//! below one answers `EAGAIN` and the client retries it under locks, which waits
//! for the transaction to end. In memory: before it serves, a server that
//! starts fences again the paths of the transactions open at the lock service
//! whose kind fences, under their original ids (`Mode::open_transactions`),
//! so a restart loses none that may matter.
//!
//! A fence, once up, also waits for the operations admitted before it to end:
//! when it answers, nothing below it is being changed (a check that follows,
//! such as "does anything below this directory live here", stays true).
//!
//! The transactions recovery has revoked here (`revoked.rs` keeps them
//! durably) are kept beside the fences, under the same lock: a `Fence` of a
//! revoked transaction is refused, so none goes up after recovery has read
//! what the transaction left.

use crate::core::Core;
use crate::revoked::Revoked;
use canopy_proto::path::NsPath;
use canopy_proto::{Errno, Reply};
use parking_lot::{RwLock, RwLockReadGuard};
use std::sync::atomic::{AtomicUsize, Ordering};

#[derive(Default)]
pub(crate) struct Fences {
    by_txn: RwLock<Vec<(u64, NsPath)>>,
    /// How many fences there are, read without the lock on every request.
    count: AtomicUsize,
    /// Held shared by each admitted operation while it runs; a new fence
    /// takes it once exclusively, to wait for those admitted before it.
    running: RwLock<()>,
    /// Revoked transactions, changed only while `by_txn` is held for
    /// writing.
    revoked: Revoked,
}

impl Fences {
    /// No fence up; `revoked` revoked.
    pub(crate) fn with_revoked(revoked: Revoked) -> Fences {
        Fences { revoked, ..Fences::default() }
    }

    /// Held by an operation from before its admission until it ends.
    pub(crate) fn running(&self) -> RwLockReadGuard<'_, ()> {
        self.running.read()
    }

    pub(crate) fn any(&self) -> bool {
        self.count.load(Ordering::Acquire) > 0
    }

    /// `EAGAIN` if `path` is within a fenced subtree.
    pub(crate) fn admit(&self, path: &NsPath) -> Result<(), Errno> {
        if self.by_txn.read().iter().any(|(_, f)| path.is_within(f)) {
            return Err(Errno::EAGAIN);
        }
        Ok(())
    }

    /// A transaction's step puts up its fences: refused `ESTALE` once the
    /// transaction is revoked.
    pub(crate) fn fence(&self, txn: u64, paths: &[String]) -> Result<Reply, Errno> {
        self.put_up(txn, paths, true)
    }

    /// A start fences again what an open transaction may have fenced before
    /// it, revoked or not: its recovery lifts them.
    pub(crate) fn fence_again(&self, txn: u64, paths: &[String]) -> Result<Reply, Errno> {
        self.put_up(txn, paths, false)
    }

    fn put_up(&self, txn: u64, paths: &[String], unless_revoked: bool) -> Result<Reply, Errno> {
        let parsed = paths.iter().map(|p| NsPath::parse(p)).collect::<Result<Vec<_>, _>>()?;
        let mut fences = self.by_txn.write();
        if unless_revoked && self.revoked.contains(txn) {
            return Err(Errno::ESTALE);
        }
        for p in parsed {
            if !fences.iter().any(|(t, f)| *t == txn && *f == p) {
                fences.push((txn, p));
            }
        }
        self.count.store(fences.len(), Ordering::Release);
        drop(fences);
        // Every operation admitted before the fence went up has ended.
        drop(self.running.write());
        Ok(Reply::Unit)
    }

    pub(crate) fn unfence(&self, txn: u64) {
        self.lift(|t, _| t == txn);
    }

    /// Lifts every fence that covers `path` (stale ones: see
    /// `Request::ClearFences`); answers the transactions whose fences it lifted.
    pub(crate) fn clear_covering(&self, path: &NsPath) -> Vec<u64> {
        self.lift(|_, f| path.is_within(f))
    }

    /// The transactions with a fence up here that covers `path`.
    pub(crate) fn covering(&self, path: &NsPath) -> Vec<u64> {
        let mut txns: Vec<u64> = self.by_txn.read().iter().filter(|(_, f)| path.is_within(f)).map(|(t, _)| *t).collect();
        txns.dedup();
        txns
    }

    /// Whether transaction `txn` has a fence up here.
    pub(crate) fn is_up(&self, txn: u64) -> bool {
        self.by_txn.read().iter().any(|(t, _)| *t == txn)
    }

    /// `ESTALE` if transaction `txn` is revoked here (`Revoked::refuse`).
    pub(crate) fn refuse_revoked(&self, txn: Option<u64>) -> Result<(), Errno> {
        self.revoked.refuse(txn, Errno::ESTALE)
    }

    /// Revokes `txn` (durably: `crate::revoked`).
    pub(crate) fn revoke(&self, core: &Core, txn: u64) -> Result<(), Errno> {
        let _fences = self.by_txn.write();
        self.revoked.add(core, txn)
    }

    fn lift(&self, which: impl Fn(u64, &NsPath) -> bool) -> Vec<u64> {
        let mut fences = self.by_txn.write();
        let mut lifted = Vec::new();
        fences.retain(|(t, f)| {
            let lift = which(*t, f);
            if lift && !lifted.contains(t) {
                lifted.push(*t);
            }
            !lift
        });
        self.count.store(fences.len(), Ordering::Release);
        lifted
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fence_covers_its_subtree_until_its_transaction_unfences() {
        let f = Fences::default();
        let p = |s: &str| NsPath::parse(s).unwrap();
        assert!(!f.any());
        f.fence(7, &["/a".into()]).unwrap();
        f.fence(7, &["/a".into()]).unwrap();
        assert!(f.any());
        assert_eq!(f.admit(&p("/a/b")), Err(Errno::EAGAIN));
        assert_eq!(f.admit(&p("/a")), Err(Errno::EAGAIN));
        assert_eq!(f.admit(&p("/ab")), Ok(()));
        f.unfence(8);
        assert!(f.any());
        assert!(f.is_up(7));
        f.unfence(7);
        assert!(!f.is_up(7));
        assert!(!f.any());
        assert_eq!(f.admit(&p("/a/b")), Ok(()));
        assert_eq!(f.fence(9, &["rel".into()]), Err(Errno::EINVAL));
    }

    #[test]
    fn a_revoked_transaction_puts_up_no_fence_but_at_a_start() {
        let f = Fences::with_revoked(Revoked::of([5]));
        f.fence(4, &["/a".into()]).unwrap();
        assert_eq!(f.fence(5, &["/b".into()]), Err(Errno::ESTALE));
        assert!(!f.is_up(5));
        f.fence_again(5, &["/b".into()]).unwrap();
        assert!(f.is_up(5));
        assert_eq!(f.fence(6, &["/c".into()]), Ok(Reply::Unit));
        assert_eq!(f.refuse_revoked(Some(4)), Ok(()));
        assert_eq!(f.refuse_revoked(Some(5)), Err(Errno::ESTALE));
        assert_eq!(f.refuse_revoked(None), Ok(()));
    }

    #[test]
    fn clearing_a_path_lifts_the_fences_above_it_only() {
        let f = Fences::default();
        let p = |s: &str| NsPath::parse(s).unwrap();
        f.fence(1, &["/a".into()]).unwrap();
        f.fence(2, &["/a/b".into(), "/c".into()]).unwrap();
        f.fence(3, &["/a/b/c/d".into()]).unwrap();
        assert_eq!(f.clear_covering(&p("/a/b/c")), vec![1, 2]);
        assert_eq!(f.admit(&p("/a/x")), Ok(()));
        assert_eq!(f.admit(&p("/c")), Err(Errno::EAGAIN), "the other path of a cleared transaction");
        assert_eq!(f.admit(&p("/a/b/c/d")), Err(Errno::EAGAIN), "a fence below the path");
    }

    #[test]
    fn a_fence_waits_for_the_operations_admitted_before_it() {
        let f = std::sync::Arc::new(Fences::default());
        let admitted = f.running();
        let up = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let fencer = {
            let (f, up) = (f.clone(), up.clone());
            std::thread::spawn(move || {
                f.fence(3, &["/a".into()]).unwrap();
                up.store(true, Ordering::Release);
            })
        };
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert!(!up.load(Ordering::Acquire), "the fence answered while an operation admitted before it ran");
        drop(admitted);
        fencer.join().unwrap();
        assert!(up.load(Ordering::Acquire));
        let later = f.running();
        assert_eq!(f.admit(&NsPath::parse("/a/x").unwrap()), Err(Errno::EAGAIN));
        drop(later);
    }
}
