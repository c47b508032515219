//! BatchFS batches (seed 002): a job works in a private namespace, then
//! merges it into the cluster's in bulk, and the servers verify the merge.
//!
//! - [`begin`] checks the caller may write the batch's root, records the batch
//!   on every server and makes its private metadata server
//!   ([`private::Private`]: the same server code over a RocksDB store in the
//!   batch's directory); [`open`] opens it again from another process.
//!   [`begin_with`] `Start::Snapshot` first copies the subtree under the root
//!   into it and keeps that copy as the batch's base ([`snapshot`]).
//! - [`OpenBatch::client`] is the private namespace, by global paths under the
//!   root, with new files of directories made in it kept in memory
//!   ([`writeback`]); no operation costs an RPC to the cluster.
//! - [`commit`] reads the private namespace whole ([`export`]) and tells
//!   what changed from the base ([`diff`]): base entries moved, removed or
//!   changed are done by the owner's ordinary operations ([`reconcile`]); it
//!   makes the new directories in the cluster (each an ordinary mkdir by the owner, so the
//!   servers check it; one already there and a directory is used as it is),
//!   then lands its files as per-server tables the servers verify and
//!   ingest ([`canopy_client::batch::land`]). Refused files and directories
//!   are listed by path with why; the rest lands. Run again after a crash, it
//!   finishes what the first run began. [`abort`] drops the batch. Either
//!   ends by removing the batch's directory (`discard.rs`: renamed aside
//!   first, so a kill midway leaves the batch whole or gone, never half).
//!
//! This crate links the server and the store (the private server is one);
//! `canopy-client` stays free of them.

mod discard;
pub mod fids;
pub mod diff;
pub mod export;
pub mod paths;
pub mod private;
pub mod reconcile;
pub mod snapshot;
pub mod writeback;

use canopy_client::batch::{self, DirFiles, Landed};
use canopy_proto::msg::DirLookup;
use diff::Move;
use reconcile::{Journal, Refused, Stage};
use snapshot::Base;
use canopy_client::Client;
use canopy_proto::path::NsPath;
use canopy_proto::{Creds, Errno, FileKind, SetAttr};
use paths::Rooted;
use private::Private;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use writeback::BatchNs;

type Res<T> = Result<T, Errno>;

/// What a batch's directory records of it (`batch.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchMeta {
    pub id: u64,
    pub root: String,
    pub owner: Creds,
    /// Begun from a snapshot (whose base a commit then needs).
    #[serde(default)]
    pub snapshot: bool,
}

/// Where batches live unless told: `$CANOPY_BATCHES`, else `batches` in
/// `$CANOPY_HOME`, else `~/.canopy/batches`.
pub fn default_base() -> PathBuf {
    if let Some(dir) = std::env::var_os("CANOPY_BATCHES") {
        return PathBuf::from(dir);
    }
    if let Some(home) = std::env::var_os("CANOPY_HOME") {
        return PathBuf::from(home).join("batches");
    }
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("/tmp"), PathBuf::from);
    home.join(".canopy").join("batches")
}

/// A batch's number as its users write it.
pub fn id_text(id: u64) -> String {
    format!("{id:016x}")
}

pub fn parse_id(text: &str) -> Result<u64, String> {
    u64::from_str_radix(text, 16).map_err(|_| format!("invalid batch id '{text}' (16 hex digits, as `canopy batch begin` prints)"))
}

/// An open batch: its record and its private server.
pub struct OpenBatch {
    pub meta: BatchMeta,
    pub dir: PathBuf,
    private: Arc<Private>,
    ns: Arc<BatchNs>,
}

impl OpenBatch {
    fn open_at(dir: PathBuf, meta: BatchMeta) -> Res<OpenBatch> {
        let private = Arc::new(Private::open(&dir.join("store"), &dir.join("locks"), meta.owner.clone())?);
        let ns = Arc::new(BatchNs::new(private.clone(), Rooted::new(&meta.root)?));
        Ok(OpenBatch { meta, dir, private, ns })
    }

