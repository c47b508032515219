//! Directory times under a burst of changes: at most one `TouchDir` per
//! directory per [`TOUCH_WINDOW`].
//!
//! Why: with directory times on, every create, unlink, mkdir or rmdir posts a
//! `TouchDir` to the server of the parent's attributes, so a burst of creates
//! in one directory would wake that server once per create for an update the
//! next one repeats (15% of a 2-thread create's time through a ShardFS
//! mount). So the first change in a quiet directory is posted at once; a
//! change within the window after a touch was sent is owed instead, and the
//! owed touches are sent together at the end of the window by a task on the
//! client's runtime. Every mode's client does this ([`ClientCore::touched`]):
//! ShardFS and Giraffa name a directory by its path, IndexFS by its id.
//!
//! What it trades: a directory's times on its primary lag its last change by
//! at most the window during a burst. This client's own stat of a directory
//! sends the owed touch first (on the same connection, so it is served
//! first): it never sees its own change missing. A rename of a directory
//! named by its path first sends the touches owed for it and below it, which
//! would otherwise go to the old names (an IndexFS id stays with its
//! directory). A touch owed when the client dies is lost, as a posted one in
//! flight is.
//!
//! [`TouchBook`] is the bookkeeping alone (no clock, no I/O), tested below;
//! [`DirTouches`] shares one between a mount's clients and runs the sender.

use crate::core::{post_counted, ClientCore};
use crate::counters::ClientCounters;
use canopy_proto::path::NsPath;
use canopy_proto::msg::{At, DirChange};
use canopy_proto::{Creds, Request};
use canopy_rpc::Transport;
use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// How long after a directory's touch another change's touch waits at most.
/// Well under the mount's 1 s attribute timeout, which other mounts already
/// see a directory's times through. Through the mount, 2 threads, 20,000
/// creates over 100 directories: 10,810 touches sent with 20 ms, 2,713 with
/// 100 ms (40,202 without).
pub const TOUCH_WINDOW: Duration = Duration::from_millis(100);

/// Directories remembered at most; past this, those whose window is over are
/// dropped (a client changing names in many directories, each once, defers
/// nothing and should not grow the table).
const MAX_REMEMBERED: usize = 16 * 1024;

/// A directory whose times a touch sets, as its mode names it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum TouchedDir {
    /// By path (ShardFS, Giraffa): a rename changes it.
    Path(NsPath),
    /// By id (IndexFS): the directory keeps it through renames.
    Id(u64),
}

impl TouchedDir {
    fn at(&self) -> At {
        match self {
            TouchedDir::Path(p) => At::Path(p.to_string()),
            TouchedDir::Id(id) => At::Dir(*id),
        }
    }

    /// Named by a path at or below `dir`.
    fn is_within(&self, dir: &NsPath) -> bool {
        matches!(self, TouchedDir::Path(p) if p.is_within(dir))
    }
}

impl fmt::Display for TouchedDir {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TouchedDir::Path(p) => write!(f, "{p}"),
            TouchedDir::Id(id) => write!(f, "directory {id:#x}"),
        }
    }
}

/// A touch to send: the directory, the server it goes to, who made the last
/// change it covers and when (wall clock, ns: the time the directory's times
/// take, however late the touch is sent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OwedTouch {
    pub dir: TouchedDir,
    pub server: u32,
    pub creds: Creds,
    pub at_ns: i64,
}

/// What to do with a change's touch.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Touch {
    /// Send it now.
    Now,
    /// It is owed; `first` says nothing was owed before (wake the sender).
    Owed { first: bool },
}

struct Touched {
    /// The server the directory's touches go to.
    server: u32,
    /// When a touch for the directory was last sent.
    sent: Instant,
    /// Who made the last change not yet covered by a sent touch, and when.
    owed: Option<(Creds, i64)>,
}

/// Which directories had a touch sent lately, and which are owed one.
pub(crate) struct TouchBook {
    window: Duration,
    dirs: HashMap<TouchedDir, Touched>,
    owed: usize,
}

impl TouchBook {
    pub(crate) fn new(window: Duration) -> TouchBook {
        TouchBook { window, dirs: HashMap::new(), owed: 0 }
    }

