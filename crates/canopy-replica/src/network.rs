//! What members say to each other, and how a member answers: the same
//! messages whether they cross a socket or the in-process [`crate::router`].
//!
//! A snapshot travels as [`PeerCall::Begin`], which starts a new reception,
//! [`PeerCall::Chunk`]s of at most [`crate::snapshot::CHUNK_BYTES`], then
//! [`PeerCall::Install`]. A chunk out of order is refused,
//! and the leader sends the snapshot again from its start.

use crate::snapshot::{Chunk, SnapshotFiles};
use crate::{GroupConfig, MemberId, Raft};
use openraft::error::{Fatal, InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, ReplicationClosed, StreamingError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork};
use openraft::raft::{AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, VoteRequest, VoteResponse};
use openraft::{BasicNode, OptionalSend, Snapshot, SnapshotMeta, Vote};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;
use tokio::sync::Mutex;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum PeerCall {
    Append(AppendEntriesRequest<GroupConfig>),
    Vote(VoteRequest<MemberId>),
    Begin,
    Chunk(Chunk),
    Install { vote: Vote<MemberId>, meta: SnapshotMeta<MemberId, BasicNode> },
}

#[derive(Debug, Serialize, Deserialize)]
pub enum PeerReply {
    Append(Result<AppendEntriesResponse<MemberId>, RaftError<MemberId>>),
    Vote(Result<VoteResponse<MemberId>, RaftError<MemberId>>),
    Chunk(Result<(), String>),
    Install(Result<SnapshotResponse<MemberId>, String>),
}

/// One member's side of the conversation: its Raft and the snapshots it is
/// receiving, one per sender.
pub struct Peer {
    pub raft: Raft,
    inbox: Mutex<HashMap<MemberId, Box<SnapshotFiles>>>,
}

impl Peer {
    pub fn new(raft: Raft) -> Peer {
        Peer { raft, inbox: Mutex::default() }
    }

    /// Answers `call` from member `from`.
    pub async fn serve(&self, from: MemberId, call: PeerCall) -> PeerReply {
        match call {
            PeerCall::Append(req) => PeerReply::Append(self.raft.append_entries(req).await),
            PeerCall::Vote(req) => PeerReply::Vote(self.raft.vote(req).await),
            PeerCall::Begin => PeerReply::Chunk(self.begin(from).await),
            PeerCall::Chunk(chunk) => PeerReply::Chunk(self.receive(from, chunk).await),
            PeerCall::Install { vote, meta } => PeerReply::Install(self.install(from, vote, meta).await),
        }
    }

    async fn begin(&self, from: MemberId) -> Result<(), String> {
        let files = self.raft.begin_receiving_snapshot().await.map_err(|e| e.to_string())?;
        if let Some(old) = self.inbox.lock().await.insert(from, files) {
            let _ = std::fs::remove_dir_all(&old.dir);
        }
        Ok(())
    }

    async fn receive(&self, from: MemberId, chunk: Chunk) -> Result<(), String> {
        let mut inbox = self.inbox.lock().await;
        let files = inbox.get_mut(&from).ok_or("a snapshot chunk before its stream began")?;
        files.receive(chunk).map_err(|e| e.to_string())
    }

    async fn install(&self, from: MemberId, vote: Vote<MemberId>, meta: SnapshotMeta<MemberId, BasicNode>) -> Result<SnapshotResponse<MemberId>, String> {
        let files = self.inbox.lock().await.remove(&from).ok_or("a snapshot installed before it was sent")?;
        if !files.complete() {
            return Err("the snapshot's files are incomplete".into());
        }
        let snapshot = Snapshot { meta, snapshot: files };
        self.raft.install_full_snapshot(vote, snapshot).await.map_err(|e: Fatal<MemberId>| e.to_string())
    }
}