    /// The private namespace by global paths, as the batch's owner.
    pub fn client(&self) -> Client {
        Client::new(self.ns.clone(), self.meta.owner.clone())
    }

    /// The private namespace by private paths (`/` is the batch's root), with
    /// no write-back: what a mount of the batch serves.
    pub async fn private_client(&self) -> Res<Client> {
        self.ns.flush().await?;
        Ok(self.private.client.clone())
    }

    /// Lands buffered files in the private store, so another process sees them.
    pub async fn close(&self) -> Res<()> {
        self.ns.flush().await
    }
}

/// How a batch starts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Start {
    /// With an empty private namespace: what is already under the root is
    /// not seen, and a name the commit finds taken is refused.
    #[default]
    Empty,
    /// With a copy of the subtree under the root ([`snapshot`]), which the
    /// batch may change as its owner could: a commit carries the changes.
    Snapshot,
}

/// Starts a batch rooted at `root` in the cluster, as `cluster`'s user; the
/// root is made if missing (its parent must exist). Its directory is made
/// under `base`.
pub async fn begin(cluster: &Client, root: &str, base: &Path) -> Res<OpenBatch> {
    begin_with(cluster, root, base, Start::Empty).await
}

/// [`begin`], starting as `start` says.
pub async fn begin_with(cluster: &Client, root: &str, base: &Path, start: Start) -> Res<OpenBatch> {
    let root = NsPath::parse(root)?.as_str().to_string();
    let attr = match cluster.stat(&root).await {
        Ok(a) => a,
        Err(Errno::ENOENT) => cluster.mkdir(&root, 0o755).await?,
        Err(e) => return Err(e),
    };
    if attr.kind != FileKind::Dir {
        return Err(Errno::ENOTDIR);
    }
    cluster.access(&root, canopy_proto::attr::access::W | canopy_proto::attr::access::X).await?;
    let id = loop {
        let id: u64 = rand::random();
        if id > private::WRITE_BACK_BATCH {
            break id;
        }
    };
    let meta = BatchMeta { id, root: root.clone(), owner: cluster.creds().clone(), snapshot: start == Start::Snapshot };
    let dir = base.join(id_text(id));
    discard::sweep(base);
    std::fs::create_dir_all(&dir).map_err(|_| Errno::EIO)?;
    std::fs::write(dir.join("batch.json"), serde_json::to_vec_pretty(&meta).map_err(|_| Errno::EIO)?).map_err(|_| Errno::EIO)?;
    batch::open(cluster, id, &root).await?;
    let b = OpenBatch::open_at(dir, meta)?;
    // The private root looks as the real one does, so the private server
    // refuses what the cluster would.
    let private_root = b.private.client.as_user(Creds::root());
    private_root.setattr("/", &SetAttr { mode: Some(attr.mode), uid: Some(attr.uid), gid: Some(attr.gid), ..SetAttr::default() }).await?;
    batch::open(&b.private.client, private::WRITE_BACK_BATCH, "/").await?;
    if start == Start::Snapshot {
        if let Err(e) = snapshot::take(cluster, &b.private, &b.ns.rooted, &b.dir).await {
            let _ = abort(b, cluster).await;
            return Err(e);
        }
    }
    Ok(b)
}

/// Opens batch `id` made by [`begin`] under `base`.
pub fn open(base: &Path, id: u64) -> Result<OpenBatch, String> {
    let dir = base.join(id_text(id));
    if !dir.exists() {
        return Err(format!("batch {}: no such batch in {} (committed or aborted already, or begun elsewhere)", id_text(id), base.display()));
    }
    let raw = std::fs::read(dir.join("batch.json")).map_err(|e| format!("batch {}: {e} (in {})", id_text(id), base.display()))?;
    let meta: BatchMeta = serde_json::from_slice(&raw).map_err(|e| format!("batch {}: {e}", id_text(id)))?;
    OpenBatch::open_at(dir, meta).map_err(|e| format!("batch {}: private store: {e}", id_text(id)))
}

