//! The directory lookup state held in memory: for each directory its parent, name,
//! id, mode and owner, and its subdirectories by name.
//!
//! In ShardFS every server holds all of it (it is persisted in the `dirs` column
//! family and loaded at start); path resolution reads only this table, so it never
//! touches the disk or another server. Invariants: the root has id [`ROOT_ID`] and
//! parent 0; every other node's parent is in the table and lists it among its
//! subdirectories under its name.

use canopy_proto::msg::DirLookup;
use canopy_proto::path::NsPath;
use canopy_proto::placement::{fnv1a64, mix64};
use std::collections::{BTreeMap, HashMap};

pub use crate::ids::ROOT_ID;

#[derive(Debug, Clone)]
pub struct DirNode {
    pub parent: u64,
    pub name: String,
    pub lookup: DirLookup,
    pub subdirs: BTreeMap<String, u64>,
}

#[derive(Debug, Clone)]
pub struct DirTable {
    nodes: HashMap<u64, DirNode>,
}

impl DirTable {
    pub fn new(root: DirLookup) -> DirTable {
        debug_assert_eq!(root.id, ROOT_ID);
        let node = DirNode { parent: 0, name: String::new(), lookup: root, subdirs: BTreeMap::new() };
        DirTable { nodes: HashMap::from([(ROOT_ID, node)]) }
    }

