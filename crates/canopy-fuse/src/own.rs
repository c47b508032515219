//! A FUSE thread's own runtime and client, for the handlers it runs in place.
//!
//! Run on the mount's shared runtime, a handler's RPC answer is read by a
//! runtime worker (woken by the socket), which then wakes the FUSE thread
//! waiting in `block_on`: two thread wake-ups per round trip. On a runtime of
//! its own, with connections of its own, the FUSE thread waits on its sockets
//! itself and the answer wakes it directly. Each FUSE thread that ran a
//! handler in place so holds one connection to each daemon. Only where the
//! mount is given a [`ClientFactory`]: not for a client that holds leases or
//! proofs (IndexFS, Giraffa), which its threads share in one client, since a
//! change by one client waits out the others' leases.
//!
//! Its connections are driven only while the thread runs a handler, so each
//! handler first lets the runtime take in what arrived meanwhile (a daemon that
//! went away is then seen as gone and reconnected to, rather than written to).

use canopy_client::Client;
use std::cell::{Cell, RefCell};
use std::future::Future;
use std::sync::Arc;

/// Makes a client like the mount's, on the runtime it is called within.
pub type ClientFactory = Arc<dyn Fn() -> Result<Client, String> + Send + Sync>;

struct Own {
    rt: tokio::runtime::Runtime,
    client: Client,
}

thread_local! {
    /// This thread's runtime and client, once made.
    static OWN: RefCell<Option<Own>> = const { RefCell::new(None) };
    /// Whether this thread is running a handler on its own runtime now.
    static RUNNING: Cell<bool> = const { Cell::new(false) };
    /// Whether making them failed (not tried again: the mount's shared
    /// runtime serves this thread's handlers instead).
    static FAILED: Cell<bool> = const { Cell::new(false) };
}

/// Runs `fut` to completion on this thread's own runtime, made with a client
/// from `make` the first time. `Err(fut)` when they cannot be made (or this
/// thread is already running a handler so): the caller runs it elsewhere.
pub(crate) fn block_on<F: Future>(make: &ClientFactory, fut: F) -> Result<F::Output, F> {
    if RUNNING.get() || !ready(make) {
        return Err(fut);
    }
    OWN.with_borrow(|own| {
        let own = own.as_ref().expect("made by ready");
        RUNNING.set(true);
        let _done = Done;
        Ok(own.rt.block_on(async {
            // Take in what the connections received since the last handler
            // (a closed one is marked broken before it is used).
            tokio::task::yield_now().await;
            fut.await
        }))
    })
}

/// Clears [`RUNNING`] however the handler ends (a panic included).
struct Done;

impl Drop for Done {
    fn drop(&mut self) {
        RUNNING.set(false);
    }
}

/// Whether this thread has its runtime and client, making them if need be.
fn ready(make: &ClientFactory) -> bool {
    if FAILED.get() {
        return false;
    }
    if OWN.with_borrow(Option::is_some) {
        return true;
    }
    match make_own(make) {
        Ok(own) => {
            OWN.set(Some(own));
            true
        }
        Err(e) => {
            eprintln!("canopy-fuse: a FUSE thread runs its handlers on the shared runtime: {e}");
            FAILED.set(true);
            false
        }
    }
}

fn make_own(make: &ClientFactory) -> Result<Own, String> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())?;
    let client = {
        let _in = rt.enter();
        make()?
    };
    Ok(Own { rt, client })
}

/// This thread's own client while it runs a handler on its own runtime (its
/// connections answer only there); `None` anywhere else.
pub(crate) fn client() -> Option<Client> {
    if !RUNNING.get() {
        return None;
    }
    OWN.with_borrow(|own| own.as_ref().map(|o| o.client.clone()))
}

/// Whether this thread is running a handler on its own runtime, where
/// blocking work cannot leave the runtime (`tokio::task::block_in_place`
/// needs a worker of a multi-threaded one).
pub(crate) fn running() -> bool {
    RUNNING.get()
}

#[cfg(test)]
mod tests {
    use super::*;
    use canopy_client::NsOptions;
    use canopy_testkit::InProcCluster;

    #[test]
    fn a_handler_in_place_uses_the_threads_own_client_and_only_there() {
        let shared = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let cluster = shared.block_on(async { InProcCluster::memory(2) });
        let made = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (c2, m2) = (cluster.transport(), made.clone());
        let make: ClientFactory = Arc::new(move || {
            m2.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok(Client::new(canopy_client::open_namespace(&canopy_client::cluster::ModeOptions::Shardfs(Default::default()), canopy_client::Backend::Cluster(c2.clone()), NsOptions::default())?, canopy_proto::Creds::root()))
        });
        assert!(client().is_none(), "no own client outside a handler");
        for _ in 0..3 {
            let r = block_on(&make, async {
                let own = client().expect("the thread's own client inside");
                assert!(running());
                own.stat("/").await.map(|a| a.kind)
            });
            assert_eq!(r.ok().map(|r| r.unwrap()), Some(canopy_proto::FileKind::Dir));
        }
        assert_eq!(made.load(std::sync::atomic::Ordering::SeqCst), 1, "made once per thread");
        assert!(!running() && client().is_none(), "nothing left set after a handler");
        // A second thread makes its own.
        let make2 = make.clone();
        std::thread::spawn(move || assert_eq!(block_on(&make2, async { client().is_some() }).ok(), Some(true))).join().unwrap();
        assert_eq!(made.load(std::sync::atomic::Ordering::SeqCst), 2);
        // Nested: the inner one is refused, to be run elsewhere.
        let nested = block_on(&make, async { block_on(&make, async {}).is_err() });
        assert_eq!(nested.ok(), Some(true));
    }
}
