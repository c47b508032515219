//! ShardFS on a server (seed 000, §3.3): every server holds the whole directory
//! lookup table and resolves any path against it without asking another; file
//! entries live on the primary of their path (`placement::primary`); directory
//! mutations are transactions the client drives across every server, with fences
//! on the subtrees a non-monotonic one changes and migration of the objects whose
//! primary a directory rename changed.
//!
//! - [`dirtable`], [`resolve`]: the replicated table and path resolution (pure);
//! - `dirs`: mkdir, rmdir, directory setattr, `DirProbe`, `DirSync`;
//! - `rename_dir`, `migrate`, `fence`, `parked`: directory renames and what
//!   they move;
//! - `revoked`: the transactions recovery took over, whose late steps are
//!   refused;
//! - `fsck`: the table's digest and where every object belongs.

pub mod dirtable;
mod dirs;
mod fence;
mod fsck;
mod migrate;
mod parked;
mod rename_dir;
pub mod resolve;
mod revoked;

pub use crate::revoked::KEPT as REVOKED_KEPT;

use crate::core::Core;
use crate::keys::{self, DIRS, DIRTIMES};
use crate::mode::{Admission, Located, Mode, Target};
use crate::revoked::Revoked;
use canopy_posix::perm::Owner;
use canopy_proto::msg::{DirLookup, FsckReport, Intent, TxnInfo};
use canopy_proto::path::NsPath;
use canopy_proto::placement;
use canopy_proto::{Creds, DirEntry, Errno, FileKind, Reply, Request};
use canopy_store::{Batch, Store};
use dirtable::{DirTable, ROOT_ID};
use parking_lot::RwLock;
use resolve::Miss;
use std::collections::HashMap;

pub(crate) struct ShardFs {
    table: RwLock<DirTable>,
    fences: fence::Fences,
    /// Times a rename's source primary dropped, kept until it ends here.
    parked: parked::Parked,
}

/// The registry's way in: ShardFS's server (`canopy_proto::for_each_mode!`).
pub(crate) fn open(_: &canopy_proto::modes::ShardFsOptions, at: &crate::mode::Opening) -> Result<Box<dyn Mode>, String> {
    Ok(Box::new(ShardFs::open(at.core)?))
}

impl ShardFs {
    /// Loads the replicated directory table; creates the root on a new store.
    pub(crate) fn open(core: &Core) -> Result<ShardFs, String> {
        let table = load_table(core)?;
        let fences = fence::Fences::with_revoked(Revoked::of(crate::revoked::load(core)?));
        Ok(ShardFs { table: RwLock::new(table), fences, parked: parked::Parked::default() })
    }

    fn primary_of(&self, core: &Core, path: &NsPath) -> u32 {
        placement::primary(path, core.cfg.servers)
    }

    fn is_primary(&self, core: &Core, path: &NsPath) -> bool {
        self.primary_of(core, path) == core.cfg.index
    }

    /// The path an (directory id, name) target names, from the table.
    fn entry_path(&self, dir: u64, name: &str) -> Result<NsPath, Errno> {
        self.table.read().path_of(dir).ok_or(Errno::ENOENT)?.join(name)
    }

    fn target_path(&self, at: &Target) -> Result<NsPath, Errno> {
        match at {
            Target::Path(p) => Ok(p.clone()),
            Target::Entry { dir, name } => self.entry_path(*dir, name),
            Target::Dir(id) => self.table.read().path_of(*id).ok_or(Errno::ENOENT),
        }
    }

    /// Resolves `path` to what this server knows of it.
    pub(crate) fn locate_path(&self, core: &Core, creds: &Creds, path: &NsPath) -> Result<Located, Errno> {
        if path.is_root() {
            return Ok(Located::Root);
        }
        let (parent, name) = {
            let table = self.table.read();
            let (parent, name) = resolve::resolve_parent(&table, creds, path).map_err(|m| self.miss(core, &table, m))?;
            if let Some(id) = table.child(parent, name) {
                return Ok(Located::Dir { parent, name: name.to_string(), id });
            }
            (parent, name.to_string())
        };
        match core.load_record(&keys::entry_key(parent, &name))? {
            Some(record) => Ok(Located::File { parent, name, record }),
            None => Ok(Located::Absent { parent, name }),
        }
    }