    pub fn get(&self, id: u64) -> Option<&DirNode> {
        self.nodes.get(&id)
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    pub fn child(&self, parent: u64, name: &str) -> Option<u64> {
        self.nodes.get(&parent)?.subdirs.get(name).copied()
    }

    /// Whether [`DirTable::insert`] would accept `id` as `parent/name`: the parent
    /// exists, the name is free, and the id is new (two nodes with one id would
    /// break the tree's links).
    pub fn can_insert(&self, parent: u64, name: &str, id: u64) -> bool {
        id != ROOT_ID && !self.nodes.contains_key(&id) && self.nodes.get(&parent).is_some_and(|p| !p.subdirs.contains_key(name))
    }

    /// Adds a directory. The caller has checked [`DirTable::can_insert`]; a
    /// violated precondition is reported, not panicked on.
    pub fn insert(&mut self, parent: u64, name: &str, lookup: DirLookup) -> bool {
        let id = lookup.id;
        if !self.can_insert(parent, name, id) {
            return false;
        }
        match self.nodes.get_mut(&parent) {
            Some(p) => {
                p.subdirs.insert(name.to_string(), id);
            }
            _ => return false,
        }
        let node = DirNode { parent, name: name.to_string(), lookup, subdirs: BTreeMap::new() };
        self.nodes.insert(id, node);
        true
    }

    /// Removes an empty directory.
    pub fn remove(&mut self, id: u64) -> Option<DirNode> {
        if id == ROOT_ID || !self.nodes.get(&id)?.subdirs.is_empty() {
            return None;
        }
        let node = self.nodes.remove(&id)?;
        if let Some(p) = self.nodes.get_mut(&node.parent) {
            p.subdirs.remove(&node.name);
        }
        Some(node)
    }

    pub fn set_lookup(&mut self, id: u64, mode: u32, uid: u32, gid: u32) {
        if let Some(n) = self.nodes.get_mut(&id) {
            n.lookup.mode = mode;
            n.lookup.uid = uid;
            n.lookup.gid = gid;
        }
    }

    /// Moves directory `id` to `new_parent/new_name` (the slot must be free).
    pub fn move_dir(&mut self, id: u64, new_parent: u64, new_name: &str) -> bool {
        if id == ROOT_ID || self.is_ancestor(id, new_parent) || self.child(new_parent, new_name).is_some() {
            return false;
        }
        let Some(node) = self.nodes.get(&id) else { return false };
        let (old_parent, old_name) = (node.parent, node.name.clone());
        if !self.nodes.contains_key(&new_parent) {
            return false;
        }
        self.nodes.get_mut(&old_parent).map(|p| p.subdirs.remove(&old_name));
        self.nodes.get_mut(&new_parent).expect("checked").subdirs.insert(new_name.to_string(), id);
        let node = self.nodes.get_mut(&id).expect("checked");
        node.parent = new_parent;
        node.name = new_name.to_string();
        true
    }

    /// True if `a` is `b` or one of `b`'s ancestors.
    pub fn is_ancestor(&self, a: u64, mut b: u64) -> bool {
        loop {
            if a == b {
                return true;
            }
            match self.nodes.get(&b) {
                Some(n) if b != ROOT_ID => b = n.parent,
                _ => return false,
            }
        }
    }

    /// The full path of directory `id`.
    pub fn path_of(&self, mut id: u64) -> Option<NsPath> {
        let mut names = Vec::new();
        while id != ROOT_ID {
            let n = self.nodes.get(&id)?;
            names.push(n.name.as_str());
            id = n.parent;
        }
        let mut s = String::new();
        for name in names.iter().rev() {
            s.push('/');
            s.push_str(name);
        }
        NsPath::parse(if s.is_empty() { "/" } else { &s }).ok()
    }

    /// `id` and every directory below it, parents before children.
    pub fn subtree(&self, id: u64) -> Vec<u64> {
        let mut out = vec![id];
        let mut i = 0;
        while i < out.len() {
            if let Some(n) = self.nodes.get(&out[i]) {
                out.extend(n.subdirs.values().copied());
            }
            i += 1;
        }
        out
    }

    /// An order-independent digest of the whole table, equal on every server whose
    /// replica is identical (`canopy fsck` compares them).
    pub fn digest(&self) -> u64 {
        self.nodes.iter().fold(0u64, |acc, (id, n)| {
            let l = &n.lookup;
            let text = format!("{id}/{}/{}/{}/{}/{}", n.parent, n.name, l.mode, l.uid, l.gid);
            acc.wrapping_add(mix64(fnv1a64(text.as_bytes())))
        })
    }

    pub fn ids(&self) -> impl Iterator<Item = u64> + '_ {
        self.nodes.keys().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lk(id: u64) -> DirLookup {
        DirLookup { id, mode: 0o755, uid: 0, gid: 0 }
    }

    fn sample() -> DirTable {
        let mut t = DirTable::new(lk(ROOT_ID));
        assert!(t.insert(ROOT_ID, "a", lk(10)));
        assert!(t.insert(10, "b", lk(11)));
        assert!(t.insert(ROOT_ID, "c", lk(12)));
        t
    }

    #[test]
    fn insert_lookup_paths() {
        let t = sample();
        assert_eq!(t.child(10, "b"), Some(11));
        assert_eq!(t.path_of(11).unwrap().as_str(), "/a/b");
        assert_eq!(t.path_of(ROOT_ID).unwrap().as_str(), "/");
        assert_eq!(t.subtree(10), vec![10, 11]);
        let mut t2 = t.clone();
        assert!(!t2.insert(ROOT_ID, "a", lk(13)), "taken name");
        assert!(!t2.insert(99, "x", lk(14)), "missing parent");
    }

    #[test]
    fn remove_only_empty() {
        let mut t = sample();
        assert!(t.remove(10).is_none());
        assert!(t.remove(ROOT_ID).is_none());
        assert!(t.remove(11).is_some());
        assert!(t.remove(10).is_some());
        assert_eq!(t.child(ROOT_ID, "a"), None);
    }

    #[test]
    fn move_refuses_cycles() {
        let mut t = sample();
        assert!(!t.move_dir(10, 11, "x"), "into own subtree");
        assert!(t.move_dir(10, 12, "a2"));
        assert_eq!(t.path_of(11).unwrap().as_str(), "/c/a2/b");
        assert!(t.is_ancestor(12, 11));
    }

    #[test]
    fn digest_is_order_independent_and_content_sensitive() {
        let a = sample();
        let mut b = DirTable::new(lk(ROOT_ID));
        b.insert(ROOT_ID, "c", lk(12));
        b.insert(ROOT_ID, "a", lk(10));
        b.insert(10, "b", lk(11));
        assert_eq!(a.digest(), b.digest());
        b.set_lookup(11, 0o700, 0, 0);
        assert_ne!(a.digest(), b.digest());
    }
}
