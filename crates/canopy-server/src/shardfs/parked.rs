//! Times parked by a directory rename's source primary. A leaf directory's
//! times move with the rename's apply step: its new primary keeps them and
//! its old one drops them. The old primary applies at once with the others,
//! before the commit point answers, so what it drops may yet be wanted back
//! (the transaction rolled back). It therefore parks them durably, keyed by
//! transaction and directory, until the transaction has ended here (its
//! fence lifted: `Unfence`, or `ClearFences` once locks proved it over). An
//! undo of the rename takes them back. A start drops the parked times of
//! transactions no longer open at the lock service: their fences are not
//! put up again, so nothing else would.
//!
//! Kept in the `meta` family, under [`PREFIX`] ‖ txn (u64 BE) ‖ directory
//! id (u64 BE); what is parked here is also kept in memory, so an unfence
//! with nothing parked (nearly all) costs no store read, and one with
//! something deletes its keys (point deletes: a range tombstone would slow
//! every later read of the family).

use crate::core::{io, Core};
use crate::keys::{self, META};
use canopy_proto::msg::DirTimes;
use canopy_proto::Errno;
use canopy_store::Batch;
use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};

const PREFIX: &[u8] = b"parked-times/";

fn key(txn: u64, id: u64) -> Vec<u8> {
    let mut k = PREFIX.to_vec();
    k.extend_from_slice(&txn.to_be_bytes());
    k.extend_from_slice(&id.to_be_bytes());
    k
}

/// (txn, directory id) of a parked key; `None` for a corrupt one.
fn split(k: &[u8]) -> Option<(u64, u64)> {
    let rest = k.strip_prefix(PREFIX)?;
    if rest.len() != 16 {
        return None;
    }
    Some((u64::from_be_bytes(rest[..8].try_into().ok()?), u64::from_be_bytes(rest[8..].try_into().ok()?)))
}

/// One parked record as stored.
struct Stored {
    key: Vec<u8>,
    /// (txn, directory id); `None` for a corrupt key.
    which: Option<(u64, u64)>,
    /// `None` for a corrupt value.
    times: Option<DirTimes>,
}

fn all(core: &Core) -> Result<Vec<Stored>, Errno> {
    let mut out = Vec::new();
    core.store
        .for_each(META, PREFIX, &mut |k, v| {
            out.push(Stored { key: k.to_vec(), which: split(k), times: keys::decode(v) });
            true
        })
        .map_err(io)?;
    Ok(out)
}

#[derive(Default)]
pub(crate) struct Parked {
    /// The directories each transaction parked times of here.
    txns: Mutex<HashMap<u64, Vec<u64>>>,
}

impl Parked {
    /// Adds to `b` the parking of directory `id`'s `times` for `txn`; call
    /// [`Parked::written`] once `b` is written.
    pub(crate) fn park(&self, b: &mut Batch, txn: u64, id: u64, times: &DirTimes) {
        b.put(META, key(txn, id), keys::encode(times));
    }

    /// `txn` parked directory `id`'s times (the batch of [`Parked::park`] is written).
    pub(crate) fn written(&self, txn: u64, id: u64) {
        let mut txns = self.txns.lock();
        let ids = txns.entry(txn).or_default();
        if !ids.contains(&id) {
            ids.push(id);
        }
    }

    /// The times of directory `id` that `txn` parked here, if any, their
    /// record's removal added to `b` (an undo of `txn` takes them back).
    pub(crate) fn take_back(&self, core: &Core, b: &mut Batch, txn: u64, id: u64) -> Result<Option<DirTimes>, Errno> {
        if !self.txns.lock().contains_key(&txn) {
            return Ok(None);
        }
        let k = key(txn, id);
        let Some(v) = core.store.get(META, &k).map_err(io)? else { return Ok(None) };
        b.delete(META, k);
        Ok(keys::decode(&v))
    }

    /// Whether any of `txns` parked times here.
    pub(crate) fn any_of(&self, txns: &[u64]) -> bool {
        let parked = self.txns.lock();
        txns.iter().any(|t| parked.contains_key(t))
    }

    /// Drops what `ended` (transactions whose fences here were just lifted)
    /// parked: they committed, or an undo took the times back.
    pub(crate) fn drop_ended(&self, core: &Core, ended: &[u64]) -> Result<(), Errno> {
        let mut b = Batch::new();
        {
            let txns = self.txns.lock();
            for txn in ended {
                for id in txns.get(txn).into_iter().flatten() {
                    b.delete(META, key(*txn, *id));
                }
            }
        }
        if b.is_empty() {
            return Ok(());
        }
        // Forgotten only once deleted: a failed write leaves them for the
        // next lift or start.
        core.write(b)?;
        let mut txns = self.txns.lock();
        for txn in ended {
            txns.remove(txn);
        }
        Ok(())
    }

    /// At a start: keeps what the transactions still `open` (by original id)
    /// parked, for their recovery, and drops the rest.
    pub(crate) fn after_start(&self, core: &Core, open: &HashSet<u64>) -> Result<(), Errno> {
        let mut b = Batch::new();
        let mut txns = self.txns.lock();
        for p in all(core)? {
            match p.which {
                Some((txn, id)) if open.contains(&txn) => {
                    txns.entry(txn).or_default().push(id);
                }
                _ => b.delete(META, p.key),
            }
        }
        drop(txns);
        if b.is_empty() {
            return Ok(());
        }
        core.write(b)
    }

    /// fsck: parked times whose transaction has no fence up here (it ended,
    /// so they should have been dropped or taken back).
    pub(crate) fn check(&self, core: &Core, fenced: impl Fn(u64) -> bool, problems: &mut Vec<String>) -> Result<(), Errno> {
        let me = core.cfg.index;
        for p in all(core)? {
            match (p.which, p.times) {
                (Some((txn, id)), Some(_)) if !fenced(txn) => {
                    problems.push(format!("server {me}: times of directory {id:#x} parked for transaction {txn}, which has ended"))
                }
                (Some(_), Some(_)) => {}
                _ => problems.push(format!("server {me}: corrupt parked times record {:?}", p.key)),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_parked_key_names_its_transaction_and_directory() {
        let k = key(7, 0x1234);
        assert_eq!(split(&k), Some((7, 0x1234)));
        assert!(key(7, u64::MAX) < key(8, 0), "a transaction's records sort before the next one's");
        assert_eq!(split(b"parked-times/short"), None);
        assert_eq!(split(b"identity"), None);
    }
}
