//! A snapshot of a member's data: table files written from one consistent
//! view of the store (RocksDB SST files for a RocksDB store), at most
//! [`TABLE_PAIRS`] pairs each, sent to a member that lags in chunks of at
//! most [`CHUNK_BYTES`] and ingested there whole.
//!
//! Installing is redone from durable state if the member dies midway: the
//! received files stay until the install has ended, and a marker in the
//! store names them ([`pending_install`]).

use crate::log_store::{encode, read_state};
use crate::{Families, MemberId, RAFT_STATE};
use canopy_store::{Batch, Store, StoreError, View};
use openraft::{LogId, StoredMembership, BasicNode};
use serde::{Deserialize, Serialize};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// Pairs per table file: bounds what building one holds in memory.
pub const TABLE_PAIRS: usize = 65_536;
/// Bytes per chunk sent: bounds what one message carries.
pub const CHUNK_BYTES: usize = 1 << 20;

pub(crate) const APPLIED: &[u8] = b"applied";
pub(crate) const MEMBERSHIP: &[u8] = b"membership";
const INSTALLING: &[u8] = b"installing";

pub type Membership = StoredMembership<MemberId, BasicNode>;

/// One table file of a snapshot: which family it fills.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableFile {
    pub family: String,
    pub name: String,
    pub len: u64,
}

/// A snapshot's files in a directory of their own.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotFiles {
    pub dir: PathBuf,
    pub tables: Vec<TableFile>,
}

/// One piece of a snapshot on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Chunk {
    pub table: TableFile,
    pub offset: u64,
    pub bytes: Vec<u8>,
}

fn io(e: std::io::Error) -> StoreError {
    StoreError::Io(e)
}

/// The applied log id and membership a view holds.
pub fn applied_in(view: &dyn View) -> Result<(Option<LogId<MemberId>>, Membership), StoreError> {
    let read = |key: &[u8]| view.get(RAFT_STATE, key);
    let applied = match read(APPLIED)? {
        Some(b) => postcard::from_bytes(&b).map_err(|e| StoreError::Engine(format!("applied: {e}")))?,
        None => None,
    };
    let membership = match read(MEMBERSHIP)? {
        Some(b) => postcard::from_bytes(&b).map_err(|e| StoreError::Engine(format!("membership: {e}")))?,
        None => Membership::default(),
    };
    Ok((applied, membership))
}

/// Writes every data family of `view` as table files in `dir` (made here).
pub fn build(store: &dyn Store, view: &dyn View, families: &Families, dir: &Path) -> Result<SnapshotFiles, StoreError> {
    std::fs::create_dir_all(dir).map_err(io)?;
    let mut tables = Vec::new();
    for family in families.all() {
        let mut pairs = Vec::new();
        let mut failed = None;
        let flush = |pairs: &mut Vec<(Vec<u8>, Vec<u8>)>, tables: &mut Vec<TableFile>| -> Result<(), StoreError> {
            if pairs.is_empty() {
                return Ok(());
            }
            let name = format!("{family}-{}.sst", tables.len());
            store.write_table(&dir.join(&name), &mut pairs.drain(..))?;
            let len = std::fs::metadata(dir.join(&name)).map_err(io)?.len();
            tables.push(TableFile { family: family.to_string(), name, len });
            Ok(())
        };
        view.for_each(family, &[], &mut |k, v| {
            pairs.push((k.to_vec(), v.to_vec()));
            if pairs.len() >= TABLE_PAIRS {
                if let Err(e) = flush(&mut pairs, &mut tables) {
                    failed = Some(e);
                    return false;
                }
            }
            true
        })?;
        if let Some(e) = failed {
            return Err(e);
        }
        flush(&mut pairs, &mut tables)?;
    }
    Ok(SnapshotFiles { dir: dir.to_path_buf(), tables })
}