    /// `c` changed a name in `dir`, whose touches go to `server`, at `now`
    /// (`at_ns` on the wall clock).
    pub(crate) fn changed(&mut self, dir: &TouchedDir, server: u32, c: &Creds, now: Instant, at_ns: i64) -> Touch {
        if let Some(t) = self.dirs.get_mut(dir) {
            if now.saturating_duration_since(t.sent) < self.window {
                let at_ns = t.owed.as_ref().map_or(at_ns, |(_, owed)| at_ns.max(*owed));
                if t.owed.replace((c.clone(), at_ns)).is_some() {
                    return Touch::Owed { first: false };
                }
                self.owed += 1;
                return Touch::Owed { first: self.owed == 1 };
            }
            // A window over with a touch still owed: this change's touch,
            // sent now, covers it too.
            if t.owed.take().is_some() {
                self.owed -= 1;
            }
            t.sent = now;
            return Touch::Now;
        }
        if self.dirs.len() >= MAX_REMEMBERED {
            self.forget_quiet(now);
        }
        self.dirs.insert(dir.clone(), Touched { server, sent: now, owed: None });
        Touch::Now
    }

    /// The touch owed for `dir`, taken to be sent now (before a stat of it).
    pub(crate) fn take(&mut self, dir: &TouchedDir, now: Instant) -> Option<OwedTouch> {
        let t = self.dirs.get_mut(dir)?;
        let (creds, at_ns) = t.owed.take()?;
        self.owed -= 1;
        t.sent = now;
        Some(OwedTouch { dir: dir.clone(), server: t.server, creds, at_ns })
    }

    /// The touches owed for `dir` and the directories below it, taken to be
    /// sent now (before `dir` is renamed: sent after, they would go to the
    /// old names).
    pub(crate) fn take_below(&mut self, dir: &NsPath, now: Instant) -> Vec<OwedTouch> {
        self.take_where(|d| d.is_within(dir), now)
    }

    /// Every owed touch, taken to be sent now.
    pub(crate) fn take_all(&mut self, now: Instant) -> Vec<OwedTouch> {
        let out = self.take_where(|_| true, now);
        self.forget_quiet(now);
        out
    }

    fn take_where(&mut self, which: impl Fn(&TouchedDir) -> bool, now: Instant) -> Vec<OwedTouch> {
        let mut out = Vec::new();
        for (dir, t) in self.dirs.iter_mut().filter(|(dir, _)| which(dir)) {
            if let Some((creds, at_ns)) = t.owed.take() {
                t.sent = now;
                out.push(OwedTouch { dir: dir.clone(), server: t.server, creds, at_ns });
            }
        }
        self.owed -= out.len();
        out
    }

    pub(crate) fn owed(&self) -> usize {
        self.owed
    }

    /// Drops the directories whose window is over and that owe nothing: a
    /// change there is sent at once anyway.
    fn forget_quiet(&mut self, now: Instant) {
        let window = self.window;
        self.dirs.retain(|_, t| t.owed.is_some() || now.saturating_duration_since(t.sent) < window);
    }
}

/// Counts of a [`DirTouches`]: touches sent as their change was made, changes
/// whose touch was owed, and owed touches sent (each covering one or more).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TouchCounts {
    pub at_once: u64,
    pub owed: u64,
    pub owed_sent: u64,
}

/// A client's (or a mount's clients') touch book, and the task that sends the
/// owed touches through the transport it was started with.
pub struct DirTouches {
    book: Mutex<TouchBook>,
    wake: Arc<Notify>,
    /// Touches sent as their change was made; changes whose touch was owed;
    /// owed touches sent (each covering one or more of those changes).
    at_once: AtomicU64,
    owed: AtomicU64,
    owed_sent: AtomicU64,
}

