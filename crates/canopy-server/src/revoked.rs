//! Transactions recovery has revoked on this server. Before recovery reads
//! what a dead coordinator's transaction left, it revokes it everywhere
//! (`Request::Revoke`); from then on the coordinator's steps that name it are
//! refused `ESTALE`, so a step sent in time but arriving late (its server
//! slow, its coordinator stalled between its lease check and its send)
//! cannot land after recovery had read and decided. The modes whose
//! transactions span servers keep one: ShardFS beside its fences
//! (`shardfs/revoked.rs`), Giraffa for its renames' and links' steps,
//! IndexFS for its directory transactions' and links' steps.
//!
//! Kept durably, so a restart forgets none: the `meta` family under
//! [`PREFIX`] ‖ txn (u64 BE). Recoveries are rare (a coordinator died), and
//! transaction ids only grow, so the newest [`KEPT`] are kept and the oldest
//! dropped as more come: a step arriving after thousands of later recoveries
//! is not guarded against.

use crate::core::Core;
use crate::keys::META;
use canopy_proto::Errno;
use canopy_store::Batch;
use parking_lot::RwLock;
use std::collections::BTreeSet;

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

/// The revoked transactions a store holds, oldest first, the oldest beyond
/// [`KEPT`] dropped from it; a corrupt key is an error (the server would not
/// know what it promised to refuse).
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
    if let Some(k) = corrupt {
        return Err(format!("corrupt revoked-transaction record {k:?}"));
    }
    prune(core, txns)
}

/// Drops the oldest of `txns` (oldest first) beyond [`KEPT`] from the store,
/// answering those kept.
fn prune(core: &Core, mut txns: Vec<u64>) -> Result<Vec<u64>, String> {
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

/// The revoked transactions in memory.
#[derive(Default)]
pub(crate) struct Revoked(RwLock<BTreeSet<u64>>);

impl Revoked {
    pub(crate) fn of(txns: impl IntoIterator<Item = u64>) -> Revoked {
        Revoked(RwLock::new(txns.into_iter().collect()))
    }

    pub(crate) fn contains(&self, txn: u64) -> bool {
        self.0.read().contains(&txn)
    }

    /// A step naming transaction `txn` (none: not a transaction's) may go
    /// on, else `refused` (the errno the mode's clients take for "recovery
    /// took it over").
    pub(crate) fn refuse(&self, txn: Option<u64>, refused: Errno) -> Result<(), Errno> {
        match txn {
            Some(t) if self.contains(t) => Err(refused),
            _ => Ok(()),
        }
    }

    /// Revokes `txn`, durably before it answers, forgetting the oldest
    /// beyond [`KEPT`]. The caller keeps out the steps that check it.
    pub(crate) fn add(&self, core: &Core, txn: u64) -> Result<(), Errno> {
        if self.contains(txn) {
            return Ok(());
        }
        let dropped = oldest_beyond(&self.0.read(), KEPT);
        let mut b = Batch::new();
        b.put(META, key(txn), Vec::new());
        for t in &dropped {
            b.delete(META, key(*t));
        }
        core.write(b)?;
        let mut set = self.0.write();
        for t in &dropped {
            set.remove(t);
        }
        set.insert(txn);
        Ok(())
    }
}

/// The oldest of `set` that must go for one more to be kept within `kept`.
fn oldest_beyond(set: &BTreeSet<u64>, kept: usize) -> Vec<u64> {
    set.iter().take((set.len() + 1).saturating_sub(kept)).copied().collect()
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

    #[test]
    fn one_more_than_kept_drops_the_oldest() {
        let set: BTreeSet<u64> = [4, 5].into();
        assert_eq!(oldest_beyond(&set, 3), Vec::<u64>::new());
        assert_eq!(oldest_beyond(&set, 2), vec![4]);
        assert_eq!(oldest_beyond(&set, 1), vec![4, 5]);
    }
}
