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
//! [`ConnLimits::max_conns`]; a new one closes the one idle longest, so a flood of
//! idle connections cannot lock legitimate clients out), time (a handshake must
//! finish in [`HANDSHAKE_TIMEOUT`]; a connection silent for [`ConnLimits::idle`]
//! with nothing in flight is closed), replies in flight per connection
//! ([`MAX_IN_FLIGHT`]), and frame size (`frame::MAX_FRAME`, checked before any
//! allocation). When the process runs out of descriptors, accept backs off and
//! sheds the connection it cannot serve instead of spinning.

use crate::handshake;
use crate::socket::{Listener, Stream};
use crate::{Handled, RpcResult, Service};
use bytes::BytesMut;
use canopy_proto::auth::{Identity, Key};
use canopy_proto::frame::{self, FrameError};
use canopy_proto::{Creds, Errno, Request};
use futures::future::BoxFuture;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, Notify};

pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Requests of one connection whose replies are still being worked out (lock
/// waits); more are answered `EAGAIN`.
pub const MAX_IN_FLIGHT: usize = 4096;

#[derive(Debug, Clone, Copy)]
pub struct ConnLimits {
    pub max_conns: usize,
    pub idle: Duration,
}

impl Default for ConnLimits {
    fn default() -> ConnLimits {
        ConnLimits { max_conns: 4096, idle: Duration::from_secs(300) }
    }
}

/// How a daemon serves: the cluster key it checks peers against, and its limits.
pub struct ServeOpts {
    pub key: Key,
    pub limits: ConnLimits,
}

/// One live connection, as the registry sees it.
struct ConnState {
    /// Milliseconds since the registry's epoch of the last request or reply.
    last_active: AtomicU64,
    in_flight: AtomicUsize,
    close: Notify,
}

/// The live connections, so that the one idle longest can be closed to make room.
struct Registry {
    epoch: Instant,
    next: AtomicU64,
    conns: Mutex<HashMap<u64, Arc<ConnState>>>,
}

impl Registry {
    fn now(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// Registers a new connection, first closing the idlest one if at `max`.
    fn admit(&self, max: usize) -> (u64, Arc<ConnState>) {
        let mut conns = self.conns.lock();
        if conns.len() >= max {
            let idlest = conns.iter().filter(|(_, c)| c.in_flight.load(Ordering::Acquire) == 0).min_by_key(|(_, c)| c.last_active.load(Ordering::Acquire));
            if let Some((id, c)) = idlest.map(|(id, c)| (*id, c.clone())) {
                c.close.notify_one();
                conns.remove(&id);
            }
        }
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let state = Arc::new(ConnState { last_active: AtomicU64::new(self.now()), in_flight: AtomicUsize::new(0), close: Notify::new() });
        conns.insert(id, state.clone());
        (id, state)
    }

    fn leave(&self, id: u64) {
        self.conns.lock().remove(&id);
    }

    fn len(&self) -> usize {
        self.conns.lock().len()
    }
}

/// Serves `service` on every connection `listener` accepts, until the task is dropped.
pub async fn serve(listener: Listener, service: Arc<dyn Service>, opts: ServeOpts) {
    let opts = Arc::new(opts);
    let registry = Arc::new(Registry { epoch: Instant::now(), next: AtomicU64::new(1), conns: Mutex::new(HashMap::new()) });
    // A descriptor kept in reserve: when accept fails for lack of descriptors,
    // freeing it lets us take the waiting connection and close it at once.
    let mut reserve = std::fs::File::open("/dev/null").ok();
    let mut last_complaint: Option<Instant> = None;
    loop {
        match listener.accept().await {
            Ok(stream) => {
                let (id, state) = registry.admit(opts.limits.max_conns);
                let (svc, opts, registry) = (service.clone(), opts.clone(), registry.clone());
                tokio::spawn(async move {
                    serve_conn(stream, svc, &opts, &registry, &state).await;
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

/// Handles one connection until the peer closes it, breaks the framing, stays
/// idle too long, or the registry closes it to make room.
async fn serve_conn(stream: Stream, service: Arc<dyn Service>, opts: &ServeOpts, registry: &Registry, state: &ConnState) {
    let (mut rd, mut wr) = stream.into_split();
    let mut both = tokio::io::join(&mut rd, &mut wr);
    let peer = tokio::select! {
        r = tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake::accept(&mut both, &opts.key)) => match r {
            Ok(Some(peer)) => peer,
            _ => return,
        },
        _ = state.close.notified() => return,
    };
    let (late_tx, mut late_rx) = mpsc::unbounded_channel::<BytesMut>();
    // Buffers start small (an idle connection holds little) and grow with what
    // the peer sends; `trim` gives back what one large frame needed.
    let mut buf = BytesMut::with_capacity(READ_CHUNK);
    let mut out = BytesMut::new();
    let touch = || state.last_active.store(registry.now(), Ordering::Release);
    loop {
        let idle = tokio::time::sleep(opts.limits.idle);
        buf.reserve(READ_CHUNK);
        tokio::select! {
            read = rd.read_buf(&mut buf) => {
                if !matches!(read, Ok(n) if n > 0) {
                    break;
                }
                touch();
                let (requests, broken) = take_requests(&mut buf);
                let answers = answer(&peer, &service, requests).await;
                let conn = Conn { late_tx: &late_tx, state };
                conn.encode(answers, &mut out);
                if let Some(errno) = broken {
                    frame::encode_response(&mut out, 0, 0, &Err(errno));
                }
                if !out.is_empty() && wr.write_all(&out).await.is_err() {
                    break;
                }
                out.clear();
                trim(&mut buf);
                trim(&mut out);
                if broken.is_some() {
                    break;
                }
            }
            Some(late) = late_rx.recv() => {
                touch();
                state.in_flight.fetch_sub(1, Ordering::AcqRel);
                if !late.is_empty() && wr.write_all(&late).await.is_err() {
                    break;
                }
            }
            _ = idle, if state.in_flight.load(Ordering::Acquire) == 0 => break,
            _ = state.close.notified() => break,
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

/// One request's answer: ready now, or a future (a lock wait).
enum Answer {
    Now(u64, u16, RpcResult),
    Later(u64, u16, BoxFuture<'static, RpcResult>),
}

/// Takes every whole frame out of `buf`. The errno says the framing broke (an
/// error frame must be sent and the connection closed).
fn take_requests(buf: &mut BytesMut) -> (Vec<Incoming>, Option<Errno>) {
    let mut out = Vec::new();
    loop {
        match frame::parse(buf) {
            Ok(f) => out.push((f.id, f.op, frame::decode_request(&f))),
            Err(FrameError::Incomplete) => return (out, None),
            Err(FrameError::TooLarge(_)) => return (out, Some(Errno::EMSGSIZE)),
            Err(FrameError::Malformed) => return (out, Some(Errno::EPROTO)),
        }
    }
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
    Answer::Later(id, op, Box::pin(crate::call_apart(service.clone(), peer.clone(), peer.acting_as(creds), req)))
}

/// Calls the service on each of a pass's requests, inside one
/// [`Service::in_pass`]: if what they wrote may not be durable, every answer
/// becomes its errno (one still to come is not started).
fn answer_now(peer: &Identity, service: &dyn Service, requests: Vec<Incoming>) -> Vec<Answer> {
    let mut requests = Some(requests);
    let mut answers = Vec::new();
    let durable = service.in_pass(&mut || answers = requests.take().unwrap_or_default().into_iter().map(|incoming| answer_one(peer, service, incoming)).collect());
    match durable {
        Ok(()) => answers,
        Err(e) => answers
            .into_iter()
            .map(|a| match a {
                Answer::Now(id, op, _) | Answer::Later(id, op, _) => Answer::Now(id, op, Err(e)),
            })
            .collect(),
    }
}

fn answer_one(peer: &Identity, service: &dyn Service, (id, op, decoded): Incoming) -> Answer {
    match decoded {
        Err(e) => Answer::Now(id, op, Err(e)),
        Ok((creds, req)) => match service.call(peer, peer.acting_as(creds), req) {
            Handled::Now(r) => Answer::Now(id, op, r),
            Handled::Later(f) => Answer::Later(id, op, f),
        },
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
    late_tx: &'a mpsc::UnboundedSender<BytesMut>,
    state: &'a ConnState,
}

impl Conn<'_> {
    /// Appends the ready answers to `out` and starts the later ones, whose
    /// replies come back over the channel; beyond [`MAX_IN_FLIGHT`] of those,
    /// `EAGAIN`.
    fn encode(&self, answers: Vec<Answer>, out: &mut BytesMut) {
        for a in answers {
            match a {
                Answer::Now(id, op, result) => encode_answer(out, id, op, &result),
                Answer::Later(id, op, _) if self.state.in_flight.load(Ordering::Acquire) >= MAX_IN_FLIGHT => {
                    encode_answer(out, id, op, &Err(Errno::EAGAIN));
                }
                Answer::Later(id, op, fut) => {
                    self.state.in_flight.fetch_add(1, Ordering::AcqRel);
                    let tx = self.late_tx.clone();
                    tokio::spawn(async move {
                        // Empty for a one-way request: it still gives its place back.
                        let mut late = BytesMut::new();
                        encode_answer(&mut late, id, op, &fut.await);
                        let _ = tx.send(late);
                    });
                }
            }
        }
    }
}
