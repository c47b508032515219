#![allow(dead_code)] // each test file uses part of the kit

//! A group of in-process members over memory stores, for the tests.

use canopy_proto::auth::Identity;
use canopy_proto::clock::SharedClock;
use canopy_proto::{Creds, Errno, Reply, Request};
use canopy_replica::router::{Router, RouterNetwork};
use canopy_replica::service::{Leading, ReplicatedService};
use canopy_replica::sessions::SESSIONS;
use canopy_replica::{Families, Member, MemberId, Proposal, ReplicatedStore, RAFT_CFS};
use canopy_rpc::{Handled, Service};
use canopy_store::{Batch, MemStore, Store};
use openraft::error::{ClientWriteError, RaftError};
use openraft::{Config, SnapshotPolicy};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub const DATA: &str = "data";

pub fn families() -> Families {
    Families::new(&[DATA, SESSIONS])
}

/// Fast timings for tests: a failover within about half a second.
pub fn test_config(snapshot_every: u64) -> Config {
    Config {
        heartbeat_interval: 50,
        election_timeout_min: 150,
        election_timeout_max: 300,
        snapshot_policy: SnapshotPolicy::LogsSinceLast(snapshot_every),
        max_in_snapshot_log_to_keep: 0,
        purge_batch_size: 1,
        ..canopy_replica::config()
    }
}

pub struct Group {
    pub router: Arc<Router>,
    pub stores: BTreeMap<MemberId, Arc<MemStore>>,
    pub members: BTreeMap<MemberId, Member>,
    pub config: Config,
    dir: tempfile::TempDir,
}

pub fn new_store() -> Arc<MemStore> {
    let mut cfs = vec![DATA, SESSIONS];
    cfs.extend_from_slice(RAFT_CFS);
    Arc::new(MemStore::new(&cfs))
}

impl Group {
    /// `n` members, founded as one group.
    pub async fn new(n: u64, seed: u64, config: Config) -> Group {
        let mut g = Group {
            router: Router::new(seed),
            stores: BTreeMap::new(),
            members: BTreeMap::new(),
            config,
            dir: tempfile::tempdir().unwrap(),
        };
        for id in 1..=n {
            g.stores.insert(id, new_store());
            g.start(id).await;
        }
        let all: BTreeMap<MemberId, String> = (1..=n).map(|id| (id, format!("m{id}"))).collect();
        g.members[&1].found(&all).await.unwrap();
        g
    }

    /// Starts member `id` over its store (a restart if it ran before).
    pub async fn start(&mut self, id: MemberId) {
        let store: Arc<dyn Store> = self.stores[&id].clone();
        let net = RouterNetwork { router: self.router.clone(), from: id };
        let snaps = self.dir.path().join(format!("snapshots-{id}"));
        let m = Member::open(id, store, families(), snaps, net, self.config.clone()).await.unwrap();
        self.router.add(id, m.peer.clone());
        self.members.insert(id, m);
    }

    /// Kills member `id`: off the network, its Raft stopped; its store stays.
    pub async fn kill(&mut self, id: MemberId) {
        self.router.remove(id);
        if let Some(m) = self.members.remove(&id) {
            let _ = m.raft.shutdown().await;
        }
    }

    /// The member every live member agrees leads, once there is one.
    pub async fn leader(&self) -> MemberId {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            // A leader cut off from the rest still believes it leads; the
            // one of the newest term is the group's.
            let newest = self
                .members
                .values()
                .map(|m| m.raft.metrics().borrow().clone())
                .filter(|m| m.state.is_leader())
                .max_by_key(|m| m.current_term);
            if let Some(m) = newest {
                return m.id;
            }
            assert!(Instant::now() < deadline, "no leader within 20 s");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Puts `key = value` through whichever member leads, retrying while
    /// leadership moves; answers the entry's index.
    pub async fn put(&self, key: &[u8], value: &[u8]) -> u64 {
        let mut b = Batch::new();
        b.put(DATA, key.to_vec(), value.to_vec());
        self.propose(Proposal::of_batch(&b)).await
    }

    pub async fn propose(&self, p: Proposal) -> u64 {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let l = self.leader().await;
            match self.members[&l].raft.client_write(p.clone()).await {
                Ok(r) => return r.data.index,
                Err(RaftError::APIError(ClientWriteError::ForwardToLeader(_))) => {}
                Err(e) => panic!("write failed: {e}"),
            }
            assert!(Instant::now() < deadline, "no write within 30 s");
        }
    }

    /// Waits until every live member has applied entry `index`.
    pub async fn applied_everywhere(&self, index: u64) {
        for m in self.members.values() {
            m.raft
                .wait(Some(Duration::from_secs(30)))
                .applied_index_at_least(Some(index), "catch up")
                .await
                .unwrap_or_else(|e| panic!("member {} did not apply {index}: {e}", m.id));
        }
    }

    /// Member `leader`'s service as a daemon runs it, leading in its
    /// current term over a fresh replicated store, with the service
    /// `over` makes over that store; and that store and service. Call
    /// within a runtime.
    pub fn lead<S: Service>(&self, leader: MemberId, clock: SharedClock, over: impl FnOnce(&Arc<ReplicatedStore>) -> Arc<S>) -> (Arc<ReplicatedService>, Arc<ReplicatedStore>, Arc<S>) {
        let m = &self.members[&leader];
        let svc = ReplicatedService::new(leader, m.raft.clone(), m.peer.clone(), clock);
        let store = ReplicatedStore::new(self.stores[&leader].clone(), m.raft.clone(), &tokio::runtime::Handle::current(), Duration::from_secs(20));
        let service = over(&store);
        svc.lead(Leading { term: m.raft.metrics().borrow().current_term, store: store.clone(), service: service.clone() });
        (svc, store, service)
    }

    /// Member `id`'s data, whole.
    pub fn data(&self, id: MemberId) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut out = Vec::new();
        self.stores[&id]
            .for_each(DATA, &[], &mut |k, v| {
                out.push((k.to_vec(), v.to_vec()));
                true
            })
            .unwrap();
        out
    }
}

/// `req` served in a read pass of its own on a blocking thread, as a
/// daemon's may be: its answer, whenever it comes, and whether it came at
/// once (not later, after a round of heartbeats or a wait).
pub async fn serve(svc: &Arc<ReplicatedService>, req: Request) -> (Result<Reply, Errno>, bool) {
    let s = svc.clone();
    let handled = tokio::task::spawn_blocking(move || {
        let (mut req, mut handled) = (Some(req), None);
        s.in_pass(&mut || handled = req.take().map(|r| s.call(&Identity::Cluster, Creds::root(), r))).unwrap();
        handled.unwrap()
    })
    .await
    .unwrap();
    match handled {
        Handled::Now(r) => (r, true),
        Handled::Later(f) => (f.await, false),
    }
}
