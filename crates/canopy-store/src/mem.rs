//! In-memory store: ordered maps per column family behind one lock.
//!
//! Its table files are its own format, not RocksDB's: `MAGIC`, then for each pair
//! `u32 key length ‖ key ‖ u32 value length ‖ value` (big-endian), keys strictly
//! increasing. A snapshot is a copy (tests and simulations only).

use crate::{Batch, Change, Pairs, Result, Store, StoreError, View};
use parking_lot::RwLock;
use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Write};
use std::ops::Bound;
use std::path::{Path, PathBuf};

const MAGIC: &[u8; 8] = b"CNPYMEMT";

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
    StoreError::UnknownFamily(cf.to_string())
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
                Change::Put(cf, ..) | Change::Delete(cf, _) | Change::DeleteRange(cf, ..) => *cf,
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
                Change::DeleteRange(cf, from, to) => {
                    let t = cfs.get_mut(cf).expect("checked");
                    let doomed: Vec<Vec<u8>> = t.range(from..to).map(|(k, _)| k.clone()).collect();
                    for k in doomed {
                        t.remove(&k);
                    }
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
        visit(&self.cfs.read(), cf, prefix, f)
    }

    fn snapshot(&self) -> Box<dyn View + '_> {
        Box::new(MemView { cfs: self.cfs.read().clone() })
    }

    fn write_table(&self, path: &Path, pairs: &mut dyn Iterator<Item = (Vec<u8>, Vec<u8>)>) -> Result<u64> {
        let mut out = MAGIC.to_vec();
        let mut last: Option<Vec<u8>> = None;
        let mut n = 0u64;
        for (k, v) in pairs {
            if last.as_ref().is_some_and(|l| *l >= k) {
                return Err(StoreError::Table("table keys must be strictly increasing".into()));
            }
            for part in [&k, &v] {
                out.extend_from_slice(&(part.len() as u32).to_be_bytes());
                out.extend_from_slice(part);
            }
            last = Some(k);
            n += 1;
        }
        if n == 0 {
            return Err(StoreError::Table("a table needs at least one pair".into()));
        }
        let mut f = std::fs::OpenOptions::new().write(true).create_new(true).open(path).map_err(io)?;
        f.write_all(&out).map_err(io)?;
        Ok(n)
    }

    fn ingest(&self, cf: &'static str, paths: &[PathBuf]) -> Result<()> {
        let tables = paths.iter().map(|p| read_table(p)).collect::<Result<Vec<_>>>()?;
        let mut cfs = self.cfs.write();
        let t = cfs.get_mut(cf).ok_or_else(|| unknown(cf))?;
        for (k, v) in tables.into_iter().flatten() {
            t.insert(k, v);
        }
        Ok(())
    }
}

fn io(e: std::io::Error) -> StoreError {
    StoreError::Io(e)
}

fn visit(cfs: &HashMap<&'static str, Table>, cf: &'static str, prefix: &[u8], f: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> Result<()> {
    let t = cfs.get(cf).ok_or_else(|| unknown(cf))?;
    for (k, v) in range(t, prefix, None) {
        if !f(k, v) {
            break;
        }
    }
    Ok(())
}

/// Reads a table file this store wrote; anything else is an error, not a panic.
fn read_table(path: &Path) -> Result<Pairs> {
    let mut bytes = Vec::new();
    std::fs::File::open(path).and_then(|mut f| f.read_to_end(&mut bytes)).map_err(io)?;
    let bad = || StoreError::Table(format!("{} is not a table file of this store", path.display()));
    let mut rest = bytes.strip_prefix(&MAGIC[..]).ok_or_else(bad)?;
    let take = |rest: &mut &[u8]| -> Result<Vec<u8>> {
        let (len, tail) = rest.split_first_chunk::<4>().ok_or_else(bad)?;
        let len = u32::from_be_bytes(*len) as usize;
        let (part, tail) = tail.split_at_checked(len).ok_or_else(bad)?;
        *rest = tail;
        Ok(part.to_vec())
    };
    let mut out = Vec::new();
    while !rest.is_empty() {
        let k = take(&mut rest)?;
        let v = take(&mut rest)?;
        out.push((k, v));
    }
    Ok(out)
}

/// A copy of the whole store.
struct MemView {
    cfs: HashMap<&'static str, Table>,
}

impl View for MemView {
    fn get(&self, cf: &'static str, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.cfs.get(cf).ok_or_else(|| unknown(cf))?.get(key).cloned())
    }

    fn for_each(&self, cf: &'static str, prefix: &[u8], f: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> Result<()> {
        visit(&self.cfs, cf, prefix, f)
    }
}
