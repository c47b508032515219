//! Members of groups in one process, and a network between them that a
//! test controls: links cut both ways, and messages dropped (before or
//! after they are served), duplicated and delayed, from a seeded random
//! source so a failing run can be replayed.

use crate::network::{Carrier, Failed, Link, Peer, PeerCall, PeerReply};
use crate::{GroupConfig, MemberId};
use openraft::error::Unreachable;
use openraft::network::RaftNetworkFactory;
use openraft::BasicNode;
use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

/// What the network does to messages besides carrying them.
#[derive(Debug, Clone, Default)]
pub struct Faults {
    /// Per mille of messages lost before they are served.
    pub drop_request: u32,
    /// Per mille of answers lost after the message was served.
    pub drop_reply: u32,
    /// Per mille of messages served twice.
    pub duplicate: u32,
    /// Each message waits up to this long first.
    pub delay_max: Duration,
    /// How many of the next snapshot messages (begin, chunk, install) are
    /// lost: a snapshot's sending interrupted.
    pub lose_snapshot_messages: u32,
}

#[derive(Default)]
struct Links {
    members: HashMap<MemberId, Arc<Peer>>,
    cut: HashSet<(MemberId, MemberId)>,
    faults: Faults,
}

pub struct Router {
    links: Mutex<Links>,
    rng: Mutex<StdRng>,
}


impl Router {
    pub fn new(seed: u64) -> Arc<Router> {
        Arc::new(Router { links: Mutex::default(), rng: Mutex::new(StdRng::seed_from_u64(seed)) })
    }

    pub fn add(&self, id: MemberId, peer: Arc<Peer>) {
        self.links.lock().members.insert(id, peer);
    }

    /// Takes a member off the network (a killed process).
    pub fn remove(&self, id: MemberId) -> Option<Arc<Peer>> {
        self.links.lock().members.remove(&id)
    }

    /// Cuts every link between `side` and the other members.
    pub fn partition(&self, side: &[MemberId]) {
        let mut l = self.links.lock();
        let all: Vec<MemberId> = l.members.keys().copied().collect();
        for a in side {
            for b in all.iter().filter(|b| !side.contains(b)) {
                l.cut.insert((*a, *b));
                l.cut.insert((*b, *a));
            }
        }
    }

    pub fn heal(&self) {
        self.links.lock().cut.clear();
    }

    pub fn set_faults(&self, faults: Faults) {
        self.links.lock().faults = faults;
    }

    fn lose_snapshot_message(&self) -> bool {
        let mut l = self.links.lock();
        let left = &mut l.faults.lose_snapshot_messages;
        let lose = *left > 0;
        *left = left.saturating_sub(1);
        lose
    }

    fn chance(&self, per_mille: u32) -> bool {
        per_mille > 0 && self.rng.lock().gen_range(0..1000) < per_mille
    }

    /// Carries `call` from `from` to `to` through the faults.
    pub async fn call(&self, from: MemberId, to: MemberId, call: PeerCall) -> Result<PeerReply, Unreachable> {
        let (peer, faults) = {
            let l = self.links.lock();
            let unreachable = l.cut.contains(&(from, to));
            match l.members.get(&to) {
                Some(p) if !unreachable => (p.clone(), l.faults.clone()),
                _ => return Err(Unreachable::new(&Failed(format!("member {to} unreachable from {from}")))),
            }
        };
        if !faults.delay_max.is_zero() {
            let ms = self.rng.lock().gen_range(0..=faults.delay_max.as_millis() as u64);
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
        if matches!(call, PeerCall::Begin { .. } | PeerCall::Chunk { .. } | PeerCall::Install { .. }) && self.lose_snapshot_message() {
            return Err(Unreachable::new(&Failed("snapshot message lost".into())));
        }
        if self.chance(faults.drop_request) {
            return Err(Unreachable::new(&Failed("request dropped".into())));
        }
        let reply = peer.serve(from, call.clone()).await;
        if self.chance(faults.duplicate) {
            let _ = peer.serve(from, call).await;
        }
        if self.chance(faults.drop_reply) {
            return Err(Unreachable::new(&Failed("reply dropped".into())));
        }
        Ok(reply)
    }
}

/// The network factory one member's Raft uses.
#[derive(Clone)]
pub struct RouterNetwork {
    pub router: Arc<Router>,
    pub from: MemberId,
}

/// The router's way from one member to another.
pub struct RouterCarrier {
    router: Arc<Router>,
    from: MemberId,
    to: MemberId,
}

impl RaftNetworkFactory<GroupConfig> for RouterNetwork {
    type Network = Link<RouterCarrier>;

    async fn new_client(&mut self, to: MemberId, _node: &BasicNode) -> Link<RouterCarrier> {
        Link { to, carrier: RouterCarrier { router: self.router.clone(), from: self.from, to } }
    }
}

impl Carrier for RouterCarrier {
    async fn carry(&mut self, call: PeerCall, _timeout: Duration) -> Result<PeerReply, Unreachable> {
        self.router.call(self.from, self.to, call).await
    }
}
