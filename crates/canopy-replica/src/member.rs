//! One member of a group: its store, its Raft over that store, and how it
//! answers its peers.

use crate::network::Peer;
use crate::{Families, GroupConfig, LogStore, MemberId, Raft, StateMachine};
use canopy_store::Store;
use openraft::network::RaftNetworkFactory;
use openraft::{BasicNode, Config, SnapshotPolicy};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

/// The timings a group runs with. A follower that hears no leader for the
/// lease (the election timeout's upper end) plus an election timeout
/// stands for election, so a dead leader is replaced within about two
/// seconds; a heartbeat every 100 ms keeps a live one.
pub fn config() -> Config {
    Config {
        cluster_name: "canopy".into(),
        heartbeat_interval: 100,
        election_timeout_min: 500,
        election_timeout_max: 1000,
        snapshot_policy: SnapshotPolicy::LogsSinceLast(20_000),
        max_in_snapshot_log_to_keep: 1_000,
        ..Config::default()
    }
}

pub struct Member {
    pub id: MemberId,
    pub raft: Raft,
    pub peer: Arc<Peer>,
}

impl Member {
    /// Opens member `id` over `store` (which holds `families` and
    /// [`crate::RAFT_CFS`]), with snapshots in `snapshots`.
    pub async fn open<N: RaftNetworkFactory<GroupConfig>>(
        id: MemberId,
        store: Arc<dyn Store>,
        families: Families,
        snapshots: PathBuf,
        network: N,
        config: Config,
    ) -> Result<Member, String> {
        let config = Arc::new(config.validate().map_err(|e| e.to_string())?);
        let sm = StateMachine::open(store.clone(), families, snapshots).map_err(|e| e.to_string())?;
        let raft = Raft::new(id, config, network, LogStore::new(store), sm).await.map_err(|e| e.to_string())?;
        Ok(Member { id, peer: Arc::new(Peer::new(raft.clone())), raft })
    }

    /// Makes a new group of `members` (a no-op on a member already in one).
    pub async fn found(&self, members: &BTreeMap<MemberId, String>) -> Result<(), String> {
        if self.raft.is_initialized().await.map_err(|e| e.to_string())? {
            return Ok(());
        }
        let nodes: BTreeMap<MemberId, BasicNode> = members.iter().map(|(id, addr)| (*id, BasicNode::new(addr))).collect();
        self.raft.initialize(nodes).await.map_err(|e| e.to_string())
    }
}
