//! Directories this mount made lately, and the names it has made in them
//! since: a name it has not made in one is absent, for the entry timeout
//! after the mkdir's answer (or after a renewal, below), as far as this
//! mount can tell.
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
//! Renewal: a directory still being filled outlives its first timeout (a
//! benchmark or `rsync` makes the directories first, then the files in them).
//! Once a directory has answered [`RENEW_AFTER`] lookups here and half its
//! time is gone, the mount lists it and stats it as the maker, off the
//! lookup's path. If the listing shows only names made here and the
//! directory is still the maker's and searchable by it, the knowledge is
//! dated from when that listing was sent, as if the mkdir had been answered
//! then: the same trade, counted from a later look. Anything else (another
//! client's name, an error, a changed owner or mode, another directory at
//! the path) forgets the directory. A directory forgotten while its renewal
//! was under way stays forgotten.
//!
//! The names made are kept as keyed 64-bit hashes, not as text: a few bytes
//! each, so a mount building a large tree keeps its directories' knowledge
//! (kept as text, 32K names would be the bound, and a 40,000-file tree's last
//! 7,000 creates would each have their LOOKUP sent to a server). Two names with one
//! hash only ever cost a round trip: a name whose hash is held is asked of a
//! server, never answered absent, and a listed name taken for one made here
//! keeps a directory that, like any, is answered from only up to the entry
//! timeout after its last look. The key is random per mount, so no caller can
//! choose names that collide.
//!
//! Pure bookkeeping, no I/O: tested without a mount.

use std::collections::hash_map::RandomState;
use std::collections::{HashMap, HashSet};
use std::hash::BuildHasher;
use std::time::{Duration, Instant};

/// Directories kept at most; past that the expired ones go, and if that is
/// not enough the table starts over (forgetting only costs round trips).
const MAX_DIRS: usize = 16 * 1024;
/// Names kept per directory at most; past that the directory is forgotten.
pub(crate) const MAX_NAMES: usize = 4 * 1024;
/// Names kept in all at most (their hashes: about 5 MiB); past that the table
/// starts over.
const MAX_ALL_NAMES: usize = 256 * 1024;
/// Lookups a directory answers here before it is worth renewing: a renewal
/// costs a listing (one RPC to every server in ShardFS) and a stat.
const RENEW_AFTER: u32 = 16;

/// Whether a directory owned by `owner` with permission bits `mode` is one
/// whose lookups this mount may answer for `maker`: a server's answer to the
/// maker could otherwise be a rights error, not "absent".
pub(crate) fn maker_may_search(maker: u32, owner: u32, mode: u32) -> bool {
    owner == maker && mode & 0o100 != 0
}

struct Fresh {
    /// When the mkdir's answer came.
    made: Instant,
    /// The uid that made it, the only one answered from here.
    maker: u32,
    /// Names this mount has made (or tried to make) in it since, as
    /// [`FreshDirs::keys`] hashes them.
    names: HashSet<u64>,
    /// Lookups answered absent here since `made`.
    answered: u32,
    /// A renewal is under way (`renewal_due`).
    renewing: bool,
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
    /// This table's key for hashing names: what a name is kept as is
    /// `keys.hash_one(name)`, computed only for a directory held.
    keys: RandomState,
}

