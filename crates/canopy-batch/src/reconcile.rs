//! A commit's changes to entries of the batch's base ([`crate::diff`]), done
//! in the cluster by the owner's ordinary operations:
//!
//! 1. every moved entry is renamed into a stage directory under the root
//!    (`.canopy-batch-ID`, one name per entry), shallowest first, so no move
//!    waits on another (swaps, cycles, a directory moved into one of its
//!    former children);
//! 2. removed entries are unlinked, then removed directories rmdir'ed,
//!    deepest first;
//! 3. the commit places directories a level at a time, making new ones and
//!    renaming moved ones out of the stage, then the moved files;
//! 4. modified entries get their contents and attributes.
//!
//! Each step touches a cluster entry only while it is the one the batch
//! copied (same inode number); one that is not is refused with `ESTALE`.
//! Each step can tell it was done already (by inode numbers, and a journal
//! of the removals), so a commit run again after a crash finishes what an
//! earlier try began.

use crate::diff::{Modify, Move};
use crate::paths::Rooted;
use crate::snapshot::BaseEntry;
use crate::{id_text, unreachable_cluster, CommitReport};
use canopy_client::data::DataWrite;
use canopy_client::Client;
use canopy_proto::{Errno, FileKind, SetAttr};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

type Res<T> = Result<T, Errno>;

/// Entries refused so far, by private path (nothing below one is tried).
pub(crate) type Refused = HashMap<String, Errno>;

/// The stage: where moved entries wait.
pub(crate) struct Stage {
    /// Its global path.
    dir: String,
    /// Where staged base entries are now: private path in the base → global path.
    at: HashMap<String, String>,
}

impl Stage {
    pub(crate) fn new(rooted: &Rooted, batch: u64) -> Stage {
        Stage { dir: rooted.global(&format!("/.canopy-batch-{}", id_text(batch))), at: HashMap::new() }
    }

    fn slot(&self, id: u64) -> String {
        format!("{}/{id:x}", self.dir)
    }

    /// The global path of the base entry copied from private `base_path`, now
    /// that some of it or its directories are staged.
    fn now_at(&self, rooted: &Rooted, base_path: &str) -> String {
        let mut cut = base_path.len();
        loop {
            let prefix = &base_path[..cut];
            if let Some(g) = self.at.get(prefix) {
                return format!("{g}{}", &base_path[cut..]);
            }
            cut = match prefix.rfind('/') {
                Some(0) | None => return rooted.global(base_path),
                Some(i) => i,
            };
        }
    }
}

/// The base entries a commit removed, kept in the batch's directory: a
/// rerun must not take what an earlier try put at a removed entry's name
/// (a directory removed and made again) for a change by someone else.
pub(crate) struct Journal {
    file: PathBuf,
    removed: HashSet<u64>,
}

