//! The client's view of a cluster: N metadata servers and a lock service, reached
//! over TCP or inside this process, behind one trait.

use crate::conn::Connection;
use crate::groups::{Group, GroupCounts, Member, Session};
use crate::handshake::ClientAuth;
use crate::owed::{self, Owed, Taken};
use crate::{Handled, RpcResult, Service};
use canopy_proto::auth::Identity;
use canopy_proto::{Creds, Errno, Reply, Request};
use futures::future::join_all;
use futures::future::BoxFuture;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Which daemon a request is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Daemon {
    Server(u32),
    Lockd,
}

pub trait Transport: Send + Sync + 'static {
    /// How many metadata servers the cluster has.
    fn servers(&self) -> u32;
    fn call<'a>(&'a self, target: Daemon, creds: &'a Creds, req: Request) -> BoxFuture<'a, RpcResult>;

    /// Sends `req` without waiting for its answer, for an update the caller
    /// does not act on. Ends once `req` is written to the connection (so the
    /// process may exit after it), in order with this client's other requests
    /// to `target`: a later one is served after it. `Err`: it may not have
    /// been sent. If the connection breaks before the peer reads it, it is
    /// lost unnoticed (a later request goes on a new connection). By default,
    /// the call is awaited and its answer dropped (in-process transports
    /// answer at once anyway).
    fn post<'a>(&'a self, target: Daemon, creds: &'a Creds, req: Request) -> BoxFuture<'a, Result<(), Errno>> {
        Box::pin(async move { self.call(target, creds, req).await.map(drop) })
    }

    /// [`Transport::post`] for a post that may go a little late: where this
    /// transport shares a box of owed posts ([`TcpTransport::owing`]), it
    /// goes ahead of the next request to `target` from any transport sharing
    /// the box, or from the flusher within a few milliseconds
    /// ([`crate::owed`]). This client's later requests to `target` are
    /// served after it, unless another transport or the flusher took it
    /// meanwhile: then one may overtake it on its way. Use it only where that
    /// is harmless. Elsewhere it is posted now.
    fn post_soon<'a>(&'a self, target: Daemon, creds: &'a Creds, req: Request) -> BoxFuture<'a, Result<(), Errno>> {
        self.post(target, creds, req)
    }

    /// Redirects and failovers among the members of replica groups.
    fn group_counts(&self) -> GroupCounts {
        GroupCounts::default()
    }
}

/// Requests to a server index outside the cluster are refused with this.
fn unknown_target() -> RpcResult {
    Err(Errno::EINVAL)
}

/// One TCP endpoint, connected lazily, and again after a failure or once
/// quiet long enough that the server may close it ([`Connection::is_stale`]).
struct Endpoint {
    addr: String,
    conn: tokio::sync::Mutex<Option<Arc<Connection>>>,
}

impl Endpoint {
    async fn connection(&self, me: &ClientAuth, timeout: Duration) -> Result<Arc<Connection>, Errno> {
        let mut slot = self.conn.lock().await;
        if let Some(c) = slot.as_ref() {
            if !c.is_stale() {
                return Ok(c.clone());
            }
        }
        let c = Arc::new(Connection::connect(&self.addr, me, timeout).await?);
        *slot = Some(c.clone());
        Ok(c)
    }
}

pub struct TcpTransport {
    servers: Vec<Group<Endpoint>>,
    lockd: Group<Endpoint>,
    me: ClientAuth,
    timeout: Duration,
    owed: Option<Arc<Owed>>,
}

impl TcpTransport {
    /// Daemons of one member each.
    pub fn new(servers: &[String], lockd: &str, me: ClientAuth, timeout: Duration) -> TcpTransport {
        let one = |a: &String| vec![Member { id: 1, addr: a.clone() }];
        TcpTransport::of_groups(servers.iter().map(one).collect(), one(&lockd.to_string()), me, timeout)
    }

