//! What the mount knows of the processes calling it beyond the request's uid
//! and gid: their supplementary groups, and whether they hold root's file
//! capabilities. FUSE passes only a request's uid, gid and pid; the rest is
//! read from `/proc/PID/status`, which costs a file read per request, so it is
//! kept per (pid, uid, gid) for [`GROUPS_LIFETIME`].
//!
//! What that trades: for up to the lifetime after a process changes its
//! groups (setgroups(2)) or capabilities, the servers see its old ones (a
//! group it just joined may not count yet: `EACCES` where it would pass), and
//! a new thread that reuses an id within it, with the same uid and gid, is
//! taken for its predecessor. With `default_permissions` (on with
//! `allow_other`) the kernel checks every access with the process's current
//! groups and capabilities before the mount sees it, so a group or capability
//! dropped never passes; without it (a mount only its owner may use), for up
//! to the lifetime it may.

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

/// What a calling process's status says.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Process {
    pub groups: Vec<u32>,
    /// All of root's powers over files are effective: `CAP_CHOWN`,
    /// `CAP_DAC_OVERRIDE`, `CAP_DAC_READ_SEARCH`, `CAP_FOWNER`, `CAP_FSETID`
    /// (in the mount's user namespace: `convert::process` checks that). The
    /// servers take uid 0 for root; a uid-0 process without these (a service
    /// confined by its capability set) is not.
    pub file_caps: bool,
}

/// The capability bits of [`Process::file_caps`] (capability numbers 0 to 4).
const FILE_CAPS: u64 = 0x1f;

impl Process {
    /// From a /proc status file: the `Groups:` and `CapEff:` lines (an
    /// unreadable one: no groups, no capabilities).
    pub fn parse(status: &str) -> Process {
        let field = |name: &str| status.lines().find_map(|l| l.strip_prefix(name)).map(str::trim);
        let groups = field("Groups:").map(|g| g.split_whitespace().filter_map(|n| n.parse().ok()).collect()).unwrap_or_default();
        let caps = field("CapEff:").and_then(|c| u64::from_str_radix(c, 16).ok()).unwrap_or(0);
        Process { groups, file_caps: caps & FILE_CAPS == FILE_CAPS }
    }
}

#[derive(Default)]
pub struct ProcessCache {
    known: Mutex<HashMap<Key, (Instant, Process)>>,
}

impl ProcessCache {
    /// What process `pid` running as `uid`:`gid` is, from `read` when nothing
    /// fresher than [`GROUPS_LIFETIME`] at `now` is kept.
    pub fn process(&self, pid: u32, uid: u32, gid: u32, now: Instant, read: impl FnOnce() -> Process) -> Process {
        let key = (pid, uid, gid);
        if let Some((at, known)) = self.known.lock().get(&key) {
            if now.saturating_duration_since(*at) < GROUPS_LIFETIME {
                return known.clone();
            }
        }
        let process = read();
        let mut known = self.known.lock();
        if known.len() >= MAX_PROCESSES {
            known.retain(|_, (at, _)| now.saturating_duration_since(*at) < GROUPS_LIFETIME);
            if known.len() >= MAX_PROCESSES {
                known.clear();
            }
        }
        known.insert(key, (now, process.clone()));
        process
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    #[test]
    fn groups_are_read_once_per_process_and_lifetime() {
        let cache = ProcessCache::default();
        let reads = Cell::new(0);
        let read = |g: Vec<u32>| {
            reads.set(reads.get() + 1);
            Process { groups: g, file_caps: false }
        };
        let groups = |p: Process| p.groups;
        let t0 = Instant::now();
        assert_eq!(groups(cache.process(10, 1000, 1000, t0, || read(vec![27]))), vec![27]);
        assert_eq!(groups(cache.process(10, 1000, 1000, t0 + GROUPS_LIFETIME / 2, || read(vec![99]))), vec![27], "kept");
        assert_eq!(reads.get(), 1);
        // Another process, or the same pid as another user: read anew.
        assert_eq!(groups(cache.process(11, 1000, 1000, t0, || read(vec![5]))), vec![5]);
        assert_eq!(groups(cache.process(10, 1001, 1000, t0, || read(vec![6]))), vec![6]);
        assert_eq!(groups(cache.process(10, 1000, 1001, t0, || read(vec![7]))), vec![7]);
        // Past the lifetime: read again.
        assert_eq!(groups(cache.process(10, 1000, 1000, t0 + GROUPS_LIFETIME, || read(vec![99]))), vec![99]);
        assert_eq!(reads.get(), 5);
    }

    #[test]
    fn groups_and_file_capabilities_come_from_the_status_file() {
        let root = "Name:\tx\nUid:\t0\t0\t0\t0\nGroups:\t4 24 1001 \nNgid:\t0\nCapEff:\t000001ffffffffff\n";
        assert_eq!(Process::parse(root), Process { groups: vec![4, 24, 1001], file_caps: true });
        // A service confined to CAP_NET_BIND_SERVICE, and one without CAP_FOWNER.
        assert!(!Process::parse("Groups:\t\nCapEff:\t0000000000000400\n").file_caps);
        assert!(!Process::parse("CapEff:\t0000000000000017\n").file_caps);
        assert_eq!(Process::parse(""), Process::default(), "a process gone: nothing");
    }

    #[test]
    fn the_cache_stays_bounded() {
        let cache = ProcessCache::default();
        let t0 = Instant::now();
        for pid in 0..MAX_PROCESSES as u32 * 3 {
            cache.process(pid, 0, 0, t0, Process::default);
        }
        assert!(cache.known.lock().len() <= MAX_PROCESSES);
    }
}
