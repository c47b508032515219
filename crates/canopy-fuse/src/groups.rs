//! Supplementary groups of the processes calling the mount. FUSE passes only a
//! request's uid, gid and pid; the groups are read from `/proc/PID/status`,
//! which costs a file read per request, so they are kept per (pid, uid, gid)
//! for [`GROUPS_LIFETIME`].
//!
//! What that trades: for up to the lifetime after a process changes its
//! groups (setgroups(2)), the servers see its old ones (a group it just joined
//! may not count yet: `EACCES` where it would pass), and a new thread that
//! reuses an id within it, with the same uid and gid, is sent its
//! predecessor's groups. With `default_permissions` (the default) the kernel
//! checks every access with the process's current groups before the mount
//! sees it, so a group dropped never passes; without it, see the mount's
//! documentation.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How long a process's groups are reused: short, so that a program that
/// changes its groups and then uses the mount at once is seldom refused on
/// the strength of its old ones, and long enough for a busy thread to read
/// its status file a few times a second rather than per request.
pub const GROUPS_LIFETIME: Duration = Duration::from_millis(100);

/// Processes remembered at most; past it, the stale ones are dropped (or all).
const MAX_PROCESSES: usize = 4096;

type Key = (u32, u32, u32);

#[derive(Default)]
pub struct GroupCache {
    known: Mutex<HashMap<Key, (Instant, Vec<u32>)>>,
}

impl GroupCache {
    /// The groups of process `pid` running as `uid`:`gid`, from `read` when
    /// none fresher than [`GROUPS_LIFETIME`] at `now` are kept.
    pub fn groups(&self, pid: u32, uid: u32, gid: u32, now: Instant, read: impl FnOnce() -> Vec<u32>) -> Vec<u32> {
        let key = (pid, uid, gid);
        if let Some((at, groups)) = self.known.lock().get(&key) {
            if now.saturating_duration_since(*at) < GROUPS_LIFETIME {
                return groups.clone();
            }
        }
        let groups = read();
        let mut known = self.known.lock();
        if known.len() >= MAX_PROCESSES {
            known.retain(|_, (at, _)| now.saturating_duration_since(*at) < GROUPS_LIFETIME);
            if known.len() >= MAX_PROCESSES {
                known.clear();
            }
        }
        known.insert(key, (now, groups.clone()));
        groups
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    #[test]
    fn groups_are_read_once_per_process_and_lifetime() {
        let cache = GroupCache::default();
        let reads = Cell::new(0);
        let read = |g: Vec<u32>| {
            reads.set(reads.get() + 1);
            g
        };
        let t0 = Instant::now();
        assert_eq!(cache.groups(10, 1000, 1000, t0, || read(vec![27])), vec![27]);
        assert_eq!(cache.groups(10, 1000, 1000, t0 + GROUPS_LIFETIME / 2, || read(vec![99])), vec![27], "kept");
        assert_eq!(reads.get(), 1);
        // Another process, or the same pid as another user: read anew.
        assert_eq!(cache.groups(11, 1000, 1000, t0, || read(vec![5])), vec![5]);
        assert_eq!(cache.groups(10, 1001, 1000, t0, || read(vec![6])), vec![6]);
        assert_eq!(cache.groups(10, 1000, 1001, t0, || read(vec![7])), vec![7]);
        // Past the lifetime: read again.
        assert_eq!(cache.groups(10, 1000, 1000, t0 + GROUPS_LIFETIME, || read(vec![99])), vec![99]);
        assert_eq!(reads.get(), 5);
    }

    #[test]
    fn the_cache_stays_bounded() {
        let cache = GroupCache::default();
        let t0 = Instant::now();
        for pid in 0..MAX_PROCESSES as u32 * 3 {
            cache.groups(pid, 0, 0, t0, Vec::new);
        }
        assert!(cache.known.lock().len() <= MAX_PROCESSES);
    }
}
