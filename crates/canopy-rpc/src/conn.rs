//! A pipelined client connection. A caller writes its request to the socket
//! itself when nothing is queued before it, else queues it for the writer task
//! (which sends everything queued in one write), and waits on a oneshot that
//! the reader task fills when the response with its id arrives. When the
//! connection breaks, every waiting caller gets `ENOTCONN`.
//!
//! A caller's timeout is a deadline beside its waiter, which the connection's
//! watchdog task checks every tick (see [`tick_for`]), not a timer of its own:
//! registering a runtime timer per call woke the runtime's driver each time
//! the timer wheel was empty (an `eventfd` write and an extra `epoll_wait` per
//! call for a caller with one call in flight, such as a FUSE thread).

use crate::handshake::{self, ClientAuth};
use crate::socket::{ReadHalf, Stream, WriteHalf};
use crate::RpcResult;
use bytes::{Buf, BytesMut};
use canopy_proto::frame::{self, FrameError};
use canopy_proto::{Creds, Errno, Request};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::AsyncReadExt;
use tokio::sync::{oneshot, Notify};

type Pending = Arc<Mutex<HashMap<u64, Waiter>>>;

/// A caller waiting for the answer to its request, until `deadline` (none:
/// a timeout too long to count from now, never reached).
struct Waiter {
    done: oneshot::Sender<RpcResult>,
    deadline: Option<Instant>,
}

pub struct Connection {
    out: Arc<Outbox>,
    pending: Pending,
    next_id: AtomicU64,
    broken: Arc<AtomicBool>,
    /// How long the server keeps a connection with nothing to do.
    server_idle: Duration,
    opened: Instant,
    /// Milliseconds from `opened` to the last request sent.
    last_sent: AtomicU64,
}

impl Connection {
    /// Connects and proves `me`; a refused or timed-out connect, another protocol
    /// version or a refused key is an errno.
    pub async fn connect(addr: &str, me: &ClientAuth, timeout: Duration) -> Result<Connection, Errno> {
        let (mut rd, mut wr) = match tokio::time::timeout(timeout, Stream::connect(addr)).await {
            Ok(Ok(s)) => s.into_split(),
            Ok(Err(_)) => return Err(Errno::ECONNREFUSED),
            Err(_) => return Err(Errno::ETIMEDOUT),
        };
        let server_idle = match tokio::time::timeout(timeout, handshake::connect(&mut tokio::io::join(&mut rd, &mut wr), me, addr)).await {
            Ok(r) => r?,
            Err(_) => return Err(Errno::ETIMEDOUT),
        };
        let pending: Pending = Arc::new(Mutex::new(HashMap::new()));
        let broken = Arc::new(AtomicBool::new(false));
        let out = Arc::new(Outbox { sock: wr, queued: Mutex::default(), more: Notify::new(), drained: Notify::new(), gather: AtomicBool::new(false), closing: AtomicBool::new(false), broken: broken.clone() });
        tokio::spawn(out.clone().write_queued());
        let reader_pending = pending.clone();
        let reader_broken = broken.clone();
        tokio::spawn(async move {
            read_responses(&mut rd, &reader_pending).await;
            reader_broken.store(true, Ordering::Release);
            for (_, waiter) in reader_pending.lock().drain() {
                let _ = waiter.done.send(Err(Errno::ENOTCONN));
            }
        });
        tokio::spawn(watch_deadlines(Arc::downgrade(&pending), broken.clone(), tick_for(timeout)));
        Ok(Connection { out, pending, next_id: AtomicU64::new(1), broken, server_idle, opened: Instant::now(), last_sent: AtomicU64::new(0) })
    }

    pub fn is_broken(&self) -> bool {
        self.broken.load(Ordering::Acquire)
    }

    /// Whether a new request should go on a new connection instead: this one
    /// broke, or it has been quiet for half the server's idle limit, so the
    /// server may close it before the request arrives (or while it is on
    /// its way). A connection with answers still awaited is not quiet.
    pub fn is_stale(&self) -> bool {
        if self.is_broken() {
            return true;
        }
        let quiet = self.opened.elapsed().saturating_sub(Duration::from_millis(self.last_sent.load(Ordering::Acquire)));
        quiet >= self.server_idle / 2 && self.pending.lock().is_empty()
    }

    /// A request goes out now: the connection is not quiet.
    fn note_sent(&self) {
        self.last_sent.store(self.opened.elapsed().as_millis() as u64, Ordering::Release);
    }

