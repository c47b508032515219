//! Directories this mount made lately, and the names it has made in them
//! since: a name it has not made in one is absent, for the entry timeout
//! after the mkdir's answer, as far as this mount can tell.
//!
//! Why: before the kernel makes a name (create, mkdir, mknod, symlink, link)
//! it looks the name up, and a new name's LOOKUP is a round trip to a server
//! that answers "absent". Building a tree (`tar x`, `cp -a`, `mkdir -p`, the
//! benchmark's tree) makes names in directories it has just made. A
//! directory is empty when its mkdir commits, and every name this mount makes
//! in it afterwards passes through here first, so the mount answers those
//! LOOKUPs itself.
//!
//! What it trades, the same as the kernel's negative entries (which the mount
//! already asks for, the entry timeout long): as if this mount had looked up
//! every name in the new directory when the mkdir was answered, a name another
//! client makes there is seen here up to the entry timeout after that, never
//! later (an answer from here carries only the time left). Only the maker's
//! uid gets such answers, and only where the directory lets its owner search
//! it. A rights change this mount makes to a directory (`chmod`, `chown`) or
//! one whose outcome it does not know forgets the fresh directories at and
//! below it, since a lookup below a directory depends on its rights and its
//! ancestors'; a rename forgets those at and below both of its names (a
//! directory moved may take fresh ones where their maker may not search),
//! and records the new name as made in its new parent. A listing from a
//! server that shows a name this mount has not made there (another
//! client's, which must not then be answered absent) forgets the directory.
//! Removing a name changes nothing: an absent name stays absent.
//!
//! Pure bookkeeping, no I/O: tested without a mount.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

/// Directories kept at most; past that the expired ones go, and if that is
/// not enough the table starts over (forgetting only costs round trips).
const MAX_DIRS: usize = 16 * 1024;
/// Names kept per directory at most; past that the directory is forgotten.
const MAX_NAMES: usize = 4 * 1024;
/// Names kept in all at most (a few MiB at the longest names); past that the
/// table starts over.
const MAX_ALL_NAMES: usize = 32 * 1024;

struct Fresh {
    /// When the mkdir's answer came.
    made: Instant,
    /// The uid that made it, the only one answered from here.
    maker: u32,
    /// Names this mount has made (or tried to make) in it since.
    names: HashSet<String>,
}

pub(crate) struct FreshDirs {
    ttl: Duration,
    /// By node id.
    map: HashMap<u64, Fresh>,
    /// The names held in all directories together.
    names: usize,
    /// How many times everything was forgotten: a mkdir that began before
    /// the last time is not kept (`made`).
    epoch: u64,
}

impl FreshDirs {
    /// `ttl`: the entry timeout; zero keeps nothing.
    pub(crate) fn new(ttl: Duration) -> FreshDirs {
        FreshDirs { ttl, map: HashMap::new(), names: 0, epoch: 0 }
    }

    /// What to hand to [`FreshDirs::made`] for a mkdir about to be sent.
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Directory `dir`, owned by `owner` with permission bits `mode`, was
    /// just made by `maker` through this mount (its mkdir answered at `now`,
    /// sent at `epoch`).
    pub(crate) fn made(&mut self, dir: u64, maker: u32, owner: u32, mode: u32, epoch: u64, now: Instant) {
        // The owner must be able to search it, and be who asks: else a
        // server's answer could be a rights error, not "absent". A rights
        // change or rename made while the mkdir was under way may have
        // changed what a lookup below it answers.
        if self.ttl.is_zero() || owner != maker || mode & 0o100 == 0 || epoch != self.epoch {
            return;
        }
        if self.map.len() >= MAX_DIRS {
            let ttl = self.ttl;
            self.map.retain(|_, f| now.saturating_duration_since(f.made) < ttl);
            self.names = self.map.values().map(|f| f.names.len()).sum();
            if self.map.len() >= MAX_DIRS {
                self.forget_all();
            }
        }
        self.forget(dir);
        self.map.insert(dir, Fresh { made: now, maker, names: HashSet::new() });
    }

