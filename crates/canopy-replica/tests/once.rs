//! A mutation numbered in a session is applied once, however its tries and
//! the session's other requests meet on the leader.

mod kit;

use canopy_proto::auth::Identity;
use canopy_proto::clock::SystemClock;
use canopy_proto::{Creds, Errno, Reply, Request};
use canopy_replica::ReplicatedStore;
use canopy_rpc::{Handled, Service};
use canopy_store::{Batch, Store};
use kit::*;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How long the test waits for a step before it fails.
const STEP: Duration = Duration::from_secs(10);

/// Counts the mkdirs of each path, writing one key a call, and answers the
/// count; the first mkdir of `/slow` says it `entered`, then waits until
/// the test lets it go (`go`).
struct Counting {
    store: Arc<ReplicatedStore>,
    calls: Mutex<HashMap<String, u32>>,
    entered: Mutex<Sender<()>>,
    go: Mutex<Receiver<()>>,
}

impl Service for Counting {
    fn call(&self, _peer: &Identity, _creds: Creds, req: Request) -> Handled {
        let Request::Mkdir { path, .. } = req else { return Handled::Now(Err(Errno::ENOSYS)) };
        let n = {
            let mut calls = self.calls.lock();
            let n = calls.entry(path.clone()).or_default();
            *n += 1;
            *n
        };
        if path == "/slow" && n == 1 {
            self.entered.lock().send(()).unwrap();
            self.go.lock().recv_timeout(STEP).expect("the test lets the first try go");
        }
        let mut b = Batch::new();
        b.put(DATA, format!("{path} {n}").into_bytes(), vec![1]);
        match self.store.write(b) {
            Ok(()) => Handled::Now(Ok(Reply::Pong { server: n, servers: 0 })),
            Err(_) => Handled::Now(Err(Errno::EIO)),
        }
    }
}

/// A session begun now, numbered as a client numbers it: the second it
/// began in its high half.
fn new_session() -> u64 {
    (SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() << 32) | 1
}

fn mkdir(session: u64, seq: u64, path: &str) -> Request {
    let inner = Request::Mkdir { path: path.into(), mode: 0o755, id: seq + 10, fence: None };
    Request::Once { session, seq, done_below: 0, inner: postcard::to_allocvec(&inner).unwrap() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_and_the_sessions_next_request_wait_for_the_try_still_served() {
    let g = Group::new(1, 21, test_config(10_000)).await;
    let leader = g.leader().await;
    let ((entered_tx, entered), (go, go_rx)) = (channel(), channel());
    let (svc, _, counting) = g.lead(leader, SystemClock::shared(), |store| {
        Arc::new(Counting { store: store.clone(), calls: Mutex::default(), entered: Mutex::new(entered_tx), go: Mutex::new(go_rx) })
    });

    let session = new_session();
    // The first try of request 0 is being served ...
    let first = tokio::spawn({
        let svc = svc.clone();
        async move { serve(&svc, mkdir(session, 0, "/slow")).await.0 }
    });
    tokio::task::spawn_blocking(move || entered.recv_timeout(STEP)).await.unwrap().expect("the first try is served");
    // ... when its retry comes, and the session's next request.
    let retry = tokio::spawn({
        let svc = svc.clone();
        async move { serve(&svc, mkdir(session, 0, "/slow")).await.0 }
    });
    let next = tokio::spawn({
        let svc = svc.clone();
        async move { serve(&svc, mkdir(session, 1, "/next")).await.0 }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(counting.calls.lock().get("/next"), None, "the session's next request waits for the try being served");
    go.send(()).unwrap();

    let first = first.await.unwrap();
    assert_eq!(first, Ok(Reply::Pong { server: 1, servers: 0 }));
    assert_eq!(retry.await.unwrap(), first, "the retry is answered as the first try was");
    assert_eq!(next.await.unwrap(), Ok(Reply::Pong { server: 1, servers: 0 }));
    // Both answers are in the session's record: retried again, neither is
    // applied again.
    assert_eq!(serve(&svc, mkdir(session, 0, "/slow")).await.0, first);
    assert_eq!(serve(&svc, mkdir(session, 1, "/next")).await.0, Ok(Reply::Pong { server: 1, servers: 0 }));
    assert_eq!(*counting.calls.lock(), HashMap::from([("/slow".to_string(), 1), ("/next".to_string(), 1)]));
}