    /// Sends one request without waiting for its response, as one-way
    /// ([`frame::ONE_WAY`]: the server sends none): ends once it is written to the socket,
    /// so a process may exit after it. Frames go out in the order they are
    /// queued, so this client's later requests are served after it; if the
    /// connection breaks before the peer reads it, it is lost.
    /// `ECONNREFUSED`: nothing was sent; `ENOTCONN` and `ETIMEDOUT` (not
    /// written within `timeout`): it may or may not have been.
    pub async fn post(&self, creds: &Creds, req: &Request, timeout: Duration) -> Result<(), Errno> {
        let end = self.start_post(&[], creds, req)?;
        self.written(end, timeout).await
    }

    /// Writes (or queues) `before` and the one-way frame of `req`: the mark
    /// to wait for with [`Connection::written`]. An error: none of it was sent.
    pub fn start_post(&self, before: &[u8], creds: &Creds, req: &Request) -> Result<u64, Errno> {
        if self.is_broken() {
            return Err(Errno::ECONNREFUSED);
        }
        self.note_sent();
        let alone = self.pending.lock().is_empty();
        with_frame(before, frame::ONE_WAY, creds, req, |frame| self.out.send(frame, alone))
    }

    /// Writes (or queues) `frames` (whole one-way frames, encoded elsewhere),
    /// as [`Connection::start_post`] does one.
    pub fn start_frames(&self, frames: &[u8]) -> Result<u64, Errno> {
        if self.is_broken() {
            return Err(Errno::ECONNREFUSED);
        }
        self.note_sent();
        let alone = self.pending.lock().is_empty();
        self.out.send(frames, alone)
    }

    /// Ends once what was sent up to mark `end` is written to the socket,
    /// at most `timeout`: `ENOTCONN` and `ETIMEDOUT` say it may or may not
    /// have been.
    pub async fn written(&self, end: u64, timeout: Duration) -> Result<(), Errno> {
        tokio::time::timeout(timeout, self.out.written(end)).await.map_err(|_| Errno::ETIMEDOUT)?
    }

    /// Sends one request and waits for its response, at most `timeout` (and
    /// up to one watchdog tick more).
    ///
    /// The errno says what is known of the outcome: `ECONNREFUSED` when the
    /// request was never sent (certain: nothing happened), `ENOTCONN` and
    /// `ETIMEDOUT` when it may have been applied and the answer is lost.
    pub async fn call(&self, creds: &Creds, req: &Request, timeout: Duration) -> RpcResult {
        self.start_call(&[], creds, req, timeout)?.await
    }

    /// Writes (or queues) `before` (whole one-way frames, which the peer then
    /// serves first) and request `req`; the answer is the returned future's.
    /// An error: none of it was sent. A caller that stops waiting leaves its
    /// waiter to the watchdog.
    pub fn start_call(&self, before: &[u8], creds: &Creds, req: &Request, timeout: Duration) -> Result<impl std::future::Future<Output = RpcResult>, Errno> {
        if self.is_broken() {
            return Err(Errno::ECONNREFUSED);
        }
        self.note_sent();
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (done, wait) = oneshot::channel();
        let deadline = Instant::now().checked_add(timeout);
        with_frame(before, id, creds, req, |frame| {
            // Waited for before it is sent: the answer may come at once.
            let alone = {
                let mut pending = self.pending.lock();
                pending.insert(id, Waiter { done, deadline });
                pending.len() == 1
            };
            self.out.send(frame, alone).inspect_err(|_| {
                self.pending.lock().remove(&id);
            })
        })?;
        Ok(async move { wait.await.unwrap_or(Err(Errno::ENOTCONN)) })
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.out.closing.store(true, Ordering::Release);
        self.out.more.notify_one();
    }
}

thread_local! {
    /// Where this thread encodes its requests: no allocation per request.
    static ENCODE: std::cell::RefCell<BytesMut> = std::cell::RefCell::new(BytesMut::new());
}

/// Encodes request `id` after the bytes `before` and hands them to `send`.
fn with_frame<T>(before: &[u8], id: u64, creds: &Creds, req: &Request, send: impl FnOnce(&[u8]) -> Result<T, Errno>) -> Result<T, Errno> {
    ENCODE.with_borrow_mut(|buf| {
        buf.clear();
        buf.extend_from_slice(before);
        frame::encode_request(buf, id, creds, req)?;
        let r = send(buf);
        // A large request (a write's contents) does not stay held.
        if buf.capacity() > 256 * 1024 {
            *buf = BytesMut::new();
        }
        r
    })
}