    /// Turns a resolution miss into an errno: a missing intermediate component is
    /// `ENOTDIR` if this server holds a file of that name, `ENOENT` if this server
    /// is that name's primary and holds nothing, else `EREMOTE` (only its primary
    /// can tell). Callers pass the table they resolved against and still hold: a
    /// second read lock could wait behind a queued writer and deadlock.
    fn miss(&self, core: &Core, table: &DirTable, miss: Miss) -> Errno {
        if let Miss::Broken { id } = &miss {
            core.problem(format!("directory {id:#x} is listed but missing from the table"));
        }
        if let Miss::NotADir { parent, name } = &miss {
            if let Ok(Some(_)) = core.load_record(&keys::entry_key(*parent, name)) {
                return Errno::ENOTDIR;
            }
            let path = table.path_of(*parent).and_then(|p| p.join(name).ok());
            if path.is_some_and(|p| self.is_primary(core, &p)) {
                return Errno::ENOENT;
            }
        }
        resolve::miss_errno(&miss)
    }

    fn dir_owner(&self, id: u64) -> Result<Owner, Errno> {
        self.table.read().get(id).map(resolve::owner).ok_or(Errno::ENOENT)
    }

    fn dir_lookup(&self, id: u64) -> Result<DirLookup, Errno> {
        self.table.read().get(id).map(|n| n.lookup.clone()).ok_or(Errno::ENOENT)
    }

    fn has_subdirs(&self, id: u64) -> bool {
        self.table.read().get(id).is_some_and(|n| !n.subdirs.is_empty())
    }
}