    /// Each metadata server and the lock service a replica group.
    pub fn of_groups(servers: Vec<Vec<Member>>, lockd: Vec<Member>, me: ClientAuth, timeout: Duration) -> TcpTransport {
        let group = |members: Vec<Member>| {
            let eps = members.into_iter().map(|m| {
                let ep = Endpoint { addr: m.addr.clone(), conn: tokio::sync::Mutex::new(None) };
                (m, ep)
            });
            Group::new(eps.collect())
        };
        TcpTransport { servers: servers.into_iter().map(group).collect(), lockd: group(lockd), me, timeout, owed: None }
    }

    fn group(&self, target: Daemon) -> Result<&Group<Endpoint>, Errno> {
        match target {
            Daemon::Server(i) => self.servers.get(i as usize).ok_or(Errno::EINVAL),
            Daemon::Lockd => Ok(&self.lockd),
        }
    }

    /// This transport owes its [`Transport::post_soon`] posts in `owed`, and
    /// sends what `owed` holds for a daemon ahead of its own requests to it.
    /// Some transport sharing `owed` must run [`TcpTransport::flush_owed`].
    pub fn owing(self, owed: Arc<Owed>) -> TcpTransport {
        TcpTransport { owed: Some(owed), ..self }
    }

    /// Sends the owed posts that have waited [`owed::FLUSH_AFTER`], looking
    /// that often while any are owed, until [`Owed::stop`]. Run it on a
    /// runtime that is always driven (not a FUSE thread's own).
    ///
    /// Each daemon's frames go in a task of their own, so one that does not
    /// answer (a connect to a host that is down waits up to the RPC timeout)
    /// holds up no other's; while such a send is in flight, what is owed to
    /// that daemon waits in the box, and the flusher sleeps while nothing
    /// else is owed (the send's end wakes it). Ends once the sends it
    /// started have.
    pub async fn flush_owed(self: Arc<Self>) {
        let Some(owed) = self.owed.clone() else { return };
        let sending: Arc<parking_lot::Mutex<HashSet<Daemon>>> = Arc::default();
        let mut sends = tokio::task::JoinSet::new();
        // Asleep while nothing is owed but to daemons with a send in flight.
        while owed.wait_for_some(&sending).await {
            while !owed.stopping() {
                tokio::time::sleep(owed::FLUSH_AFTER).await;
                while let Some(done) = sends.try_join_next() {
                    if let Err(e) = done {
                        eprintln!("canopy-client: a send of owed posts failed: {e}");
                    }
                }
                for taken in owed.take_due(owed::FLUSH_AFTER) {
                    let target = taken.target;
                    if !sending.lock().insert(target) {
                        owed.put_back(taken);
                        continue;
                    }
                    let in_flight = InFlight { target, sending: sending.clone(), owed: owed.clone() };
                    let me = self.clone();
                    sends.spawn(async move {
                        let _in_flight = in_flight;
                        me.send_owed(vec![taken], true).await;
                    });
                }
                if owed.only_for(&sending) {
                    break;
                }
            }
        }
        while sends.join_next().await.is_some() {}
    }

    /// Sends everything owed now (a client that stops, after
    /// [`Owed::stop`] and its flusher ended).
    pub async fn flush_all_owed(&self) {
        if let Some(owed) = self.owed.as_ref() {
            self.send_owed(owed.take_all(), false).await;
        }
    }

    /// Owed frames, to each daemon at once (one that does not answer holds
    /// up no other), as posts are sent. For the flusher (`flusher`), those
    /// certainly not sent (no connection) go back in the box to be tried
    /// again, and those sent are counted; at the end they are lost, as a
    /// post lost with its connection.
    async fn send_owed(&self, due: Vec<Taken>, flusher: bool) {
        let Some(owed) = self.owed.as_ref() else { return };
        join_all(due.into_iter().map(|taken| async move {
            let c = match self.connection(taken.target).await {
                Ok(c) => c,
                Err(_) if flusher => return owed.put_back(taken),
                Err(e) => return eprintln!("canopy-client: posts owed to {:?} not sent: {e}", taken.target),
            };
            match c.start_frames(&taken.frames) {
                Ok(end) => {
                    if flusher {
                        owed.flushed(&taken);
                    }
                    let _ = c.written(end, self.timeout).await;
                }
                Err(_) if flusher => owed.put_back(taken),
                Err(e) => eprintln!("canopy-client: posts owed to {:?} not sent: {e}", taken.target),
            }
        }))
        .await;
    }