/// Where requests leave: the socket, shared by the callers and the writer task,
/// and the bytes the socket has not taken yet, in order.
///
/// A caller alone on the connection (no other answer awaited, nothing
/// queued) writes its frame itself, with a non-blocking write: a hand-off to
/// the writer task would wake a runtime thread, which for a caller outside the
/// runtime (a FUSE handler's thread) costs a good part of a round trip. When
/// others are in flight, frames are queued for the writer task, which sends
/// all that gathered meanwhile in one write: fewer system calls per request
/// under load. What the socket does not take at once is queued too, and every
/// later frame after it, until the writer task has sent it all.
struct Outbox {
    sock: WriteHalf,
    queued: Mutex<Queue>,
    more: Notify,
    /// The writer task wrote some of the queue, or found the socket broken.
    drained: Notify,
    /// The queue began on a multi-threaded runtime (`on_pooled_runtime`):
    /// the writer lets more frames gather before it writes.
    gather: AtomicBool,
    /// The connection was dropped: the writer task sends what is queued,
    /// then ends, and the socket closes with it.
    closing: AtomicBool,
    broken: Arc<AtomicBool>,
}

/// The bytes waiting for the writer task, and how far it has come: a frame
/// queued when `ever` was E is written once `written` reaches E.
#[derive(Default)]
struct Queue {
    bytes: BytesMut,
    /// Bytes ever queued.
    ever: u64,
    /// Bytes ever queued that the writer task has written.
    written: u64,
}

impl Queue {
    fn push(&mut self, bytes: &[u8]) {
        self.bytes.extend_from_slice(bytes);
        self.ever += bytes.len() as u64;
    }

    fn advance(&mut self, n: usize) {
        self.bytes.advance(n);
        self.written += n as u64;
    }
}

/// Whether the caller runs on a multi-threaded tokio runtime. A queue
/// begun there is written once the writer's thread has run the other tasks
/// ready on it (one system call, one wake-up of the server for all their
/// frames): Canopy's clients run their connections' writers on such a
/// runtime, so those tasks are the writer's neighbours. A frame from a
/// thread of its own (a FUSE thread's runtime) gains nothing by the wait,
/// which costs an extra poll for I/O. Measured in `docs/performance.md`
/// ("Gathering frames before a write").
fn on_pooled_runtime() -> bool {
    tokio::runtime::Handle::try_current().is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread)
}

/// Bytes queued at most before callers are refused (`EAGAIN`): a server that
/// stops reading cannot make a client hold more.
const MAX_QUEUED: usize = 64 << 20;

impl Outbox {
    /// Sends `frame` now if `alone` (see above), else queues it; what the
    /// socket does not take is queued. Answers the queue's mark for
    /// [`Outbox::written`]. An error means none of it was sent.
    fn send(&self, frame: &[u8], alone: bool) -> Result<u64, Errno> {
        let mut queued = self.queued.lock();
        if !queued.bytes.is_empty() {
            if queued.bytes.len() + frame.len() > MAX_QUEUED {
                return Err(Errno::EAGAIN);
            }
            // The writer task was told when the queue began.
            queued.push(frame);
            return Ok(queued.ever);
        }
        let sent = match alone.then(|| self.sock.try_write(frame)) {
            None => 0,
            Some(Ok(n)) => n,
            Some(Err(e)) if e.kind() == std::io::ErrorKind::WouldBlock => 0,
            Some(Err(_)) => {
                self.broken.store(true, Ordering::Release);
                return Err(Errno::ECONNREFUSED);
            }
        };
        if sent < frame.len() {
            queued.push(&frame[sent..]);
            let end = queued.ever;
            drop(queued);
            self.gather.store(on_pooled_runtime(), Ordering::Release);
            self.more.notify_one();
            return Ok(end);
        }
        Ok(queued.ever)
    }

    /// Ends once the queue's bytes up to mark `end` (from [`Outbox::send`])
    /// are written to the socket: at once when the caller wrote its frame
    /// itself. Later frames queued behind it are not waited for. `ENOTCONN`
    /// if the socket broke first.
    async fn written(&self, end: u64) -> Result<(), Errno> {
        loop {
            let drained = self.drained.notified();
            tokio::pin!(drained);
            // Registered before the checks: progress between them still wakes it.
            drained.as_mut().enable();
            if self.queued.lock().written >= end {
                return Ok(());
            }
            if self.broken.load(Ordering::Acquire) {
                return Err(Errno::ENOTCONN);
            }
            drained.await;
        }
    }

    /// The writer task ends: the socket broke.
    fn break_off(&self) {
        self.broken.store(true, Ordering::Release);
        self.drained.notify_waiters();
    }