impl Mode for ShardFs {
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn name(&self) -> &'static str {
        "shardfs"
    }

    /// A target named by id resolves through its path, so search permission is
    /// checked on every ancestor however the entry is named.
    fn locate(&self, core: &Core, creds: &Creds, at: &Target) -> Result<Located, Errno> {
        match at {
            Target::Path(p) => self.locate_path(core, creds, p),
            other => self.locate_path(core, creds, &self.target_path(other)?),
        }
    }

    /// Every entry but the root (replicated like every directory) is its
    /// path's primary's.
    fn check_placement(&self, core: &Core, at: &Target) -> Result<(), Errno> {
        let named;
        let path = match at {
            Target::Path(p) => p,
            other => {
                named = self.target_path(other)?;
                &named
            }
        };
        if path.is_root() || self.is_primary(core, path) {
            Ok(())
        } else {
            Err(Errno::ENXIO)
        }
    }

    fn entry_key(&self, dir: u64, name: &str) -> Vec<u8> {
        keys::entry_key(dir, name)
    }

    fn entry_name(&self, key: &[u8]) -> Option<String> {
        keys::split_entry_key(key).map(|(_, name)| name)
    }

    fn checks_ancestors(&self) -> bool {
        true
    }

    fn keys_in_name_order(&self) -> bool {
        true
    }

    fn admit(&self, at: &Target) -> Result<Admission<'_>, Errno> {
        // Running before the fence check: a fence put up from now on waits
        // for this operation, or this operation sees it.
        let running = self.fences.running();
        if self.fences.any() {
            self.fences.admit(&self.target_path(at)?)?;
        }
        Ok(Some(running))
    }

    fn dir(&self, _core: &Core, id: u64) -> Result<Option<(DirLookup, Option<u32>)>, Errno> {
        Ok(self.table.read().get(id).map(|n| (n.lookup.clone(), Some(2 + n.subdirs.len() as u32))))
    }

    fn blocks(&self, _req: &Request) -> bool {
        false
    }

    /// Resolved as root: the ids only pick lock stripes, and a target that does
    /// not resolve fails its operation under any stripe.
    fn parent_ids(&self, targets: &[&Target]) -> Vec<u64> {
        let table = self.table.read();
        targets
            .iter()
            .map(|t| match t {
                Target::Entry { dir, .. } => *dir,
                Target::Dir(id) => table.get(*id).map_or(0, |n| n.parent),
                Target::Path(p) => {
                    p.split().and_then(|(parent, _)| resolve::resolve_dir(&table, &Creds::root(), &parent).ok()).unwrap_or(0)
                }
            })
            .collect()
    }

    fn subdirs(&self, _core: &Core, id: u64, after: Option<&str>, limit: usize) -> Result<Vec<DirEntry>, Errno> {
        let table = self.table.read();
        let node = table.get(id).ok_or(Errno::ENOENT)?;
        let range = match after {
            Some(a) => node.subdirs.range::<str, _>((std::ops::Bound::Excluded(a), std::ops::Bound::Unbounded)),
            None => node.subdirs.range::<str, _>(..),
        };
        Ok(range.take(limit).map(|(n, id)| DirEntry { name: n.clone(), ino: *id, kind: FileKind::Dir }).collect())
    }

    fn counters(&self) -> Vec<(String, u64)> {
        Vec::new()
    }

    fn refuse_step(&self, txn: Option<u64>) -> Result<(), Errno> {
        self.refuse_revoked(txn)
    }

    fn needs_open_transactions(&self) -> bool {
        true
    }

    /// Fences again what an open transaction of a kind that fences may have
    /// fenced here before a restart lost it (a mkdir's replica may hold a
    /// directory the transaction yet rolls back; a rename's check found
    /// nothing below a name that must stay so): its intent's paths, under its
    /// original id, which its coordinator and recovery lift. Kinds that never
    /// fence (rmdir, link) are left alone: their own steps would meet it.
    ///
    /// Times parked by transactions no longer open are dropped (`parked.rs`).
    fn open_transactions(&self, core: &Core, txns: &[TxnInfo]) -> Result<(), String> {
        for t in txns.iter().filter(|t| fences_its_paths(&t.intent)) {
            let paths: Vec<String> = t.intent.paths().into_iter().map(str::to_string).collect();
            if let Err(e) = self.fences.fence_again(t.origin, &paths) {
                eprintln!("canopy-server: transaction {} names a path that is no path ({e}): not fenced", t.txn);
            }
        }
        let open = txns.iter().map(|t| t.origin).collect();
        self.parked.after_start(core, &open).map_err(|e| format!("cannot sort the parked directory times: {e}"))
    }

    fn dirs(&self) -> u64 {
        self.table.read().len() as u64
    }

    fn handle(&self, core: &Core, creds: &Creds, req: Request) -> Result<Reply, Errno> {
        let parse = NsPath::parse;
        match req {
            Request::Fence { txn, paths } => self.fences.fence(txn, &paths),
            Request::Unfence { txn } => self.lift_fences(core, &[txn], || {
                self.fences.unfence(txn);
                vec![txn]
            }),
            Request::ClearFences { path } => {
                let path = parse(&path)?;
                self.lift_fences(core, &self.fences.covering(&path), || self.fences.clear_covering(&path))
            }
            Request::Mkdir { path, mode, id, fence } => self.mkdir(core, creds, &parse(&path)?, mode, id, fence),
            Request::Rmdir { path, txn } => self.rmdir(core, creds, &parse(&path)?, txn),
            Request::DirSetAttr { path, set, txn } => self.dir_set_attr(core, creds, &parse(&path)?, &set, txn),
            Request::Revoke { txn } => self.revoke(core, txn),
            Request::RenameDir { src, dst, step } => self.rename_dir(core, creds, &parse(&src)?, &parse(&dst)?, step),
            Request::DirProbe { path } => self.dir_probe(&parse(&path)?),
            Request::DirSync { path, want, txn } => self.dir_sync(core, &parse(&path)?, want, txn),
            Request::Migrate { root, limit } => self.migrate(core, &parse(&root)?, limit),
            Request::Adopt { items, txn } => self.adopt(core, items, txn),
            Request::Release { items, txn } => self.release(core, items, txn),
            _ => Err(Errno::ENOSYS),
        }
    }

    fn fsck(&self, core: &Core, report: &mut FsckReport) -> Result<(), Errno> {
        self.check(core, report)
    }
}

