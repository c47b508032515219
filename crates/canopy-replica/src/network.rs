//! What members say to each other, and how a member answers: the same
//! messages whether they cross a socket or the in-process [`crate::router`].
//!
//! A snapshot travels as [`PeerCall::Begin`], which starts a new reception,
//! [`PeerCall::Chunk`]s of at most [`crate::snapshot::CHUNK_BYTES`], then
//! [`PeerCall::Install`], all naming one stream. A leader may begin a new
//! stream before an old one has stopped (a replication restarted by a change
//! of membership): a chunk or install of any stream but the receiver's
//! newest is refused, and an install names every file it needs, so files of
//! two streams are never mixed and a reception emptied by a newer `Begin` is
//! never installed. A refused stream is sent again from its start.

use crate::snapshot::{Chunk, SnapshotFiles, TableFile};
use crate::{GroupConfig, MemberId, Raft};
use openraft::error::{Fatal, InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, ReplicationClosed, StreamingError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork};
use openraft::raft::{AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, VoteRequest, VoteResponse};
use openraft::{BasicNode, OptionalSend, Snapshot, SnapshotMeta, Vote};
use serde::{Deserialize, Serialize};
use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;
use tokio::sync::Mutex;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum PeerCall {
    Append(AppendEntriesRequest<GroupConfig>),
    Vote(VoteRequest<MemberId>),
    Begin { stream: u64 },
    Chunk { stream: u64, chunk: Chunk },
    Install { stream: u64, vote: Vote<MemberId>, meta: SnapshotMeta<MemberId, BasicNode>, tables: Vec<TableFile> },
}

#[derive(Debug, Serialize, Deserialize)]
pub enum PeerReply {
    Append(Result<AppendEntriesResponse<MemberId>, RaftError<MemberId>>),
    Vote(Result<VoteResponse<MemberId>, RaftError<MemberId>>),
    Chunk(Result<(), String>),
    Install(Result<SnapshotResponse<MemberId>, String>),
}

/// One member's side of the conversation: its Raft and the snapshots it is
/// receiving, the newest stream of each sender.
pub struct Peer {
    pub raft: Raft,
    inbox: Mutex<HashMap<MemberId, (u64, Box<SnapshotFiles>)>>,
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
            PeerCall::Begin { stream } => PeerReply::Chunk(self.begin(from, stream).await),
            PeerCall::Chunk { stream, chunk } => PeerReply::Chunk(self.receive(from, stream, chunk).await),
            PeerCall::Install { stream, vote, meta, tables } => PeerReply::Install(self.install(from, stream, vote, meta, tables).await),
        }
    }

    async fn begin(&self, from: MemberId, stream: u64) -> Result<(), String> {
        let files = self.raft.begin_receiving_snapshot().await.map_err(|e| e.to_string())?;
        if let Some((_, old)) = self.inbox.lock().await.insert(from, (stream, files)) {
            let _ = std::fs::remove_dir_all(&old.dir);
        }
        Ok(())
    }

    async fn receive(&self, from: MemberId, stream: u64, chunk: Chunk) -> Result<(), String> {
        let mut inbox = self.inbox.lock().await;
        match inbox.get_mut(&from) {
            Some((open, files)) if *open == stream => files.receive(chunk).map_err(|e| e.to_string()),
            _ => Err(format!("a snapshot chunk of stream {stream}, which is not open")),
        }
    }

    async fn install(
        &self,
        from: MemberId,
        stream: u64,
        vote: Vote<MemberId>,
        meta: SnapshotMeta<MemberId, BasicNode>,
        tables: Vec<TableFile>,
    ) -> Result<SnapshotResponse<MemberId>, String> {
        let files = match self.inbox.lock().await.entry(from) {
            Entry::Occupied(open) if open.get().0 == stream => open.remove().1,
            _ => return Err(format!("an install of snapshot stream {stream}, which is not open")),
        };
        if files.tables != tables || !files.complete() {
            let _ = std::fs::remove_dir_all(&files.dir);
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

    /// `Begin`, the chunks, `Install`, until openraft cancels it; any failure
    /// sends it again from the start (openraft retries).
    async fn full_snapshot(
        &mut self,
        vote: Vote<MemberId>,
        snapshot: Snapshot<GroupConfig>,
        cancel: impl Future<Output = ReplicationClosed> + OptionalSend + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse<MemberId>, StreamingError<GroupConfig, Fatal<MemberId>>> {
        tokio::select! {
            sent = self.send_snapshot(vote, snapshot, option) => sent,
            closed = cancel => Err(StreamingError::Closed(closed)),
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

impl<C: Carrier> Link<C> {
    async fn send_snapshot(
        &mut self,
        vote: Vote<MemberId>,
        snapshot: Snapshot<GroupConfig>,
        option: RPCOption,
    ) -> Result<SnapshotResponse<MemberId>, StreamingError<GroupConfig, Fatal<MemberId>>> {
        let timeout = option.hard_ttl().max(SNAPSHOT_TIMEOUT);
        let stream = rand::random::<u64>();
        let chunks = snapshot.snapshot.chunks().map(|c| c.map(|chunk| PeerCall::Chunk { stream, chunk }));
        for call in std::iter::once(Ok(PeerCall::Begin { stream })).chain(chunks) {
            let call = call.map_err(|e| StreamingError::Network(NetworkError::new(&e)))?;
            match self.carrier.carry(call, timeout).await? {
                PeerReply::Chunk(Ok(())) => {}
                PeerReply::Chunk(Err(why)) => return Err(StreamingError::Network(refused(why))),
                other => return Err(StreamingError::Network(unexpected(other))),
            }
        }
        let install = PeerCall::Install { stream, vote, meta: snapshot.meta, tables: snapshot.snapshot.tables.clone() };
        match self.carrier.carry(install, timeout).await? {
            PeerReply::Install(Ok(r)) => Ok(r),
            PeerReply::Install(Err(why)) => Err(StreamingError::Network(refused(why))),
            other => Err(StreamingError::Network(unexpected(other))),
        }
    }
}