    /// The writer task: sends what is queued whenever there is some, until
    /// the socket fails or the connection is dropped and all is sent.
    async fn write_queued(self: Arc<Self>) {
        loop {
            self.more.notified().await;
            if self.gather.load(Ordering::Acquire) {
                // The other tasks ready on this thread first (tokio runs a
                // yielded task once it has polled for I/O): the frames they
                // queue go out in the same write.
                tokio::task::yield_now().await;
            }
            loop {
                // Written first, waited for only when the socket is full (a
                // Unix socket is watched for room only then: `unix_conn`).
                let wrote = {
                    let mut queued = self.queued.lock();
                    if queued.bytes.is_empty() {
                        break;
                    }
                    let wrote = self.sock.try_write(&queued.bytes);
                    if let Ok(n) = wrote {
                        queued.advance(n);
                    }
                    wrote
                };
                match wrote {
                    Ok(_) => self.drained.notify_waiters(),
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        if self.sock.writable().await.is_err() {
                            self.break_off();
                            return;
                        }
                    }
                    Err(_) => {
                        self.break_off();
                        return;
                    }
                }
            }
            if self.closing.load(Ordering::Acquire) {
                return;
            }
        }
    }
}

/// How often a connection made with `timeout` checks its callers' deadlines:
/// a sixteenth of it, so a call times out at most that much late, between a
/// millisecond and a second.
fn tick_for(timeout: Duration) -> Duration {
    (timeout / 16).clamp(Duration::from_millis(1), Duration::from_secs(1))
}

/// The watchdog: every `tick`, answers `ETIMEDOUT` to each caller whose
/// deadline has passed (its request may or may not have been served), until
/// the connection is gone or broken (the reader answers the rest).
async fn watch_deadlines(pending: std::sync::Weak<Mutex<HashMap<u64, Waiter>>>, broken: Arc<AtomicBool>, tick: Duration) {
    loop {
        tokio::time::sleep(tick).await;
        let Some(pending) = pending.upgrade() else { return };
        if broken.load(Ordering::Acquire) {
            return;
        }
        for waiter in take_overdue(&mut pending.lock(), Instant::now()) {
            let _ = waiter.done.send(Err(Errno::ETIMEDOUT));
        }
    }
}

/// Removes and returns the waiters whose deadline is `now` or before.
fn take_overdue(pending: &mut HashMap<u64, Waiter>, now: Instant) -> Vec<Waiter> {
    pending.extract_if(|_, w| w.deadline.is_some_and(|d| d <= now)).map(|(_, w)| w).collect()
}

async fn read_responses(rd: &mut ReadHalf, pending: &Pending) {
    let mut buf = BytesMut::with_capacity(64 * 1024);
    loop {
        match rd.read_buf(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        loop {
            match frame::parse(&mut buf) {
                Ok(f) => {
                    let result = frame::decode_response(&f);
                    if f.id == 0 {
                        // The server rejected our framing and is closing.
                        return;
                    }
                    if let Some(waiter) = pending.lock().remove(&f.id) {
                        let _ = waiter.done.send(result);
                    }
                }
                Err(FrameError::Incomplete) => break,
                Err(_) => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A frame's mark is reached when the bytes before and of it are written,
    /// whatever was queued behind it since.
    #[test]
    fn a_mark_is_reached_by_its_own_bytes_not_by_an_empty_queue() {
        let mut q = Queue::default();
        q.push(b"first frame");
        let first = q.ever;
        q.push(b"second");
        q.advance(5);
        assert!(q.written < first);
        q.advance(6);
        assert!(q.written >= first, "the first frame is out");
        q.push(b"third");
        assert!(!q.bytes.is_empty(), "later frames are still queued");
        q.advance(q.bytes.len());
        assert_eq!((q.written, q.ever), (22, 22));
    }

    /// Only the waiters past their deadline are taken, and each once.
    #[test]
    fn the_watchdog_takes_only_overdue_waiters() {
        let now = Instant::now();
        let mut pending = HashMap::new();
        for (id, deadline) in [(1, Some(now - Duration::from_millis(5))), (2, Some(now)), (3, Some(now + Duration::from_millis(5))), (5, None)] {
            pending.insert(id, Waiter { done: oneshot::channel().0, deadline });
        }
        assert_eq!(take_overdue(&mut pending, now).len(), 2, "the one past and the one due now");
        let mut left: Vec<u64> = pending.keys().copied().collect();
        left.sort();
        assert_eq!(left, vec![3, 5]);
        assert!(take_overdue(&mut pending, now).is_empty(), "none taken twice");
        assert_eq!(take_overdue(&mut pending, now + Duration::from_millis(5)).len(), 1);
        assert!(take_overdue(&mut pending, now + Duration::from_secs(1 << 40)).is_empty(), "no deadline: never overdue");
    }

    #[test]
    fn a_tick_is_a_sixteenth_of_the_timeout_within_bounds() {
        assert_eq!(tick_for(Duration::from_secs(30)), Duration::from_secs(1));
        assert_eq!(tick_for(Duration::from_secs(4)), Duration::from_millis(250));
        assert_eq!(tick_for(Duration::ZERO), Duration::from_millis(1));
    }
}
