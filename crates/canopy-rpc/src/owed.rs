//! One-way requests a client may send a little late: "owed" posts.
//!
//! An owed post goes out ahead of the next request that any transport sharing
//! its box sends to the same daemon, in the same write, so the daemon serves it
//! first; if no such request comes within [`FLUSH_AFTER`], a flusher sends it
//! ([`crate::transport::TcpTransport::flush_owed`]). A mount's FUSE threads
//! share one box: a directory mutation's closing posts (the replicas'
//! unfences, the unlock) then ride on the next mutation's frames instead of
//! each waking its daemon on its own, which on a machine of few cores costs
//! about as much as the request itself.
//!
//! Only posts whose lateness is harmless are owed: a request that meets a
//! fence whose lift has not come yet clears it under read locks, and a lock
//! request behind an owed unlock waits for it (within the flusher's bound) or
//! carries it itself when it comes from the same box.

use crate::transport::Daemon;
use bytes::BytesMut;
use canopy_proto::{frame, Creds, Errno, Request};
use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// How long an owed post waits for a request to ride on before the flusher
/// sends it on its own. The flusher looks this often while posts are owed,
/// so a post goes out about twice this late at most while its daemon can
/// be reached.
pub const FLUSH_AFTER: Duration = Duration::from_millis(2);

/// The most bytes owed to one daemon: a post past it is sent at once.
const MAX_OWED: usize = 64 * 1024;

/// The frames owed to one daemon: since when the first has waited, and
/// how many posts they are.
struct Slot {
    frames: BytesMut,
    since: Instant,
    posts: u64,
}

/// Owed frames taken out of the box to be sent: put back
/// ([`Owed::put_back`]) if they certainly were not.
#[derive(Debug, PartialEq)]
pub(crate) struct Taken {
    pub(crate) target: Daemon,
    pub(crate) frames: BytesMut,
    posts: u64,
    since: Instant,
}

/// The owed frames per daemon.
#[derive(Default)]
struct Slots(HashMap<Daemon, Slot>);

impl Slots {
    /// Adds `frame` for `target` at `now`, unless that would pass
    /// [`MAX_OWED`] (false: the caller sends it itself).
    fn push(&mut self, target: Daemon, frame: &[u8], now: Instant) -> bool {
        let held = self.0.get(&target).map_or(0, |slot| slot.frames.len());
        if held + frame.len() > MAX_OWED {
            return false;
        }
        let slot = self.0.entry(target).or_insert_with(|| Slot { frames: BytesMut::new(), since: now, posts: 0 });
        slot.frames.extend_from_slice(frame);
        slot.posts += 1;
        true
    }

    fn take(&mut self, target: Daemon) -> Option<Taken> {
        self.0.remove(&target).map(|slot| Taken { target, frames: slot.frames, posts: slot.posts, since: slot.since })
    }

    /// Frames that were taken and not sent go back ahead of those owed
    /// since, and wait from when they first did (a full box keeps them all:
    /// [`MAX_OWED`] bounds what is owed, not what comes back).
    fn put_back(&mut self, taken: Taken) {
        match self.0.get_mut(&taken.target) {
            Some(slot) => {
                let mut frames = taken.frames;
                frames.extend_from_slice(&slot.frames);
                slot.frames = frames;
                slot.posts += taken.posts;
                slot.since = slot.since.min(taken.since);
            }
            None => {
                self.0.insert(taken.target, Slot { frames: taken.frames, since: taken.since, posts: taken.posts });
            }
        }
    }

    /// The frames of every daemon whose oldest has waited `after` by `now`.
    fn take_due(&mut self, now: Instant, after: Duration) -> Vec<Taken> {
        let due: Vec<Daemon> = self.0.iter().filter(|(_, slot)| now.saturating_duration_since(slot.since) >= after).map(|(t, _)| *t).collect();
        due.into_iter().filter_map(|t| self.take(t)).collect()
    }

    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether every daemon anything is owed to is in `busy` (true when
    /// nothing is owed).
    fn only_for(&self, busy: &HashSet<Daemon>) -> bool {
        self.0.keys().all(|t| busy.contains(t))
    }
}

/// How many posts a box took, and how many of them its flusher sent (the
/// others rode on a request, or went when the client stopped).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OwedCounts {
    pub owed: u64,
    pub flushed: u64,
}

/// A box of owed posts, shared by the transports of one client process,
/// which all prove one identity (the frames carry their credentials).
#[derive(Default)]
pub struct Owed {
    slots: Mutex<Slots>,
    /// The flusher waits for a first owed post (rather than looking on a
    /// timer): the next post wakes it.
    idle: AtomicBool,
    came: Notify,
    /// The client stops: the flusher ends after what it is sending.
    stopping: AtomicBool,
    owed: AtomicU64,
    flushed: AtomicU64,
}

