//! A request that may wait long (an IndexFS mutation waiting out a lease) is
//! answered apart: the requests sent with it on the same connection, or to
//! the same in-process server, are answered meanwhile. The waiting handler
//! here is released only by a later request's handler, so a transport that
//! held the rest behind it would make it time out.

use canopy_proto::auth::{Identity, Key};
use canopy_proto::{Creds, Errno, Reply, Request};
use canopy_rpc::conn::Connection;
use canopy_rpc::server::{ConnLimits, ServeOpts};
use canopy_rpc::transport::Daemon;
use canopy_rpc::{ClientAuth, Handled, InProcTransport, Service, Transport};
use parking_lot::{Condvar, Mutex};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

const T: Duration = Duration::from_secs(20);

/// `Stats` waits (up to 10 s) until a `Ping` has been answered.
#[derive(Default)]
struct Gate {
    pinged: Mutex<bool>,
    rang: Condvar,
    /// A `Stats` handler is waiting.
    entered: AtomicBool,
}

impl Service for Gate {
    fn call(&self, _peer: &Identity, _creds: Creds, req: Request) -> Handled {
        let mut pinged = self.pinged.lock();
        match req {
            Request::Ping => {
                *pinged = true;
                self.rang.notify_all();
                Handled::Now(Ok(Reply::Unit))
            }
            Request::Stats => {
                self.entered.store(true, Ordering::SeqCst);
                let _ = self.rang.wait_while_for(&mut pinged, |p| !*p, Duration::from_secs(10));
                Handled::Now(if *pinged { Ok(Reply::Unit) } else { Err(Errno::ETIMEDOUT) })
            }
            _ => Handled::Now(Err(Errno::ENOSYS)),
        }
    }

    fn waits(&self, req: &Request) -> bool {
        matches!(req, Request::Stats)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tcp_a_waiting_request_does_not_hold_up_its_connection() {
    let key = Key::from_bytes([7; 32]);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(canopy_rpc::server::serve(listener.into(), Arc::new(Gate::default()), ServeOpts { key: key.clone(), limits: ConnLimits::default() }));
    let conn = Connection::connect(&addr, &ClientAuth { identity: Identity::Cluster, key }, T).await.unwrap();
    let root = Creds::root();
    // One connection: the wait goes first, the ping that releases it after.
    let (waited, pinged) = tokio::join!(conn.call(&root, &Request::Stats, T), conn.call(&root, &Request::Ping, T));
    assert_eq!(pinged, Ok(Reply::Unit));
    assert_eq!(waited, Ok(Reply::Unit), "the ping was held behind the waiting request");
}

#[tokio::test(flavor = "current_thread")]
async fn in_process_a_waiting_request_does_not_hold_up_the_runtime() {
    let gate = Arc::new(Gate::default());
    let t = Arc::new(InProcTransport::new(vec![gate.clone()], gate.clone()));
    let waiter = {
        let t = t.clone();
        tokio::spawn(async move { t.call(Daemon::Server(0), &Creds::root(), Request::Stats).await })
    };
    // The runtime's one thread: had the waiting handler taken it, this task
    // would not run again until the wait timed out.
    while !gate.entered.load(Ordering::SeqCst) {
        tokio::task::yield_now().await;
    }
    assert_eq!(t.call(Daemon::Server(0), &Creds::root(), Request::Ping).await, Ok(Reply::Unit));
    assert_eq!(waiter.await.unwrap(), Ok(Reply::Unit), "the ping was held behind the waiting request");
}