    /// Whether `name` in directory `dir` is known absent to `uid`, and for how
    /// much longer: `None` means a server must be asked.
    pub(crate) fn absent(&mut self, dir: u64, name: &str, uid: u32, now: Instant) -> Option<Duration> {
        let fresh = self.map.get(&dir)?;
        let left = self.ttl.checked_sub(now.saturating_duration_since(fresh.made)).filter(|l| !l.is_zero());
        let Some(left) = left else {
            self.forget(dir);
            return None;
        };
        (fresh.maker == uid && !fresh.names.contains(name)).then_some(left)
    }

    /// This mount is about to make `name` in directory `dir`: from now on a
    /// server is asked about it, whether the making succeeds or not.
    pub(crate) fn making(&mut self, dir: u64, name: &str) {
        let Some(fresh) = self.map.get_mut(&dir) else { return };
        if fresh.names.len() >= MAX_NAMES {
            self.forget(dir);
            return;
        }
        if fresh.names.insert(name.to_string()) {
            self.names += 1;
        }
        if self.names > MAX_ALL_NAMES {
            self.forget_all();
        }
    }

    /// Directory `dir` was listed from a server, showing `names`: one this
    /// mount has not made there is another client's, which must not then be
    /// answered absent, so the directory is forgotten. A listing of only
    /// names made here is what this mount knows already, and keeps it.
    pub(crate) fn listed<'a>(&mut self, dir: u64, mut names: impl Iterator<Item = &'a str>) {
        let Some(fresh) = self.map.get(&dir) else { return };
        if names.any(|name| !fresh.names.contains(name)) {
            self.forget(dir);
        }
    }

    /// Directory `dir` is gone, or its contents are no longer known.
    pub(crate) fn forget(&mut self, dir: u64) {
        if let Some(fresh) = self.map.remove(&dir) {
            self.names -= fresh.names.len();
        }
    }

    /// Everything: the table is full.
    pub(crate) fn forget_all(&mut self) {
        self.forget_if(|_, _| true);
    }

    /// The directories `changed` picks (by id and maker) were renamed or had
    /// their rights or an ancestor's changed, or may have: a lookup below one
    /// may now answer differently (a rights error), so they are forgotten.
    /// So is any mkdir under way now, whose directory may be below one.
    pub(crate) fn forget_if(&mut self, changed: impl Fn(u64, u32) -> bool) {
        self.map.retain(|dir, fresh| !changed(*dir, fresh.maker));
        self.names = self.map.values().map(|f| f.names.len()).sum();
        self.epoch += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);
    /// The epoch of a table nothing was forgotten from.
    const EPOCH: u64 = 0;

    fn table(t0: Instant) -> FreshDirs {
        let mut f = FreshDirs::new(S);
        f.made(5, 1000, 1000, 0o755, EPOCH, t0);
        f
    }

    #[test]
    fn a_new_directory_holds_no_name_for_the_time_left_of_the_timeout() {
        let t0 = Instant::now();
        let mut f = table(t0);
        assert_eq!(f.absent(5, "a", 1000, t0 + Duration::from_millis(300)), Some(Duration::from_millis(700)));
        assert_eq!(f.absent(5, "a", 1000, t0 + S), None, "expired");
        assert_eq!(f.absent(5, "a", 1000, t0), None, "an expired directory is gone, not revived");
        assert_eq!(f.absent(6, "a", 1000, t0), None, "a directory not made here");
    }

    #[test]
    fn a_name_made_here_is_asked_for_even_if_the_making_failed() {
        let t0 = Instant::now();
        let mut f = table(t0);
        f.making(5, "a");
        assert_eq!(f.absent(5, "a", 1000, t0), None);
        assert!(f.absent(5, "b", 1000, t0).is_some());
        f.making(9, "a");
        assert_eq!(f.absent(9, "a", 1000, t0), None, "nothing is made up for a directory not held");
    }

    #[test]
    fn only_the_maker_and_only_where_the_owner_may_search() {
        let t0 = Instant::now();
        let mut f = table(t0);
        assert_eq!(f.absent(5, "a", 1001, t0), None, "another uid asks a server");
        f.made(6, 1000, 1000, 0o655, EPOCH, t0);
        assert_eq!(f.absent(6, "a", 1000, t0), None, "no search right for the owner");
        f.made(7, 0, 1000, 0o755, EPOCH, t0);
        assert_eq!(f.absent(7, "a", 0, t0), None, "made for another owner");
        assert_eq!(f.absent(7, "a", 1000, t0), None);
    }

    #[test]
    fn a_move_or_rights_change_forgets_the_directories_it_picks_and_any_mkdir_under_way() {
        let t0 = Instant::now();
        let mut f = table(t0);
        f.made(6, 1000, 1000, 0o700, EPOCH, t0);
        f.making(5, "a");
        f.making(6, "b");
        let sent = f.epoch();
        f.forget_if(|dir, maker| dir == 6 && maker == 1000);
        assert!(f.absent(5, "x", 1000, t0).is_some(), "not picked: kept");
        assert_eq!(f.absent(5, "a", 1000, t0), None, "with its names");
        assert_eq!(f.absent(6, "x", 1000, t0), None);
        assert_eq!(f.names, 1, "the forgotten one's names no longer counted");
        f.made(7, 1000, 1000, 0o700, sent, t0);
        assert_eq!(f.absent(7, "x", 1000, t0), None, "made while it was forgetting: maybe below one it picked");
        f.forget_all();
        assert_eq!(f.absent(5, "x", 1000, t0), None);
    }

    #[test]
    fn bounded_in_names_and_in_directories() {
        let t0 = Instant::now();
        let mut f = table(t0);
        for i in 0..MAX_NAMES {
            f.making(5, &i.to_string());
        }
        assert!(f.absent(5, "x", 1000, t0).is_some());
        f.making(5, "one more");
        assert_eq!(f.absent(5, "x", 1000, t0), None, "too many names: forgotten");
        assert_eq!(f.names, 0, "its names no longer counted");

        let mut f = FreshDirs::new(S);
        let per_dir = MAX_NAMES - 1;
        let dirs = MAX_ALL_NAMES / per_dir + 1;
        for d in 0..dirs as u64 {
            let epoch = f.epoch();
            f.made(d, 1, 1, 0o700, epoch, t0);
            for i in 0..per_dir {
                f.making(d, &i.to_string());
            }
        }
        assert!(f.names <= MAX_ALL_NAMES && f.map.len() < dirs, "too many names in all: started over");

        let mut f = FreshDirs::new(S);
        for d in 0..MAX_DIRS as u64 {
            let epoch = f.epoch();
            f.made(d, 1, 1, 0o700, epoch, t0);
        }
        let later = t0 + Duration::from_millis(500);
        f.made(u64::MAX, 1, 1, 0o700, EPOCH, later);
        assert!(f.map.len() <= MAX_DIRS);
        assert!(f.absent(u64::MAX, "x", 1, later).is_some(), "the newest is kept");
        let mut g = FreshDirs::new(S);
        for d in 0..MAX_DIRS as u64 {
            g.made(d, 1, 1, 0o700, EPOCH, t0);
        }
        g.made(u64::MAX, 1, 1, 0o700, EPOCH, t0 + 2 * S);
        assert_eq!(g.map.len(), 1, "the expired ones made room");
    }

    #[test]
    fn a_mkdir_under_way_while_everything_was_forgotten_is_not_kept() {
        let t0 = Instant::now();
        let mut f = FreshDirs::new(S);
        let sent = f.epoch();
        f.forget_all();
        f.made(5, 1, 1, 0o700, sent, t0);
        assert_eq!(f.absent(5, "a", 1, t0), None);
        let sent = f.epoch();
        f.made(5, 1, 1, 0o700, sent, t0);
        assert!(f.absent(5, "a", 1, t0).is_some());
    }

    #[test]
    fn a_listing_showing_another_clients_name_forgets_the_directory() {
        let t0 = Instant::now();
        let mut f = table(t0);
        f.making(5, "a");
        f.listed(5, [].into_iter());
        f.listed(5, ["a"].into_iter());
        assert!(f.absent(5, "b", 1000, t0).is_some(), "only names made here: nothing new");
        f.listed(5, ["a", "b"].into_iter());
        assert_eq!(f.absent(5, "b", 1000, t0), None);
        assert_eq!(f.absent(5, "c", 1000, t0), None, "the whole directory is forgotten");
        assert_eq!(f.names, 0);
    }

    #[test]
    fn no_timeout_keeps_nothing() {
        let t0 = Instant::now();
        let mut f = FreshDirs::new(Duration::ZERO);
        f.made(5, 1, 1, 0o700, EPOCH, t0);
        assert_eq!(f.absent(5, "a", 1, t0), None);
    }
}
