//! The data column families a group replicates, by name.
//!
//! A store names its families with `&'static str`; a proposal carries names
//! as strings over the wire, and a member turns them back into the store's
//! own names here, refusing one it does not hold.

use canopy_store::StoreError;

#[derive(Debug, Clone)]
pub struct Families {
    names: Vec<&'static str>,
}

impl Families {
    /// The data families (not Raft's own).
    pub fn new(names: &[&'static str]) -> Families {
        Families { names: names.to_vec() }
    }

    pub fn all(&self) -> &[&'static str] {
        &self.names
    }

    /// The store's name for `name`.
    pub fn named(&self, name: &str) -> Result<&'static str, StoreError> {
        self.names.iter().copied().find(|n| *n == name).ok_or_else(|| StoreError::UnknownFamily(name.to_string()))
    }
}
