//! What a directory rename freezes on a server while it copies the subtree's
//! rows to their new keys: rows under the subtree's prefixes, and the rows of
//! the renamed directory's two names. A frozen row is not changed (`EAGAIN`;
//! clients retry) so no change lands on a row after it was copied and before
//! the old one is deleted. A freeze lapses after [`FREEZE_MS`] so a dead
//! coordinator cannot hold rows forever (its recovery redoes the copy).
//! Kept durably too (`frozen_store.rs`), so a server restarted mid-rename
//! holds them again for what is left of their lapse.
//!
//! Pure bookkeeping: times are passed in (ms on the server's clock).

use std::collections::HashMap;

/// How long a freeze holds without being thawed.
pub const FREEZE_MS: u64 = 60_000;

#[derive(Default)]
pub(crate) struct Frozen {
    prefixes: HashMap<u64, u64>,
    paths: HashMap<String, u64>,
}

impl Frozen {
    pub(crate) fn freeze(&mut self, prefixes: &[u64], paths: &[String], until: u64) {
        for p in prefixes {
            self.prefixes.insert(*p, until);
        }
        for p in paths {
            self.paths.insert(p.clone(), until);
        }
    }

    pub(crate) fn thaw(&mut self, prefixes: &[u64], paths: &[String]) {
        for p in prefixes {
            self.prefixes.remove(p);
        }
        for p in paths {
            self.paths.remove(p);
        }
    }

    /// Whether the row of `path`, kept under `prefix`, is frozen at `now`.
    pub(crate) fn holds(&self, prefix: u64, path: &str, now: u64) -> bool {
        if self.prefixes.is_empty() && self.paths.is_empty() {
            return false;
        }
        self.prefixes.get(&prefix).is_some_and(|u| *u > now) || self.paths.get(path).is_some_and(|u| *u > now)
    }

}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frozen_rows_are_held_until_thawed_or_lapsed() {
        let mut f = Frozen::default();
        assert!(!f.holds(7, "/a/x", 0));
        f.freeze(&[7], &["/a".to_string()], 1_000);
        assert!(f.holds(7, "/a/x", 10), "a row under a frozen prefix");
        assert!(f.holds(3, "/a", 10), "a frozen directory's own row");
        assert!(!f.holds(8, "/b", 10));
        assert!(!f.holds(7, "/a/x", 1_000), "lapsed");
        f.thaw(&[7], &["/a".to_string()]);
        assert!(!f.holds(7, "/a/x", 10));
        assert!(!f.holds(3, "/a", 10));
    }
}
