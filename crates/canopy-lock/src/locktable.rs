//! The lock table. A lock names one path and a mode, and implies read locks on
//! every ancestor of that path (seed 000 §3.3: "a write lock on the last component
//! and read locks on its ancestors"), so a request carries one entry per path it
//! changes instead of one per ancestor: its size grows with the path's length,
//! not with the square of its depth.
//!
//! Two locks conflict when one's path is the other's or an ancestor of it and the
//! lock on the upper path is a write lock (or both are on one path and either
//! writes): a write lock on `/a` excludes every lock at or below `/a`, a read lock
//! on `/a/b` excludes writers of `/`, `/a` and `/a/b`.
//!
//! A transaction's whole lock set is granted at once or not at all, so no
//! transaction holds some locks while waiting for others (no deadlock). Time is
//! passed in, never read here.

use canopy_proto::msg::LockMode;
use std::collections::{BTreeMap, HashMap, HashSet};

#[derive(Debug, Default)]
struct PathLock {
    readers: HashSet<u64>,
    writer: Option<u64>,
}

impl PathLock {
    fn holders(&self) -> impl Iterator<Item = u64> + '_ {
        self.writer.into_iter().chain(self.readers.iter().copied())
    }
}

#[derive(Debug, Clone)]
pub struct Held {
    pub locks: Vec<(String, LockMode)>,
    /// Lease expiry, milliseconds on the caller's clock.
    pub expires_at: u64,
}

#[derive(Debug, Default)]
pub struct LockTable {
    /// Ordered, so the locks below a path are one range.
    paths: BTreeMap<String, PathLock>,
    txns: HashMap<u64, Held>,
}

/// `path` and each of its ancestors, the root first: `/`, `/a`, `/a/b` for `/a/b`.
fn self_and_ancestors(path: &str) -> impl Iterator<Item = &str> {
    let cuts = path.match_indices('/').map(|(i, _)| i.max(1)).chain(std::iter::once(path.len()));
    let mut last = 0;
    cuts.filter(move |&i| {
        let new = i != last;
        last = i;
        new
    })
    .map(move |i| &path[..i])
}

/// The range of keys strictly below `path` (`/a/...` for `/a`; everything but `/`
/// for the root). `0` is the byte after `/`.
fn below(path: &str) -> (std::ops::Bound<String>, std::ops::Bound<String>) {
    use std::ops::Bound::{Excluded, Unbounded};
    if path == "/" {
        return (Excluded("/".to_string()), Unbounded);
    }
    (Excluded(format!("{path}/")), Excluded(format!("{path}0")))
}

