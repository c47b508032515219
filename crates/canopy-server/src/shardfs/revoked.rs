//! Transactions recovery has revoked on this server. Before recovery reads
//! what a dead coordinator's transaction left, it revokes it everywhere
//! (`Request::Revoke`); from then on the coordinator's steps that name it are
//! refused `ESTALE`. Without that, a step sent in time but arriving late (its
//! server slow, its coordinator stalled between its lease check and its
//! send) could land after recovery had read and decided: a mkdir's primary
//! making a directory recovery rolled back on every replica, an rmdir's
//! primary removing one recovery put back, a file rename's insert making
//! a second name recovery found no trace of, a migration's adoption putting
//! back a moved file's old record. (A file rename's `RenameOutCommit`, which
//! drops the source only if it still names the inode, as recovery would,
//! names no transaction. A dead recoverer's steps name its own id, which
//! the next recoverer revokes as well.)
//!
//! Kept durably, so a restart forgets none: the `meta` family under
//! [`PREFIX`] ‖ txn (u64 BE), loaded at a start into [`Fences`]. Recoveries
//! are rare (a coordinator died), and transaction ids only grow, so the
//! newest [`KEPT`] are kept and the oldest dropped as more come: a step
//! arriving after thousands of later recoveries is not guarded against.
//!
//! [`Fences`]: super::fence::Fences

use super::ShardFs;
use crate::core::Core;
use crate::keys::META;
use canopy_proto::msg::txn_of_dir_id;
use canopy_proto::{Errno, Reply};
use canopy_store::Batch;

const PREFIX: &[u8] = b"revoked/";

/// How many revoked transactions a server remembers.
pub const KEPT: usize = 4096;

fn key(txn: u64) -> Vec<u8> {
    let mut k = PREFIX.to_vec();
    k.extend_from_slice(&txn.to_be_bytes());
    k
}

fn split(k: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(k.strip_prefix(PREFIX)?.try_into().ok()?))
}

/// The revoked transactions stored here, oldest first; a corrupt key is an
/// error (the server would not know what it promised to refuse).
pub(crate) fn load(core: &Core) -> Result<Vec<u64>, String> {
    let mut txns = Vec::new();
    let mut corrupt = None;
    core.store
        .for_each(META, PREFIX, &mut |k, _| {
            match split(k) {
                Some(t) => txns.push(t),
                None => corrupt = Some(k.to_vec()),
            }
            true
        })
        .map_err(|e| e.to_string())?;
    match corrupt {
        Some(k) => Err(format!("corrupt revoked-transaction record {k:?}")),
        None => Ok(txns),
    }
}

impl ShardFs {
    /// `Request::Revoke`: durable before it answers, and under the structure
    /// lock, which every directory step holds while it checks and applies
    /// (and a file rename's, shared, with its entry locks), so a step of
    /// `txn` under way ends first and a later one sees it.
    pub(crate) fn revoke(&self, core: &Core, txn: u64) -> Result<Reply, Errno> {
        let _g = core.lock_structure();
        if self.fences.is_revoked(txn) {
            return Ok(Reply::Unit);
        }
        let dropped = self.fences.revoked_beyond(KEPT);
        let mut b = Batch::new();
        b.put(META, key(txn), Vec::new());
        for t in &dropped {
            b.delete(META, key(*t));
        }
        core.write(b)?;
        self.fences.revoke(txn, &dropped);
        Ok(Reply::Unit)
    }

    /// `ESTALE` if a coordinator's step naming transaction `txn` must not
    /// land: recovery has revoked it here.
    pub(crate) fn refuse_revoked(&self, txn: Option<u64>) -> Result<(), Errno> {
        match txn {
            Some(t) if self.fences.is_revoked(t) => Err(Errno::ESTALE),
            _ => Ok(()),
        }
    }

    /// [`ShardFs::refuse_revoked`] for a mkdir's step, which names its
    /// transaction by the directory id it makes (the primary's carries no
    /// fence).
    pub(crate) fn refuse_revoked_mkdir(&self, id: u64) -> Result<(), Errno> {
        self.refuse_revoked(txn_of_dir_id(id))
    }
}

/// Drops the oldest of `txns` (oldest first) beyond [`KEPT`] from the store,
/// answering those kept.
pub(crate) fn prune(core: &Core, mut txns: Vec<u64>) -> Result<Vec<u64>, String> {
    if txns.len() <= KEPT {
        return Ok(txns);
    }
    let kept = txns.split_off(txns.len() - KEPT);
    let mut b = Batch::new();
    for t in txns {
        b.delete(META, key(t));
    }
    core.write(b).map_err(|e| format!("cannot drop old revoked transactions: {e}"))?;
    Ok(kept)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_revoked_key_names_its_transaction_in_order() {
        assert_eq!(split(&key(0x1234)), Some(0x1234));
        assert!(key(255) < key(256), "ids sort as numbers");
        assert_eq!(split(b"revoked/short"), None);
        assert_eq!(split(b"parked-times/00000000"), None);
    }
}
