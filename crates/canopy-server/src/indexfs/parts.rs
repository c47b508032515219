//! Which partition of a directory holds a name, on this server (GIGA+, seed
//! 000 §3.1): every header here knows the partitions it split off, so the
//! union of the bitmaps of this server's partitions of a directory routes any
//! name either to one of them or away (`EREMCHG`, answered with that bitmap
//! as `Reply::IxMoved`).

use super::{Header, IndexFs};
use crate::core::{io, Core};
use crate::keys::{self, PARTS};
use canopy_proto::giga::{self, PartMap};
use canopy_proto::{Errno, Reply};
use canopy_store::Batch;
use parking_lot::RwLock;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// At most this many partitions of one directory on one server (a directory
/// has at most 2^16).
const MAX_HERE: usize = 1 << 16;

/// Directories whose headers the cache holds before it starts over.
const CACHED_DIRS: usize = 65_536;

/// The headers of directories read lately. Every header write bumps `epoch`
/// after it lands, which empties the cache; a reader keeps what it read only
/// if no write landed meanwhile, so the cache never holds a header older
/// than the last write it saw completed.
#[derive(Default)]
pub(crate) struct HeaderCache {
    epoch: AtomicU64,
    /// The epoch the entries were read at, and the entries.
    map: RwLock<(u64, Cached)>,
}

type Cached = HashMap<u64, Arc<Vec<Header>>>;

/// The partitions of a directory that the headers `parts` know.
pub(crate) fn known(parts: &[Header]) -> PartMap {
    let mut m = PartMap::new();
    for h in parts {
        m.merge(&h.parts);
    }
    m
}

impl IndexFs {
    /// Every partition of `dir` held here, in partition order: from the cache
    /// unless a header was written since it was filled.
    pub(crate) fn parts_here(&self, core: &Core, dir: u64) -> Result<Arc<Vec<Header>>, Errno> {
        let epoch = self.cache.epoch.load(Ordering::Acquire);
        {
            let c = self.cache.map.read();
            if c.0 == epoch {
                if let Some(parts) = c.1.get(&dir) {
                    return Ok(parts.clone());
                }
            }
        }
        let found = core.store.scan(PARTS, &dir.to_be_bytes(), None, MAX_HERE).map_err(io)?;
        let parts: Arc<Vec<Header>> = Arc::new(found.iter().map(|(_, v)| keys::decode::<Header>(v).ok_or(Errno::EIO)).collect::<Result<_, _>>()?);
        let mut c = self.cache.map.write();
        // Only what was read with no header written meanwhile is kept.
        if self.cache.epoch.load(Ordering::Acquire) == epoch {
            if c.0 != epoch || c.1.len() >= CACHED_DIRS {
                *c = (epoch, HashMap::new());
            }
            c.1.insert(dir, parts.clone());
        }
        Ok(parts)
    }

    /// Writes `b`, which may change headers (the cache then starts over).
    pub(crate) fn commit(&self, core: &Core, b: Batch) -> Result<(), Errno> {
        let r = core.write(b);
        self.cache.epoch.fetch_add(1, Ordering::AcqRel);
        r
    }

    /// [`IndexFs::commit`] of a batch that removes `n` file entries.
    pub(crate) fn commit_removing(&self, core: &Core, b: Batch, n: u64) -> Result<(), Errno> {
        let r = core.write_removing(b, n);
        self.cache.epoch.fetch_add(1, Ordering::AcqRel);
        r
    }

    /// The partition here that holds `name` of `dir`. `ENXIO`: no partition of
    /// `dir` is here; `EREMCHG`: the name's partition is elsewhere;
    /// `EINPROGRESS` or `EAGAIN`: the name is in the half a split of its
    /// partition is moving, and that split is not running now (see
    /// [`super::split::Splits::refusal`]).
    pub(crate) fn part_for(&self, core: &Core, dir: u64, name: &str) -> Result<Header, Errno> {
        let r = self.part_of_hash(core, dir, giga::name_hash(name));
        if matches!(r, Err(Errno::EINPROGRESS | Errno::EAGAIN)) {
            // Counted here, once per request, not in every check of a hash.
            self.splits.count_refusal();
        }
        r
    }

    /// [`IndexFs::part_for`] of a name by its hash.
    fn part_of_hash(&self, core: &Core, dir: u64, hash: u64) -> Result<Header, Errno> {
        let parts = self.parts_here(core, dir)?;
        if parts.is_empty() {
            return Err(Errno::ENXIO);
        }
        let part = known(&parts).part_of(hash);
        let h = parts.iter().find(|h| h.part == part).cloned().ok_or(Errno::EREMCHG)?;
        if let Some(child) = h.splitting {
            let mut after = h.parts.clone();
            after.insert(child);
            if after.part_of(hash) == child && !self.splits.running(dir, h.part) {
                return Err(self.splits.refusal(dir, h.part));
            }
        }
        Ok(h)
    }

    /// Whether `h` is still what this server holds (a split since it was read
    /// would have changed its bitmap).
    pub(crate) fn unchanged(&self, core: &Core, h: &Header) -> Result<bool, Errno> {
        Ok(self.part_header(core, h.lookup.id, h.part)?.is_some_and(|now| now.parts == h.parts))
    }

    /// The errno for a name that partition `h` was found not to hold:
    /// `ENOENT`, unless a split moved the name since `h` was read (`EREMCHG`:
    /// the client asks again).
    pub(crate) fn absent(&self, core: &Core, h: &Header) -> Errno {
        match self.unchanged(core, h) {
            Ok(true) => Errno::ENOENT,
            Ok(false) => Errno::EREMCHG,
            Err(e) => e,
        }
    }

    /// The redirect for a request naming the name of hash `hash` in `dir`
    /// (`None`: names of `dir` some of which are not here), if its partition
    /// is not here.
    pub(crate) fn redirect(&self, core: &Core, dir: u64, hash: Option<u64>) -> Option<Reply> {
        if let Some(hash) = hash {
            if self.part_of_hash(core, dir, hash) != Err(Errno::EREMCHG) {
                return None;
            }
        }
        let parts = self.parts_here(core, dir).ok().filter(|p| !p.is_empty())?;
        Some(Reply::IxMoved { dir, parts: known(&parts) })
    }

    /// What this server knows of `dir`'s partitions (`ENXIO`: it holds none).
    pub(crate) fn known_here(&self, core: &Core, dir: u64) -> Result<(Arc<Vec<Header>>, PartMap), Errno> {
        let parts = self.parts_here(core, dir)?;
        if parts.is_empty() {
            return Err(Errno::ENXIO);
        }
        let map = known(&parts);
        Ok((parts, map))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use canopy_proto::msg::DirLookup;

    fn header(part: u32, parts: &[u32]) -> Header {
        let mut m = PartMap::new();
        for p in parts {
            m.insert(*p);
        }
        Header { lookup: DirLookup { id: 9, mode: 0o755, uid: 0, gid: 0 }, parent: 1, depth: 1, subdirs: 0, sealed: false, part, parts: m, splitting: None }
    }

    #[test]
    fn the_union_of_the_headers_here_routes_every_name() {
        // Partition 0 split off 1 and then 2; this server also holds 3 (1's child).
        let here = [header(0, &[0, 1, 2]), header(3, &[0, 1, 3])];
        let m = known(&here);
        assert_eq!(m.parts().collect::<Vec<_>>(), vec![0, 1, 2, 3]);
        for i in 0..400 {
            let h = giga::name_hash(&format!("n{i}"));
            assert_eq!(m.part_of(h), (h & 3) as u32);
        }
    }
}
