//! The private namespace read whole for a commit, straight from the private
//! server's store (ShardFS's layout, `canopy_server::keys`): every directory
//! with its lookup state, parents before children, and every file by
//! directory.
//!
//! The store is in its user's own directory, so what it holds is read as that
//! user's word: an entry whose name is no plain name (`..`, one with a `/`)
//! would name a path outside the batch's root once joined to it, and is
//! refused with everything below it (`EXDEV`).

use canopy_client::batch::path_in;
use canopy_proto::batch::BatchFile;
use canopy_proto::msg::{DirLookup, Record};
use canopy_proto::path::check_name;
use canopy_proto::Errno;
use canopy_server::keys::{self, DIRS, ENTRIES};
use canopy_server::ROOT_ID;
use canopy_store::Store;
use std::collections::{BTreeMap, HashMap};

#[derive(Debug, Default)]
pub struct Tree {
    /// Directories below the root by private path, parents first.
    pub dirs: Vec<(String, DirLookup)>,
    /// Files by their directory's private path.
    pub files: BTreeMap<String, Vec<BatchFile>>,
    /// Entries a commit does not carry (hard links), by private path.
    pub refused: Vec<(String, Errno)>,
    /// The inode numbers those hard links share (a snapshot's file linked in
    /// the batch is still there, unchanged as far as a commit goes).
    pub linked: Vec<u64>,
}

/// Every pair of `cf`, decoded, by (parent, name).
fn pairs<T: serde::de::DeserializeOwned>(store: &dyn Store, cf: &'static str) -> Result<Vec<(u64, String, T)>, Errno> {
    let mut out = Vec::new();
    let mut bad = false;
    store
        .for_each(cf, &[], &mut |k, v| {
            match (keys::split_entry_key(k), keys::decode::<T>(v)) {
                (Some((parent, name)), Some(t)) => out.push((parent, name, t)),
                _ => bad = true,
            }
            true
        })
        .map_err(|_| Errno::EIO)?;
    if bad {
        return Err(Errno::EIO);
    }
    Ok(out)
}

/// A name a private entry may have: one component, neither `.` nor `..`.
fn plain(name: &str) -> bool {
    check_name(name).is_ok() && name != "." && name != ".."
}

pub fn read(store: &dyn Store) -> Result<Tree, Errno> {
    let mut children: HashMap<u64, Vec<(String, DirLookup)>> = HashMap::new();
    for (parent, name, lookup) in pairs::<DirLookup>(store, DIRS)? {
        if !(parent == 0 && name.is_empty()) {
            children.entry(parent).or_default().push((name, lookup));
        }
    }
    let mut tree = Tree::default();
    let mut path_of: HashMap<u64, String> = HashMap::from([(ROOT_ID, "/".to_string())]);
    let mut level = vec![ROOT_ID];
    while !level.is_empty() {
        let mut next = Vec::new();
        for id in level {
            let dir = path_of[&id].clone();
            for (name, lookup) in children.remove(&id).unwrap_or_default() {
                let p = path_in(&dir, &name);
                if !plain(&name) {
                    tree.refused.push((p, Errno::EXDEV));
                    continue;
                }
                path_of.insert(lookup.id, p.clone());
                next.push(lookup.id);
                tree.dirs.push((p, lookup));
            }
        }
        level = next;
    }
    for (parent, name, record) in pairs::<Record>(store, ENTRIES)? {
        // Below a refused directory: refused with it.
        let Some(dir) = path_of.get(&parent) else { continue };
        if !plain(&name) {
            tree.refused.push((path_in(dir, &name), Errno::EXDEV));
            continue;
        }
        match record {
            Record::Inode(inode) => tree.files.entry(dir.clone()).or_default().push(BatchFile { name, inode }),
            Record::Linked { ino, .. } => {
                tree.refused.push((path_in(dir, &name), Errno::EMLINK));
                tree.linked.push(ino);
            }
        }
    }
    Ok(tree)
}