impl Owed {
    pub fn new() -> std::sync::Arc<Owed> {
        std::sync::Arc::new(Owed::default())
    }

    /// Owes `req` to `target` as a one-way frame. False: the box is full for
    /// `target`; the caller posts it itself.
    pub(crate) fn owe(&self, target: Daemon, creds: &Creds, req: &Request) -> Result<bool, Errno> {
        let mut frame = BytesMut::new();
        frame::encode_request(&mut frame, frame::ONE_WAY, creds, req)?;
        if !self.slots.lock().push(target, &frame, Instant::now()) {
            return Ok(false);
        }
        self.owed.fetch_add(1, Ordering::Relaxed);
        self.nudge();
        Ok(true)
    }

    /// What is owed to `target`, to go ahead of a request to it.
    pub(crate) fn take(&self, target: Daemon) -> Option<Taken> {
        self.slots.lock().take(target)
    }

    /// Frames taken that were certainly not sent (the request they were to
    /// go with failed before anything was written). Wakes an idle flusher:
    /// a send of its own may put them back after it last looked.
    pub(crate) fn put_back(&self, taken: Taken) {
        self.slots.lock().put_back(taken);
        self.nudge();
    }

    /// Wakes the flusher if it waits ([`Owed::wait_for_some`]): what it
    /// waits for may have changed.
    pub(crate) fn nudge(&self) {
        if self.idle.swap(false, Ordering::AcqRel) {
            self.came.notify_one();
        }
    }

    /// What has waited `after`, for the flusher to send.
    pub(crate) fn take_due(&self, after: Duration) -> Vec<Taken> {
        self.slots.lock().take_due(Instant::now(), after)
    }

    /// The flusher sent `taken`.
    pub(crate) fn flushed(&self, taken: &Taken) {
        self.flushed.fetch_add(taken.posts, Ordering::Relaxed);
    }

    pub fn counts(&self) -> OwedCounts {
        OwedCounts { owed: self.owed.load(Ordering::Relaxed), flushed: self.flushed.load(Ordering::Relaxed) }
    }

    /// Everything owed, for a client that stops.
    pub(crate) fn take_all(&self) -> Vec<Taken> {
        self.slots.lock().take_due(Instant::now(), Duration::ZERO)
    }

