//! Sorted tables in the server's scratch directory: built from pairs, ingested
//! whole (bulk insertion, and a split's destination), or read back as bytes to
//! send (a split's source).

use crate::core::{io, Core};
use canopy_proto::Errno;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

static TABLES: AtomicU64 = AtomicU64::new(0);

/// A fresh path for one table; the caller removes it.
fn scratch(core: &Core, what: &str) -> Result<PathBuf, Errno> {
    let dir = core.store.scratch_dir();
    std::fs::create_dir_all(&dir).map_err(io)?;
    let n = TABLES.fetch_add(1, Ordering::Relaxed);
    Ok(dir.join(format!("{what}-{}-{}-{n}.sst", core.cfg.index, std::process::id())))
}

/// Writes sorted `pairs` as one table and ingests it into `cf`.
pub(crate) fn ingest_pairs(core: &Core, cf: &'static str, pairs: Vec<(Vec<u8>, Vec<u8>)>) -> Result<(), Errno> {
    let path = scratch(core, "bulk")?;
    let result = core.store.write_table(&path, &mut pairs.into_iter()).map_err(io).and_then(|_| core.store.ingest(cf, std::slice::from_ref(&path)).map_err(io));
    let _ = std::fs::remove_file(&path);
    result
}

/// Sorted `pairs` as the bytes of one table.
pub(crate) fn table_bytes(core: &Core, pairs: Vec<(Vec<u8>, Vec<u8>)>) -> Result<Vec<u8>, Errno> {
    let path = scratch(core, "split-out")?;
    let result = core.store.write_table(&path, &mut pairs.into_iter()).map_err(io).and_then(|_| std::fs::read(&path).map_err(io));
    let _ = std::fs::remove_file(&path);
    result
}

/// Ingests a table another server built (`table_bytes`) into `cf`.
pub(crate) fn ingest_bytes(core: &Core, cf: &'static str, bytes: &[u8]) -> Result<(), Errno> {
    let path = scratch(core, "split-in")?;
    let result = std::fs::write(&path, bytes).map_err(io).and_then(|_| core.store.ingest(cf, std::slice::from_ref(&path)).map_err(io));
    let _ = std::fs::remove_file(&path);
    result
}
