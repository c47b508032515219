//! An in-process cluster: N metadata servers and a lock service in this process,
//! over memory or RocksDB stores, reached through the in-process transport. Used by
//! the semantics suite, the model tests, and simulations larger than the machine.
//!
//! As in `canopy server`, each server runs delegated operations
//! ([`canopy_client::delegate`]) with a cluster-key client of its own; clients
//! reach the cluster as the cluster key ([`InProcCluster::client`]) or as one
//! user's key ([`InProcCluster::user_client`]).

use crate::faulty::FaultyTransport;
use canopy_client::delegate::Delegating;
use canopy_client::txn::StepHook;
use canopy_client::{open_namespace, Backend, Client, NsOptions};
use canopy_rpc::Transport;
use canopy_lock::service::{LockDaemon, CFS as LOCK_CFS};
use canopy_lock::LockService;
use canopy_proto::auth::Identity;
use canopy_proto::clock::{ManualClock, SharedClock, SystemClock};
use canopy_proto::Creds;
use canopy_rpc::{InProcTransport, Service};
use canopy_server::keys::{with_entry_cache, ALL_CFS, DEFAULT_ENTRY_CACHE_MIB};
use canopy_server::{random_proof_key, MetaServer, ModeOptions, ServerConfig};
use canopy_store::{Durability, MemStore, RocksStore, SharedStore};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// A root client of `mode` over `t`, reading time from `clock` unless `opts`
/// names another.
fn root_client(mode: &str, t: Arc<dyn Transport>, mut opts: NsOptions, clock: &SharedClock) -> Client {
    opts.clock.get_or_insert_with(|| clock.clone());
    Client::new(open_namespace(&named(mode), Backend::Cluster(t), opts).expect("a mode over a cluster"), Creds::root())
}

pub struct InProcCluster {
    pub servers: Vec<Arc<MetaServer>>,
    pub lock: Arc<LockService>,
    transport: Arc<FaultyTransport>,
    inproc: Arc<InProcTransport>,
    delegating: Vec<Arc<Delegating>>,
    client: Client,
    mode: &'static str,
    /// What the servers, the lock service and the clients made here read time
    /// from: the system's, or a test's manual clock.
    clock: SharedClock,
    /// That clock, if it is manual ([`InProcCluster::pass`] moves it).
    manual: Option<Arc<ManualClock>>,
}

impl InProcCluster {
    /// `n` ShardFS servers over in-memory stores.
    pub fn memory(n: u32) -> InProcCluster {
        InProcCluster::memory_mode("shardfs", n)
    }

    /// `n` servers of `mode` over in-memory stores.
    pub fn memory_mode(mode: &'static str, n: u32) -> InProcCluster {
        InProcCluster::memory_with(n, named(mode))
    }

    /// `n` servers of the mode `opts` configures, over in-memory stores.
    pub fn memory_with(n: u32, opts: ModeOptions) -> InProcCluster {
        InProcCluster::memory_on(n, opts, SystemClock::shared())
    }

    /// `n` servers of `mode` over in-memory stores, all on a manual clock:
    /// leases run out when the test calls [`InProcCluster::pass`], at once.
    pub fn memory_manual(mode: &'static str, n: u32) -> InProcCluster {
        let manual = manual_clock();
        let mut c = InProcCluster::memory_on(n, named(mode), manual.clone());
        c.manual = Some(manual);
        c
    }

    /// The cluster's manual clock, if it runs on one.
    pub fn manual_clock(&self) -> Option<Arc<ManualClock>> {
        self.manual.clone()
    }

    /// Lets `ms` milliseconds pass for the cluster: on a manual clock, moved
    /// at once; on the system's, waited out.
    pub async fn pass(&self, ms: u64) {
        match &self.manual {
            Some(m) => {
                m.advance(ms);
                // What was waiting on time looks again.
                tokio::task::yield_now().await;
            }
            None => tokio::time::sleep(Duration::from_millis(ms)).await,
        }
    }

    /// `n` servers of the mode `opts` configures, over in-memory stores, every
    /// part reading time from `clock` (a test's `ManualClock`: leases run out
    /// when the test moves it, not in real time).
    pub fn memory_on(n: u32, opts: ModeOptions, clock: SharedClock) -> InProcCluster {
        let stores = (0..n).map(|_| Arc::new(MemStore::new(ALL_CFS)) as SharedStore).collect();
        InProcCluster::over(stores, Arc::new(MemStore::new(LOCK_CFS)), opts, clock)
    }