impl SnapshotFiles {
    /// An empty snapshot to receive into `dir` (made here, emptied first).
    pub fn receiving(dir: &Path) -> Result<SnapshotFiles, StoreError> {
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir).map_err(io)?;
        Ok(SnapshotFiles { dir: dir.to_path_buf(), tables: Vec::new() })
    }

    /// The chunks that carry this snapshot, read one at a time.
    pub fn chunks(&self) -> impl Iterator<Item = Result<Chunk, StoreError>> + '_ {
        self.tables.iter().flat_map(move |t| {
            let count = t.len.div_ceil(CHUNK_BYTES as u64).max(1);
            (0..count).map(move |i| self.read_chunk(t, i * CHUNK_BYTES as u64))
        })
    }

    fn read_chunk(&self, table: &TableFile, offset: u64) -> Result<Chunk, StoreError> {
        let mut f = std::fs::File::open(self.dir.join(&table.name)).map_err(io)?;
        f.seek(SeekFrom::Start(offset)).map_err(io)?;
        let mut bytes = Vec::with_capacity(CHUNK_BYTES.min(table.len as usize));
        f.take(CHUNK_BYTES as u64).read_to_end(&mut bytes).map_err(io)?;
        Ok(Chunk { table: table.clone(), offset, bytes })
    }

    /// Adds a received chunk. Chunks come in order; one that does not
    /// continue its file where the last ended, or names a file outside the
    /// directory, is refused.
    pub fn receive(&mut self, chunk: Chunk) -> Result<(), StoreError> {
        let name = &chunk.table.name;
        if name.contains('/') || name.starts_with('.') || chunk.bytes.len() > CHUNK_BYTES {
            return Err(StoreError::Table(format!("snapshot chunk names {name:?}")));
        }
        let path = self.dir.join(name);
        let have = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        if have != chunk.offset || chunk.offset + chunk.bytes.len() as u64 > chunk.table.len {
            return Err(StoreError::Table(format!("snapshot chunk of {name} at {} after {have} bytes", chunk.offset)));
        }
        let mut f = std::fs::OpenOptions::new().create(true).append(true).open(&path).map_err(io)?;
        f.write_all(&chunk.bytes).map_err(io)?;
        if !self.tables.iter().any(|t| t.name == *name) {
            self.tables.push(chunk.table);
        }
        Ok(())
    }

    /// Whether every file has all its bytes.
    pub fn complete(&self) -> bool {
        self.tables.iter().all(|t| std::fs::metadata(self.dir.join(&t.name)).is_ok_and(|m| m.len() == t.len))
    }
}

/// A snapshot being installed: its files, and the log id and membership it
/// holds.
pub type Installing = (SnapshotFiles, Option<LogId<MemberId>>, Membership);

/// What an interrupted install left: the snapshot to install again.
pub fn pending_install(store: &dyn Store) -> Result<Option<Installing>, StoreError> {
    read_state(store, INSTALLING).map_err(StoreError::Engine)
}

/// Replaces every data family of `store` with the snapshot's, and records
/// what it holds. A marker written first makes a member that dies midway
/// redo it when it opens.
pub fn install(
    store: &dyn Store,
    families: &Families,
    files: &SnapshotFiles,
    applied: Option<LogId<MemberId>>,
    membership: &Membership,
) -> Result<(), StoreError> {
    mark_install(store, files, applied, membership)?;
    finish_install(store, families, files, applied, membership)
}

/// Records that `files` are being installed: the first step of [`install`].
pub fn mark_install(
    store: &dyn Store,
    files: &SnapshotFiles,
    applied: Option<LogId<MemberId>>,
    membership: &Membership,
) -> Result<(), StoreError> {
    if !files.complete() {
        return Err(StoreError::Table(format!("snapshot in {} is incomplete", files.dir.display())));
    }
    let mut mark = Batch::new();
    mark.put(RAFT_STATE, INSTALLING, encode(&(files, applied, membership)));
    store.write(mark)
}

/// The rest of [`install`], after [`mark_install`]: done again whole by a
/// member that died during it.
pub fn finish_install(
    store: &dyn Store,
    families: &Families,
    files: &SnapshotFiles,
    applied: Option<LogId<MemberId>>,
    membership: &Membership,
) -> Result<(), StoreError> {
    let mut clear = Batch::new();
    for family in families.all() {
        clear_family(store, family, &mut clear)?;
    }
    store.write(clear)?;
    for family in families.all() {
        let links = link_tables(store, files, family)?;
        if !links.is_empty() {
            let res = store.ingest(family, &links);
            for l in &links {
                let _ = std::fs::remove_file(l);
            }
            res?;
        }
    }
    let mut done = Batch::new();
    done.put(RAFT_STATE, APPLIED, encode(&applied));
    done.put(RAFT_STATE, MEMBERSHIP, encode(membership));
    done.delete(RAFT_STATE, INSTALLING);
    store.write(done)?;
    store.flush_log()
}

/// Adds to `batch` the deletion of every key of `family`: one range up to
/// 256 bytes of 0xff, and each key beyond it (none in practice).
fn clear_family(store: &dyn Store, family: &'static str, batch: &mut Batch) -> Result<(), StoreError> {
    let end = vec![0xff; 256];
    batch.delete_range(family, Vec::new(), end.clone());
    store.for_each(family, &end, &mut |k, _| {
        batch.delete(family, k.to_vec());
        true
    })
}

/// Links to a family's files for the store to take in, so the received
/// files stay until the install has ended.
fn link_tables(store: &dyn Store, files: &SnapshotFiles, family: &str) -> Result<Vec<PathBuf>, StoreError> {
    let scratch = store.scratch_dir();
    std::fs::create_dir_all(&scratch).map_err(io)?;
    let mut links = Vec::new();
    // Stores of one process may share a scratch directory (memory stores use
    // the system's): each link gets a name of its own.
    static LINKS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    for t in files.tables.iter().filter(|t| t.family == family) {
        let n = LINKS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let link = scratch.join(format!("install-{}-{n}-{}", std::process::id(), t.name));
        let _ = std::fs::remove_file(&link);
        if std::fs::hard_link(files.dir.join(&t.name), &link).is_err() {
            std::fs::copy(files.dir.join(&t.name), &link).map_err(io)?;
        }
        links.push(link);
    }
    Ok(links)
}
