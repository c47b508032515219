//! A batch's private metadata server (seed 002 §II-C): the same server code as
//! the cluster's, one ShardFS server over a RocksDB store in the batch's
//! directory, with a lock service of its own over another, reached in
//! process. Nothing of it is seen by anyone else until a commit.
//!
//! Each `canopy batch exec` opens them anew. The lock service keeps its
//! transaction numbers (and what a killed exec left locked, recovered by the
//! next one whose locks conflict) in its own store, since a directory's id is
//! made from the number of the mkdir that made it: a number handed out again
//! would be an id in use.

use canopy_client::{open_namespace, Client, NsOptions};
use canopy_lock::service::{LockDaemon, CFS as LOCK_CFS};
use canopy_lock::LockService;
use canopy_proto::clock::SystemClock;
use canopy_proto::{Creds, Errno};
use canopy_rpc::{InProcTransport, Service};
use canopy_server::keys::ALL_CFS;
use canopy_server::{random_proof_key, MetaServer, ModeOptions, ServerConfig};
use canopy_store::{Durability, RocksStore, SharedStore};
use std::path::Path;
use std::sync::Arc;

/// The batch number the private server records for the write-back's
/// landings (its own batch, not the cluster's).
pub const WRITE_BACK_BATCH: u64 = 1;

pub struct Private {
    /// The private server's store, which a commit reads whole.
    pub store: SharedStore,
    /// The private namespace (paths relative to the batch's root).
    pub client: Client,
    _server: Arc<MetaServer>,
    _lock: Arc<LockService>,
}

impl Private {
    /// Opens (or makes) the private server whose store is `dir` and whose
    /// lock service's is `locks`, for `owner`.
    pub fn open(dir: &Path, locks: &Path, owner: Creds) -> Result<Private, Errno> {
        let store: SharedStore = Arc::new(open_store(dir, ALL_CFS)?);
        let cfg = ServerConfig { index: 0, servers: 1 };
        let server = Arc::new(MetaServer::open_with(&ModeOptions::Shardfs(Default::default()), cfg, store.clone(), SystemClock::shared(), random_proof_key()).map_err(|_| Errno::EIO)?);
        let lock = LockService::open(Arc::new(open_store(locks, LOCK_CFS)?)).map_err(|_| Errno::EIO)?;
        if server.needs_open_transactions() {
            server.open_transactions(&lock.transactions()).map_err(|_| Errno::EIO)?;
        }
        let t = Arc::new(InProcTransport::new(vec![server.clone() as Arc<dyn Service>], Arc::new(LockDaemon(lock.clone()))));
        let ns = open_namespace(&canopy_client::cluster::ModeOptions::Shardfs(Default::default()), canopy_client::Backend::Cluster(t), NsOptions::default()).map_err(|_| Errno::EIO)?;
        Ok(Private { store, client: Client::new(ns, owner), _server: server, _lock: lock })
    }
}

/// A private store; `EBUSY` if another process (or a handle in this one not
/// yet let go) keeps it open.
fn open_store(dir: &Path, cfs: &[&'static str]) -> Result<RocksStore, Errno> {
    RocksStore::open(dir, cfs, Durability::Wal).map_err(|e| if matches!(e, canopy_store::StoreError::InUse(_)) { Errno::EBUSY } else { Errno::EIO })
}
