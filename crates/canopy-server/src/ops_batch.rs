//! BatchFS commits on a server (seed 002 §II-E, II-F).
//!
//! A batch's owner opens it on every server (`BatchOpen`: a record in `meta`).
//! Its commit stages, chunk by chunk, the files this server will hold
//! (`BatchStage`: kept in `meta`, so a restart loses nothing acknowledged), then
//! applies them (`BatchApply`): under the stripes of every directory they go
//! in, each file is checked as its owner's create of it with those attributes
//! would be (`canopy_posix::batch`: the directory exists here and the owner may
//! write it; the name is free; the attributes are the owner's to give), the
//! accepted ones are written as one sorted table and ingested whole, and the
//! chunks are forgotten. A server's share so lands at once or not at all, and
//! is refused file by file.
//!
//! A regular file lands with a FID this server issues, never the one the batch
//! carries (a private namespace is its user's to edit, and a FID names
//! back-end contents that mounts read as root); its contents must be inline
//! (`EFBIG` otherwise, as for a modified base file: the commit carries inline
//! contents only). Only root's batches keep the FIDs they carry, contents
//! already in back-end storage included (root reads every back-end file
//! anyway; a batch's private server is loaded so with the files of a
//! snapshot). The FID it carried identifies it across tries instead:
//! before the table is ingested, `meta` records the inode number each such
//! file lands as (`LANDED` ‖ batch ‖ carried FID), so a file found at its name
//! with that inode number was landed by an earlier apply whose answer was
//! lost: counted as landed, not made twice, and a commit run again after a
//! crash finishes it. A carried FID given twice lands once.

use crate::core::io;
use crate::keys::{self, ENTRIES, META};
use crate::mode::{Located, Target};
use crate::server::MetaServer;
use canopy_posix::batch::check_new_file;
use canopy_proto::batch::{BatchFile, BatchInfo, Rejected, CHUNKS_MAX, CHUNK_MAX, OPEN_MAX};
use canopy_proto::msg::{At, Record};
use canopy_proto::path::{check_name, NsPath};
use canopy_proto::{Creds, Errno, Fid, Reply};
use canopy_store::Batch;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashSet};

/// Keys in `meta`: each batch's record under `RECORDS` ‖ batch, its staged
/// chunks under `CHUNKS` ‖ batch ‖ chunk. Apart, so listing the records never
/// reads a chunk.
const RECORDS: &[u8] = b"batch-record\0";
const CHUNKS: &[u8] = b"batch-chunk\0";
/// The inode number each regular file of a batch lands as, by the FID it carried.
const LANDED: &[u8] = b"batch-landed\0";

fn record_key(batch: u64) -> Vec<u8> {
    [RECORDS, &batch.to_be_bytes()].concat()
}

fn chunks_prefix(batch: u64) -> Vec<u8> {
    [CHUNKS, &batch.to_be_bytes()].concat()
}

fn chunk_key(batch: u64, chunk: u32) -> Vec<u8> {
    [&chunks_prefix(batch)[..], &chunk.to_be_bytes()].concat()
}

/// The key just past every key starting with `prefix`: its last byte below
/// 0xff raised by one, the 0xff bytes after it dropped (every prefix here
/// starts with `batch`, so some byte is below 0xff).
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while end.last() == Some(&0xff) {
        end.pop();
    }
    if let Some(last) = end.last_mut() {
        *last += 1;
    }
    end
}

fn landed_prefix(batch: u64) -> Vec<u8> {
    [LANDED, &batch.to_be_bytes()].concat()
}

fn landed_key(batch: u64, carried: Fid) -> Vec<u8> {
    [&landed_prefix(batch)[..], &carried.0.to_be_bytes()].concat()
}

/// A batch's staged chunks, for a range delete.
fn delete_chunks(b: &mut Batch, batch: u64) {
    let prefix = chunks_prefix(batch);
    b.delete_range(META, prefix.clone(), prefix_end(&prefix));
}

