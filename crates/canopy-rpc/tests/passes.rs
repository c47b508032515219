//! Every handler the server runs runs inside `Service::in_pass`, whether
//! answered in its read pass or apart, and the pass's verdict decides its
//! answer: a service whose writes did not become durable has its callers
//! hear the errno, not the reply its handler gave.

use canopy_proto::auth::{Identity, Key};
use canopy_proto::{Creds, Errno, Reply, Request};
use canopy_rpc::conn::Connection;
use canopy_rpc::server::{ConnLimits, ServeOpts};
use canopy_rpc::{ClientAuth, Handled, Service};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

const T: Duration = Duration::from_secs(20);

thread_local! {
    /// This thread runs handlers inside `in_pass`.
    static IN_PASS: Cell<bool> = const { Cell::new(false) };
}

/// Answers `Ping` in its pass, `ListTxns` later and `Stats` apart; counts handlers run outside
/// a pass; fails its passes while `fail` is set.
#[derive(Default)]
struct Passes {
    inside: AtomicU64,
    outside: AtomicU64,
    passes: AtomicU64,
    fail: AtomicBool,
}

impl Service for Passes {
    fn call(&self, _peer: &Identity, _creds: Creds, req: Request) -> Handled {
        let counter = if IN_PASS.with(Cell::get) { &self.inside } else { &self.outside };
        counter.fetch_add(1, Ordering::SeqCst);
        if req == Request::ListTxns {
            return Handled::Later(Box::pin(async { Ok(Reply::Unit) }));
        }
        Handled::Now(match req {
            Request::Ping | Request::Stats => Ok(Reply::Unit),
            _ => Err(Errno::ENOSYS),
        })
    }

    fn waits(&self, req: &Request) -> bool {
        matches!(req, Request::Stats)
    }

    fn in_pass(&self, handlers: &mut dyn FnMut()) -> Result<(), Errno> {
        IN_PASS.with(|p| p.set(true));
        handlers();
        IN_PASS.with(|p| p.set(false));
        self.passes.fetch_add(1, Ordering::SeqCst);
        if self.fail.load(Ordering::SeqCst) {
            return Err(Errno::EIO);
        }
        Ok(())
    }
}

/// Serves `svc` on a Unix socket in `dir`; a connection to it.
async fn connect(svc: Arc<Passes>, dir: &tempfile::TempDir) -> Connection {
    let key = Key::from_bytes([7; 32]);
    let addr = format!("unix:{}", dir.path().join("s.sock").display());
    let listener = canopy_rpc::socket::Listener::bind(&addr).unwrap();
    tokio::spawn(canopy_rpc::server::serve(listener, svc, ServeOpts { key: key.clone(), limits: ConnLimits::default() }));
    Connection::connect(&addr, &ClientAuth { identity: Identity::Cluster, key }, T).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_handler_runs_in_a_pass_whose_failure_its_caller_hears() {
    let dir = tempfile::tempdir().unwrap();
    let svc = Arc::new(Passes::default());
    let conn = connect(svc.clone(), &dir).await;
    let root = Creds::root();
    let burst = (0..64).map(|i| conn.call(&root, if i % 8 == 0 { &Request::Stats } else { &Request::Ping }, T));
    let answers = futures::future::join_all(burst).await;
    assert!(answers.iter().all(|a| *a == Ok(Reply::Unit)), "{answers:?}");
    assert_eq!((svc.inside.load(Ordering::SeqCst), svc.outside.load(Ordering::SeqCst)), (64, 0), "handlers inside and outside a pass");
    assert!(svc.passes.load(Ordering::SeqCst) >= 9, "the 8 answered apart have passes of their own");

    svc.fail.store(true, Ordering::SeqCst);
    assert_eq!(conn.call(&root, &Request::Ping, T).await, Err(Errno::EIO), "answered in its pass");
    assert_eq!(conn.call(&root, &Request::Stats, T).await, Err(Errno::EIO), "answered apart");
    assert_eq!(conn.call(&root, &Request::ListTxns, T).await, Err(Errno::EIO), "answered later");
    svc.fail.store(false, Ordering::SeqCst);
    assert_eq!(conn.call(&root, &Request::Ping, T).await, Ok(Reply::Unit), "the connection serves on");
    assert_eq!(conn.call(&root, &Request::ListTxns, T).await, Ok(Reply::Unit));
}