/// The batches under `base` (this machine's).
pub fn local(base: &Path) -> Vec<BatchMeta> {
    let Ok(entries) = std::fs::read_dir(base) else { return Vec::new() };
    let mut out: Vec<BatchMeta> = entries
        .flatten()
        .filter(|e| !discard::is_aside(&e.file_name().to_string_lossy()))
        .filter_map(|e| std::fs::read(e.path().join("batch.json")).ok())
        .filter_map(|raw| serde_json::from_slice(&raw).ok())
        .collect();
    out.sort_by_key(|m| m.id);
    out
}

/// What a commit did.
#[derive(Debug, Default)]
pub struct CommitReport {
    pub dirs_made: u64,
    /// Directories that were already there (made by an earlier try, or by
    /// someone else) and were used as they are.
    pub dirs_adopted: u64,
    pub files: Landed,
    /// Entries of the base (a snapshot batch's) moved, removed and modified.
    pub moved: u64,
    pub removed: u64,
    pub modified: u64,
    /// Entries of the base refused their new place, left (by global path) in
    /// the commit's stage directory under the root.
    pub left_in_stage: Vec<String>,
    /// Every directory and file refused, by global path, with why.
    pub rejected: Vec<(String, Errno)>,
    /// Reading the private namespace; making directories and the changes to
    /// the base; everything.
    pub export_time: Duration,
    pub dirs_time: Duration,
    pub total_time: Duration,
}

/// Directories made at once.
const MKDIRS_AT_ONCE: usize = 64;

/// Merges the batch into the cluster and, once it all landed or was refused,
/// drops it (see the crate doc).
pub async fn commit(b: OpenBatch, cluster: &Client) -> Res<CommitReport> {
    if cluster.creds().uid != b.meta.owner.uid && !cluster.creds().is_root() {
        return Err(Errno::EPERM);
    }
    // A root its owner may no longer write takes nothing: refused whole.
    cluster.access(&b.meta.root, canopy_proto::attr::access::W | canopy_proto::attr::access::X).await?;
    // A try that died while closing may have closed it on some servers.
    batch::open(cluster, b.meta.id, &b.meta.root).await?;
    let t0 = Instant::now();
    let mut report = CommitReport::default();
    let buffered = b.ns.take_buffers();
    let mut tree = export::read(&*b.private.store)?;
    for df in buffered {
        tree.files.entry(df.dir).or_default().extend(df.files);
    }
    let rooted = Rooted::new(&b.meta.root)?;
    report.rejected.extend(tree.refused.iter().map(|(p, e)| (rooted.global(p), *e)));
    let changes = diff::changes(&Base::load(&b.dir, b.meta.snapshot)?, tree);
    report.export_time = t0.elapsed();
    let t = Instant::now();
    let mut refused = Refused::new();
    let mut stage = Stage::new(&rooted, b.meta.id);
    let mut journal = Journal::open(&b.dir)?;
    reconcile::stage_moves(cluster, &rooted, &mut stage, &changes.moves, &mut refused, &mut report).await?;
    reconcile::remove(cluster, &rooted, &stage, &mut journal, &changes.removed, &mut report).await?;
    place(cluster, &rooted, &stage, &changes, &mut refused, &mut report).await?;
    reconcile::drop_stage(cluster, &stage, &mut report).await?;
    reconcile::modify(cluster, &rooted, &changes.modified, &mut refused, &mut report).await?;
    report.dirs_time = t.elapsed();
    let mut dirs = Vec::new();
    for (dir, files) in changes.new_files {
        if let Some(e) = refused_below(&refused, &dir) {
            report.rejected.extend(files.iter().map(|f| (rooted.global(&batch::path_in(&dir, &f.name)), e)));
            continue;
        }
        dirs.push(DirFiles { dir: rooted.global(&dir), files });
    }
    report.files = batch::land(cluster, b.meta.id, &dirs).await?;
    let mut finish: Vec<&(String, DirLookup)> = changes.new_dirs.iter().chain(&changes.changed_dirs).collect();
    finish.sort_by_key(|(p, _)| paths::depth(p));
    finish_dirs(cluster, &rooted, &finish, &refused, &mut report).await;
    report.rejected.extend(report.files.rejected.iter().cloned());
    report.rejected.sort_by(|a, b| a.0.cmp(&b.0));
    batch::close(cluster, b.meta.id).await?;
    let dir = b.dir.clone();
    drop(b);
    if let Err(e) = discard::discard(&dir) {
        eprintln!("canopy-batch: batch committed; its directory {} could not be removed: {e}", dir.display());
    }
    report.total_time = t0.elapsed();
    Ok(report)
}

