//! Moving requests between clients and daemons.
//!
//! - [`Service`]: what a daemon is to the transport: credentials and a request in,
//!   a reply out, now or later (the lock service answers a blocked lock later).
//! - [`socket`]: TCP or Unix domain sockets, told apart by the address;
//!   [`unix_conn`]: a Unix socket watched for input only.
//! - [`server`]: the accept and connection loops. The connection layer is the
//!   only code that touches a socket: it does the handshake, reads frames, answers
//!   malformed ones and closes, batches responses into few writes, and bounds
//!   connections, idle time and replies in flight.
//! - [`handshake`]: protocol version and key proof, both sides.
//! - [`conn`]: a pipelined client connection: many requests in flight, responses
//!   matched by request id, writes coalesced.
//! - [`owed`]: one-way requests sent a little late, with the next request to
//!   the same daemon. It and [`transport`] import each other on purpose: the
//!   box of owed requests is kept per [`transport::Daemon`], and
//!   [`TcpTransport`] holds one; it is TCP's own part, in a file of its own.
//! - [`private_dir`]: directories and files only the daemon's user may read
//!   (stores, back-end directories, logs).
//! - [`transport`]: the client's view of a cluster ([`Transport`]): TCP
//!   ([`TcpTransport`]) or in-process ([`InProcTransport`]) behind one trait.

pub mod blocking;
pub mod conn;
pub mod groups;
pub mod handshake;
pub mod owed;
pub mod registry;
pub mod private_dir;
pub mod random;
pub mod server;
pub mod socket;
pub mod transport;
pub mod unix_conn;

use canopy_proto::auth::Identity;
use canopy_proto::{Creds, Errno, Reply, Request};
use futures::future::BoxFuture;

pub type RpcResult = Result<Reply, Errno>;

/// A reply available at once, or one that completes later.
pub enum Handled {
    Now(RpcResult),
    Later(BoxFuture<'static, RpcResult>),
}

/// A daemon as the transport sees it. `peer` is whom the connection proved to be;
/// for a user key, `creds` are already that user's, whatever the request said.
pub trait Service: Send + Sync + 'static {
    fn call(&self, peer: &Identity, creds: Creds, req: Request) -> Handled;

    /// Whether answering `req` may block the calling thread (a synced write, a
    /// long scan): the TCP server then answers it off the reactor.
    fn blocks(&self, _req: &Request) -> bool {
        false
    }

    /// Whether answering `req` may wait a long time (for a lease to run out):
    /// it is then answered on a thread of its own and its reply sent when
    /// ready, so the requests that came with it on its connection are not
    /// held behind it.
    fn waits(&self, _req: &Request) -> bool {
        false
    }

    /// Runs `handlers` (the calls of one read pass, or one call answered
    /// apart), then makes what they wrote as durable as one call's write is,
    /// before any of their answers is sent: a store may then write its log
    /// once per pass rather than once per write. An error means what they
    /// wrote may not be durable: their answers are not sent, the caller
    /// hears the errno instead.
    fn in_pass(&self, handlers: &mut dyn FnMut()) -> Result<(), Errno> {
        handlers();
        Ok(())
    }

    /// As [`Service::in_pass`], for a service whose writes become durable
    /// after the pass (a replica group applies them): `Some(f)`: the pass's
    /// answers wait for `f` (its error becomes every answer), while the
    /// daemon goes on to its next pass.
    fn in_pass_later(&self, handlers: &mut dyn FnMut()) -> Result<Option<Durable>, Errno> {
        self.in_pass(handlers).map(|_| None)
    }
}

/// When a pass's writes are durable ([`Service::in_pass_later`]).
pub type Durable = BoxFuture<'static, Result<(), Errno>>;

/// Answers `req` on a blocking thread of its own (it may wait long, see
/// [`Service::waits`], or a service may have to wait before it can serve
/// it), then whatever the handler handed back.
pub async fn call_apart(service: std::sync::Arc<dyn Service>, peer: Identity, creds: Creds, req: Request) -> RpcResult {
    let call = move || {
        let mut input = Some((creds, req));
        let mut handled = None;
        let durable = service.in_pass(&mut || handled = input.take().map(|(creds, req)| service.call(&peer, creds, req)));
        (handled, durable)
    };
    match tokio::task::spawn_blocking(call).await {
        Ok((Some(Handled::Now(r)), Ok(()))) => r,
        Ok((Some(Handled::Later(f)), Ok(()))) => f.await,
        Ok((_, Err(e))) => Err(e),
        // The handler panicked: what it did is unknown.
        Ok((None, Ok(()))) | Err(_) => Err(Errno::EIO),
    }
}

pub use blocking::BlockingCaller;
pub use handshake::ClientAuth;
pub use transport::{InProcTransport, Daemon, TcpTransport, Transport};