/// What carries one member's messages to one peer: a socket
/// ([`crate::tcp`]) or the in-process router ([`crate::router`]).
pub trait Carrier: Send + Sync + 'static {
    /// Delivers `call` and brings back the answer, within `timeout`.
    fn carry(&mut self, call: PeerCall, timeout: Duration) -> impl Future<Output = Result<PeerReply, Unreachable>> + Send;
}

/// Raft's view of the way to one peer: its messages as [`PeerCall`]s over a
/// [`Carrier`].
pub struct Link<C> {
    pub to: MemberId,
    pub carrier: C,
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct Failed(pub String);

fn unexpected(reply: PeerReply) -> NetworkError {
    NetworkError::new(&Failed(format!("unexpected reply {reply:?}")))
}

fn refused(why: String) -> NetworkError {
    NetworkError::new(&Failed(why))
}

type RpcErr<E = openraft::error::Infallible> = RPCError<MemberId, BasicNode, RaftError<MemberId, E>>;

/// How long a snapshot's message may take at least.
const SNAPSHOT_TIMEOUT: Duration = Duration::from_secs(10);

impl<C: Carrier> RaftNetwork<GroupConfig> for Link<C> {
    async fn append_entries(&mut self, rpc: AppendEntriesRequest<GroupConfig>, option: RPCOption) -> Result<AppendEntriesResponse<MemberId>, RpcErr> {
        match self.carrier.carry(PeerCall::Append(rpc), option.hard_ttl()).await? {
            PeerReply::Append(Ok(r)) => Ok(r),
            PeerReply::Append(Err(e)) => Err(RPCError::RemoteError(RemoteError::new(self.to, e))),
            other => Err(RPCError::Network(unexpected(other))),
        }
    }

    async fn vote(&mut self, rpc: VoteRequest<MemberId>, option: RPCOption) -> Result<VoteResponse<MemberId>, RpcErr> {
        match self.carrier.carry(PeerCall::Vote(rpc), option.hard_ttl()).await? {
            PeerReply::Vote(Ok(r)) => Ok(r),
            PeerReply::Vote(Err(e)) => Err(RPCError::RemoteError(RemoteError::new(self.to, e))),
            other => Err(RPCError::Network(unexpected(other))),
        }
    }

    /// `Begin`, the chunks, `Install`; any failure sends it again from the
    /// start (openraft retries).
    async fn full_snapshot(
        &mut self,
        vote: Vote<MemberId>,
        snapshot: Snapshot<GroupConfig>,
        _cancel: impl Future<Output = ReplicationClosed> + OptionalSend + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse<MemberId>, StreamingError<GroupConfig, Fatal<MemberId>>> {
        let timeout = option.hard_ttl().max(SNAPSHOT_TIMEOUT);
        let chunks = snapshot.snapshot.chunks().map(|c| c.map(PeerCall::Chunk));
        for call in std::iter::once(Ok(PeerCall::Begin)).chain(chunks) {
            let call = call.map_err(|e| StreamingError::Network(NetworkError::new(&e)))?;
            match self.carrier.carry(call, timeout).await? {
                PeerReply::Chunk(Ok(())) => {}
                PeerReply::Chunk(Err(why)) => return Err(StreamingError::Network(refused(why))),
                other => return Err(StreamingError::Network(unexpected(other))),
            }
        }
        match self.carrier.carry(PeerCall::Install { vote, meta: snapshot.meta }, timeout).await? {
            PeerReply::Install(Ok(r)) => Ok(r),
            PeerReply::Install(Err(why)) => Err(StreamingError::Network(refused(why))),
            other => Err(StreamingError::Network(unexpected(other))),
        }
    }

    #[allow(deprecated)]
    async fn install_snapshot(
        &mut self,
        _rpc: openraft::raft::InstallSnapshotRequest<GroupConfig>,
        _option: RPCOption,
    ) -> Result<openraft::raft::InstallSnapshotResponse<MemberId>, RpcErr<InstallSnapshotError>> {
        Err(RPCError::Network(refused("snapshots are sent whole (full_snapshot)".into())))
    }
}
