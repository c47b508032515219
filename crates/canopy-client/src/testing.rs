//! An in-process cluster: N metadata servers and a lock service in this process,
//! over memory or RocksDB stores, reached through the in-process transport. Used by
//! the semantics suite, the model tests, and simulations larger than the machine.

use crate::shardfs::{ShardFs, StepHook};
use crate::Client;
use canopy_lock::service::{LockDaemon, CFS as LOCK_CFS};
use canopy_lock::LockService;
use canopy_proto::Creds;
use canopy_rpc::{InProcTransport, Service};
use canopy_server::keys::ALL_CFS;
use canopy_server::{MetaServer, ServerConfig};
use canopy_store::{Durability, MemStore, RocksStore, SharedStore};
use std::path::Path;
use std::sync::Arc;

pub struct InProcCluster {
    pub servers: Vec<Arc<MetaServer>>,
    pub lock: Arc<LockService>,
    transport: Arc<InProcTransport>,
    client: Client,
}

impl InProcCluster {
    /// `n` servers over in-memory stores.
    pub fn memory(n: u32) -> InProcCluster {
        let stores = (0..n).map(|_| Arc::new(MemStore::new(ALL_CFS)) as SharedStore).collect();
        InProcCluster::over(stores, Arc::new(MemStore::new(LOCK_CFS)))
    }

    /// `n` servers over RocksDB stores under `dir`.
    pub fn rocks(n: u32, dir: &Path) -> InProcCluster {
        let open = |sub: String, cfs| Arc::new(RocksStore::open(&dir.join(sub), cfs, Durability::Wal).expect("open store")) as SharedStore;
        let stores = (0..n).map(|i| open(format!("server-{i}"), ALL_CFS)).collect();
        InProcCluster::over(stores, open("lockd".into(), LOCK_CFS))
    }

    fn over(stores: Vec<SharedStore>, lock_store: SharedStore) -> InProcCluster {
        let n = stores.len() as u32;
        let servers: Vec<Arc<MetaServer>> = stores
            .into_iter()
            .enumerate()
            .map(|(i, s)| Arc::new(MetaServer::open(ServerConfig { index: i as u32, servers: n }, s).expect("open server")))
            .collect();
        let lock = LockService::open(lock_store).expect("open lock service");
        let services: Vec<Arc<dyn Service>> = servers.iter().map(|s| s.clone() as Arc<dyn Service>).collect();
        let transport = Arc::new(InProcTransport::new(services, Arc::new(LockDaemon(lock.clone()))));
        let client = Client::new(Arc::new(ShardFs::new(transport.clone())), Creds::root());
        InProcCluster { servers, lock, transport, client }
    }

    /// A root client with its own counters that stops at each transaction step
    /// for `hook`, asking for leases of `lease_ms`.
    pub fn client_with_hook(&self, hook: Arc<dyn StepHook>, lease_ms: u32) -> Client {
        let ns = ShardFs::with_hook(self.transport.clone(), hook).with_lease(lease_ms);
        Client::new(Arc::new(ns), Creds::root())
    }

    /// A root client with its own counters.
    pub fn fresh_client(&self) -> Client {
        Client::new(Arc::new(ShardFs::new(self.transport.clone())), Creds::root())
    }

    /// A client acting as root.
    pub fn client(&self) -> Client {
        self.client.clone()
    }
}