    /// Runs `start` (which writes, or fails having written nothing) with what
    /// is owed to `target` ahead of its own frame; what it could not send
    /// goes back in the box.
    fn sending_owed<T>(&self, target: Daemon, start: impl FnOnce(&[u8]) -> Result<T, Errno>) -> Result<T, Errno> {
        let Some(owed) = self.owed.as_ref() else { return start(&[]) };
        let Some(taken) = owed.take(target) else { return start(&[]) };
        let r = start(&taken.frames);
        if r.is_err() {
            owed.put_back(taken);
        }
        r
    }
}

/// A flusher's send to `target` in flight, until dropped (also when the
/// send panics): then the flusher may send to it again, and is woken to.
struct InFlight {
    target: Daemon,
    sending: Arc<parking_lot::Mutex<HashSet<Daemon>>>,
    owed: Arc<Owed>,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.sending.lock().remove(&self.target);
        self.owed.nudge();
    }
}

impl Transport for TcpTransport {
    fn servers(&self) -> u32 {
        self.servers.len() as u32
    }

    fn group_counts(&self) -> GroupCounts {
        let all = self.servers.iter().chain(std::iter::once(&self.lockd)).map(|g| g.counts.get());
        all.fold(GroupCounts::default(), |a, c| GroupCounts {
            redirects: a.redirects + c.redirects,
            failovers: a.failovers + c.failovers,
            resent: a.resent + c.resent,
        })
    }

    fn call<'a>(&'a self, target: Daemon, creds: &'a Creds, req: Request) -> BoxFuture<'a, RpcResult> {
        Box::pin(async move {
            let timeout = match &req {
                Request::Lock { wait_ms, .. } => self.timeout + Duration::from_millis(*wait_ms as u64),
                _ => self.timeout,
            };
            let group = self.group(target)?;
            // Only a client that may send a mutation again (to another
            // member, after an unknown outcome) needs it applied once.
            let (req, seq) = match req.changes_nothing() || !group.replicated() {
                true => (req, None),
                false => {
                    let session = group.session(now_secs(), random_u32);
                    let (once, seq) = session.wrap(&req);
                    (once, Some(Ended { session, seq }))
                }
            };
            let deadline = Instant::now() + FAILOVER_WAIT;
            let mut round = 0u32;
            loop {
                let at = group.leader();
                let r = self.call_once(target, creds, &req, timeout).await;
                let again = match &r {
                    Ok(Reply::NotLeader { leader }) => {
                        group.redirected(at, *leader);
                        true
                    }
                    // Never sent: any member may take it.
                    Err(Errno::ECONNREFUSED) if group.replicated() => {
                        group.unreachable(at);
                        true
                    }
                    // Its answer lost: asked again under its session, or
                    // as it is if it changes nothing.
                    Err(Errno::ENOTCONN | Errno::ETIMEDOUT) if group.replicated() => {
                        group.unreachable(at);
                        if seq.is_some() {
                            group.counts.resent();
                        }
                        true
                    }
                    _ => false,
                };
                if !again || Instant::now() >= deadline {
                    drop(seq);
                    // Nobody led in time: the request was not applied.
                    return match r {
                        Ok(Reply::NotLeader { .. }) => Err(Errno::ECONNREFUSED),
                        r => r,
                    };
                }
                if group.leader() <= at {
                    // A round of the members: let an election end.
                    round += 1;
                    tokio::time::sleep(Duration::from_millis(20 * u64::from(round.min(10)))).await;
                }
            }
        })
    }

    fn post<'a>(&'a self, target: Daemon, creds: &'a Creds, req: Request) -> BoxFuture<'a, Result<(), Errno>> {
        Box::pin(async move {
            let c = self.connection(target).await?;
            let end = self.sending_owed(target, |before| c.start_post(before, creds, &req))?;
            c.written(end, self.timeout).await
        })
    }

    fn post_soon<'a>(&'a self, target: Daemon, creds: &'a Creds, req: Request) -> BoxFuture<'a, Result<(), Errno>> {
        Box::pin(async move {
            match &self.owed {
                Some(owed) if owed.owe(target, creds, &req)? => Ok(()),
                _ => self.post(target, creds, req).await,
            }
        })
    }
}

