//! A transport that fails servers on a test's word, so transactions that meet a
//! dead server can be tested without timing: the failure happens exactly at the
//! request the test names.

use canopy_proto::{Creds, Errno, Request};
use canopy_rpc::{RpcResult, Daemon, Transport};
use futures::future::BoxFuture;
use parking_lot::Mutex;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, Semaphore};

/// A transport that fails servers as a test says, deterministically:
/// [`FaultyTransport::down`] refuses every request to a server (`ECONNREFUSED`:
/// it is not running), and [`FaultyTransport::die_after`] lets the next request
/// of one kind to a server be applied, then loses its reply (`ENOTCONN`) and takes
/// the server down: a crash after its commit, before it answered.
/// [`FaultyTransport::refuse_next`] answers the next request of one kind to a
/// server with an error without applying it: a refusal the coordinator can
/// trust. [`FaultyTransport::slow`] delays every request of one kind: a long
/// job (a big subtree's recovery) without building a big subtree;
/// [`FaultyTransport::on_each`] runs a test's code before each.
/// [`FaultyTransport::hold_next`] holds the next request of one kind to a
/// server on its way until the test lets it go: a step sent in time that
/// arrives late.
pub struct FaultyTransport {
    inner: Arc<dyn Transport>,
    faults: Mutex<Faults>,
}

#[derive(Default)]
struct Faults {
    down: HashSet<u32>,
    die_after: Option<(u32, &'static str)>,
    refuse_next: Option<(u32, &'static str, Errno)>,
    slow: Option<(&'static str, Duration)>,
    on_each: Option<(&'static str, Arc<dyn Fn() + Send + Sync>)>,
    hold_next: Option<(u32, &'static str, mpsc::UnboundedSender<()>, Arc<Semaphore>)>,
}

impl FaultyTransport {
    pub fn new(inner: Arc<dyn Transport>) -> FaultyTransport {
        FaultyTransport { inner, faults: Mutex::new(Faults::default()) }
    }

    pub fn down(&self, server: u32) {
        self.faults.lock().down.insert(server);
    }

    pub fn revive(&self, server: u32) {
        self.faults.lock().down.remove(&server);
    }

    /// The next request named `op` (as in `Request::name`) to `server` is applied,
    /// its reply lost, and the server goes down.
    pub fn die_after(&self, server: u32, op: &'static str) {
        self.faults.lock().die_after = Some((server, op));
    }

    /// The next request named `op` to `server` is not applied and is answered
    /// `errno`; the server stays up.
    pub fn refuse_next(&self, server: u32, op: &'static str, errno: Errno) {
        self.faults.lock().refuse_next = Some((server, op, errno));
    }

    /// Every request named `op`, to any server, is sent `delay` late.
    pub fn slow(&self, op: &'static str, delay: Duration) {
        self.faults.lock().slow = Some((op, delay));
    }

    /// Every request named `op`, to any server, first runs `f` (a test moving
    /// its manual clock: a job that takes time without taking it).
    pub fn on_each(&self, op: &'static str, f: Arc<dyn Fn() + Send + Sync>) {
        self.faults.lock().on_each = Some((op, f));
    }

    /// The next request named `op` to `server` waits on its way until the
    /// test adds a permit to the semaphore answered; the receiver hears when
    /// it is held.
    pub fn hold_next(&self, server: u32, op: &'static str) -> (mpsc::UnboundedReceiver<()>, Arc<Semaphore>) {
        let (held, at) = mpsc::unbounded_channel();
        let release = Arc::new(Semaphore::new(0));
        self.faults.lock().hold_next = Some((server, op, held, release.clone()));
        (at, release)
    }
}

impl Transport for FaultyTransport {
    fn servers(&self) -> u32 {
        self.inner.servers()
    }

    fn call<'a>(&'a self, target: Daemon, creds: &'a Creds, req: Request) -> BoxFuture<'a, RpcResult> {
        Box::pin(async move {
            let Daemon::Server(i) = target else { return self.inner.call(target, creds, req).await };
            let delay = self.faults.lock().slow.filter(|(op, _)| *op == req.name()).map(|(_, d)| d);
            let each = self.faults.lock().on_each.as_ref().filter(|(op, _)| *op == req.name()).map(|(_, f)| f.clone());
            if let Some(f) = each {
                f();
            }
            if let Some(d) = delay {
                tokio::time::sleep(d).await;
            }
            let hold = {
                let mut f = self.faults.lock();
                match &f.hold_next {
                    Some((s, op, _, _)) if (*s, *op) == (i, req.name()) => f.hold_next.take(),
                    _ => None,
                }
            };
            if let Some((_, _, held, release)) = hold {
                let _ = held.send(());
                let _ = release.acquire().await.map(|p| p.forget());
            }
            let dies = {
                let mut f = self.faults.lock();
                if f.down.contains(&i) {
                    return Err(Errno::ECONNREFUSED);
                }
                if let Some((_, _, errno)) = f.refuse_next.filter(|(s, op, _)| (*s, *op) == (i, req.name())) {
                    f.refuse_next = None;
                    return Err(errno);
                }
                let dies = f.die_after == Some((i, req.name()));
                if dies {
                    f.die_after = None;
                    f.down.insert(i);
                }
                dies
            };
            let r = self.inner.call(target, creds, req).await;
            if dies {
                return Err(Errno::ENOTCONN);
            }
            r
        })
    }
}