impl DirTouches {
    /// Coalesces touches, sending the owed ones through `t` from a task on the
    /// current Tokio runtime, each counted in `counters` (those of the client
    /// that starts the book: a mount's clients share their first one's).
    /// `None` (each touch sent at once, none owed) outside a runtime, or on a
    /// current-thread one: its tasks run only while its owner drives it, so an
    /// owed touch could wait for the next call.
    pub(crate) fn start(t: Arc<dyn Transport>, counters: Arc<ClientCounters>) -> Option<Arc<DirTouches>> {
        let rt = tokio::runtime::Handle::try_current().ok()?;
        if rt.runtime_flavor() != tokio::runtime::RuntimeFlavor::MultiThread {
            return None;
        }
        let wake = Arc::new(Notify::new());
        let touches = Arc::new(DirTouches { book: Mutex::new(TouchBook::new(TOUCH_WINDOW)), wake: wake.clone(), at_once: AtomicU64::new(0), owed: AtomicU64::new(0), owed_sent: AtomicU64::new(0) });
        rt.spawn(send_owed(Arc::downgrade(&touches), wake, t, counters));
        Some(touches)
    }

    /// `c` changed a name in `dir`, whose touches go to `server`, at `at_ns`
    /// (wall clock): true if its touch is to be sent now.
    pub(crate) fn changed(&self, dir: &TouchedDir, server: u32, c: &Creds, at_ns: i64) -> bool {
        let touch = self.book().changed(dir, server, c, Instant::now(), at_ns);
        match touch {
            Touch::Now => {
                self.at_once.fetch_add(1, Ordering::Relaxed);
                true
            }
            Touch::Owed { first } => {
                self.owed.fetch_add(1, Ordering::Relaxed);
                if first {
                    self.wake.notify_one();
                }
                false
            }
        }
    }

    /// The touch owed for the directory `dir` names, if one is: the caller
    /// sends it. `dir` is called only if some touch is owed, so a stat pays
    /// for no name when none is (the common case).
    pub(crate) fn take(&self, dir: impl FnOnce() -> TouchedDir) -> Option<OwedTouch> {
        let mut book = self.book();
        if book.owed() == 0 {
            return None;
        }
        let taken = book.take(&dir(), Instant::now());
        if taken.is_some() {
            self.owed_sent.fetch_add(1, Ordering::Relaxed);
        }
        taken
    }

    /// The touches owed for the directories named by a path at or below
    /// `dir`: the caller sends them.
    pub(crate) fn take_below(&self, dir: &NsPath) -> Vec<OwedTouch> {
        let mut book = self.book();
        if book.owed() == 0 {
            return Vec::new();
        }
        let taken = book.take_below(dir, Instant::now());
        self.owed_sent.fetch_add(taken.len() as u64, Ordering::Relaxed);
        taken
    }

    /// What this book did so far.
    pub fn counts(&self) -> TouchCounts {
        TouchCounts {
            at_once: self.at_once.load(Ordering::Relaxed),
            owed: self.owed.load(Ordering::Relaxed),
            owed_sent: self.owed_sent.load(Ordering::Relaxed),
        }
    }

    fn book(&self) -> std::sync::MutexGuard<'_, TouchBook> {
        self.book.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for DirTouches {
    fn drop(&mut self) {
        // The sender holds only a weak reference: woken, it finds it gone and ends.
        self.wake.notify_one();
    }
}

/// Posts a touch (the directory's mtime and ctime set to the time of the
/// change it covers), counted in `counters`: the one way a client sends one,
/// at once or owed.
async fn post_touch(t: &dyn Transport, counters: &ClientCounters, touch: &OwedTouch) {
    let OwedTouch { dir, server, creds, at_ns } = touch;
    let req = Request::TouchDir { at: dir.at(), change: DirChange::Names, at_ns: *at_ns };
    post_counted(t, counters, *server, creds, req, || format!("the times of {dir}")).await;
}

/// The sender: woken when a touch becomes owed, it waits out the window and
/// sends every touch then owed, until nothing is.
async fn send_owed(touches: Weak<DirTouches>, wake: Arc<Notify>, t: Arc<dyn Transport>, counters: Arc<ClientCounters>) {
    loop {
        wake.notified().await;
        loop {
            tokio::time::sleep(TOUCH_WINDOW).await;
            let Some(touches) = touches.upgrade() else { return };
            let due = touches.book().take_all(Instant::now());
            if due.is_empty() {
                break;
            }
            touches.owed_sent.fetch_add(due.len() as u64, Ordering::Relaxed);
            for touch in &due {
                post_touch(t.as_ref(), &counters, touch).await;
            }
        }
        if touches.strong_count() == 0 {
            return;
        }
    }
}

/// A mode's client keeps directory times through these.
impl ClientCore {
    /// `c` added or removed a name in `dir`, whose attributes live on
    /// `server`: posts its touch now, or owes it in a burst. Nothing is waited
    /// for (one round trip less per change; this client's later requests to
    /// `server`, a stat of `dir` among them, are served after it), as a failed
    /// touch would not undo the change.
    pub(crate) async fn touched(&self, c: &Creds, dir: TouchedDir, server: u32) {
        let at_ns = self.clock.wall_ns();
        if !self.dir_times || self.touches.as_ref().is_some_and(|t| !t.changed(&dir, server, c, at_ns)) {
            return;
        }
        self.send_touch(&OwedTouch { dir, server, creds: c.clone(), at_ns }).await;
    }

