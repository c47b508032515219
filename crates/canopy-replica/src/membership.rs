//! Changes of a group's members, as its leader makes them: a member added
//! catches up as a learner (from a snapshot if the log it needs was
//! purged) to within openraft's `replication_lag_threshold` of the leader's
//! log (5,000 entries) before it votes, so the group does not wait on a
//! whole log's replay to commit; a member removed stops voting and
//! receiving the log at once.

use crate::{MemberId, Raft};
use canopy_proto::msg::GroupChange;
use canopy_proto::Errno;
use openraft::error::{ChangeMembershipError, ClientWriteError, RaftError};
use openraft::{BasicNode, ChangeMembers};
use std::collections::BTreeSet;

/// Why a change was not made.
#[derive(Debug, PartialEq, Eq)]
pub enum Refused {
    /// This member does not lead; the one it believes does.
    NotLeader(Option<MemberId>),
    Errno(Errno),
}

/// Makes `change` as the group's leader; done again, it changes nothing.
pub async fn change(raft: &Raft, change: GroupChange) -> Result<(), Refused> {
    let (voters, nodes) = {
        let m = raft.metrics();
        let m = m.borrow();
        let membership = m.membership_config.membership();
        let voters: BTreeSet<MemberId> = membership.voter_ids().collect();
        let nodes: BTreeSet<MemberId> = membership.nodes().map(|(id, _)| *id).collect();
        (voters, nodes)
    };
    match change {
        GroupChange::Add { id, addr } => {
            if !voters.contains(&id) {
                raft.add_learner(id, BasicNode::new(addr), true).await.map_err(refused)?;
                raft.change_membership(ChangeMembers::AddVoterIds([id].into()), false).await.map_err(refused)?;
            }
        }
        GroupChange::Remove { id } => {
            if voters.contains(&id) {
                if voters.len() == 1 {
                    // The last voter: nobody would be left to commit anything.
                    return Err(Refused::Errno(Errno::EINVAL));
                }
                raft.change_membership(ChangeMembers::RemoveVoters([id].into()), false).await.map_err(refused)?;
            } else if nodes.contains(&id) {
                raft.change_membership(ChangeMembers::RemoveNodes([id].into()), false).await.map_err(refused)?;
            }
        }
    }
    Ok(())
}

fn refused(e: RaftError<MemberId, ClientWriteError<MemberId, BasicNode>>) -> Refused {
    match e {
        RaftError::APIError(ClientWriteError::ForwardToLeader(f)) => Refused::NotLeader(f.leader_id),
        RaftError::APIError(ClientWriteError::ChangeMembershipError(ChangeMembershipError::InProgress(_))) => Refused::Errno(Errno::EBUSY),
        RaftError::APIError(ClientWriteError::ChangeMembershipError(_)) => Refused::Errno(Errno::EINVAL),
        RaftError::Fatal(_) => Refused::Errno(Errno::EIO),
    }
}
