//! The client's view of a cluster: N metadata servers and a lock service, reached
//! over TCP or inside this process, behind one trait.

use crate::conn::Connection;
use crate::handshake::ClientAuth;
use crate::owed::{self, Owed};
use crate::{Handled, RpcResult, Service};
use canopy_proto::auth::Identity;
use canopy_proto::{Creds, Errno, Request};
use futures::future::BoxFuture;
use std::sync::Arc;
use std::time::Duration;

/// Which daemon a request is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Target {
    Server(u32),
    Lockd,
}

pub trait Transport: Send + Sync + 'static {
    /// How many metadata servers the cluster has.
    fn servers(&self) -> u32;
    fn call<'a>(&'a self, target: Target, creds: &'a Creds, req: Request) -> BoxFuture<'a, RpcResult>;

    /// Sends `req` without waiting for its answer, for an update the caller
    /// does not act on. Ends once `req` is written to the connection (so the
    /// process may exit after it), in order with this client's other requests
    /// to `target`: a later one is served after it. `Err`: it may not have
    /// been sent. If the connection breaks before the peer reads it, it is
    /// lost unnoticed (a later request goes on a new connection). By default,
    /// the call is awaited and its answer dropped (in-process transports
    /// answer at once anyway).
    fn post<'a>(&'a self, target: Target, creds: &'a Creds, req: Request) -> BoxFuture<'a, Result<(), Errno>> {
        Box::pin(async move { self.call(target, creds, req).await.map(drop) })
    }

    /// [`Transport::post`] for a post that may go a little late: where this
    /// transport shares a box of owed posts ([`TcpTransport::owing`]), it
    /// goes ahead of the next request to `target` from any transport sharing
    /// the box, or from the flusher within a few milliseconds
    /// ([`crate::owed`]); this client's later requests to `target` are still
    /// served after it, unless the flusher sent it meanwhile. Elsewhere it is
    /// posted now.
    fn post_soon<'a>(&'a self, target: Target, creds: &'a Creds, req: Request) -> BoxFuture<'a, Result<(), Errno>> {
        self.post(target, creds, req)
    }
}

/// Requests to a server index outside the cluster are refused with this.
fn unknown_target() -> RpcResult {
    Err(Errno::EINVAL)
}

/// One TCP endpoint, connected lazily and reconnected after a failure.
struct Endpoint {
    addr: String,
    conn: tokio::sync::Mutex<Option<Arc<Connection>>>,
}

impl Endpoint {
    async fn connection(&self, me: &ClientAuth, timeout: Duration) -> Result<Arc<Connection>, Errno> {
        let mut slot = self.conn.lock().await;
        if let Some(c) = slot.as_ref() {
            if !c.is_broken() {
                return Ok(c.clone());
            }
        }
        let c = Arc::new(Connection::connect(&self.addr, me, timeout).await?);
        *slot = Some(c.clone());
        Ok(c)
    }
}

pub struct TcpTransport {
    servers: Vec<Endpoint>,
    lockd: Endpoint,
    me: ClientAuth,
    timeout: Duration,
    owed: Option<Arc<Owed>>,
}

impl TcpTransport {
    pub fn new(servers: &[String], lockd: &str, me: ClientAuth, timeout: Duration) -> TcpTransport {
        let ep = |a: &str| Endpoint { addr: a.to_string(), conn: tokio::sync::Mutex::new(None) };
        TcpTransport { servers: servers.iter().map(|a| ep(a)).collect(), lockd: ep(lockd), me, timeout, owed: None }
    }

    /// This transport owes its [`Transport::post_soon`] posts in `owed`, and
    /// sends what `owed` holds for a daemon ahead of its own requests to it.
    /// Some transport sharing `owed` must run [`TcpTransport::flush_owed`].
    pub fn owing(self, owed: Arc<Owed>) -> TcpTransport {
        TcpTransport { owed: Some(owed), ..self }
    }

    /// The box of owed posts this transport shares, if any.
    pub fn owed(&self) -> Option<Arc<Owed>> {
        self.owed.clone()
    }

    /// Sends the owed posts that have waited [`owed::FLUSH_AFTER`], looking
    /// that often while any are owed, until the runtime stops. Run it on a
    /// runtime that is always driven (not a FUSE thread's own).
    pub async fn flush_owed(self: Arc<Self>) {
        let Some(owed) = self.owed.clone() else { return };
        loop {
            owed.wait_for_some().await;
            loop {
                tokio::time::sleep(owed::FLUSH_AFTER).await;
                for (target, frames) in owed.take_due(owed::FLUSH_AFTER) {
                    self.send_owed(target, &frames).await;
                }
                if owed.is_empty() {
                    break;
                }
            }
        }
    }

    /// Sends everything owed now (a client that stops).
    pub async fn flush_all_owed(&self) {
        let Some(owed) = self.owed.as_ref() else { return };
        for (target, frames) in owed.take_all() {
            self.send_owed(target, &frames).await;
        }
    }

    /// Owed frames, as a post is sent: lost if they cannot be (as a post
    /// lost with its connection).
    async fn send_owed(&self, target: Target, frames: &[u8]) {
        if let Ok(c) = self.connection(target).await {
            let _ = c.post_frames(frames, self.timeout).await;
        }
    }

    /// What is owed to `target`, taken to go ahead of a request to it.
    fn owed_to(&self, target: Target) -> Option<bytes::BytesMut> {
        self.owed.as_ref().and_then(|o| o.take(target))
    }
}

impl Transport for TcpTransport {
    fn servers(&self) -> u32 {
        self.servers.len() as u32
    }

    fn call<'a>(&'a self, target: Target, creds: &'a Creds, req: Request) -> BoxFuture<'a, RpcResult> {
        Box::pin(async move {
            let timeout = match &req {
                Request::Lock { wait_ms, .. } => self.timeout + Duration::from_millis(*wait_ms as u64),
                _ => self.timeout,
            };
            let c = self.connection(target).await?;
            let before = self.owed_to(target);
            c.call_after(before.as_deref().unwrap_or_default(), creds, &req, timeout).await
        })
    }

    fn post<'a>(&'a self, target: Target, creds: &'a Creds, req: Request) -> BoxFuture<'a, Result<(), Errno>> {
        Box::pin(async move {
            let c = self.connection(target).await?;
            let before = self.owed_to(target);
            c.post_after(before.as_deref().unwrap_or_default(), creds, &req, self.timeout).await
        })
    }

    fn post_soon<'a>(&'a self, target: Target, creds: &'a Creds, req: Request) -> BoxFuture<'a, Result<(), Errno>> {
        Box::pin(async move {
            match &self.owed {
                Some(owed) if owed.owe(target, creds, &req)? => Ok(()),
                _ => self.post(target, creds, req).await,
            }
        })
    }
}

impl TcpTransport {
    /// The connection to `target`, made if need be. Nothing was sent when it
    /// cannot be made: the outcome is certain, which ECONNREFUSED says (see
    /// `Connection::call`).
    async fn connection(&self, target: Target) -> Result<Arc<Connection>, Errno> {
        let ep = match target {
            Target::Server(i) => self.servers.get(i as usize).ok_or(Errno::EINVAL)?,
            Target::Lockd => &self.lockd,
        };
        ep.connection(&self.me, self.timeout).await.map_err(|e| match e {
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

    fn call<'a>(&'a self, target: Target, creds: &'a Creds, req: Request) -> BoxFuture<'a, RpcResult> {
        let service = match target {
            Target::Server(i) => self.servers.get(i as usize).cloned(),
            Target::Lockd => Some(self.lockd.clone()),
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
