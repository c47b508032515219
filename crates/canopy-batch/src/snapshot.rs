//! A batch that starts from a snapshot of its root's subtree (seed 002 §II-E:
//! a batch "operates within its own file system image that originates from a
//! specific snapshot"): the subtree is read as the owner, copied into the
//! private server with its attributes, and remembered as the *base*, so a
//! commit carries only what changed since ([`crate::diff`]).
//!
//! The copy is read entry by entry, not frozen: each entry is the one seen
//! when it was read, and the base keeps its inode number in the cluster so a
//! commit touches the cluster's entry only while it is still that one.

use crate::paths::Rooted;
use crate::private::{Private, WRITE_BACK_BATCH};
use canopy_client::batch::{self, path_in, DirFiles};
use canopy_client::data::DataRead;
use crate::fids::CarriedFids;
use canopy_client::Client;
use canopy_proto::batch::BatchFile;
use canopy_proto::msg::{FileData, Inode};
use canopy_proto::placement::fnv1a64;
use canopy_proto::{Attr, Creds, Errno, FileKind, SetAttr};
use canopy_server::ROOT_ID;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::Path;

type Res<T> = Result<T, Errno>;

/// One entry of the subtree a batch started from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BaseEntry {
    /// Its private path when copied.
    pub path: String,
    /// The private id of its directory when copied.
    pub parent: u64,
    /// Its inode number in the cluster.
    pub global_ino: u64,
    pub kind: FileKind,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    pub atime: i64,
    pub mtime: i64,
    /// FNV-1a of a regular file's inline contents (`None`: in back-end storage).
    pub digest: Option<u64>,
}

impl BaseEntry {
    pub fn name(&self) -> &str {
        split(&self.path).1
    }
}

/// The base of a batch, by the private id each entry was given when copied.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Base {
    pub entries: HashMap<u64, BaseEntry>,
}

const BASE_FILE: &str = "base.json";

impl Base {
    /// The base kept in batch directory `dir`; empty for a batch that began
    /// empty. `EIO` for a snapshot batch without one (its begin did not
    /// finish: abort it).
    pub fn load(dir: &Path, snapshot: bool) -> Res<Base> {
        match std::fs::read(dir.join(BASE_FILE)) {
            Ok(raw) => serde_json::from_slice(&raw).map_err(|_| Errno::EIO),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !snapshot => Ok(Base::default()),
            Err(_) => Err(Errno::EIO),
        }
    }

    /// Written whole or not at all.
    fn save(&self, dir: &Path) -> Res<()> {
        let raw = serde_json::to_vec(self).map_err(|_| Errno::EIO)?;
        let tmp = dir.join(format!("{BASE_FILE}.tmp"));
        std::fs::write(&tmp, raw).and_then(|_| std::fs::rename(&tmp, dir.join(BASE_FILE))).map_err(|_| Errno::EIO)
    }
}

/// One entry as read from the cluster.
struct Seen {
    /// Private path.
    path: String,
    attr: Attr,
    target: Option<String>,
    data: Option<DataRead>,
}

/// Stats read at once.
const READS_AT_ONCE: usize = 256;

/// Reads the subtree below the root as `cluster`'s user, parents first.
/// Refused whole (the errno of the first entry that could not be read) if
/// the user may not read it all, or it holds a hard link (`EMLINK`: batches
/// carry none).
async fn read_subtree(cluster: &Client, rooted: &Rooted) -> Res<Vec<Seen>> {
    let mut out = Vec::new();
    let mut dirs = vec!["/".to_string()];
    while let Some(dir) = dirs.pop() {
        let names = cluster.readdir(&rooted.global(&dir)).await?;
        for group in names.chunks(READS_AT_ONCE) {
            let read = futures::future::join_all(group.iter().map(|e| read_one(cluster, rooted, path_in(&dir, &e.name)))).await;
            for seen in read {
                let seen = seen?;
                if seen.attr.kind == FileKind::Dir {
                    dirs.push(seen.path.clone());
                }
                out.push(seen);
            }
        }
    }
    // Parents first, whatever order the walk found them in.
    out.sort_by_key(|s| crate::paths::depth(&s.path));
    Ok(out)
}

