//! The kernel's node ids and the Canopy paths behind them.
//!
//! FUSE names objects by a node id, which is also the `st_ino` users see; Canopy
//! names them by path. A node's id is its Canopy inode number (the root's is
//! FUSE's 1), so every name of a hard-linked file is one node, as the kernel
//! expects. This table keeps each node's known names and the kernel's lookup
//! count: a node lives until the kernel forgets every lookup. A rename moves the
//! names at and below the old path; a node whose last known name was removed
//! stays, unnamed ("orphan"), while the kernel holds it, so open files work on.
//!
//! Pure bookkeeping, no I/O: tested without a mount.

use canopy_proto::path::is_within;
use std::collections::HashMap;

pub const ROOT: u64 = 1;

#[derive(Debug)]
struct Node {
    /// Names known to the kernel, most recent last. Empty: orphan.
    paths: Vec<String>,
    lookups: u64,
}

#[derive(Debug)]
pub struct Nodes {
    by_id: HashMap<u64, Node>,
    by_path: HashMap<String, u64>,
}

impl Default for Nodes {
    fn default() -> Nodes {
        Nodes::new()
    }
}

/// `parent/name` for a Canopy path.
pub fn child_path(parent: &str, name: &str) -> String {
    if parent == "/" {
        format!("/{name}")
    } else {
        format!("{parent}/{name}")
    }
}

/// `path` with the prefix `from` replaced by `to`, if `path` is `from` or below it.
fn moved(path: &str, from: &str, to: &str) -> Option<String> {
    // The root is never renamed: nothing is below it but itself.
    let below = is_within(path, from) && (from != "/" || path == "/");
    below.then(|| format!("{to}{}", &path[from.len()..]))
}

impl Nodes {
    pub fn new() -> Nodes {
        let mut n = Nodes { by_id: HashMap::new(), by_path: HashMap::new() };
        n.by_id.insert(ROOT, Node { paths: vec!["/".into()], lookups: 1 });
        n.by_path.insert("/".into(), ROOT);
        n
    }

    /// A current path of node `id`; None if unknown or orphaned.
    pub fn path(&self, id: u64) -> Option<&str> {
        self.by_id.get(&id).and_then(|n| n.paths.last()).map(String::as_str)
    }

    pub fn exists(&self, id: u64) -> bool {
        self.by_id.contains_key(&id)
    }

    /// The node known at `path`.
    pub fn find(&self, path: &str) -> Option<u64> {
        self.by_path.get(path).copied()
    }

    /// Counts one kernel lookup of node `id` found at `path`.
    pub fn remember(&mut self, id: u64, path: &str) {
        if let Some(old) = self.by_path.insert(path.to_string(), id) {
            if old != id {
                // Another object had this name (replaced behind our back).
                self.drop_name(old, path);
            }
        }
        let node = self.by_id.entry(id).or_insert(Node { paths: Vec::new(), lookups: 0 });
        node.lookups += 1;
        if !node.paths.iter().any(|p| p == path) {
            node.paths.push(path.to_string());
        }
    }

    fn drop_name(&mut self, id: u64, path: &str) {
        if let Some(n) = self.by_id.get_mut(&id) {
            n.paths.retain(|p| p != path);
        }
    }

    /// The kernel dropped `n` lookups of `id`; the node goes when none are left.
    pub fn forget(&mut self, id: u64, n: u64) {
        if id == ROOT {
            return;
        }
        let Some(node) = self.by_id.get_mut(&id) else { return };
        node.lookups = node.lookups.saturating_sub(n);
        if node.lookups == 0 {
            for p in self.by_id.remove(&id).expect("present").paths {
                if self.by_path.get(&p) == Some(&id) {
                    self.by_path.remove(&p);
                }
            }
        }
    }

    /// The name `path` was removed. Returns its node, if known.
    pub fn unlinked(&mut self, path: &str) -> Option<u64> {
        let id = self.by_path.remove(path)?;
        self.drop_name(id, path);
        Some(id)
    }

    /// True if node `id` is held by the kernel but has no known name left.
    pub fn is_orphan(&self, id: u64) -> bool {
        self.by_id.get(&id).is_some_and(|n| n.paths.is_empty())
    }

    /// `from` was renamed to `to`: the name `to` stops naming what it named, and
    /// every name at or below `from` moves. Returns the node that lost `to`.
    pub fn renamed(&mut self, from: &str, to: &str) -> Option<u64> {
        let replaced = self.unlinked(to);
        let moving: Vec<(String, String, u64)> =
            self.by_path.iter().filter_map(|(p, &id)| moved(p, from, to).map(|np| (p.clone(), np, id))).collect();
        for (old, new, id) in moving {
            self.by_path.remove(&old);
            self.by_path.insert(new.clone(), id);
            let node = self.by_id.get_mut(&id).expect("indexed node exists");
            for p in node.paths.iter_mut().filter(|p| **p == old) {
                *p = new.clone();
            }
        }
        replaced
    }

    /// Nodes the kernel holds, the root included.
    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_lives_until_every_lookup_is_forgotten() {
        let mut n = Nodes::new();
        n.remember(7, "/a");
        n.remember(7, "/a");
        n.forget(7, 1);
        assert_eq!(n.path(7), Some("/a"));
        n.forget(7, 1);
        assert!(!n.exists(7));
        assert_eq!(n.find("/a"), None);
        n.forget(ROOT, 5);
        assert_eq!(n.path(ROOT), Some("/"), "the root is never forgotten");
    }

    #[test]
    fn hard_links_are_one_node_with_several_names() {
        let mut n = Nodes::new();
        n.remember(7, "/a");
        n.remember(7, "/b");
        assert_eq!(n.find("/a"), Some(7));
        assert_eq!(n.find("/b"), Some(7));
        assert_eq!(n.unlinked("/b"), Some(7));
        assert_eq!(n.path(7), Some("/a"));
        assert!(!n.is_orphan(7));
        n.unlinked("/a");
        assert!(n.is_orphan(7) && n.exists(7));
    }

    #[test]
    fn rename_moves_the_subtree_and_takes_the_name_from_the_replaced_node() {
        let mut n = Nodes::new();
        n.remember(10, "/d");
        n.remember(11, "/d/f");
        n.remember(12, "/d/e/g");
        n.remember(13, "/dd/x");
        n.remember(14, "/z");
        assert_eq!(n.renamed("/d", "/z"), Some(14));
        assert_eq!(n.path(10), Some("/z"));
        assert_eq!(n.path(11), Some("/z/f"));
        assert_eq!(n.path(12), Some("/z/e/g"));
        assert_eq!(n.path(13), Some("/dd/x"), "a name sharing a prefix is not below");
        assert!(n.is_orphan(14));
        assert_eq!(n.find("/z/f"), Some(11));
        assert_eq!(n.find("/d/f"), None);
    }

    #[test]
    fn a_name_reused_by_another_object_moves_to_it() {
        let mut n = Nodes::new();
        n.remember(7, "/a");
        n.remember(8, "/a");
        assert_eq!(n.find("/a"), Some(8));
        assert!(n.is_orphan(7));
        n.forget(7, 1);
        assert_eq!(n.find("/a"), Some(8), "forgetting the old node keeps the new name");
    }

    #[test]
    fn child_paths_of_the_root_and_below() {
        assert_eq!(child_path("/", "a"), "/a");
        assert_eq!(child_path("/a", "b"), "/a/b");
        assert_eq!(moved("/a/b", "/a", "/c"), Some("/c/b".to_string()));
        assert_eq!(moved("/ab", "/a", "/c"), None);
    }
}
