//! The daemon side of a socket (TCP or Unix, see `socket`): accept, handshake (protocol version and key), then a
//! read loop per connection.
//!
//! Every frame read in one pass is handled and its response appended to one buffer,
//! which goes out as a single write: pipelined clients get batched socket writes
//! for free. A malformed or oversized frame gets an error response (request id 0)
//! and the connection is closed; a bad payload in a whole frame gets an error
//! response for its id and the connection goes on.
//!
//! What one peer can make a daemon hold is bounded: connections (at most
//! [`ConnLimits::max_conns`]; a new one closes one stalled writing to a peer
//! that does not read, else the one idle longest, so a flood of connections
//! cannot lock legitimate clients out: `registry.rs`), time (a handshake must
//! finish in [`HANDSHAKE_TIMEOUT`]; a connection silent for [`ConnLimits::idle`]
//! with nothing in flight is closed, and one whose peer does not take a reply
//! within [`ConnLimits::write_timeout`]), reply bytes (a connection's frames
//! are answered a pass of at most [`PASS_REPLY_BYTES`] at a time, written
//! before more is read, so a peer that does not read stops being read; all
//! connections together hold at most [`ConnLimits::reply_budget`], a pass
//! waiting for room and a stalled connection closed to make it), replies in
//! flight per connection ([`MAX_IN_FLIGHT`]), and frame size
//! (`frame::MAX_FRAME`, checked before any allocation). When the process runs
//! out of descriptors, accept backs off and sheds the connection it cannot
//! serve instead of spinning.

use crate::handshake;
use crate::registry::{ConnState, Registry};
use crate::socket::{Listener, Stream, WriteHalf};
use crate::{Handled, RpcResult, Service};
use bytes::BytesMut;
use canopy_proto::auth::{Identity, Key};
use canopy_proto::frame::{self, FrameError};
use canopy_proto::{Creds, Errno, Request};
use futures::future::BoxFuture;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};

pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Requests of one connection whose replies are still being worked out (lock
/// waits); more are answered `EAGAIN`.
pub const MAX_IN_FLIGHT: usize = 4096;
/// The replies of one read pass are worked out and written before the next
/// requests are read, this many bytes at most (by their bound,
/// `Request::reply_bound`; a pass holds one request at least): what a peer
/// that asks and does not read can make its connection hold.
pub const PASS_REPLY_BYTES: usize = 1 << 20;

#[derive(Debug, Clone, Copy)]
pub struct ConnLimits {
    pub max_conns: usize,
    pub idle: Duration,
    /// A write to a peer that does not take it for this long closes the
    /// connection.
    pub write_timeout: Duration,
    /// Reply bytes the daemon holds at most for all its connections at once
    /// (by their bounds): a pass waits for room, and a connection stalled
    /// writing is closed to make it.
    pub reply_budget: usize,
}

impl Default for ConnLimits {
    fn default() -> ConnLimits {
        ConnLimits { max_conns: 4096, idle: Duration::from_secs(300), write_timeout: Duration::from_secs(30), reply_budget: 64 << 20 }
    }
}

/// How a daemon serves: the cluster key it checks peers against, and its limits.
pub struct ServeOpts {
    pub key: Key,
    pub limits: ConnLimits,
}

/// The daemon's reply budget, in KiB permits.
#[derive(Clone)]
struct Budget {
    kib: Arc<Semaphore>,
    total: u32,
}

impl Budget {
    fn new(bytes: usize) -> Budget {
        let total = (bytes >> 10).clamp(1, u32::MAX as usize) as u32;
        Budget { kib: Arc::new(Semaphore::new(total as usize)), total }
    }

    fn permits_for(&self, bytes: usize) -> u32 {
        (bytes.div_ceil(1024).min(self.total as usize)).max(1) as u32
    }

    fn try_reserve(&self, bytes: usize) -> Option<OwnedSemaphorePermit> {
        self.kib.clone().try_acquire_many_owned(self.permits_for(bytes)).ok()
    }

    async fn reserve(&self, bytes: usize) -> Option<OwnedSemaphorePermit> {
        self.kib.clone().acquire_many_owned(self.permits_for(bytes)).await.ok()
    }
}

/// Serves `service` on every connection `listener` accepts, until the task is dropped.
pub async fn serve(listener: Listener, service: Arc<dyn Service>, opts: ServeOpts) {
    let opts = Arc::new(opts);
    let registry = Arc::new(Registry::default());
    let budget = Budget::new(opts.limits.reply_budget);
    // A descriptor kept in reserve: when accept fails for lack of descriptors,
    // freeing it lets us take the waiting connection and close it at once.
    let mut reserve = std::fs::File::open("/dev/null").ok();
    let mut last_complaint: Option<Instant> = None;
    loop {
        match listener.accept().await {
            Ok(stream) => {
                let (id, state) = registry.admit(opts.limits.max_conns);
                let (svc, opts, registry, budget) = (service.clone(), opts.clone(), registry.clone(), budget.clone());
                tokio::spawn(async move {
                    let conn = ConnCtx { opts: &opts, registry: &registry, state: &state, budget };
                    serve_conn(stream, svc, conn).await;
                    registry.leave(id);
                });
            }
            Err(e) => {
                if last_complaint.is_none_or(|t| t.elapsed() > Duration::from_secs(10)) {
                    eprintln!("canopy: accept failed: {e} ({} connections open); backing off", registry.len());
                    last_complaint = Some(Instant::now());
                }
                if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) && reserve.take().is_some() {
                    if let Ok(shed) = listener.accept().await {
                        drop(shed);
                    }
                    reserve = std::fs::File::open("/dev/null").ok();
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// What serving one connection needs of its daemon.
struct ConnCtx<'a> {
    opts: &'a ServeOpts,
    registry: &'a Registry,
    state: &'a ConnState,
    budget: Budget,
}

impl ConnCtx<'_> {
    /// Writes `bytes` to the peer, unless it takes longer than the write
    /// timeout or the connection is told to close meanwhile (then `false`:
    /// close it). What the socket takes at once goes without a timer; a
    /// write that must wait counts as a stall while it lasts.
    async fn write_out(&self, wr: &mut WriteHalf, bytes: &[u8]) -> bool {
        let mut sent = 0;
        while sent < bytes.len() {
            match wr.try_write(&bytes[sent..]) {
                Ok(n) => sent += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(_) => return false,
            }
        }
        if sent == bytes.len() {
            return true;
        }
        self.registry.writing(self.state, true);
        let done = tokio::select! {
            r = tokio::time::timeout(self.opts.limits.write_timeout, wr.write_all(&bytes[sent..])) => matches!(r, Ok(Ok(()))),
            _ = self.state.close.notified() => false,
        };
        self.registry.writing(self.state, false);
        done
    }

    /// Room in the budget for a pass whose replies take `bytes` at most: at
    /// once, or once a connection stalled writing was closed to make it, or
    /// when others' writes finish; this connection's own later replies,
    /// which may hold the room, are written meanwhile. `None`: close it.
    async fn room_for(&self, bytes: usize, wr: &mut WriteHalf, late_rx: &mut mpsc::UnboundedReceiver<Late>) -> Option<OwnedSemaphorePermit> {
        if let Some(p) = self.budget.try_reserve(bytes) {
            return Some(p);
        }
        self.registry.close_stalled();
        loop {
            tokio::select! {
                p = self.budget.reserve(bytes) => return p,
                Some(late) = late_rx.recv() => {
                    if !self.write_late(wr, late).await {
                        return None;
                    }
                }
                _ = self.state.close.notified() => return None,
            }
        }
    }

    /// Writes a reply worked out later, then gives its room back.
    async fn write_late(&self, wr: &mut WriteHalf, (late, _room): Late) -> bool {
        self.touch();
        self.state.in_flight.fetch_sub(1, Ordering::AcqRel);
        self.write_out(wr, &late).await
    }

    fn touch(&self) {
        self.state.last_active.store(self.registry.now(), Ordering::Release);
    }
}

/// Handles one connection until the peer closes it, breaks the framing, stays
/// idle too long, does not take its replies, or the registry closes it to
/// make room. Whole frames already read are answered, a pass at a time
/// ([`PASS_REPLY_BYTES`]), before more is read: a peer that does not read
/// its replies stops being read itself.
async fn serve_conn(stream: Stream, service: Arc<dyn Service>, cx: ConnCtx<'_>) {
    let (mut rd, mut wr) = stream.into_split();
    let mut both = tokio::io::join(&mut rd, &mut wr);
    let peer = tokio::select! {
        r = tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake::accept(&mut both, &cx.opts.key, cx.opts.limits.idle)) => match r {
            Ok(Some(peer)) => peer,
            _ => return,
        },
        _ = cx.state.close.notified() => return,
    };
    let (late_tx, mut late_rx) = mpsc::unbounded_channel::<Late>();
    // Buffers start small (an idle connection holds little) and grow with what
    // the peer sends; `trim` gives back what one large frame needed.
    let mut buf = BytesMut::with_capacity(READ_CHUNK);
    let mut out = BytesMut::new();
    loop {
        let pass = take_pass(&mut buf);
        if !pass.requests.is_empty() || pass.broken.is_some() {
            let Some(_room) = cx.room_for(pass.reply_bytes, &mut wr, &mut late_rx).await else { break };
            let answers = answer(&peer, &service, pass.requests).await;
            let conn = Conn { late_tx: &late_tx, state: cx.state, budget: &cx.budget };
            conn.encode(answers, &mut out);
            if let Some(errno) = pass.broken {
                frame::encode_response(&mut out, 0, 0, &Err(errno));
            }
            if !cx.write_out(&mut wr, &out).await || pass.broken.is_some() {
                break;
            }
            out.clear();
            trim(&mut out);
            continue;
        }
        trim(&mut buf);
        buf.reserve(READ_CHUNK);
        let idle = tokio::time::sleep(cx.opts.limits.idle);
        tokio::select! {
            read = rd.read_buf(&mut buf) => {
                if !matches!(read, Ok(n) if n > 0) {
                    break;
                }
                cx.touch();
            }
            Some(late) = late_rx.recv() => {
                if !cx.write_late(&mut wr, late).await {
                    break;
                }
            }
            _ = idle, if cx.state.in_flight.load(Ordering::Acquire) == 0 => break,
            _ = cx.state.close.notified() => break,
        }
    }
    let _ = wr.shutdown().await;
}

/// Bytes read per system call at least; also a connection's idle buffer size.
const READ_CHUNK: usize = 16 * 1024;
/// A buffer larger than this is dropped once empty rather than kept.
const KEEP_BUFFER: usize = 256 * 1024;

/// Lets an empty buffer that grew for a large frame go.
fn trim(b: &mut BytesMut) {
    if b.is_empty() && b.capacity() > KEEP_BUFFER {
        *b = BytesMut::new();
    }
}

/// A whole frame from the peer: its id and opcode, and the request or why it
/// could not be decoded.
type Incoming = (u64, u16, Result<(Creds, Request), Errno>);

/// One request's answer: ready now, or a future (a lock wait) with the bound
/// on its reply.
enum Answer {
    Now(u64, u16, RpcResult),
    Later(u64, u16, usize, BoxFuture<'static, RpcResult>),
    /// A pass's answers, sent once what it wrote is durable; the bound on
    /// their replies.
    Durable(Vec<(u64, u16, RpcResult)>, usize, crate::Durable),
}

/// A reply worked out later, and the room it holds in the budget until written.
type Late = (BytesMut, Option<OwnedSemaphorePermit>);

/// One read pass: the whole frames taken, the bound on their replies, and
/// whether the framing broke (an error frame must be sent and the
/// connection closed).
struct Pass {
    requests: Vec<Incoming>,
    reply_bytes: usize,
    broken: Option<Errno>,
}

/// Takes whole frames out of `buf` until their replies' bound reaches
/// [`PASS_REPLY_BYTES`] (one at least); the rest wait for the next pass.
fn take_pass(buf: &mut BytesMut) -> Pass {
    let mut pass = Pass { requests: Vec::new(), reply_bytes: 0, broken: None };
    while pass.reply_bytes < PASS_REPLY_BYTES {
        match frame::parse(buf) {
            Ok(f) => {
                let decoded = frame::decode_request(&f);
                pass.reply_bytes += decoded.as_ref().map_or(64, |(_, req)| req.reply_bound());
                pass.requests.push((f.id, f.op, decoded));
            }
            Err(FrameError::Incomplete) => break,
            Err(FrameError::TooLarge(_)) => {
                pass.broken = Some(Errno::EMSGSIZE);
                break;
            }
            Err(FrameError::Malformed) => {
                pass.broken = Some(Errno::EPROTO);
                break;
            }
        }
    }
    pass
}

/// Answers one read pass's requests. If the service says any of them may block
/// (a synced write), the whole pass runs on the blocking pool, so the reactor
/// goes on serving other connections meanwhile; one hand-off per pass, not per
/// request, keeps pipelined clients cheap.
///
/// A request that may wait long (for a lease to run out) is answered apart,
/// later: otherwise every request pipelined behind it on the connection, and
/// the connection's next reads, would wait as long.
async fn answer(peer: &Identity, service: &Arc<dyn Service>, requests: Vec<Incoming>) -> Vec<Answer> {
    let (waiting, requests): (Vec<Incoming>, Vec<Incoming>) = requests.into_iter().partition(|(_, _, r)| r.as_ref().is_ok_and(|(_, req)| service.waits(req)));
    let mut answers: Vec<Answer> = waiting.into_iter().map(|incoming| answer_apart(peer, service, incoming)).collect();
    let blocks = requests.iter().any(|(_, _, r)| r.as_ref().is_ok_and(|(_, req)| service.blocks(req)));
    if !blocks {
        answers.extend(answer_now(peer, &**service, requests));
        return answers;
    }
    let (peer, service) = (peer.clone(), service.clone());
    // A handler that panicked says nothing of these requests: no answers.
    answers.extend(tokio::task::spawn_blocking(move || answer_now(&peer, &*service, requests)).await.unwrap_or_default());
    answers
}

/// One request answered on a blocking thread of its own, its reply sent when
/// ready.
fn answer_apart(peer: &Identity, service: &Arc<dyn Service>, (id, op, decoded): Incoming) -> Answer {
    let (creds, req) = match decoded {
        Ok(decoded) => decoded,
        Err(e) => return Answer::Now(id, op, Err(e)),
    };
    let bound = req.reply_bound();
    Answer::Later(id, op, bound, Box::pin(crate::call_apart(service.clone(), peer.clone(), peer.acting_as(creds), req)))
}

/// Calls the service on each of a pass's requests, inside one
/// [`Service::in_pass`]: if what they wrote may not be durable, every answer
/// becomes its errno (one still to come is not started).
fn answer_now(peer: &Identity, service: &dyn Service, requests: Vec<Incoming>) -> Vec<Answer> {
    let mut requests = Some(requests);
    let mut answers = Vec::new();
    let bounds: Vec<usize> = requests.iter().flatten().map(|(_, _, r)| r.as_ref().map_or(0, |(_, req)| req.reply_bound())).collect();
    let durable = service.in_pass_later(&mut || answers = requests.take().unwrap_or_default().into_iter().map(|incoming| answer_one(peer, service, incoming)).collect());
    match durable {
        Ok(None) => answers,
        Ok(Some(later)) => {
            let (now, mut rest): (Vec<Answer>, Vec<Answer>) = answers.into_iter().partition(|a| matches!(a, Answer::Now(..)));
            let now: Vec<(u64, u16, RpcResult)> = now.into_iter().filter_map(|a| if let Answer::Now(id, op, r) = a { Some((id, op, r)) } else { None }).collect();
            rest.push(Answer::Durable(now, bounds.iter().sum(), later));
            rest
        }
        Err(e) => answers
            .into_iter()
            .map(|a| match a {
                Answer::Now(id, op, _) | Answer::Later(id, op, _, _) => Answer::Now(id, op, Err(e)),
                Answer::Durable(..) => unreachable!("made only here"),
            })
            .collect(),
    }
}

fn answer_one(peer: &Identity, service: &dyn Service, (id, op, decoded): Incoming) -> Answer {
    match decoded {
        Err(e) => Answer::Now(id, op, Err(e)),
        Ok((creds, req)) => {
            let bound = req.reply_bound();
            match service.call(peer, peer.acting_as(creds), req) {
                Handled::Now(r) => Answer::Now(id, op, r),
                Handled::Later(f) => Answer::Later(id, op, bound, f),
            }
        }
    }
}

/// Appends the answer to request `id`, unless it is one-way
/// ([`frame::ONE_WAY`]): those get none, not even an error.
fn encode_answer(out: &mut BytesMut, id: u64, op: u16, result: &RpcResult) {
    if id != frame::ONE_WAY {
        frame::encode_response(out, id, op, result);
    }
}

/// What answering one connection's frames needs.
struct Conn<'a> {
    late_tx: &'a mpsc::UnboundedSender<Late>,
    state: &'a ConnState,
    budget: &'a Budget,
}

impl Conn<'_> {
    /// Appends the ready answers to `out` and starts the later ones, whose
    /// replies come back over the channel, each holding room in the budget
    /// from before it is worked out until it is written; beyond
    /// [`MAX_IN_FLIGHT`] of those, `EAGAIN`.
    fn encode(&self, answers: Vec<Answer>, out: &mut BytesMut) {
        for a in answers {
            match a {
                Answer::Now(id, op, result) => encode_answer(out, id, op, &result),
                Answer::Durable(answers, bound, durable) => {
                    self.state.in_flight.fetch_add(1, Ordering::AcqRel);
                    let (tx, budget) = (self.late_tx.clone(), self.budget.clone());
                    tokio::spawn(async move {
                        let room = budget.kib.clone().acquire_many_owned(budget.permits_for(bound)).await.ok();
                        let outcome = durable.await;
                        let mut late = BytesMut::new();
                        for (id, op, result) in answers {
                            match outcome {
                                Ok(()) => encode_answer(&mut late, id, op, &result),
                                Err(e) => encode_answer(&mut late, id, op, &Err(e)),
                            }
                        }
                        let _ = tx.send((late, room));
                    });
                }
                Answer::Later(id, op, _, _) if self.state.in_flight.load(Ordering::Acquire) >= MAX_IN_FLIGHT => {
                    encode_answer(out, id, op, &Err(Errno::EAGAIN));
                }
                Answer::Later(id, op, bound, fut) => {
                    self.state.in_flight.fetch_add(1, Ordering::AcqRel);
                    let (tx, budget) = (self.late_tx.clone(), self.budget.clone());
                    tokio::spawn(async move {
                        let room = budget.kib.clone().acquire_many_owned(budget.permits_for(bound)).await.ok();
                        // Empty for a one-way request: it still gives its place back.
                        let mut late = BytesMut::new();
                        encode_answer(&mut late, id, op, &fut.await);
                        let _ = tx.send((late, room));
                    });
                }
            }
        }
    }
}