    /// `n` ShardFS servers over RocksDB stores under `dir`.
    pub fn rocks(n: u32, dir: &Path) -> InProcCluster {
        InProcCluster::rocks_mode("shardfs", n, dir)
    }

    /// `n` servers of `mode` over RocksDB stores under `dir`.
    pub fn rocks_mode(mode: &'static str, n: u32, dir: &Path) -> InProcCluster {
        InProcCluster::rocks_with(n, dir, named(mode))
    }

    /// `n` servers of `mode` over RocksDB stores under `dir`, all on a manual
    /// clock ([`InProcCluster::memory_manual`]).
    pub fn rocks_manual(mode: &'static str, n: u32, dir: &Path) -> InProcCluster {
        let manual = manual_clock();
        let mut c = InProcCluster::rocks_on(n, dir, named(mode), manual.clone());
        c.manual = Some(manual);
        c
    }

    /// `n` servers of the mode `opts` configures, over RocksDB stores under `dir`.
    pub fn rocks_with(n: u32, dir: &Path, opts: ModeOptions) -> InProcCluster {
        InProcCluster::rocks_on(n, dir, opts, SystemClock::shared())
    }

    /// [`InProcCluster::rocks_with`], every part reading time from `clock`.
    pub fn rocks_on(n: u32, dir: &Path, opts: ModeOptions, clock: SharedClock) -> InProcCluster {
        let open = |sub: String, cfs| Arc::new(RocksStore::open(&dir.join(sub), cfs, Durability::Wal).expect("open store")) as SharedStore;
        // Cached as a daemon's store is, so the tests read through the cache.
        let stores = (0..n).map(|i| with_entry_cache(open(format!("server-{i}"), ALL_CFS), DEFAULT_ENTRY_CACHE_MIB)).collect();
        InProcCluster::over(stores, open("lockd".into(), LOCK_CFS), opts, clock)
    }

    fn over(stores: Vec<SharedStore>, lock_store: SharedStore, opts: ModeOptions, clock: SharedClock) -> InProcCluster {
        let (n, mode) = (stores.len() as u32, opts.name());
        let proof_key = random_proof_key();
        let open = |i: usize, s: SharedStore| {
            let cfg = ServerConfig { index: i as u32, servers: n };
            Arc::new(MetaServer::open_with(&opts, cfg, s, clock.clone(), proof_key).expect("open server"))
        };
        let servers: Vec<Arc<MetaServer>> = stores.into_iter().enumerate().map(|(i, s)| open(i, s)).collect();
        let lock = LockService::open_with_clock(lock_store, clock.clone()).expect("open lock service");
        // As `canopy server` does before it serves.
        let open = lock.transactions();
        for s in servers.iter().filter(|s| s.needs_open_transactions()) {
            s.open_transactions(&open).expect("open transactions");
        }
        let delegating: Vec<Arc<Delegating>> = servers.iter().map(|s| Arc::new(Delegating::new(s.clone()))).collect();
        let services: Vec<Arc<dyn Service>> = delegating.iter().map(|s| s.clone() as Arc<dyn Service>).collect();
        let inproc = Arc::new(InProcTransport::new(services, Arc::new(LockDaemon(lock.clone()))));
        for d in &delegating {
            d.set_client(root_client(mode, inproc.clone(), NsOptions::default(), &clock));
        }
        for s in &servers {
            s.start_background(inproc.clone());
        }
        let transport = Arc::new(FaultyTransport::new(inproc.clone()));
        let client = root_client(mode, transport.clone(), NsOptions::default(), &clock);
        InProcCluster { servers, lock, transport, inproc, delegating, client, mode, clock, manual: None }
    }

    /// A root client with its own counters that stops at each transaction step
    /// for `hook`, asking for leases of `lease_ms`.
    pub fn client_with_hook(&self, hook: Arc<dyn StepHook>, lease_ms: u32) -> Client {
        root_client(self.mode, self.transport.clone(), NsOptions { hook: Some(hook), lease_ms: Some(lease_ms), ..NsOptions::default() }, &self.clock)
    }

    /// A root client with its own counters.
    pub fn fresh_client(&self) -> Client {
        self.client_with(NsOptions::default())
    }

