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