/// How long a request goes round a group's members for one that leads.
const FAILOVER_WAIT: Duration = Duration::from_secs(15);
/// How long a connection to one member of a group of more may take.
const MEMBER_CONNECT: Duration = Duration::from_secs(1);

/// Ends a mutation's number in its session when the call ends, however.
struct Ended {
    session: Arc<Session>,
    seq: u64,
}

impl Drop for Ended {
    fn drop(&mut self) {
        self.session.end(self.seq);
    }
}

fn now_secs() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// Random bits telling this client's sessions from others begun the same
/// second (the process id, should the kernel give none).
fn random_u32() -> u32 {
    crate::random::bytes().map_or(std::process::id(), u32::from_be_bytes)
}

impl TcpTransport {
    /// Sends `req` to `target`'s member believed to lead.
    async fn call_once(&self, target: Daemon, creds: &Creds, req: &Request, timeout: Duration) -> RpcResult {
        let c = self.connection(target).await?;
        let sent = match self.sending_owed(target, |before| c.start_call(before, creds, req, timeout)) {
            // Found broken before anything was written (the server closed
            // it meanwhile): certainly never sent, so sent again once, on
            // a new connection.
            Err(Errno::ECONNREFUSED) => {
                let c = self.connection(target).await?;
                self.sending_owed(target, |before| c.start_call(before, creds, req, timeout))?
            }
            r => r?,
        };
        sent.await
    }

    /// The connection to `target`, made if need be. Nothing was sent when it
    /// cannot be made: the outcome is certain, which ECONNREFUSED says (see
    /// `Connection::call`).
    async fn connection(&self, target: Daemon) -> Result<Arc<Connection>, Errno> {
        let group = self.group(target)?;
        let (_, ep) = group.members.get(group.leader()).ok_or(Errno::EINVAL)?;
        // A member whose host is gone answers nothing, not even a refusal:
        // another member is tried after a moment rather than a whole timeout.
        let timeout = if group.replicated() { self.timeout.min(MEMBER_CONNECT) } else { self.timeout };
        ep.connection(&self.me, timeout).await.map_err(|e| match e {
            Errno::EACCES | Errno::EPROTO => e,
            _ => Errno::ECONNREFUSED,
        })
    }
}

/// Daemons in this process, called directly: for tests and simulated clusters.
/// Every call comes from `peer`, as if it had proved that identity's key.
pub struct InProcTransport {
    servers: Vec<Arc<dyn Service>>,
    lockd: Arc<dyn Service>,
    peer: Identity,
}

impl InProcTransport {
    pub fn new(servers: Vec<Arc<dyn Service>>, lockd: Arc<dyn Service>) -> InProcTransport {
        InProcTransport { servers, lockd, peer: Identity::Cluster }
    }

    /// The same daemons, reached as `peer`.
    pub fn as_peer(&self, peer: Identity) -> InProcTransport {
        InProcTransport { servers: self.servers.clone(), lockd: self.lockd.clone(), peer }
    }
}

impl Transport for InProcTransport {
    fn servers(&self) -> u32 {
        self.servers.len() as u32
    }

    fn call<'a>(&'a self, target: Daemon, creds: &'a Creds, req: Request) -> BoxFuture<'a, RpcResult> {
        let service = match target {
            Daemon::Server(i) => self.servers.get(i as usize).cloned(),
            Daemon::Lockd => Some(self.lockd.clone()),
        };
        let Some(service) = service else { return Box::pin(async { unknown_target() }) };
        // As over TCP.
        let creds = self.peer.acting_as(creds.clone());
        Box::pin(async move {
            // A message on a network is a point where other tasks run: yield, so
            // concurrent clients interleave here as they would over TCP.
            tokio::task::yield_now().await;
            // As over TCP, a request that may wait long (a lease) waits on a
            // thread of its own, not on one the other clients' tasks need.
            if service.waits(&req) {
                return crate::call_apart(service, self.peer.clone(), creds, req).await;
            }
            match service.call(&self.peer, creds, req) {
                Handled::Now(r) => r,
                Handled::Later(f) => f.await,
            }
        })
    }
}
