//! A batch's private metadata server (seed 002 §II-C): the same server code as
//! the cluster's, one ShardFS server over a RocksDB store in the batch's
//! directory, with a lock service of its own, reached in process. Nothing of
//! it is seen by anyone else until a commit.

use canopy_client::{open_namespace, Client, NsOptions};
use canopy_lock::service::{LockDaemon, CFS as LOCK_CFS};
use canopy_lock::LockService;
use canopy_proto::clock::SystemClock;
use canopy_proto::{Creds, Errno};
use canopy_rpc::{InProcTransport, Service};
use canopy_server::keys::ALL_CFS;
use canopy_server::{MetaServer, ModeOptions, ServerConfig};
use canopy_store::{Durability, MemStore, RocksStore, SharedStore};
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
    /// Opens (or makes) the private server whose store is `dir`, for `owner`.
    pub fn open(dir: &Path, owner: Creds) -> Result<Private, Errno> {
        let store: SharedStore = Arc::new(open_store(dir)?);
        let cfg = ServerConfig { index: 0, servers: 1 };
        let server = Arc::new(MetaServer::open_with("shardfs", cfg, store.clone(), SystemClock::shared(), ModeOptions::default()).map_err(|_| Errno::EIO)?);
        // A private mkdir or rename that dies with its process has no one to
        // recover it but its single server's state: its locks need not last.
        let lock = LockService::open(Arc::new(MemStore::new(LOCK_CFS))).map_err(|_| Errno::EIO)?;
        let t = Arc::new(InProcTransport::new(vec![server.clone() as Arc<dyn Service>], Arc::new(LockDaemon(lock.clone()))));
        let ns = open_namespace("shardfs", t, NsOptions::default()).map_err(|_| Errno::EIO)?;
        Ok(Private { store, client: Client::new(ns, owner), _server: server, _lock: lock })
    }
}

/// The private store; `EBUSY` if another process (or a handle in this one not
/// yet let go) keeps it open.
fn open_store(dir: &Path) -> Result<RocksStore, Errno> {
    RocksStore::open(dir, ALL_CFS, Durability::Wal).map_err(|e| if e.to_string().contains("lock") { Errno::EBUSY } else { Errno::EIO })
}
