//! Members talking over the daemons' own sockets: a Raft message is a
//! `Request::Peer` on a connection proved with the cluster key, answered
//! with `Reply::PeerReply`.

use crate::network::{Carrier, Failed, Link, PeerCall, PeerReply};
use crate::{GroupConfig, MemberId};
use canopy_proto::{Creds, Reply, Request};
use canopy_rpc::conn::Connection;
use canopy_rpc::ClientAuth;
use openraft::error::Unreachable;
use openraft::network::RaftNetworkFactory;
use openraft::BasicNode;
use std::sync::Arc;
use std::time::Duration;

/// The network factory of a member whose peers listen on TCP or Unix
/// sockets (their addresses are in the group's membership).
#[derive(Clone)]
pub struct TcpPeers {
    pub me: MemberId,
    pub auth: Arc<ClientAuth>,
}

/// The way to one peer: its address, and a connection made when first
/// needed and again after one breaks.
pub struct TcpCarrier {
    me: MemberId,
    auth: Arc<ClientAuth>,
    addr: String,
    conn: Option<Arc<Connection>>,
}

impl RaftNetworkFactory<GroupConfig> for TcpPeers {
    type Network = Link<TcpCarrier>;

    async fn new_client(&mut self, to: MemberId, node: &BasicNode) -> Link<TcpCarrier> {
        Link { to, carrier: TcpCarrier { me: self.me, auth: self.auth.clone(), addr: node.addr.clone(), conn: None } }
    }
}

impl Carrier for TcpCarrier {
    async fn carry(&mut self, call: PeerCall, timeout: Duration) -> Result<PeerReply, Unreachable> {
        let unreachable = |why: String| Unreachable::new(&Failed(why));
        let conn = match self.conn.clone() {
            Some(c) if !c.is_broken() && !c.is_stale() => c,
            _ => {
                let c = Arc::new(Connection::connect(&self.addr, &self.auth, timeout).await.map_err(|e| unreachable(format!("{}: {e}", self.addr)))?);
                self.conn = Some(c.clone());
                c
            }
        };
        let req = Request::Peer { call: postcard::to_allocvec(&(self.me, call)).map_err(|e| unreachable(e.to_string()))? };
        match conn.call(&Creds::root(), &req, timeout).await {
            Ok(Reply::PeerReply(bytes)) => postcard::from_bytes(&bytes).map_err(|e| unreachable(format!("a peer's reply: {e}"))),
            Ok(other) => Err(unreachable(format!("{} answered a peer message with {other:?}", self.addr))),
            Err(e) => {
                self.conn = None;
                Err(unreachable(format!("{}: {e}", self.addr)))
            }
        }
    }
}
