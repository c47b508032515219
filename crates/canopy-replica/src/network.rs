//! What members say to each other, and how a member answers: the same
//! messages whether they cross a socket or the in-process [`crate::router`].
//!
//! A snapshot travels as [`PeerCall::Begin`], which starts a new reception,
//! [`PeerCall::Chunk`]s of at most [`crate::snapshot::CHUNK_BYTES`], then
//! [`PeerCall::Install`]. A chunk out of order is refused,
//! and the leader sends the snapshot again from its start.

use crate::snapshot::{Chunk, SnapshotFiles};
use crate::{GroupConfig, MemberId, Raft};
use openraft::error::{Fatal, RaftError};
use openraft::raft::{AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, VoteRequest, VoteResponse};
use openraft::{BasicNode, Snapshot, SnapshotMeta, Vote};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
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
