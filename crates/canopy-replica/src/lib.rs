//! Replica groups: one metadata server's store kept by several members with
//! Raft, so no acknowledged write lives in one copy.
//!
//! The consensus engine is `openraft`; this crate gives it what it asks of an
//! application and nothing of its own protocol:
//! - [`Proposal`]: what a leader replicates, the write batch it decided
//!   (followers apply it; they never re-run the logic that chose it);
//! - [`LogStore`]: the Raft log, vote and commit point in the member's own
//!   store (RocksDB on disk), next to the data;
//! - [`StateMachine`]: applies committed batches to that store, recording the
//!   last applied entry in the same atomic write, and builds and installs
//!   snapshots as table files sent in bounded chunks ([`snapshot`]);
//! - [`network`]: how members reach each other, with an in-process router for
//!   tests ([`router`]) that drops, delays, duplicates and partitions messages.
//!
//! Rule: nothing here knows what a key means; a group replicates any store.

// openraft's traits return its `StorageError`, whatever its size.
#![allow(clippy::result_large_err)]

mod families;
pub mod in_use;
pub mod leadership;
pub mod membership;
mod log_store;
mod member;
pub mod overlay;
mod replicated;
pub mod service;
pub mod sessions;
pub mod tcp;
pub mod network;
mod proposal;
pub mod router;
pub mod snapshot;
mod state_machine;

pub use families::Families;
pub use log_store::{holds_raft_state, LogStore};
pub use member::{config, Member};
pub use proposal::{Applied, Edit, Proposal};
pub use replicated::{ReplicatedStore, COMMIT_WAIT};
pub use snapshot::SnapshotFiles;
pub use state_machine::StateMachine;

/// A member's id within its group.
pub type MemberId = u64;

openraft::declare_raft_types!(
    /// The types a replica group's Raft is built from.
    pub GroupConfig:
        D = Proposal,
        R = Applied,
        NodeId = MemberId,
        Node = openraft::BasicNode,
        Entry = openraft::Entry<GroupConfig>,
        SnapshotData = SnapshotFiles,
        AsyncRuntime = openraft::TokioRuntime,
);

/// One member's Raft handle.
pub type Raft = openraft::Raft<GroupConfig>;

/// The column families a member's store holds for Raft, beside the data's.
pub const RAFT_LOG: &str = "raft_log";
pub const RAFT_STATE: &str = "raft_state";
pub const RAFT_CFS: &[&str] = &[RAFT_LOG, RAFT_STATE];
