//! Inode and directory ids, unique across the cluster without coordination:
//! `(server index + 1) << 48 | counter`. The counter's high-water mark is persisted
//! in blocks, so a restarted server skips at most one block and never reuses an id.
//! Id 1 is the root (server bits zero).

use crate::keys::{self, META, META_NEXT_ID};
use canopy_store::{Batch, Store};

/// The root directory's id, in every mode.
pub const ROOT_ID: u64 = 1;

const BLOCK: u64 = 4096;

pub struct IdAlloc {
    base: u64,
    next: u64,
    reserved: u64,
}

impl IdAlloc {
    pub fn load(index: u32, store: &dyn Store) -> Result<IdAlloc, String> {
        let reserved = match store.get(META, META_NEXT_ID).map_err(|e| e.to_string())? {
            Some(v) => keys::decode::<u64>(&v).ok_or("corrupt id counter")?,
            None => 1,
        };
        Ok(IdAlloc { base: (index as u64 + 1) << 48, next: reserved, reserved })
    }

    /// The next id; persists a new block reservation when the current one runs out.
    pub fn allocate(&mut self, store: &dyn Store) -> Result<u64, String> {
        if self.next >= self.reserved {
            let reserved = self.next + BLOCK;
            let mut b = Batch::new();
            b.put(META, META_NEXT_ID.to_vec(), keys::encode(&reserved));
            store.write(b).map_err(|e| e.to_string())?;
            self.reserved = reserved;
        }
        let id = self.base | self.next;
        self.next += 1;
        Ok(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use canopy_store::MemStore;

    #[test]
    fn ids_are_unique_across_restarts_and_servers() {
        let store = MemStore::new(keys::ALL_CFS);
        let mut a = IdAlloc::load(0, &store).unwrap();
        let first: Vec<u64> = (0..10).map(|_| a.allocate(&store).unwrap()).collect();
        let mut again = IdAlloc::load(0, &store).unwrap();
        let after = again.allocate(&store).unwrap();
        assert!(first.iter().all(|id| *id < after), "a restart never reuses ids");
        let mut other = IdAlloc::load(1, &MemStore::new(keys::ALL_CFS)).unwrap();
        assert_ne!(other.allocate(&store).unwrap() >> 48, first[0] >> 48);
    }
}
