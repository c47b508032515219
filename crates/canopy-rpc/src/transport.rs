//! The client's view of a cluster: N metadata servers and a lock service, reached
//! over TCP or inside this process, behind one trait.

use crate::conn::Connection;
use crate::handshake::ClientAuth;
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
}

impl TcpTransport {
    pub fn new(servers: &[String], lockd: &str, me: ClientAuth, timeout: Duration) -> TcpTransport {
        let ep = |a: &str| Endpoint { addr: a.to_string(), conn: tokio::sync::Mutex::new(None) };
        TcpTransport { servers: servers.iter().map(|a| ep(a)).collect(), lockd: ep(lockd), me, timeout }
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
            self.connection(target).await?.call(creds, &req, timeout).await
        })
    }

    fn post<'a>(&'a self, target: Target, creds: &'a Creds, req: Request) -> BoxFuture<'a, Result<(), Errno>> {
        Box::pin(async move { self.connection(target).await?.post(creds, &req, self.timeout).await })
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