    /// Directory `dir`, whose times live on `server`, was renamed at this
    /// client's now: posts its new ctime there (for a mode whose rename steps
    /// do not reach that server).
    pub(crate) async fn renamed_dir(&self, c: &Creds, dir: TouchedDir, server: u32) {
        let req = Request::TouchDir { at: dir.at(), change: DirChange::Renamed, at_ns: self.clock.wall_ns() };
        if !self.is_dead() {
            post_counted(self.t.as_ref(), &self.counters, server, c, req, || format!("the ctime of renamed {dir}")).await;
        }
    }

    /// Before a stat of the directory `dir` names: sends the touch owed for
    /// it, if any, so this client sees its own changes in the directory's
    /// times (see [`DirTouches::take`] for why `dir` is a function).
    pub(crate) async fn send_owed_touch(&self, dir: impl FnOnce() -> TouchedDir) {
        if let Some(owed) = self.touches.as_ref().and_then(|t| t.take(dir)) {
            self.send_touch(&owed).await;
        }
    }

    /// Before `dir` is renamed: sends the touches owed for it and the
    /// directories below, which would otherwise go to their old names (to
    /// nothing, or to a directory made there since) once the window is over.
    pub(crate) async fn send_owed_touches_below(&self, dir: &NsPath) {
        for owed in self.touches.as_ref().map(|t| t.take_below(dir)).unwrap_or_default() {
            self.send_touch(&owed).await;
        }
    }

