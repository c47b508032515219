//! Directory attributes this mount answered lately, kept for the attribute
//! timeout from the moment a server gave them.
//!
//! Why: the kernel drops a directory's cached attributes whenever a name in it
//! changes, and with `default_permissions` it needs them back (a GETATTR)
//! before the next create or unlink in that directory. The mount knows what
//! its own change did to the directory: a file made or removed sets its mtime
//! and ctime to now (the `TouchDir` the client posts gives the server the
//! time the client recorded the change at, microseconds before), and nothing
//! else. So it answers that GETATTR
//! itself, one RPC less per create through the mount.
//!
//! What it trades, the same as the kernel's attribute cache: a change made
//! through another client is seen here up to the attribute timeout after this
//! mount fetched the attributes (never later: an answer from here carries only
//! the time left). A subdirectory made or removed here changes the link count
//! as the server does (where it counts them); a rename drops the entry, so the
//! next GETATTR asks a server.

use canopy_proto::{Attr, FileKind};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Entries kept at most; past that the table starts over (a mount touching
/// more directories than this within a timeout gains little from it).
const MAX_ENTRIES: usize = 64 * 1024;

pub(crate) struct DirAttrs {
    ttl: Duration,
    /// By node id: the attributes and when a server gave them.
    map: HashMap<u64, (Attr, Instant)>,
}

impl DirAttrs {
    pub(crate) fn new(ttl: Duration) -> DirAttrs {
        DirAttrs { ttl, map: HashMap::new() }
    }

    /// A server's answer for `attr`; kept if it is a directory's.
    pub(crate) fn remember(&mut self, attr: &Attr, now: Instant) {
        if attr.kind != FileKind::Dir || self.ttl.is_zero() {
            return;
        }
        if self.map.len() >= MAX_ENTRIES {
            self.map.clear();
        }
        self.map.insert(attr.ino, (attr.clone(), now));
    }

    /// Directory `node`'s attributes and how long they may still be trusted,
    /// if a server gave them less than the timeout ago.
    pub(crate) fn get(&mut self, node: u64, now: Instant) -> Option<(Attr, Duration)> {
        let (attr, at) = self.map.get(&node)?;
        match self.ttl.checked_sub(now.saturating_duration_since(*at)) {
            Some(left) if !left.is_zero() => Some((attr.clone(), left)),
            _ => {
                self.map.remove(&node);
                None
            }
        }
    }

    /// A file was made or removed in directory `node` at `now_ns`: its mtime
    /// and ctime are now that (they never go back).
    pub(crate) fn touched(&mut self, node: u64, now_ns: i64) {
        if let Some((attr, _)) = self.map.get_mut(&node) {
            set_times(attr, now_ns);
        }
    }

    /// A subdirectory was made in (`added`) or removed from directory `node`:
    /// its link count follows where it is counted (2 and up; 1 says "not
    /// counted", as a split IndexFS directory answers, and stays), and with
    /// `now_ns` (directory times kept) its mtime and ctime are now that.
    pub(crate) fn subdir_changed(&mut self, node: u64, added: bool, now_ns: Option<i64>) {
        let Some((attr, _)) = self.map.get_mut(&node) else { return };
        if attr.nlink >= 2 {
            attr.nlink = if added { attr.nlink.saturating_add(1) } else { attr.nlink.saturating_sub(1).max(2) };
        }
        if let Some(now_ns) = now_ns {
            set_times(attr, now_ns);
        }
    }

    /// Whether a server gave `node`'s attributes as a directory's and they are
    /// still kept, however long ago: a hint for a rename, which the servers
    /// check (a wrong one costs a round trip, never a wrong answer).
    pub(crate) fn was_dir(&self, node: u64) -> bool {
        self.map.contains_key(&node)
    }

    /// Directory `node` changed in a way the mount does not work out itself.
    pub(crate) fn forget(&mut self, node: u64) {
        self.map.remove(&node);
    }
}

/// A change at `now_ns`: mtime and ctime move to it, never back.
fn set_times(attr: &mut Attr, now_ns: i64) {
    attr.mtime = attr.mtime.max(now_ns);
    attr.ctime = attr.ctime.max(now_ns);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(ino: u64) -> Attr {
        Attr { ino, kind: FileKind::Dir, mode: 0o755, uid: 1, gid: 1, size: 0, nlink: 2, rdev: 0, atime: 10, mtime: 10, ctime: 10 }
    }

    #[test]
    fn kept_for_the_time_left_of_the_timeout_then_dropped() {
        let t0 = Instant::now();
        let mut c = DirAttrs::new(Duration::from_secs(1));
        c.remember(&dir(5), t0);
        let (a, left) = c.get(5, t0 + Duration::from_millis(300)).unwrap();
        assert_eq!((a, left), (dir(5), Duration::from_millis(700)));
        assert!(c.get(5, t0 + Duration::from_secs(1)).is_none());
        assert!(c.get(5, t0).is_none(), "an expired entry is gone, not revived");
    }

    #[test]
    fn only_directories_and_only_with_a_timeout() {
        let t0 = Instant::now();
        let mut c = DirAttrs::new(Duration::from_secs(1));
        c.remember(&Attr { kind: FileKind::File, ..dir(6) }, t0);
        assert!(c.get(6, t0).is_none());
        let mut off = DirAttrs::new(Duration::ZERO);
        off.remember(&dir(7), t0);
        assert!(off.get(7, t0).is_none());
    }

    #[test]
    fn a_change_sets_the_times_forward_only_and_keeps_the_fetch_time() {
        let t0 = Instant::now();
        let mut c = DirAttrs::new(Duration::from_secs(1));
        c.remember(&dir(5), t0);
        c.touched(5, 50);
        c.touched(5, 20);
        let (a, left) = c.get(5, t0 + Duration::from_millis(900)).unwrap();
        assert_eq!((a.mtime, a.ctime, a.atime, a.nlink), (50, 50, 10, 2));
        assert_eq!(left, Duration::from_millis(100), "a change does not extend the trust");
        c.touched(9, 50);
        assert!(c.get(9, t0).is_none(), "nothing is made up for a directory not held");
        c.forget(5);
        assert!(c.get(5, t0).is_none());
    }

    #[test]
    fn a_subdirectory_counts_where_links_are_counted() {
        let t0 = Instant::now();
        let mut c = DirAttrs::new(Duration::from_secs(1));
        c.remember(&dir(5), t0);
        c.subdir_changed(5, true, Some(40));
        c.subdir_changed(5, true, None);
        let (a, _) = c.get(5, t0).unwrap();
        assert_eq!((a.nlink, a.mtime, a.ctime, a.atime), (4, 40, 40, 10));
        c.subdir_changed(5, false, Some(30));
        c.subdir_changed(5, false, None);
        c.subdir_changed(5, false, None);
        let (a, _) = c.get(5, t0).unwrap();
        assert_eq!((a.nlink, a.mtime), (2, 40), "never below 2, times never back");
        c.remember(&Attr { nlink: 1, ..dir(6) }, t0);
        c.subdir_changed(6, true, Some(50));
        let (a, _) = c.get(6, t0).unwrap();
        assert_eq!((a.nlink, a.mtime), (1, 50), "an uncounted directory stays uncounted");
        c.subdir_changed(9, true, Some(50));
        assert!(c.get(9, t0).is_none());
    }
}