    /// Ends the flusher once it has sent what it holds (the client then
    /// sends the rest itself).
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::Release);
        self.came.notify_one();
    }

    pub(crate) fn stopping(&self) -> bool {
        self.stopping.load(Ordering::Acquire)
    }

    /// Ends once something is owed to a daemon not in `busy` (at once if
    /// something is): true, or false if the client stops. Whoever takes a
    /// daemon out of `busy` must [`Owed::nudge`] after.
    pub(crate) async fn wait_for_some(&self, busy: &Mutex<HashSet<Daemon>>) -> bool {
        let came = self.came.notified();
        tokio::pin!(came);
        came.as_mut().enable();
        self.idle.store(true, Ordering::Release);
        if self.only_for(busy) && !self.stopping() {
            came.await;
        }
        self.idle.store(false, Ordering::Release);
        !self.stopping()
    }

    /// Whether every daemon anything is owed to is in `busy`.
    pub(crate) fn only_for(&self, busy: &Mutex<HashSet<Daemon>>) -> bool {
        let busy = busy.lock();
        self.slots.lock().only_for(&busy)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: Daemon = Daemon::Server(0);
    const B: Daemon = Daemon::Lockd;

    #[test]
    fn frames_owed_to_a_daemon_are_taken_together_in_order() {
        let (mut s, t0) = (Slots::default(), Instant::now());
        assert!(s.push(A, b"one", t0));
        assert!(s.push(B, b"x", t0));
        assert!(s.push(A, b"two", t0));
        assert_eq!(s.take(A).map(|t| t.frames).as_deref(), Some(&b"onetwo"[..]));
        assert_eq!(s.take(A), None);
        assert_eq!(s.take(B).map(|t| t.frames).as_deref(), Some(&b"x"[..]));
        assert!(s.is_empty());
    }

    #[test]
    fn only_frames_that_waited_long_enough_are_due() {
        let (mut s, t0) = (Slots::default(), Instant::now());
        let after = Duration::from_millis(2);
        s.push(A, b"old", t0);
        s.push(B, b"new", t0 + Duration::from_millis(1));
        // A later frame to A does not make A's wait start again.
        s.push(A, b"more", t0 + Duration::from_millis(1));
        let due = s.take_due(t0 + after, after);
        assert_eq!(due.len(), 1);
        assert_eq!((due[0].target, due[0].posts), (A, 2));
        assert_eq!(&due[0].frames[..], b"oldmore");
        assert!(s.take_due(t0 + after, after).is_empty());
        let due = s.take_due(t0 + Duration::from_millis(3), after);
        assert_eq!((due.len(), due[0].target, &due[0].frames[..]), (1, B, &b"new"[..]));
        assert!(s.is_empty());
    }

    #[test]
    fn only_daemons_with_a_send_in_flight_may_be_owed_while_the_flusher_sleeps() {
        let (mut s, t0) = (Slots::default(), Instant::now());
        let busy: HashSet<Daemon> = [A].into();
        assert!(s.only_for(&busy), "nothing owed");
        s.push(A, b"a", t0);
        assert!(s.only_for(&busy));
        s.push(B, b"b", t0);
        assert!(!s.only_for(&busy));
        assert!(!s.only_for(&HashSet::new()));
    }

    #[test]
    fn a_full_box_refuses_and_keeps_what_it_holds() {
        let (mut s, t0) = (Slots::default(), Instant::now());
        let big = vec![7u8; MAX_OWED - 1];
        assert!(s.push(A, &big, t0));
        assert!(!s.push(A, b"xx", t0));
        assert!(s.push(B, b"xx", t0));
        assert_eq!(s.take(A).map(|t| t.frames.len()), Some(MAX_OWED - 1));
    }

    #[test]
    fn frames_put_back_go_ahead_of_those_owed_since_and_keep_their_wait() {
        let (mut s, t0) = (Slots::default(), Instant::now());
        let after = Duration::from_millis(2);
        s.push(A, b"first", t0);
        let taken = s.take(A).unwrap();
        s.push(A, b"second", t0 + Duration::from_millis(1));
        s.put_back(taken);
        let due = s.take_due(t0 + after, after);
        assert_eq!(due.len(), 1, "due from when the first was owed");
        assert_eq!((&due[0].frames[..], due[0].posts), (&b"firstsecond"[..], 2));
        // Into an empty box too.
        s.put_back(due.into_iter().next().unwrap());
        assert_eq!(s.take(A).map(|t| t.frames).as_deref(), Some(&b"firstsecond"[..]));
    }

    #[tokio::test]
    async fn the_flusher_is_woken_by_a_first_post_only_when_waiting() {
        let owed = std::sync::Arc::new(Owed::default());
        let none: std::sync::Arc<Mutex<HashSet<Daemon>>> = Default::default();
        let waiter = tokio::spawn({
            let (owed, none) = (owed.clone(), none.clone());
            async move { owed.wait_for_some(&none).await }
        });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        assert!(owed.owe(A, &Creds::root(), &Request::Unfence { txn: 9 }).unwrap());
        assert!(tokio::time::timeout(Duration::from_secs(5), waiter).await.expect("woken").unwrap());
        // Something is owed: no wait.
        assert!(tokio::time::timeout(Duration::from_secs(5), owed.wait_for_some(&none)).await.expect("at once"));
        let frames = owed.take(A).unwrap().frames;
        let mut buf = frames.clone();
        let f = frame::parse(&mut buf).unwrap();
        assert_eq!(f.id, frame::ONE_WAY);
        assert_eq!(frame::decode_request(&f).unwrap().1, Request::Unfence { txn: 9 });
        // A client that stops ends the wait, and every later one.
        let waiter = tokio::spawn({
            let (owed, none) = (owed.clone(), none.clone());
            async move { owed.wait_for_some(&none).await }
        });
        tokio::task::yield_now().await;
        owed.stop();
        assert!(!tokio::time::timeout(Duration::from_secs(5), waiter).await.expect("woken").unwrap());
        assert!(!owed.wait_for_some(&none).await);
    }

    /// What is owed only to a daemon with a send in flight leaves the
    /// flusher asleep; the send's end (a nudge) or a post to another daemon
    /// wakes it.
    #[tokio::test]
    async fn the_flusher_sleeps_while_only_daemons_it_is_sending_to_are_owed() {
        let owed = std::sync::Arc::new(Owed::default());
        let busy: std::sync::Arc<Mutex<HashSet<Daemon>>> = std::sync::Arc::new(Mutex::new([A].into()));
        assert!(owed.owe(A, &Creds::root(), &Request::Unfence { txn: 1 }).unwrap());
        let wait = || {
            let (owed, busy) = (owed.clone(), busy.clone());
            tokio::spawn(async move { owed.wait_for_some(&busy).await })
        };
        let waiter = wait();
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiter.is_finished(), "woke with only a busy daemon owed");
        busy.lock().remove(&A);
        owed.nudge();
        assert!(tokio::time::timeout(Duration::from_secs(5), waiter).await.expect("woken by the send's end").unwrap());
        busy.lock().insert(A);
        let waiter = wait();
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiter.is_finished());
        assert!(owed.owe(B, &Creds::root(), &Request::Unfence { txn: 2 }).unwrap());
        assert!(tokio::time::timeout(Duration::from_secs(5), waiter).await.expect("woken by a post to another daemon").unwrap());
    }
}