impl LockTable {
    /// The transactions whose locks conflict with `locks`.
    pub fn conflicts(&self, locks: &[(String, LockMode)]) -> Vec<u64> {
        let mut out = Vec::new();
        for (path, mode) in locks {
            for upper in self_and_ancestors(path) {
                let Some(l) = self.paths.get(upper) else { continue };
                out.extend(l.writer);
                if upper == path && *mode == LockMode::Write {
                    out.extend(l.readers.iter().copied());
                }
            }
            if *mode == LockMode::Write {
                // A lock below `path` holds a read lock on `path` itself.
                out.extend(self.paths.range(below(path)).flat_map(|(_, l)| l.holders()));
            }
        }
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Grants all of `locks` to `txn` if none conflicts; returns whether it did.
    pub fn try_grant(&mut self, txn: u64, locks: &[(String, LockMode)], expires_at: u64) -> bool {
        if self.txns.contains_key(&txn) || !self.conflicts(locks).is_empty() {
            return false;
        }
        for (path, mode) in locks {
            let l = self.paths.entry(path.clone()).or_default();
            match mode {
                LockMode::Read => {
                    l.readers.insert(txn);
                }
                LockMode::Write => l.writer = Some(txn),
            }
        }
        self.txns.insert(txn, Held { locks: locks.to_vec(), expires_at });
        true
    }

    /// Releases everything `txn` holds; false if it held nothing.
    pub fn release(&mut self, txn: u64) -> bool {
        let Some(held) = self.txns.remove(&txn) else { return false };
        for (path, _) in held.locks {
            if let Some(l) = self.paths.get_mut(&path) {
                l.readers.remove(&txn);
                if l.writer == Some(txn) {
                    l.writer = None;
                }
                if l.readers.is_empty() && l.writer.is_none() {
                    self.paths.remove(&path);
                }
            }
        }
        true
    }

    /// Extends `txn`'s lease to `expires_at`; false if it holds nothing.
    pub fn renew(&mut self, txn: u64, expires_at: u64) -> bool {
        match self.txns.get_mut(&txn) {
            Some(h) => {
                h.expires_at = expires_at;
                true
            }
            None => false,
        }
    }

    pub fn expires_at(&self, txn: u64) -> Option<u64> {
        self.txns.get(&txn).map(|h| h.expires_at)
    }

    /// Transactions whose lease ran out by `now`.
    pub fn expired(&self, now: u64) -> Vec<u64> {
        let mut out: Vec<u64> = self.txns.iter().filter(|(_, h)| h.expires_at <= now).map(|(t, _)| *t).collect();
        out.sort_unstable();
        out
    }

    /// The locks transaction `txn` holds (none if it holds none).
    pub fn locks_of(&self, txn: u64) -> Vec<(String, LockMode)> {
        self.txns.get(&txn).map(|h| h.locks.clone()).unwrap_or_default()
    }

    pub fn held(&self) -> impl Iterator<Item = (u64, &Held)> {
        self.txns.iter().map(|(t, h)| (*t, h))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use LockMode::{Read, Write};

    fn l(p: &str, m: LockMode) -> (String, LockMode) {
        (p.to_string(), m)
    }

    #[test]
    fn ancestors_are_listed_root_first() {
        assert_eq!(self_and_ancestors("/").collect::<Vec<_>>(), vec!["/"]);
        assert_eq!(self_and_ancestors("/a/bc/d").collect::<Vec<_>>(), vec!["/", "/a", "/a/bc", "/a/bc/d"]);
    }

    #[test]
    fn a_lock_implies_read_locks_on_its_ancestors() {
        let mut t = LockTable::default();
        assert!(t.try_grant(1, &[l("/a", Write)], 100));
        assert!(t.try_grant(2, &[l("/b", Write)], 100), "siblings are independent");
        assert!(!t.try_grant(3, &[l("/a/x", Write)], 100), "below a written path");
        assert!(!t.try_grant(3, &[l("/a/x", Read)], 100), "reading below a written path");
        assert!(!t.try_grant(3, &[l("/", Write)], 100), "above held paths");
        assert!(t.try_grant(3, &[l("/", Read)], 100), "reading an ancestor of held paths");
        assert_eq!(t.conflicts(&[l("/", Write)]), vec![1, 2, 3]);
        assert!(t.release(1));
        assert!(t.try_grant(4, &[l("/a/x", Write)], 100));
        assert!(!t.release(1), "released twice");
    }

    #[test]
    fn readers_share_and_prefixes_are_not_ancestors() {
        let mut t = LockTable::default();
        assert!(t.try_grant(1, &[l("/a/b", Read)], 100));
        assert!(t.try_grant(2, &[l("/a/b", Read)], 100));
        assert!(t.try_grant(3, &[l("/a/bc", Write)], 100), "/a/bc is not below /a/b");
        assert!(t.try_grant(4, &[l("/a/b-c", Write)], 100), "nor is /a/b-c");
        assert_eq!(t.conflicts(&[l("/a/b", Write)]), vec![1, 2]);
        assert_eq!(t.conflicts(&[l("/a", Write)]), vec![1, 2, 3, 4]);
    }

    #[test]
    fn all_or_nothing() {
        let mut t = LockTable::default();
        assert!(t.try_grant(1, &[l("/b", Write)], 100));
        assert!(!t.try_grant(2, &[l("/a", Write), l("/b", Write)], 100));
        assert!(t.conflicts(&[l("/a", Write)]).is_empty(), "a refused grant holds nothing");
    }

    #[test]
    fn expiry_is_reported() {
        let mut t = LockTable::default();
        t.try_grant(1, &[l("/a", Write)], 50);
        t.try_grant(2, &[l("/b", Write)], 150);
        assert_eq!(t.expired(100), vec![1]);
        t.renew(1, 200);
        assert!(t.expired(100).is_empty());
    }

    /// The same answers as a table that spells out every ancestor's read lock.
    #[test]
    fn matches_explicit_ancestor_locks() {
        let paths = ["/", "/a", "/a/b", "/a/b/c", "/a/bb", "/b", "/b/a"];
        let explicit = |p: &str, m: LockMode| -> Vec<(String, LockMode)> {
            self_and_ancestors(p).map(|q| (q.to_string(), if q == p { m } else { Read })).collect()
        };
        let clash = |a: &[(String, LockMode)], b: &[(String, LockMode)]| {
            a.iter().any(|(p, m)| b.iter().any(|(q, n)| p == q && (*m == Write || *n == Write)))
        };
        for p in paths {
            for q in paths {
                for (m, n) in [(Read, Read), (Read, Write), (Write, Read), (Write, Write)] {
                    let mut t = LockTable::default();
                    t.try_grant(1, &[l(p, m)], 100);
                    let got = !t.conflicts(&[l(q, n)]).is_empty();
                    assert_eq!(got, clash(&explicit(p, m), &explicit(q, n)), "{p} {m:?} vs {q} {n:?}");
                }
            }
        }
    }
}