    async fn send_touch(&self, touch: &OwedTouch) {
        // A coordinator a test hook killed sends nothing more (`ClientCore::post`).
        if !self.is_dead() {
            post_touch(self.t.as_ref(), &self.counters, touch).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const W: Duration = Duration::from_millis(20);

    fn p(path: &str) -> NsPath {
        NsPath::parse(path).unwrap()
    }

    fn d(path: &str) -> TouchedDir {
        TouchedDir::Path(p(path))
    }

    fn ms(start: Instant, n: u64) -> Instant {
        start + Duration::from_millis(n)
    }

    #[test]
    fn a_quiet_directory_is_touched_at_once_and_a_burst_owes_one_touch() {
        let (mut b, t0, c) = (TouchBook::new(W), Instant::now(), Creds::root());
        assert_eq!(b.changed(&d("/d"), 0, &c, t0, 0), Touch::Now);
        assert_eq!(b.changed(&d("/d"), 0, &c, ms(t0, 1), 0), Touch::Owed { first: true });
        assert_eq!(b.changed(&d("/d"), 0, &c, ms(t0, 2), 0), Touch::Owed { first: false });
        assert_eq!(b.changed(&d("/e"), 0, &c, ms(t0, 3), 0), Touch::Now);
        assert_eq!(b.changed(&d("/e"), 0, &c, ms(t0, 4), 0), Touch::Owed { first: false });
        assert_eq!(b.owed(), 2);
        let mut due = b.take_all(ms(t0, 20));
        due.sort_by(|a, b| a.dir.cmp(&b.dir));
        assert_eq!(due.iter().map(|o| o.dir.to_string()).collect::<Vec<_>>(), ["/d", "/e"]);
        assert_eq!(b.owed(), 0);
        // Sent at 20 ms: the window runs from then.
        assert_eq!(b.changed(&d("/d"), 0, &c, ms(t0, 39), 0), Touch::Owed { first: true });
        assert_eq!(b.changed(&d("/e"), 0, &c, ms(t0, 40), 0), Touch::Now);
    }

    #[test]
    fn an_owed_touch_carries_the_time_of_the_last_change_it_covers() {
        let (mut b, t0, c) = (TouchBook::new(W), Instant::now(), Creds::root());
        b.changed(&d("/d"), 0, &c, t0, 1_000);
        b.changed(&d("/d"), 0, &c, ms(t0, 1), 2_000);
        b.changed(&d("/d"), 0, &c, ms(t0, 2), 1_500);
        // Sent a whole window after the changes: it still says when they were.
        let owed = b.take_all(ms(t0, 20));
        assert_eq!(owed.iter().map(|o| o.at_ns).collect::<Vec<_>>(), [2_000]);
    }

    #[test]
    fn a_change_after_the_window_sends_its_touch_and_settles_what_was_owed() {
        let (mut b, t0, c) = (TouchBook::new(W), Instant::now(), Creds::root());
        b.changed(&d("/d"), 0, &c, t0, 0);
        b.changed(&d("/d"), 0, &c, ms(t0, 5), 0);
        assert_eq!(b.changed(&d("/d"), 0, &c, ms(t0, 25), 0), Touch::Now);
        assert_eq!(b.owed(), 0);
        assert!(b.take_all(ms(t0, 30)).is_empty());
    }

    #[test]
    fn the_owed_touch_goes_with_the_last_changer_and_is_taken_once() {
        let (mut b, t0) = (TouchBook::new(W), Instant::now());
        let (alice, bob) = (Creds::user(1000, 1000), Creds::user(1001, 1001));
        b.changed(&d("/d"), 0, &alice, t0, 0);
        b.changed(&d("/d"), 0, &alice, ms(t0, 1), 0);
        b.changed(&d("/d"), 0, &bob, ms(t0, 2), 0);
        assert_eq!(b.take(&d("/e"), ms(t0, 3)), None);
        assert_eq!(b.take(&d("/d"), ms(t0, 3)).map(|o| o.creds.uid), Some(1001));
        assert_eq!(b.take(&d("/d"), ms(t0, 4)), None);
        assert_eq!(b.owed(), 0);
        // Taken at 3 ms: a change at 10 ms is within that touch's window.
        assert_eq!(b.changed(&d("/d"), 0, &alice, ms(t0, 10), 0), Touch::Owed { first: true });
    }

    #[test]
    fn a_directory_to_be_renamed_takes_its_own_and_its_descendants_owed_touches() {
        let (mut b, t0, c) = (TouchBook::new(W), Instant::now(), Creds::root());
        for dir in ["/a", "/a/b", "/ab", "/b", "/a/b/c"] {
            b.changed(&d(dir), 0, &c, t0, 0);
            b.changed(&d(dir), 0, &c, ms(t0, 1), 0);
        }
        b.changed(&d("/a/quiet"), 0, &c, t0, 0);
        let mut taken: Vec<String> = b.take_below(&p("/a"), ms(t0, 2)).into_iter().map(|o| o.dir.to_string()).collect();
        taken.sort();
        assert_eq!(taken, ["/a", "/a/b", "/a/b/c"], "not /ab, /b, nor /a/quiet (which owes none)");
        assert_eq!(b.owed(), 2);
        assert!(b.take_below(&p("/a"), ms(t0, 3)).is_empty(), "taken once");
        assert_eq!(b.take_below(&p("/"), ms(t0, 3)).len(), 2, "below the root: the rest");
        assert_eq!(b.owed(), 0);
    }

    #[test]
    fn a_directory_named_by_id_owes_its_touch_to_its_server_and_stays_through_renames() {
        let (mut b, t0, c) = (TouchBook::new(W), Instant::now(), Creds::root());
        let (dir, other) = (TouchedDir::Id(0x42), TouchedDir::Id(0x43));
        b.changed(&dir, 3, &c, t0, 0);
        b.changed(&dir, 3, &c, ms(t0, 1), 0);
        b.changed(&other, 1, &c, t0, 0);
        b.changed(&other, 1, &c, ms(t0, 1), 0);
        assert!(b.take_below(&p("/"), ms(t0, 2)).is_empty(), "an id is no path a rename moves");
        let owed = b.take(&dir, ms(t0, 2)).expect("owed");
        assert_eq!((owed.server, owed.dir.at()), (3, At::Dir(0x42)));
        let rest = b.take_all(ms(t0, 3));
        assert_eq!(rest.iter().map(|o| (o.dir.clone(), o.server)).collect::<Vec<_>>(), [(other, 1)]);
        assert_eq!(d("/x/y").at(), At::Path("/x/y".into()));
    }

    #[test]
    fn touches_are_coalesced_only_where_the_sender_keeps_running() {
        let t = || Arc::new(canopy_rpc::InProcTransport::new(Vec::new(), Arc::new(Refuse))) as Arc<dyn Transport>;
        let counters = || Arc::new(ClientCounters::new(0));
        assert!(DirTouches::start(t(), counters()).is_none(), "outside a runtime");
        let current = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        assert!(current.block_on(async { DirTouches::start(t(), counters()) }).is_none(), "on a current-thread runtime");
        let multi = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        assert!(multi.block_on(async { DirTouches::start(t(), counters()) }).is_some(), "on a multi-threaded runtime");
    }

    #[test]
    fn an_owed_touch_sent_after_its_window_is_counted_as_the_clients_rpc() {
        let touched = Arc::new(CountTouches::default());
        let servers: Vec<Arc<dyn canopy_rpc::Service>> = vec![touched.clone(), touched.clone()];
        let t = Arc::new(canopy_rpc::InProcTransport::new(servers, Arc::new(Refuse))) as Arc<dyn Transport>;
        let counters = Arc::new(ClientCounters::new(2));
        let multi = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let book = multi.block_on(async { DirTouches::start(t, counters.clone()) }).expect("a sender");
        let c = Creds::root();
        assert!(book.changed(&d("/d"), 1, &c, 0), "the first change's touch is the caller's to send");
        assert!(!book.changed(&d("/d"), 1, &c, 0) && !book.changed(&d("/d"), 1, &c, 0), "a burst owes one");
        // Sent by the sender once the window is over: wait for it (generously).
        let deadline = Instant::now() + Duration::from_secs(10);
        while touched.0.load(Ordering::SeqCst) == 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(touched.0.load(Ordering::SeqCst), 1, "one touch covers the burst");
        assert_eq!(book.counts().owed_sent, 1);
        assert_eq!(counters.snapshot().total_rpcs(), 1, "the owed touch counts as an RPC of the client");
    }

    struct Refuse;

    impl canopy_rpc::Service for Refuse {
        fn call(&self, _: &canopy_proto::auth::Identity, _: Creds, _: Request) -> canopy_rpc::Handled {
            canopy_rpc::Handled::Now(Err(canopy_proto::Errno::ENOSYS))
        }
    }

    /// A server that counts the directory touches it is sent.
    #[derive(Default)]
    struct CountTouches(AtomicU64);

    impl canopy_rpc::Service for CountTouches {
        fn call(&self, _: &canopy_proto::auth::Identity, _: Creds, req: Request) -> canopy_rpc::Handled {
            if matches!(req, Request::TouchDir { .. }) {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
            canopy_rpc::Handled::Now(Ok(canopy_proto::Reply::Unit))
        }
    }

    #[test]
    fn directories_changed_once_are_not_kept_past_their_window() {
        let (mut b, t0, c) = (TouchBook::new(W), Instant::now(), Creds::root());
        for i in 0..MAX_REMEMBERED {
            assert_eq!(b.changed(&d(&format!("/d{i}")), 0, &c, t0, 0), Touch::Now);
        }
        b.changed(&d("/d0"), 0, &c, ms(t0, 1), 0);
        assert_eq!(b.changed(&d("/new"), 0, &c, ms(t0, 30), 0), Touch::Now);
        // Only the one that owes a touch, and the new one, are left.
        assert_eq!(b.dirs.len(), 2);
        assert_eq!(b.owed(), 1);
    }
}
