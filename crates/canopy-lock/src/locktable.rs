//! The lock table: per path, either readers or one writer. A transaction's whole
//! lock set is granted at once or not at all, so no transaction holds some locks
//! while waiting for others (no deadlock). Time is passed in, never read here.

use canopy_proto::msg::LockMode;
use std::collections::{HashMap, HashSet};

#[derive(Debug, Default)]
struct PathLock {
    readers: HashSet<u64>,
    writer: Option<u64>,
}

#[derive(Debug, Clone)]
pub struct Held {
    pub locks: Vec<(String, LockMode)>,
    /// Lease expiry, milliseconds on the caller's clock.
    pub expires_at: u64,
}

#[derive(Debug, Default)]
pub struct LockTable {
    paths: HashMap<String, PathLock>,
    txns: HashMap<u64, Held>,
}

impl LockTable {
    /// The transactions whose locks conflict with `locks`.
    pub fn conflicts(&self, locks: &[(String, LockMode)]) -> Vec<u64> {
        let mut out = Vec::new();
        for (path, mode) in locks {
            if let Some(l) = self.paths.get(path) {
                out.extend(l.writer);
                if *mode == LockMode::Write {
                    out.extend(l.readers.iter().copied());
                }
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
        self.txns.iter().filter(|(_, h)| h.expires_at <= now).map(|(t, _)| *t).collect()
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
    fn readers_share_writers_exclude() {
        let mut t = LockTable::default();
        assert!(t.try_grant(1, &[l("/", Read), l("/a", Write)], 100));
        assert!(t.try_grant(2, &[l("/", Read), l("/b", Write)], 100));
        assert!(!t.try_grant(3, &[l("/", Read), l("/a", Read), l("/a/x", Write)], 100));
        assert_eq!(t.conflicts(&[l("/", Write)]), vec![1, 2]);
        assert!(t.release(1));
        assert!(t.try_grant(3, &[l("/", Read), l("/a", Read), l("/a/x", Write)], 100));
        assert!(!t.release(1), "released twice");
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
}