async fn read_one(cluster: &Client, rooted: &Rooted, path: String) -> Res<Seen> {
    let g = rooted.global(&path);
    let attr = cluster.stat(&g).await?;
    if attr.kind != FileKind::Dir && attr.nlink > 1 {
        return Err(Errno::EMLINK);
    }
    let target = match attr.kind {
        FileKind::Symlink => Some(cluster.readlink(&g).await?),
        _ => None,
    };
    let data = match attr.kind {
        // An empty file has nothing to read (its contents are inline).
        FileKind::File if attr.size == 0 => Some(DataRead::Inline(Vec::new())),
        FileKind::File => Some(cluster.read_data(&g, 0, u32::try_from(attr.size).unwrap_or(u32::MAX)).await?),
        _ => None,
    };
    Ok(Seen { path, attr, target, data })
}

/// The inode a copied entry is landed in the private server with.
fn inode_of(seen: &Seen, fids: &CarriedFids) -> Inode {
    let data = seen.data.as_ref().map(|d| match d {
        DataRead::Inline(bytes) => FileData { fid: fids.next(), inline: Some(bytes.clone()) },
        DataRead::Backend { fid, .. } => FileData { fid: *fid, inline: None },
    });
    Inode { attr: seen.attr.clone(), target: seen.target.clone(), data }
}

/// Copies the cluster's subtree below the batch's root into its (empty)
/// private server and keeps it as the batch's base in `dir`.
pub async fn take(cluster: &Client, private: &Private, rooted: &Rooted, dir: &Path) -> Res<Base> {
    let seen = read_subtree(cluster, rooted).await?;
    let root = private.client.as_user(Creds::root());
    // Directories owner-only until filled, as root; their attributes last.
    let mut files: HashMap<String, Vec<BatchFile>> = HashMap::new();
    let fids = CarriedFids::new();
    for s in &seen {
        match s.attr.kind {
            FileKind::Dir => {
                root.mkdir(&s.path, 0o700).await?;
            }
            _ => {
                let (parent, name) = split(&s.path);
                files.entry(parent.to_string()).or_default().push(BatchFile { name: name.to_string(), inode: inode_of(s, &fids) });
            }
        }
    }
    let dirs: Vec<DirFiles> = files.into_iter().map(|(dir, files)| DirFiles { dir, files }).collect();
    let landed = batch::land(&root, WRITE_BACK_BATCH, &dirs).await?;
    if let Some((_, e)) = landed.rejected.first() {
        return Err(*e);
    }
    for s in seen.iter().rev().filter(|s| s.attr.kind == FileKind::Dir) {
        let a = &s.attr;
        root.setattr(&s.path, &SetAttr { mode: Some(a.mode), uid: Some(a.uid), gid: Some(a.gid), ..SetAttr::default() }).await?;
    }
    let ids = private_ids(&*private.store)?;
    let mut base = Base::default();
    for s in &seen {
        let id = *ids.get(&s.path).ok_or(Errno::EIO)?;
        let parent = *ids.get(split(&s.path).0).ok_or(Errno::EIO)?;
        base.entries.insert(id, base_entry(s, parent));
    }
    base.save(dir)?;
    Ok(base)
}

fn base_entry(s: &Seen, parent: u64) -> BaseEntry {
    let a = &s.attr;
    let digest = match &s.data {
        Some(DataRead::Inline(bytes)) => Some(fnv1a64(bytes)),
        _ => None,
    };
    BaseEntry { path: s.path.clone(), parent, global_ino: a.ino, kind: a.kind, mode: a.mode, uid: a.uid, gid: a.gid, size: a.size, atime: a.atime, mtime: a.mtime, digest }
}

/// Every private path's id (directories and files; the root's is [`ROOT_ID`]).
fn private_ids(store: &dyn canopy_store::Store) -> Res<HashMap<String, u64>> {
    let tree = crate::export::read(store)?;
    let mut ids: HashMap<String, u64> = HashMap::from([("/".to_string(), ROOT_ID)]);
    ids.extend(tree.dirs.iter().map(|(p, l)| (p.clone(), l.id)));
    for (dir, files) in &tree.files {
        ids.extend(files.iter().map(|f| (path_in(dir, &f.name), f.inode.attr.ino)));
    }
    Ok(ids)
}

/// A private path's directory and name (`/` for the root's entries).
pub(crate) fn split(path: &str) -> (&str, &str) {
    match path.rfind('/') {
        Some(0) | None => ("/", path.trim_start_matches('/')),
        Some(i) => (&path[..i], &path[i + 1..]),
    }
}