impl FreshDirs {
    /// `ttl`: the entry timeout; zero keeps nothing.
    pub(crate) fn new(ttl: Duration) -> FreshDirs {
        FreshDirs { ttl, map: HashMap::new(), names: 0, epoch: 0, keys: RandomState::new() }
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
        if self.ttl.is_zero() || !maker_may_search(maker, owner, mode) || epoch != self.epoch {
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
        self.map.insert(dir, Fresh { made: now, maker, names: HashSet::new(), answered: 0, renewing: false });
    }

    /// Whether `name` in directory `dir` is known absent to `uid`, and for how
    /// much longer: `None` means a server must be asked.
    pub(crate) fn absent(&mut self, dir: u64, name: &str, uid: u32, now: Instant) -> Option<Duration> {
        let fresh = self.map.get_mut(&dir)?;
        let left = self.ttl.checked_sub(now.saturating_duration_since(fresh.made)).filter(|l| !l.is_zero());
        let Some(left) = left else {
            // Kept while a renewal may still date it anew.
            if !fresh.renewing {
                self.forget(dir);
            }
            return None;
        };
        if fresh.maker != uid || fresh.names.contains(&self.keys.hash_one(name)) {
            return None;
        }
        fresh.answered = fresh.answered.saturating_add(1);
        Some(left)
    }

    /// Whether directory `dir` should be renewed now (see the module's doc):
    /// it answered enough lookups and half its time is gone. A true answer
    /// marks the renewal under way; end it with [`FreshDirs::renewed`] or
    /// [`FreshDirs::forget`].
    pub(crate) fn renewal_due(&mut self, dir: u64, now: Instant) -> bool {
        let half = self.ttl / 2;
        let Some(fresh) = self.map.get_mut(&dir) else { return false };
        let due = !fresh.renewing && fresh.answered >= RENEW_AFTER && now.saturating_duration_since(fresh.made) >= half;
        fresh.renewing |= due;
        due
    }

    /// A renewal of directory `dir` sent at `sent` found it owned by `owner`
    /// with permission bits `mode`, holding `names`: dated from `sent` if
    /// nothing there is another client's and its maker may still search it,
    /// else forgotten. Nothing if the directory was forgotten meanwhile.
    pub(crate) fn renewed<'a>(&mut self, dir: u64, owner: u32, mode: u32, names: impl Iterator<Item = &'a str>, sent: Instant) {
        let Some(maker) = self.map.get(&dir).map(|f| f.maker) else { return };
        if !maker_may_search(maker, owner, mode) || self.listed_others(dir, names) {
            return self.forget(dir);
        }
        if let Some(fresh) = self.map.get_mut(&dir) {
            fresh.renewing = false;
            if sent > fresh.made {
                fresh.made = sent;
                fresh.answered = 0;
            }
        }
    }

