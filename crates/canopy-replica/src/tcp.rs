//! Members talking over the daemons' own sockets: a Raft message is a
//! `Request::Peer` on a connection proved with the cluster key, answered
//! with `Reply::PeerReply`.

use crate::network::{PeerCall, PeerReply};
use crate::{GroupConfig, MemberId};
use canopy_proto::{Creds, Reply, Request};
use canopy_rpc::conn::Connection;
use canopy_rpc::ClientAuth;
use openraft::error::{Fatal, InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, ReplicationClosed, StreamingError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, VoteRequest, VoteResponse};
use openraft::{BasicNode, OptionalSend, Snapshot, Vote};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// The network factory of a member whose peers listen on TCP or Unix
/// sockets (their addresses are in the group's membership).
#[derive(Clone)]
pub struct TcpPeers {
    pub me: MemberId,
    pub auth: Arc<ClientAuth>,
}

pub struct TcpLink {
    me: MemberId,
    to: MemberId,
    auth: Arc<ClientAuth>,
    addr: String,
    conn: Option<Arc<Connection>>,
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Failed(String);

impl RaftNetworkFactory<GroupConfig> for TcpPeers {
    type Network = TcpLink;

    async fn new_client(&mut self, to: MemberId, node: &BasicNode) -> TcpLink {
        TcpLink { me: self.me, to, auth: self.auth.clone(), addr: node.addr.clone(), conn: None }
    }
}

type RpcErr<E = openraft::error::Infallible> = RPCError<MemberId, BasicNode, RaftError<MemberId, E>>;

impl TcpLink {
    async fn call(&mut self, call: PeerCall, timeout: Duration) -> Result<PeerReply, Unreachable> {
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

fn unexpected(reply: PeerReply) -> NetworkError {
    NetworkError::new(&Failed(format!("unexpected reply {reply:?}")))
}

impl RaftNetwork<GroupConfig> for TcpLink {
    async fn append_entries(&mut self, rpc: AppendEntriesRequest<GroupConfig>, option: RPCOption) -> Result<AppendEntriesResponse<MemberId>, RpcErr> {
        match self.call(PeerCall::Append(rpc), option.hard_ttl()).await? {
            PeerReply::Append(Ok(r)) => Ok(r),
            PeerReply::Append(Err(e)) => Err(RPCError::RemoteError(RemoteError::new(self.to, e))),
            other => Err(RPCError::Network(unexpected(other))),
        }
    }

    async fn vote(&mut self, rpc: VoteRequest<MemberId>, option: RPCOption) -> Result<VoteResponse<MemberId>, RpcErr> {
        match self.call(PeerCall::Vote(rpc), option.hard_ttl()).await? {
            PeerReply::Vote(Ok(r)) => Ok(r),
            PeerReply::Vote(Err(e)) => Err(RPCError::RemoteError(RemoteError::new(self.to, e))),
            other => Err(RPCError::Network(unexpected(other))),
        }
    }

    async fn full_snapshot(
        &mut self,
        vote: Vote<MemberId>,
        snapshot: Snapshot<GroupConfig>,
        _cancel: impl Future<Output = ReplicationClosed> + OptionalSend + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse<MemberId>, StreamingError<GroupConfig, Fatal<MemberId>>> {
        let timeout = option.hard_ttl().max(Duration::from_secs(10));
        let chunks = snapshot.snapshot.chunks().map(|c| c.map(PeerCall::Chunk));
        for call in std::iter::once(Ok(PeerCall::Begin)).chain(chunks) {
            let call = call.map_err(|e| StreamingError::Network(NetworkError::new(&e)))?;
            match self.call(call, timeout).await? {
                PeerReply::Chunk(Ok(())) => {}
                PeerReply::Chunk(Err(why)) => return Err(StreamingError::Network(NetworkError::new(&Failed(why)))),
                other => return Err(StreamingError::Network(unexpected(other))),
            }
        }
        match self.call(PeerCall::Install { vote, meta: snapshot.meta }, timeout).await? {
            PeerReply::Install(Ok(r)) => Ok(r),
            PeerReply::Install(Err(why)) => Err(StreamingError::Network(NetworkError::new(&Failed(why)))),
            other => Err(StreamingError::Network(unexpected(other))),
        }
    }

    #[allow(deprecated)]
    async fn install_snapshot(
        &mut self,
        _rpc: openraft::raft::InstallSnapshotRequest<GroupConfig>,
        _option: RPCOption,
    ) -> Result<openraft::raft::InstallSnapshotResponse<MemberId>, RpcErr<InstallSnapshotError>> {
        Err(RPCError::Network(NetworkError::new(&Failed("snapshots are sent whole (full_snapshot)".into()))))
    }
}
