//! In-memory store: ordered maps per column family behind one lock.

use crate::{Batch, Change, Pairs, Result, Store, StoreError};
use parking_lot::RwLock;
use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;

type Table = BTreeMap<Vec<u8>, Vec<u8>>;

pub struct MemStore {
    cfs: RwLock<HashMap<&'static str, Table>>,
}

impl MemStore {
    pub fn new(cfs: &[&'static str]) -> MemStore {
        MemStore { cfs: RwLock::new(cfs.iter().map(|c| (*c, Table::new())).collect()) }
    }
}

fn unknown(cf: &str) -> StoreError {
    StoreError(format!("unknown column family {cf}"))
}

fn range<'a>(t: &'a Table, prefix: &'a [u8], after: Option<&[u8]>) -> impl Iterator<Item = (&'a Vec<u8>, &'a Vec<u8>)> {
    let start = match after {
        Some(a) if a >= prefix => Bound::Excluded(a.to_vec()),
        _ => Bound::Included(prefix.to_vec()),
    };
    t.range((start, Bound::Unbounded)).take_while(move |(k, _)| k.starts_with(prefix))
}

impl Store for MemStore {
    fn get(&self, cf: &'static str, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let cfs = self.cfs.read();
        Ok(cfs.get(cf).ok_or_else(|| unknown(cf))?.get(key).cloned())
    }

    fn write(&self, batch: Batch) -> Result<()> {
        let mut cfs = self.cfs.write();
        for change in &batch.changes {
            let cf = match change {
                Change::Put(cf, ..) | Change::Delete(cf, _) => *cf,
            };
            if !cfs.contains_key(cf) {
                return Err(unknown(cf));
            }
        }
        for change in batch.changes {
            match change {
                Change::Put(cf, k, v) => {
                    cfs.get_mut(cf).expect("checked").insert(k, v);
                }
                Change::Delete(cf, k) => {
                    cfs.get_mut(cf).expect("checked").remove(&k);
                }
            }
        }
        Ok(())
    }

    fn scan(&self, cf: &'static str, prefix: &[u8], after: Option<&[u8]>, limit: usize) -> Result<Pairs> {
        let cfs = self.cfs.read();
        let t = cfs.get(cf).ok_or_else(|| unknown(cf))?;
        Ok(range(t, prefix, after).take(limit).map(|(k, v)| (k.clone(), v.clone())).collect())
    }

    fn for_each(&self, cf: &'static str, prefix: &[u8], f: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> Result<()> {
        let cfs = self.cfs.read();
        let t = cfs.get(cf).ok_or_else(|| unknown(cf))?;
        for (k, v) in range(t, prefix, None) {
            if !f(k, v) {
                break;
            }
        }
        Ok(())
    }
}
