//! What a leader replicates: the write batch it decided, family names as
//! strings so a proposal can cross the wire.

use crate::Families;
use canopy_store::{Batch, Change, StoreError};
use serde::{Deserialize, Serialize};

/// Keys and values go as byte strings (a length and the bytes), not as
/// sequences of numbers: `serde_bytes`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Edit {
    Put(String, #[serde(with = "serde_bytes")] Vec<u8>, #[serde(with = "serde_bytes")] Vec<u8>),
    Delete(String, #[serde(with = "serde_bytes")] Vec<u8>),
    DeleteRange(String, #[serde(with = "serde_bytes")] Vec<u8>, #[serde(with = "serde_bytes")] Vec<u8>),
    /// A table file's bytes, ingested into the family whole (bulk insertion,
    /// a split's destination, a batch's commit). Applied before the
    /// proposal's other edits; ingesting it again changes nothing.
    Table(String, #[serde(with = "serde_bytes")] Vec<u8>),
}

/// One replicated write: a batch applied atomically by every member.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Proposal {
    pub edits: Vec<Edit>,
}

impl std::fmt::Display for Proposal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "proposal of {} edits", self.edits.len())
    }
}

/// What applying a proposal answers: the index of its log entry.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Applied {
    pub index: u64,
}

impl Proposal {
    /// The proposal of `batch`, taking its keys and values.
    pub fn from_batch(batch: Batch) -> Proposal {
        let edits = batch
            .changes
            .into_iter()
            .map(|c| match c {
                Change::Put(cf, k, v) => Edit::Put(cf.to_string(), k, v),
                Change::Delete(cf, k) => Edit::Delete(cf.to_string(), k),
                Change::DeleteRange(cf, from, to) => Edit::DeleteRange(cf.to_string(), from, to),
            })
            .collect();
        Proposal { edits }
    }

    pub fn of_batch(batch: &Batch) -> Proposal {
        let edits = batch
            .changes
            .iter()
            .map(|c| match c {
                Change::Put(cf, k, v) => Edit::Put(cf.to_string(), k.clone(), v.clone()),
                Change::Delete(cf, k) => Edit::Delete(cf.to_string(), k.clone()),
                Change::DeleteRange(cf, from, to) => Edit::DeleteRange(cf.to_string(), from.clone(), to.clone()),
            })
            .collect();
        Proposal { edits }
    }

    /// Drops each put or deletion that a later one of the same key in this
    /// proposal replaces: applied whole, the proposal leaves the same store
    /// without them. Proposals gathered into one entry often rewrite one key
    /// (a session's record, after each of its requests), and each copy
    /// would be logged, sent to every member and written to its memtable.
    pub fn drop_replaced(&mut self) {
        let mut later = std::collections::HashSet::new();
        let mut keep = vec![true; self.edits.len()];
        for (i, e) in self.edits.iter().enumerate().rev() {
            if let Edit::Put(cf, k, _) | Edit::Delete(cf, k) = e {
                keep[i] = later.insert((cf.as_str(), k.as_slice()));
            }
        }
        let mut keep = keep.into_iter();
        self.edits.retain(|_| keep.next().unwrap_or(true));
    }

    /// The table files to ingest first: family and bytes.
    pub fn tables(&self) -> impl Iterator<Item = (&str, &[u8])> {
        self.edits.iter().filter_map(|e| match e {
            Edit::Table(cf, bytes) => Some((cf.as_str(), bytes.as_slice())),
            _ => None,
        })
    }

    /// The batch to apply to a store holding `families`; a family it does
    /// not hold refuses the whole proposal.
    pub fn to_batch(&self, families: &Families, into: &mut Batch) -> Result<(), StoreError> {
        for e in &self.edits {
            match e {
                Edit::Put(cf, k, v) => into.put(families.named(cf)?, k.clone(), v.clone()),
                Edit::Delete(cf, k) => into.delete(families.named(cf)?, k.clone()),
                Edit::DeleteRange(cf, from, to) => into.delete_range(families.named(cf)?, from.clone(), to.clone()),
                Edit::Table(..) => {}
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{Edit, Proposal};
    use canopy_store::{Batch, MemStore, Store};

    fn put(k: &str, v: &str) -> Edit {
        Edit::Put("f".into(), k.into(), v.into())
    }

    fn delete(k: &str) -> Edit {
        Edit::Delete("f".into(), k.into())
    }

    fn range(from: &str, to: &str) -> Edit {
        Edit::DeleteRange("f".into(), from.into(), to.into())
    }

    /// The pairs a store holds after applying `p` over `before`.
    fn applied(before: &[(&str, &str)], p: &Proposal) -> Vec<(Vec<u8>, Vec<u8>)> {
        let store = MemStore::new(&["f"]);
        let mut b = Batch::new();
        for (k, v) in before {
            b.put("f", k.as_bytes().to_vec(), v.as_bytes().to_vec());
        }
        store.write(b).unwrap();
        let mut b = Batch::new();
        p.to_batch(&crate::Families::new(&["f"]), &mut b).unwrap();
        store.write(b).unwrap();
        store.scan("f", b"", None, usize::MAX).unwrap()
    }

    #[test]
    fn only_the_last_write_of_a_key_is_kept_and_the_store_ends_the_same() {
        let edits = vec![put("s", "1"), put("a", "x"), range("b", "d"), put("s", "12"), delete("a"), put("c", "y"), put("s", "123"), delete("e")];
        let mut p = Proposal { edits: edits.clone() };
        p.drop_replaced();
        assert_eq!(p.edits, vec![range("b", "d"), delete("a"), put("c", "y"), put("s", "123"), delete("e")]);
        let before = [("a", "0"), ("b", "0"), ("c", "0"), ("e", "0"), ("s", "0")];
        assert_eq!(applied(&before, &p), applied(&before, &Proposal { edits }));
    }

    #[test]
    fn a_put_after_a_range_deletion_over_it_is_kept() {
        let mut p = Proposal { edits: vec![range("a", "z"), put("k", "v")] };
        p.drop_replaced();
        assert_eq!(p.edits, vec![range("a", "z"), put("k", "v")]);
    }
}