impl ShardFs {
    /// Lifts fences (`lift` answers the transactions whose fences it lifted)
    /// and drops what those transactions parked here: they have ended. Under
    /// the structure lock when something is parked, so fsck never sees one
    /// done without the other.
    fn lift_fences(&self, core: &Core, covered: &[u64], lift: impl FnOnce() -> Vec<u64>) -> Result<Reply, Errno> {
        let mut guard = self.parked.any_of(covered).then(|| core.lock_structure());
        let ended = lift();
        if self.parked.any_of(&ended) {
            // Taken only now if a fence was put up since `covered` was read.
            guard.get_or_insert_with(|| core.lock_structure());
            self.parked.drop_ended(core, &ended)?;
        }
        Ok(Reply::Unit)
    }
}

/// A file entry as ShardFS keys it (parent ‖ name), decoded.
pub(crate) fn decode_entry(k: &[u8], v: &[u8]) -> Option<((u64, String), canopy_proto::msg::Record)> {
    keys::split_entry_key(k).zip(keys::decode(v))
}

/// Whether a transaction of this kind fences its intent's paths on some
/// server while it runs: a mkdir (on the replicas), a directory mode or owner
/// change that removes rights, a rename (of a directory everywhere, of a file
/// on its two primaries).
fn fences_its_paths(intent: &Intent) -> bool {
    matches!(intent, Intent::Mkdir { .. } | Intent::DirSetAttr { .. } | Intent::Rename { .. } | Intent::RenameOver { .. })
}

/// Loads the replicated directory table, parents before children; creates the
/// root on an empty store.
fn load_table(core: &Core) -> Result<DirTable, String> {
    let store: &dyn Store = &*core.store;
    let mut by_parent: HashMap<u64, Vec<(String, DirLookup)>> = HashMap::new();
    let mut root = None;
    let mut corrupt = None;
    store
        .for_each(DIRS, b"", &mut |k, v| {
            match (keys::split_entry_key(k), keys::decode::<DirLookup>(v)) {
                (Some((0, name)), Some(l)) if name.is_empty() => root = Some(l),
                (Some((parent, name)), Some(l)) => by_parent.entry(parent).or_default().push((name, l)),
                _ => corrupt = Some(k.to_vec()),
            }
            true
        })
        .map_err(|e| e.to_string())?;
    if let Some(k) = corrupt {
        return Err(format!("corrupt directory record {k:?}"));
    }
    let root = match root {
        Some(r) => r,
        None => init_root(core)?,
    };
    let mut table = DirTable::new(root);
    let mut pending = vec![ROOT_ID];
    while let Some(parent) = pending.pop() {
        for (name, lookup) in by_parent.remove(&parent).unwrap_or_default() {
            pending.push(lookup.id);
            table.insert(parent, &name, lookup);
        }
    }
    if !by_parent.is_empty() {
        return Err(format!("{} directory records have no parent", by_parent.values().map(Vec::len).sum::<usize>()));
    }
    Ok(table)
}

fn init_root(core: &Core) -> Result<DirLookup, String> {
    let root = DirLookup { id: ROOT_ID, mode: 0o755, uid: 0, gid: 0 };
    let mut b = Batch::new();
    b.put(DIRS, keys::entry_key(0, ""), keys::encode(&root));
    if placement::primary(&NsPath::root(), core.cfg.servers) == core.cfg.index {
        b.put(DIRTIMES, keys::id_key(ROOT_ID).to_vec(), keys::encode(&core.fresh_dir_times()));
    }
    core.store.write(b).map_err(|e| e.to_string())?;
    Ok(root)
}