impl Journal {
    pub(crate) fn open(batch_dir: &Path) -> Res<Journal> {
        let file = batch_dir.join("removed");
        let removed = match std::fs::read_to_string(&file) {
            Ok(text) => text.lines().filter_map(|l| u64::from_str_radix(l, 16).ok()).collect(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => HashSet::new(),
            Err(_) => return Err(Errno::EIO),
        };
        Ok(Journal { file, removed })
    }

    /// Records base entry `id` removed (before anything placed at its name).
    fn mark(&mut self, id: u64) -> Res<()> {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new().create(true).append(true).open(&self.file).map_err(|_| Errno::EIO)?;
        writeln!(f, "{id:x}").and_then(|_| f.sync_data()).map_err(|_| Errno::EIO)?;
        self.removed.insert(id);
        Ok(())
    }
}

/// The inode number at `path`, `None` if there is nothing.
async fn ino_at(cluster: &Client, path: &str) -> Res<Option<u64>> {
    match cluster.stat(path).await {
        Ok(a) => Ok(Some(a.ino)),
        Err(Errno::ENOENT | Errno::ENOTDIR) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Records `r`'s refusal of private path `path` (nothing below it is tried);
/// a cluster that cannot be reached stops the commit instead (it is run again).
pub(crate) fn settle(r: Res<()>, rooted: &Rooted, path: &str, refused: &mut Refused, report: &mut CommitReport) -> Res<()> {
    if let Some(e) = reported(r, rooted.global(path), report)? {
        refused.insert(path.to_string(), e);
    }
    Ok(())
}

/// Lists `r`'s refusal of (global) `path` in the report, and answers it.
fn reported(r: Res<()>, path: String, report: &mut CommitReport) -> Res<Option<Errno>> {
    match r {
        Ok(()) => Ok(None),
        Err(e) if unreachable_cluster(e) => Err(e),
        Err(e) => {
            report.rejected.push((path, e));
            Ok(Some(e))
        }
    }
}

/// Step 1: moved entries into the stage.
pub(crate) async fn stage_moves(cluster: &Client, rooted: &Rooted, stage: &mut Stage, moves: &[Move], refused: &mut Refused, report: &mut CommitReport) -> Res<()> {
    if moves.is_empty() {
        return Ok(());
    }
    match cluster.mkdir(&stage.dir, 0o700).await {
        Ok(_) => {}
        // An earlier try's, or a trap: only the owner's and theirs alone will do.
        Err(Errno::EEXIST) => {
            let a = cluster.stat(&stage.dir).await?;
            if a.kind != FileKind::Dir || a.uid != cluster.creds().uid || a.mode & 0o077 != 0 {
                return Err(Errno::EEXIST);
            }
        }
        Err(e) => return Err(e),
    }
    for m in moves {
        let r = stage_one(cluster, rooted, stage, m).await;
        settle(r, rooted, &m.to, refused, report)?;
    }
    Ok(())
}

async fn stage_one(cluster: &Client, rooted: &Rooted, stage: &mut Stage, m: &Move) -> Res<()> {
    let slot = stage.slot(m.id);
    if ino_at(cluster, &slot).await? != Some(m.global_ino) {
        let now = stage.now_at(rooted, &m.from);
        if ino_at(cluster, &now).await? != Some(m.global_ino) {
            // An earlier try may have placed it already: what was below it is there.
            let to = rooted.global(&m.to);
            if ino_at(cluster, &to).await? != Some(m.global_ino) {
                return Err(Errno::ESTALE);
            }
            stage.at.insert(m.from.clone(), to);
            return Ok(());
        }
        cluster.rename(&now, &slot).await?;
    }
    stage.at.insert(m.from.clone(), slot);
    Ok(())
}

/// Step 2: removed entries, files first, then directories deepest first. A
/// refusal is listed by the entry's path in the base and stops nothing else
/// (the private namespace has nothing at that path that depends on it).
pub(crate) async fn remove(cluster: &Client, rooted: &Rooted, stage: &Stage, journal: &mut Journal, removed: &[(u64, BaseEntry)], report: &mut CommitReport) -> Res<()> {
    for (id, b) in removed {
        if journal.removed.contains(id) {
            continue;
        }
        let now = stage.now_at(rooted, &b.path);
        let r = match ino_at(cluster, &now).await {
            Ok(None) => Ok(()),
            Ok(Some(ino)) if ino != b.global_ino => Err(Errno::ESTALE),
            Ok(Some(_)) if b.kind == FileKind::Dir => cluster.rmdir(&now).await,
            Ok(Some(_)) => cluster.unlink(&now).await,
            Err(e) => Err(e),
        };
        if r.is_ok() {
            journal.mark(*id)?;
            report.removed += 1;
        }
        reported(r, rooted.global(&b.path), report)?;
    }
    Ok(())
}

/// Step 3, one entry: moved entry `m` out of the stage to its place.
pub(crate) async fn unstage(cluster: &Client, rooted: &Rooted, stage: &Stage, m: &Move) -> Res<()> {
    let (slot, to) = (stage.slot(m.id), rooted.global(&m.to));
    let staged = ino_at(cluster, &slot).await? == Some(m.global_ino);
    match (staged, ino_at(cluster, &to).await?) {
        (true, None) => cluster.rename(&slot, &to).await,
        // A name someone else took meanwhile is theirs (the entry stays staged).
        (true, Some(_)) => Err(Errno::EEXIST),
        // Placed by an earlier try.
        (false, Some(ino)) if ino == m.global_ino => Ok(()),
        (false, _) => Err(Errno::ESTALE),
    }
}

/// The stage goes once empty. An entry refused its place stays in it, and
/// is listed (by where it is) in `report.left_in_stage`.
pub(crate) async fn drop_stage(cluster: &Client, stage: &Stage, report: &mut CommitReport) -> Res<()> {
    match cluster.rmdir(&stage.dir).await {
        Ok(()) | Err(Errno::ENOENT) => Ok(()),
        Err(Errno::ENOTEMPTY) => {
            report.left_in_stage = cluster.readdir(&stage.dir).await?.into_iter().map(|e| format!("{}/{}", stage.dir, e.name)).collect();
            Ok(())
        }
        Err(e) => Err(e),
    }
}

/// Step 4: contents and attributes of modified entries.
pub(crate) async fn modify(cluster: &Client, rooted: &Rooted, modified: &[Modify], refused: &mut Refused, report: &mut CommitReport) -> Res<()> {
    for m in modified {
        if crate::refused_below(refused, &m.path).is_some() {
            continue;
        }
        let r = modify_one(cluster, &rooted.global(&m.path), m).await;
        report.modified += u64::from(r.is_ok());
        settle(r, rooted, &m.path, refused, report)?;
    }
    Ok(())
}

async fn modify_one(cluster: &Client, path: &str, m: &Modify) -> Res<()> {
    if let Some(e) = m.refuse {
        return Err(e);
    }
    let a = cluster.stat(path).await?;
    if a.ino != m.global_ino {
        return Err(Errno::ESTALE);
    }
    let mut set = m.set.clone();
    if a.uid != cluster.creds().uid && !cluster.creds().is_root() {
        // Explicit times are the owner's to set; a writer's write sets them to now.
        (set.atime, set.mtime) = (None, None);
    }
    if let Some(bytes) = &m.inline {
        cluster.setattr(path, &SetAttr { size: Some(0), ..SetAttr::default() }).await?;
        if !bytes.is_empty() {
            let max = u32::try_from(bytes.len()).map_err(|_| Errno::EFBIG)?;
            match cluster.write_data(path, 0, bytes, max, false).await? {
                DataWrite::Written(_) => {}
                // Its contents went to back-end storage meanwhile: not the file copied.
                _ => return Err(Errno::ESTALE),
            }
        }
    }
    cluster.setattr(path, &set).await.map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_is_found_below_its_nearest_staged_directory() {
        let rooted = Rooted::new("/job").unwrap();
        let mut stage = Stage::new(&rooted, 0xab);
        assert_eq!(stage.now_at(&rooted, "/a/b/c"), "/job/a/b/c");
        stage.at.insert("/a".into(), stage.slot(10));
        stage.at.insert("/a/b".into(), stage.slot(11));
        assert_eq!(stage.now_at(&rooted, "/a/b/c"), "/job/.canopy-batch-00000000000000ab/b/c");
        assert_eq!(stage.now_at(&rooted, "/a/x"), "/job/.canopy-batch-00000000000000ab/a/x");
        assert_eq!(stage.now_at(&rooted, "/a/b"), "/job/.canopy-batch-00000000000000ab/b");
        assert_eq!(stage.now_at(&rooted, "/ab"), "/job/ab");
    }
}