    /// A root client with its own counters that asks for leases of
    /// `lease_ms`: a test's coordinator whose locks recovery may take soon.
    pub fn client_with_lease(&self, lease_ms: u32) -> Client {
        self.client_with(NsOptions { lease_ms: Some(lease_ms), ..NsOptions::default() })
    }

    /// A root client with its own counters, set up as `opts` says.
    pub fn client_with(&self, opts: NsOptions) -> Client {
        root_client(self.mode, self.transport.clone(), opts, &self.clock)
    }

    /// This cluster's transport (with its faults), for callers that build their
    /// own clients.
    pub fn transport(&self) -> Arc<dyn Transport> {
        self.transport.clone()
    }

    /// A client acting as root.
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// A client holding only `creds`' user key: its requests carry that identity
    /// whatever they claim, and its operations are delegated to the servers.
    pub fn user_client(&self, creds: Creds) -> Client {
        let t = Arc::new(self.inproc.as_peer(Identity::User(creds.clone())));
        let ns = open_namespace(&named(self.mode), Backend::Cluster(t), NsOptions { delegate: true, clock: Some(self.clock.clone()), ..NsOptions::default() }).expect("a known mode");
        Client::new(ns, creds)
    }

    /// A root client holding the cluster key whose operations are delegated to
    /// the servers (what a user-key client does), so the semantics suite covers
    /// delegation too.
    pub fn delegating_client(&self) -> Client {
        self.client_with(NsOptions { delegate: true, ..NsOptions::default() })
    }

    /// The mode its servers and clients run.
    pub fn mode(&self) -> &'static str {
        self.mode
    }

    /// Server failures for every client of this cluster.
    pub fn faults(&self) -> &FaultyTransport {
        &self.transport
    }

    /// Runs `op` (a coordinator's operation, or a recoverer's, whose lease is
    /// `lease_ms`) with its next `step` to `server` held on its way. Once the
    /// step is held and the lease has run out (its sender is as good as
    /// dead), a fresh client recovers that one transaction, `meanwhile` runs,
    /// and then the step arrives: answers what `op` got.
    pub async fn step_held_past_recovery<T: Send + 'static>(
        &self,
        server: u32,
        step: &'static str,
        lease_ms: u32,
        op: impl std::future::Future<Output = T> + Send + 'static,
        meanwhile: impl std::future::Future<Output = ()>,
    ) -> T {
        let (mut held, release) = self.faults().hold_next(server, step);
        let running = tokio::spawn(op);
        tokio::time::timeout(Duration::from_secs(20), held.recv()).await.expect("the step was never sent").unwrap();
        self.pass(lease_ms as u64 + 100).await;
        assert_eq!(self.fresh_client().repair().await, Ok(1), "the next recoverer finishes the transaction");
        meanwhile.await;
        release.add_permits(1);
        running.await.unwrap()
    }

    /// Stops the cluster as `kill -9` of every daemon would: background work
    /// ends where it is, and the stores close once the clients made from the
    /// cluster are gone, so a test may reopen them at once.
    pub fn crash(self) {
        self.shut_down();
    }

    /// [`InProcCluster::crash`], for a test that drops the cluster itself
    /// while clients made from it may still run: its stores close once they
    /// are gone, rather than writing on after the test removed their
    /// directory (RocksDB, assertions on, aborts on the write after a failed
    /// one).
    pub fn shut_down(&self) {
        for s in &self.servers {
            s.stop_background();
        }
        // A server's own client reaches the servers: a cycle that would keep
        // every store open.
        for d in &self.delegating {
            d.clear_client();
        }
    }

    /// Runs the lock service's sweep (as `canopy lockd` does) every `every`, until
    /// the returned task is aborted.
    pub fn start_sweeper(&self, every: Duration) -> tokio::task::JoinHandle<()> {
        tokio::spawn(canopy_client::sweep::sweep_forever(self.fresh_client(), every))
    }
}

/// Mode `mode` with its default options; tests name only modes that exist.
fn named(mode: &str) -> ModeOptions {
    ModeOptions::named(mode).expect("a known mode")
}

/// A manual clock for a test cluster: directory and file times start at a
/// plausible date, not 1970.
fn manual_clock() -> Arc<ManualClock> {
    // A server waiting out a lease moves it: the test moves it only where
    // it says time passes.
    let manual = ManualClock::moved_by_waits();
    manual.advance(1_800_000_000_000);
    manual
}