/// What a batch recorded of where its files landed, for a range delete.
fn delete_landed(b: &mut Batch, batch: u64) {
    let prefix = landed_prefix(batch);
    b.delete_range(META, prefix.clone(), prefix_end(&prefix));
}

/// A batch as recorded here.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Opened {
    uid: u32,
    gid: u32,
    root: String,
    opened_ns: u64,
}

/// One staged chunk: files for one directory.
#[derive(Debug, Serialize, Deserialize)]
struct Staged {
    dir: At,
    files: Vec<BatchFile>,
}

/// Where one staged file goes: its target, its chunk and index.
type Placed = (Target, u32, u32);

impl MetaServer {
    pub(crate) fn batch_open(&self, creds: &Creds, batch: u64, root: &str) -> Result<Reply, Errno> {
        NsPath::parse(root)?;
        if let Some(rec) = self.batch_record(batch)? {
            return if rec.uid == creds.uid && rec.root == root { Ok(Reply::Unit) } else { Err(Errno::EEXIST) };
        }
        let mine = self.batch_records()?.iter().filter(|(_, r)| r.uid == creds.uid).count();
        if mine >= OPEN_MAX {
            return Err(Errno::EAGAIN);
        }
        let rec = Opened { uid: creds.uid, gid: creds.gid, root: root.to_string(), opened_ns: self.now_ns().max(0) as u64 };
        let mut b = Batch::new();
        b.put(META, record_key(batch), keys::encode(&rec));
        self.store.write(b).map_err(io)?;
        Ok(Reply::Unit)
    }

    pub(crate) fn batch_list(&self) -> Result<Reply, Errno> {
        let mut out = Vec::new();
        for (batch, rec) in self.batch_records()? {
            let staged = self.staged(batch)?.values().map(|s| s.files.len() as u64).sum();
            out.push(BatchInfo { batch, uid: rec.uid, gid: rec.gid, root: rec.root, opened_ns: rec.opened_ns, staged });
        }
        Ok(Reply::Batches(out))
    }

    pub(crate) fn batch_stage(&self, creds: &Creds, batch: u64, chunk: u32, dir: At, files: Vec<BatchFile>) -> Result<Reply, Errno> {
        self.batch_owned(creds, batch)?;
        if chunk >= CHUNKS_MAX || files.len() > CHUNK_MAX {
            return Err(Errno::EMSGSIZE);
        }
        Target::parse(&dir)?;
        // Names are checked now; everything that depends on the namespace, at apply.
        for f in &files {
            check_name(&f.name)?;
            if f.name == "." || f.name == ".." {
                return Err(Errno::EINVAL);
            }
        }
        let mut b = Batch::new();
        // A commit stages chunk 0 first and alone: what an interrupted one
        // left here goes.
        if chunk == 0 {
            delete_chunks(&mut b, batch);
        }
        b.put(META, chunk_key(batch, chunk), keys::encode(&Staged { dir, files }));
        self.store.write(b).map_err(io)?;
        Ok(Reply::Unit)
    }