/// Why a directory at or above private path `p` was refused, if one was.
pub(crate) fn refused_below(refused: &HashMap<String, Errno>, p: &str) -> Option<Errno> {
    let mut cur = p;
    loop {
        if let Some(e) = refused.get(cur) {
            return Some(*e);
        }
        cur = match cur.rfind('/') {
            Some(0) | None => return None,
            Some(i) => &cur[..i],
        };
    }
}

/// A directory or moved entry a commit puts in its place.
#[derive(Clone, Copy)]
enum Place<'a> {
    /// A directory the batch made.
    Made(&'a (String, DirLookup)),
    /// An entry of the base moved (out of the stage).
    Moved(&'a Move),
}

impl Place<'_> {
    /// Its private path.
    fn path(&self) -> &str {
        match self {
            Place::Made((p, _)) => p,
            Place::Moved(m) => &m.to,
        }
    }
}

/// Makes the batch's new directories and places its moved ones, a level at a
/// time (a refused one refuses everything below it), then its moved files.
async fn place(cluster: &Client, rooted: &Rooted, stage: &Stage, changes: &diff::Changes, refused: &mut Refused, report: &mut CommitReport) -> Res<()> {
    let mut levels: BTreeMap<usize, Vec<Place>> = BTreeMap::new();
    let made = changes.new_dirs.iter().map(Place::Made);
    for p in made.chain(changes.moves.iter().map(Place::Moved)) {
        // Files once every directory is in place.
        let level = match p {
            Place::Moved(m) if !m.is_dir => usize::MAX,
            _ => paths::depth(p.path()),
        };
        levels.entry(level).or_default().push(p);
    }
    for level in levels.values() {
        for group in level.chunks(MKDIRS_AT_ONCE) {
            // Refusals above are known before the group starts: one level up.
            let todo: Vec<Place> = group.iter().copied().filter(|p| !skip_refused(refused, rooted, p.path(), report)).collect();
            let done = futures::future::join_all(todo.iter().map(|p| place_one(cluster, rooted, stage, *p))).await;
            for (p, r) in todo.iter().zip(done) {
                match r {
                    Ok(Placed::Made) => report.dirs_made += 1,
                    Ok(Placed::Adopted) => report.dirs_adopted += 1,
                    Ok(Placed::Moved) => report.moved += 1,
                    Err(e) => reconcile::settle(Err(e), rooted, p.path(), refused, report)?,
                }
            }
        }
    }
    Ok(())
}

/// Whether private path `p` is refused or below a refused directory; a
/// refusal not yet reported for `p` itself is.
fn skip_refused(refused: &Refused, rooted: &Rooted, p: &str, report: &mut CommitReport) -> bool {
    match refused_below(refused, p) {
        Some(_) if refused.contains_key(p) => true,
        Some(e) => {
            report.rejected.push((rooted.global(p), e));
            true
        }
        None => false,
    }
}

/// What placing one entry did.
enum Placed {
    Made,
    /// A directory was there already (made by an earlier try, or by someone else).
    Adopted,
    Moved,
}

async fn place_one(cluster: &Client, rooted: &Rooted, stage: &Stage, p: Place<'_>) -> Res<Placed> {
    match p {
        Place::Made((path, l)) => make_dir(cluster, &rooted.global(path), l).await.map(|made| if made { Placed::Made } else { Placed::Adopted }),
        Place::Moved(m) => reconcile::unstage(cluster, rooted, stage, m).await.map(|_| Placed::Moved),
    }
}