    /// This mount is about to make `name` in directory `dir`: from now on a
    /// server is asked about it, whether the making succeeds or not.
    pub(crate) fn making(&mut self, dir: u64, name: &str) {
        let Some(fresh) = self.map.get_mut(&dir) else { return };
        if fresh.names.len() >= MAX_NAMES {
            self.forget(dir);
            return;
        }
        if fresh.names.insert(self.keys.hash_one(name)) {
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
    pub(crate) fn listed<'a>(&mut self, dir: u64, names: impl Iterator<Item = &'a str>) {
        if self.listed_others(dir, names) {
            self.forget(dir);
        }
    }

    /// Whether `names`, listed from directory `dir`, hold one this mount has
    /// not made there.
    fn listed_others<'a>(&self, dir: u64, mut names: impl Iterator<Item = &'a str>) -> bool {
        self.map.get(&dir).is_some_and(|fresh| names.any(|name| !fresh.names.contains(&self.keys.hash_one(name))))
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
    fn a_tree_of_a_hundred_thousand_files_is_kept_whole() {
        let t0 = Instant::now();
        let mut f = FreshDirs::new(S);
        for d in 0..250 {
            f.made(d, 1, 1, 0o700, EPOCH, t0);
            for i in 0..400 {
                f.making(d, &format!("f{i}"));
            }
        }
        assert_eq!(f.names, 100_000);
        assert!(f.absent(0, "f400", 1, t0).is_some(), "the first directory is still known");
        assert_eq!(f.absent(0, "f399", 1, t0), None, "with its names");
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

    /// Directory 5 of `table(t0)` after `n` lookups answered absent at `at`.
    fn answer(f: &mut FreshDirs, n: u32, at: Instant) {
        for i in 0..n {
            assert!(f.absent(5, &format!("n{i}"), 1000, at).is_some());
        }
    }

    #[test]
    fn a_busy_directory_is_due_for_renewal_once_half_its_time_is_gone() {
        let t0 = Instant::now();
        let half = t0 + S / 2;
        let mut f = table(t0);
        answer(&mut f, RENEW_AFTER - 1, t0);
        assert!(!f.renewal_due(5, half), "too few lookups answered");
        answer(&mut f, 1, t0);
        assert!(!f.renewal_due(5, half - Duration::from_millis(1)), "too soon");
        assert!(!f.renewal_due(6, half), "not held");
        assert!(f.renewal_due(5, half));
        assert!(!f.renewal_due(5, half), "one renewal at a time");
    }

    #[test]
    fn a_renewal_showing_only_names_made_here_dates_the_knowledge_from_its_sending() {
        let t0 = Instant::now();
        let mut f = table(t0);
        f.making(5, "a");
        answer(&mut f, RENEW_AFTER, t0);
        let sent = t0 + Duration::from_millis(600);
        assert!(f.renewal_due(5, sent));
        // Its answer comes after the first timeout: kept meanwhile, but a
        // server is asked.
        let answered = t0 + Duration::from_millis(1100);
        assert_eq!(f.absent(5, "b", 1000, answered), None);
        f.renewed(5, 1000, 0o700, ["a"].into_iter(), sent);
        assert_eq!(f.absent(5, "b", 1000, answered), Some(Duration::from_millis(500)));
        assert_eq!(f.absent(5, "a", 1000, answered), None, "still asked for the names made here");
        assert!(!f.renewal_due(5, answered), "counted afresh");
        assert_eq!(f.absent(5, "b", 1000, sent + S), None, "expired a timeout after the renewal was sent");
        assert_eq!(f.absent(5, "b", 1000, sent), None, "and gone");
    }

    #[test]
    fn an_expired_directory_with_no_renewal_under_way_is_not_renewed() {
        let t0 = Instant::now();
        let mut f = table(t0);
        answer(&mut f, RENEW_AFTER, t0);
        assert_eq!(f.absent(5, "b", 1000, t0 + S), None);
        f.renewed(5, 1000, 0o700, [].into_iter(), t0 + S);
        assert_eq!(f.absent(5, "b", 1000, t0 + S), None, "forgotten at its expiry");
    }

    #[test]
    fn a_renewal_that_finds_anything_else_forgets_the_directory() {
        let t0 = Instant::now();
        let sent = t0 + S / 2;
        let cases: [(u32, u32, &[&str]); 3] = [(1000, 0o755, &["theirs"]), (1001, 0o755, &[]), (1000, 0o655, &[])];
        for (owner, mode, names) in cases {
            let mut f = table(t0);
            answer(&mut f, RENEW_AFTER, t0);
            assert!(f.renewal_due(5, sent));
            f.renewed(5, owner, mode, names.iter().copied(), sent);
            assert_eq!(f.absent(5, "b", 1000, sent), None, "owner {owner}, mode {mode:o}, names {names:?}");
            assert!(f.map.is_empty());
        }
    }

    #[test]
    fn a_directory_forgotten_while_its_renewal_was_under_way_stays_forgotten() {
        let t0 = Instant::now();
        let sent = t0 + S / 2;
        let mut f = table(t0);
        answer(&mut f, RENEW_AFTER, t0);
        assert!(f.renewal_due(5, sent));
        f.forget_if(|dir, _| dir == 5);
        f.renewed(5, 1000, 0o755, [].into_iter(), sent);
        assert_eq!(f.absent(5, "b", 1000, sent), None);
    }

    #[test]
    fn no_timeout_keeps_nothing() {
        let t0 = Instant::now();
        let mut f = FreshDirs::new(Duration::ZERO);
        f.made(5, 1, 1, 0o700, EPOCH, t0);
        assert_eq!(f.absent(5, "a", 1, t0), None);
    }
}