    pub(crate) fn batch_apply(&self, creds: &Creds, batch: u64) -> Result<Reply, Errno> {
        let rec = self.batch_owned(creds, batch)?;
        let staged = self.staged(batch)?;
        let mut placed: Vec<Placed> = Vec::new();
        let mut rejected: Vec<Rejected> = Vec::new();
        let root = NsPath::parse(&rec.root)?;
        for (chunk, s) in &staged {
            let dir = Target::parse(&s.dir)?;
            for (i, f) in s.files.iter().enumerate() {
                match file_target(&dir, &f.name).and_then(|t| within(&root, t)) {
                    Ok(t) => placed.push((t, *chunk, i as u32)),
                    Err(e) => rejected.push((*chunk, i as u32, e)),
                }
            }
        }
        let targets: Vec<&Target> = placed.iter().map(|(t, _, _)| t).collect();
        let _g = self.lock_entries(&targets, false)?;
        let mut pairs = Vec::with_capacity(placed.len());
        let mut seen = HashSet::with_capacity(placed.len());
        let mut carried = HashSet::new();
        let mut grew: BTreeMap<u64, u64> = BTreeMap::new();
        let mut markers = Batch::new();
        let mut landed = 0;
        for (target, chunk, i) in &placed {
            let file = &staged[chunk].files[*i as usize];
            if file.fid().is_some_and(|fid| !carried.insert(fid)) {
                rejected.push((*chunk, *i, Errno::EEXIST));
                continue;
            }
            let landed_as = self.landed_as(batch, file)?;
            match self.check_staged(creds, target, file, landed_as) {
                Ok(Check::Landed) => landed += 1,
                Ok(Check::New { parent, key }) if seen.insert(key.clone()) => {
                    let mut inode = file.inode.clone();
                    inode.attr.ino = match landed_as {
                        Some(ino) => ino,
                        None => self.new_id()?,
                    };
                    if let (Some(data), Some(fid)) = (inode.data.as_mut(), file.fid()) {
                        if !creds.is_root() {
                            data.fid = self.fid_of(inode.attr.ino);
                        }
                        markers.put(META, landed_key(batch, fid), keys::encode(&inode.attr.ino));
                    }
                    pairs.push((key, keys::encode(&Record::Inode(inode))));
                    *grew.entry(parent).or_default() += 1;
                }
                Ok(Check::New { .. }) => rejected.push((*chunk, *i, Errno::EEXIST)),
                Err(e) => rejected.push((*chunk, *i, e)),
            }
        }
        let inserted = pairs.len() as u64;
        if inserted > 0 {
            // Where they land, first: a rerun after a crash before the
            // ingest makes them anew as these inodes.
            self.store.write(markers).map_err(io)?;
            pairs.sort_unstable_by(|a, b| a.0.cmp(&b.0));
            crate::tables::ingest_pairs(self, ENTRIES, pairs)?;
            self.added_entries(inserted);
            for (dir, n) in grew {
                self.mode().grew(self, dir, n);
            }
        }
        let mut b = Batch::new();
        delete_chunks(&mut b, batch);
        self.store.write(b).map_err(io)?;
        rejected.sort_unstable_by_key(|(c, i, _)| (*c, *i));
        Ok(Reply::BatchApplied { inserted, landed, rejected })
    }

    pub(crate) fn batch_close(&self, creds: &Creds, batch: u64) -> Result<Reply, Errno> {
        match self.batch_owned(creds, batch) {
            Err(Errno::ENOENT) => return Ok(Reply::Unit),
            r => r?,
        };
        let mut b = Batch::new();
        b.delete(META, record_key(batch));
        delete_chunks(&mut b, batch);
        delete_landed(&mut b, batch);
        self.store.write(b).map_err(io)?;
        Ok(Reply::Unit)
    }

    /// The inode number an earlier apply of `batch` gave `file`, if one did.
    fn landed_as(&self, batch: u64, file: &BatchFile) -> Result<Option<u64>, Errno> {
        let Some(fid) = file.fid() else { return Ok(None) };
        let raw = self.store.get(META, &landed_key(batch, fid)).map_err(io)?;
        raw.map(|v| keys::decode(&v).ok_or(Errno::EIO)).transpose()
    }

    /// What a staged file's create would meet now; `landed_as`: the inode
    /// an earlier apply made of it.
    fn check_staged(&self, creds: &Creds, target: &Target, file: &BatchFile, landed_as: Option<u64>) -> Result<Check, Errno> {
        if !creds.is_root() && file.inode.data.as_ref().is_some_and(|d| d.inline.is_none()) {
            return Err(Errno::EFBIG);
        }
        match self.locate(creds, target)? {
            Located::Absent { parent, name } => {
                check_new_file(creds, self.dir_owner(parent)?, &file.inode)?;
                Ok(Check::New { key: self.entry_key(parent, &name), parent })
            }
            Located::File { record: Record::Inode(i), .. } if landed_as == Some(i.attr.ino) => Ok(Check::Landed),
            _ => Err(Errno::EEXIST),
        }
    }