/// Errors that say nothing of the directory but of the cluster: the commit
/// stops (and is run again), rather than refuse what was not decided.
pub(crate) fn unreachable_cluster(e: Errno) -> bool {
    matches!(e, Errno::ENOTCONN | Errno::ETIMEDOUT | Errno::ECONNREFUSED | Errno::EIO | Errno::EPROTO | Errno::EAGAIN)
}

/// Makes one directory, writable and searchable by its owner until its
/// contents are in (`finish_dirs` gives it its mode); `false`: a directory
/// was there.
async fn make_dir(cluster: &Client, path: &str, l: &DirLookup) -> Res<bool> {
    match cluster.mkdir(path, (l.mode & 0o7777) | 0o300).await {
        Ok(_) => Ok(true),
        Err(Errno::EEXIST) => match cluster.stat(path).await?.kind {
            FileKind::Dir => Ok(false),
            _ => Err(Errno::EEXIST),
        },
        Err(e) => Err(e),
    }
}

/// Gives each directory the batch made or changed its private mode and
/// group, deepest first (a chmod that takes the owner's write or search away
/// comes after everything below it landed); `dirs` is parents first.
async fn finish_dirs(cluster: &Client, rooted: &Rooted, dirs: &[&(String, DirLookup)], made: &HashMap<String, Errno>, report: &mut CommitReport) {
    for (p, l) in dirs.iter().rev() {
        if refused_below(made, p).is_some() {
            continue;
        }
        let g = rooted.global(p);
        let Ok(a) = cluster.stat(&g).await else { continue };
        // Someone else's directory, there before the commit, stays theirs.
        let mine = a.uid == cluster.creds().uid || cluster.creds().is_root();
        if !mine || (a.mode == l.mode && a.gid == l.gid) {
            continue;
        }
        let set = SetAttr { mode: Some(l.mode & 0o7777), gid: (a.gid != l.gid).then_some(l.gid), ..SetAttr::default() };
        if let Err(e) = cluster.setattr(&g, &set).await {
            report.rejected.push((g, e));
        }
    }
}

/// Drops batch `b`: its record on the servers and its private state.
pub async fn abort(b: OpenBatch, cluster: &Client) -> Res<()> {
    batch::close(cluster, b.meta.id).await?;
    let dir = b.dir.clone();
    drop(b);
    discard::discard(&dir).map_err(|_| Errno::EIO)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_covers_everything_below_it() {
        let refused = HashMap::from([("/a/b".to_string(), Errno::EACCES)]);
        assert_eq!(refused_below(&refused, "/a/b"), Some(Errno::EACCES));
        assert_eq!(refused_below(&refused, "/a/b/c/d"), Some(Errno::EACCES));
        assert_eq!(refused_below(&refused, "/a/bc"), None);
        assert_eq!(refused_below(&refused, "/a"), None);
        assert_eq!(refused_below(&refused, "/"), None);
    }

    /// A batch whose discard was killed after its rename aside (its record
    /// still there) is over: not listed, and opening it says so.
    #[test]
    fn a_batch_that_is_over_is_not_listed_and_says_so_when_opened() {
        let base = tempfile::tempdir().unwrap();
        let meta = |id| BatchMeta { id, root: "/job".into(), owner: Creds::root(), snapshot: false };
        for id in [0xaa, 0xbb] {
            let dir = base.path().join(id_text(id));
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("batch.json"), serde_json::to_vec(&meta(id)).unwrap()).unwrap();
        }
        let over = base.path().join(id_text(0xaa));
        std::fs::rename(&over, discard::aside(&over)).unwrap();
        assert_eq!(local(base.path()), vec![meta(0xbb)]);
        let err = open(base.path(), 0xaa).err().unwrap();
        assert!(err.contains("no such batch") && err.contains("committed or aborted"), "{err}");
    }

    #[test]
    fn ids_print_and_parse_back() {
        assert_eq!(parse_id(&id_text(0xdead_beef)).unwrap(), 0xdead_beef);
        assert!(parse_id("zz").is_err());
    }
}
