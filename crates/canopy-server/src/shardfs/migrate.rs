//! Migration after a directory rename: objects below the renamed directory whose
//! primary changed are listed (`Migrate`), copied to their new primary (`Adopt`)
//! and dropped here (`Release`), in batches the client drives under the rename's
//! locks. Each step is idempotent, so recovery can repeat it; a dead
//! coordinator's step that arrives once recovery revoked its transaction is
//! refused (`ESTALE`).

use super::ShardFs;
use crate::core::{io, Core};
use crate::keys::{self, DIRTIMES, ENTRIES};
use canopy_proto::msg::{DirTimes, Moved, MovedItem};
use canopy_proto::path::NsPath;
use canopy_proto::{Creds, Errno, Reply};
use canopy_store::Batch;

/// Stored bytes of the objects one `Migrate` answer lists at most: files
/// carry their inline contents (up to 64 KiB each by default), so 1,024 of
/// them would not fit in a frame; the answer, and the `Adopt` and `Release`
/// made of it, stay well inside [`canopy_proto::frame::MAX_FRAME`].
const MIGRATE_BYTES: usize = canopy_proto::frame::MAX_FRAME / 4;

impl ShardFs {
    /// Up to `limit` objects below directory `root` (its current path) held here
    /// whose primary is now another server, and no more than about
    /// [`MIGRATE_BYTES`] of them: fewer than `limit` does not mean all.
    pub(crate) fn migrate(&self, core: &Core, root: &NsPath, limit: u32) -> Result<Reply, Errno> {
        let _g = core.lock_structure();
        let limit = limit.clamp(1, crate::ops_readdir::MAX_PAGE) as usize;
        let table = self.table.read();
        let root_id = super::resolve::resolve_dir(&table, &Creds::root(), root).map_err(|_| Errno::ENOENT)?;
        let mut out = Vec::new();
        let mut bytes = 0;
        let full = |n: usize, bytes: usize| n >= limit || bytes >= MIGRATE_BYTES;
        for id in table.subtree(root_id) {
            let dir_path = table.path_of(id).ok_or(Errno::EIO)?;
            if let Some(times) = core.load_dir_times(id)? {
                let target = self.primary_of(core, &dir_path);
                if target != core.cfg.index {
                    out.push(Moved { target, item: MovedItem::DirTimes { id, times } });
                }
            }
            let mut failed = None;
            core.store
                .for_each(ENTRIES, &id.to_be_bytes(), &mut |k, v| {
                    if full(out.len(), bytes) {
                        return false;
                    }
                    let Some(((_, name), record)) = super::decode_entry(k, v) else {
                        failed = Some(Errno::EIO);
                        return false;
                    };
                    match dir_path.join(&name) {
                        Ok(p) => {
                            let target = self.primary_of(core, &p);
                            if target != core.cfg.index {
                                bytes += k.len() + v.len();
                                out.push(Moved { target, item: MovedItem::File { parent: id, name, record } });
                            }
                        }
                        Err(e) => failed = Some(e),
                    }
                    failed.is_none()
                })
                .map_err(io)?;
            if let Some(e) = failed {
                return Err(e);
            }
            if full(out.len(), bytes) {
                break;
            }
        }
        Ok(Reply::Moved(out))
    }

    /// Stores `items` here, their new primary. A dead coordinator's adopt
    /// that arrives after recovery took its transaction over (`txn` revoked)
    /// is refused: recovery has moved the items itself, and they may have
    /// changed or gone since.
    pub(crate) fn adopt(&self, core: &Core, items: Vec<MovedItem>, txn: Option<u64>) -> Result<Reply, Errno> {
        let _g = core.lock_structure();
        self.refuse_revoked(txn)?;
        let mut b = Batch::new();
        for item in items {
            match item {
                MovedItem::File { parent, name, record } => b.put(ENTRIES, keys::entry_key(parent, &name), keys::encode(&record)),
                // Times already here are as new or newer: a rename's apply
                // step carried them here, and they may have changed since.
                MovedItem::DirTimes { id, times } => {
                    if core.load_dir_times(id)?.is_none() {
                        b.put(DIRTIMES, keys::id_key(id).to_vec(), keys::encode::<DirTimes>(&times))
                    }
                }
            }
        }
        core.write(b)?;
        Ok(Reply::Unit)
    }

    /// Drops `items`, adopted elsewhere; refused as [`ShardFs::adopt`] is.
    pub(crate) fn release(&self, core: &Core, items: Vec<MovedItem>, txn: Option<u64>) -> Result<Reply, Errno> {
        let _g = core.lock_structure();
        self.refuse_revoked(txn)?;
        let mut b = Batch::new();
        for item in items {
            match item {
                MovedItem::File { parent, name, .. } => b.delete(ENTRIES, keys::entry_key(parent, &name)),
                MovedItem::DirTimes { id, .. } => b.delete(DIRTIMES, keys::id_key(id).to_vec()),
            }
        }
        core.write(b)?;
        Ok(Reply::Unit)
    }
}
