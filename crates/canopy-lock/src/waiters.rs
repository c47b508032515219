//! Lock requests that are waiting, in arrival order. A request is granted only
//! when no earlier waiter wants a lock that conflicts with one of its own:
//! otherwise a steady stream of transactions below a directory (each holding a
//! read lock on it) could keep a writer of that directory waiting until it gave
//! up. Pure: no time, no I/O.

use canopy_proto::msg::LockMode;
use std::collections::BTreeMap;

/// A place in the queue; lower came first.
pub type Place = u64;

#[derive(Debug, Default)]
pub struct Waiters {
    next: Place,
    waiting: BTreeMap<Place, Vec<(String, LockMode)>>,
}

impl Waiters {
    /// `locks` starts waiting, behind everyone waiting now.
    pub fn join(&mut self, locks: &[(String, LockMode)]) -> Place {
        let place = self.next;
        self.next += 1;
        self.waiting.insert(place, locks.to_vec());
        place
    }

    pub fn leave(&mut self, place: Place) {
        self.waiting.remove(&place);
    }

    /// Whether a waiter ahead of `place` (ahead of everyone waiting, for a
    /// request not yet waiting) wants a lock conflicting with `locks`.
    pub fn behind_a_conflict(&self, place: Option<Place>, locks: &[(String, LockMode)]) -> bool {
        let ahead = match place {
            Some(p) => self.waiting.range(..p),
            None => self.waiting.range(..),
        };
        ahead.into_iter().any(|(_, theirs)| sets_conflict(theirs, locks))
    }

    pub fn len(&self) -> usize {
        self.waiting.len()
    }

    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }
}

/// Whether two lock sets could not be held at once (the lock table's rule).
pub fn sets_conflict(a: &[(String, LockMode)], b: &[(String, LockMode)]) -> bool {
    a.iter().any(|(pa, ma)| b.iter().any(|(pb, mb)| conflict(pa, *ma, pb, *mb)))
}

/// A lock on a path implies read locks on its ancestors: two locks conflict
/// when they are on one path and either writes, or one path is above the
/// other and the lock on the upper one writes.
fn conflict(pa: &str, ma: LockMode, pb: &str, mb: LockMode) -> bool {
    let writes = |m: LockMode| m == LockMode::Write;
    if pa == pb {
        return writes(ma) || writes(mb);
    }
    (is_above(pa, pb) && writes(ma)) || (is_above(pb, pa) && writes(mb))
}

/// Whether `upper` is a proper ancestor of `path`.
fn is_above(upper: &str, path: &str) -> bool {
    upper == "/" && path != "/" || path.strip_prefix(upper).is_some_and(|rest| rest.starts_with('/'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use LockMode::{Read, Write};

    fn set(locks: &[(&str, LockMode)]) -> Vec<(String, LockMode)> {
        locks.iter().map(|(p, m)| (p.to_string(), *m)).collect()
    }

    #[test]
    fn conflicts_follow_the_lock_tables_rule() {
        assert!(conflict("/a", Write, "/a", Read));
        assert!(!conflict("/a", Read, "/a", Read));
        assert!(conflict("/a", Write, "/a/b/c", Read), "a writer of /a excludes everything below");
        assert!(conflict("/a/b", Read, "/a", Write), "either way round");
        assert!(!conflict("/a", Read, "/a/b", Write), "a reader of /a and a writer below share /a's read lock");
        assert!(!conflict("/a", Write, "/ab", Write), "/ab is not below /a");
        assert!(conflict("/", Write, "/x", Read));
        assert!(!conflict("/a/b", Write, "/a/c", Write));
    }

    #[test]
    fn the_rule_is_the_lock_tables() {
        let paths = ["/", "/a", "/a/b", "/a/b/c", "/ab", "/x"];
        for pa in paths {
            for pb in paths {
                for ma in [Read, Write] {
                    for mb in [Read, Write] {
                        let (a, b) = (set(&[(pa, ma)]), set(&[(pb, mb)]));
                        let mut table = crate::locktable::LockTable::default();
                        assert!(table.try_grant(1, &a, u64::MAX));
                        assert_eq!(sets_conflict(&a, &b), !table.conflicts(&b).is_empty(), "{a:?} {b:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn a_request_waits_behind_an_earlier_conflicting_waiter_only() {
        let mut w = Waiters::default();
        let writer = w.join(&set(&[("/d", Write)]));
        // A newcomer below /d queues behind the writer of /d; one elsewhere does not.
        assert!(w.behind_a_conflict(None, &set(&[("/d/x", Write)])));
        assert!(!w.behind_a_conflict(None, &set(&[("/e/x", Write)])));
        // The writer itself is behind no one.
        assert!(!w.behind_a_conflict(Some(writer), &set(&[("/d", Write)])));
        let later = w.join(&set(&[("/d/y", Read)]));
        assert!(w.behind_a_conflict(Some(later), &set(&[("/d/y", Read)])));
        w.leave(writer);
        assert!(!w.behind_a_conflict(Some(later), &set(&[("/d/y", Read)])));
        assert_eq!(w.len(), 1);
    }
}