    /// The batch's record, if the caller may act on it (its owner or root).
    fn batch_owned(&self, creds: &Creds, batch: u64) -> Result<Opened, Errno> {
        let rec = self.batch_record(batch)?.ok_or(Errno::ENOENT)?;
        if rec.uid != creds.uid && !creds.is_root() {
            return Err(Errno::EPERM);
        }
        Ok(rec)
    }

    fn batch_record(&self, batch: u64) -> Result<Option<Opened>, Errno> {
        let raw = self.store.get(META, &record_key(batch)).map_err(io)?;
        raw.map(|v| keys::decode(&v).ok_or(Errno::EIO)).transpose()
    }

    /// Every batch recorded here.
    fn batch_records(&self) -> Result<Vec<(u64, Opened)>, Errno> {
        self.meta_pairs(RECORDS, |rest| rest.try_into().ok().map(u64::from_be_bytes))
    }

    /// The chunks batch `batch` staged here, by number.
    fn staged(&self, batch: u64) -> Result<BTreeMap<u32, Staged>, Errno> {
        Ok(self.meta_pairs(&chunks_prefix(batch), |rest| rest.try_into().ok().map(u32::from_be_bytes))?.into_iter().collect())
    }

    /// The values under `prefix` in `meta`, decoded, each with what `number`
    /// reads from the rest of its key. `EIO` if any key or value is not one.
    fn meta_pairs<N, T: serde::de::DeserializeOwned>(&self, prefix: &[u8], number: impl Fn(&[u8]) -> Option<N>) -> Result<Vec<(N, T)>, Errno> {
        let mut out = Vec::new();
        let mut bad = false;
        self.store
            .for_each(META, prefix, &mut |k, v| {
                match (number(&k[prefix.len()..]), keys::decode(v)) {
                    (Some(n), Some(t)) => out.push((n, t)),
                    _ => bad = true,
                }
                true
            })
            .map_err(io)?;
        if bad {
            return Err(Errno::EIO);
        }
        Ok(out)
    }
}

/// What a staged file's check found.
enum Check {
    /// Free to make: its directory and its key.
    New { parent: u64, key: Vec<u8> },
    /// An earlier apply made it (the inode recorded for its carried FID is at its name).
    Landed,
}

/// `target`, if it is below the batch's root `root` (`EXDEV` otherwise), as
/// far as this server can tell: a directory named by id (IndexFS) it cannot
/// place, and the committing client checks those.
fn within(root: &NsPath, target: Target) -> Result<Target, Errno> {
    match &target {
        Target::Path(p) if p == root || !p.is_within(root) => Err(Errno::EXDEV),
        _ => Ok(target),
    }
}

/// The entry named `name` in the chunk's directory `dir`.
fn file_target(dir: &Target, name: &str) -> Result<Target, Errno> {
    match dir {
        Target::Path(p) => Ok(Target::Path(p.join(name)?)),
        Target::Dir(id) => Target::parse(&At::Entry { dir: *id, name: name.to_string() }),
        Target::Entry { .. } => Err(Errno::EINVAL),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_of_one_batch_sort_together_and_apart_from_others() {
        let (a, b) = (7u64, 8u64);
        assert!(chunk_key(a, 3).starts_with(&chunks_prefix(a)));
        assert!(chunk_key(a, 1) < chunk_key(a, 2));
        assert!(chunk_key(a, u32::MAX) < prefix_end(&chunks_prefix(a)));
        assert!(prefix_end(&chunks_prefix(a)) <= chunks_prefix(b));
        assert!(!record_key(a).starts_with(CHUNKS) && !chunk_key(a, 0).starts_with(RECORDS), "records and chunks apart");
        let top = u64::MAX;
        assert!(prefix_end(&chunks_prefix(top)) > chunk_key(top, u32::MAX), "a batch number ending in 0xff");
        assert!(prefix_end(&chunks_prefix(0xff)) > chunk_key(0xff, u32::MAX) && prefix_end(&chunks_prefix(0xff)) <= chunks_prefix(0x100));
    }
}
