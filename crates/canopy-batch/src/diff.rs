//! What a batch changed relative to its base (pure: no I/O).
//!
//! Every private entry keeps the id it was copied with, whatever renames it
//! went through, so an entry of the private namespace at commit is one of:
//! new (its id is not in the base), the base entry it was (moved if its
//! directory or name changed, modified if its attributes or inline contents
//! did), and a base entry no private entry has any more was removed.

use crate::export::Tree;
use crate::paths::depth;
use crate::snapshot::{split, Base, BaseEntry};
use canopy_client::batch::path_in;
use canopy_proto::batch::BatchFile;
use canopy_proto::msg::DirLookup;
use canopy_proto::placement::fnv1a64;
use canopy_proto::{Errno, FileKind, SetAttr, TimeSet};
use canopy_server::ROOT_ID;
use std::collections::{BTreeMap, HashMap, HashSet};

/// A base entry whose directory or name changed (private paths).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Move {
    pub id: u64,
    pub from: String,
    pub to: String,
    pub global_ino: u64,
    pub is_dir: bool,
}

/// A base regular file, symlink or special file whose attributes or contents
/// changed, at its private path now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Modify {
    pub path: String,
    pub global_ino: u64,
    pub set: SetAttr,
    /// New inline contents: the file is emptied, they are written, then it
    /// gets `set` (its size among it).
    pub inline: Option<Vec<u8>>,
    /// Why the change cannot be carried, if it cannot (contents that left
    /// inline storage in the batch: the commit carries inline contents only).
    pub refuse: Option<Errno>,
}

#[derive(Debug, Default)]
pub struct Changes {
    /// Directories the batch made, parents first, and base directories whose
    /// mode or group changed (a commit gives both their mode last).
    pub new_dirs: Vec<(String, DirLookup)>,
    pub changed_dirs: Vec<(String, DirLookup)>,
    /// Files, symlinks and special files the batch made, by directory.
    pub new_files: BTreeMap<String, Vec<BatchFile>>,
    /// Shallowest (by where they were) first.
    pub moves: Vec<Move>,
    /// Base entries gone: everything but directories first, then directories
    /// deepest first.
    pub removed: Vec<(u64, BaseEntry)>,
    pub modified: Vec<Modify>,
}

impl Changes {
    pub fn is_empty(&self) -> bool {
        self.new_dirs.is_empty() && self.changed_dirs.is_empty() && self.new_files.is_empty() && self.moves.is_empty() && self.removed.is_empty() && self.modified.is_empty()
    }
}

/// The changes from `base` to private namespace `tree`.
pub fn changes(base: &Base, tree: Tree) -> Changes {
    let mut out = Changes::default();
    let mut id_of: HashMap<&str, u64> = HashMap::from([("/", ROOT_ID)]);
    id_of.extend(tree.dirs.iter().map(|(p, l)| (p.as_str(), l.id)));
    // A file hard-linked in the batch is not carried, nor removed.
    let mut kept: HashSet<u64> = tree.linked.iter().copied().collect();
    let moved = |id: u64, path: &str, b: &BaseEntry| {
        let parent = id_of.get(split(path).0).copied();
        (parent != Some(b.parent) || split(path).1 != b.name()).then(|| Move { id, from: b.path.clone(), to: path.to_string(), global_ino: b.global_ino, is_dir: b.kind == FileKind::Dir })
    };
    for (path, l) in &tree.dirs {
        let Some(b) = base.entries.get(&l.id) else {
            out.new_dirs.push((path.clone(), l.clone()));
            continue;
        };
        kept.insert(l.id);
        out.moves.extend(moved(l.id, path, b));
        if (l.mode, l.uid, l.gid) != (b.mode, b.uid, b.gid) {
            out.changed_dirs.push((path.clone(), l.clone()));
        }
    }
    for (dir, files) in tree.files {
        for f in files {
            let id = f.inode.attr.ino;
            let Some(b) = base.entries.get(&id) else {
                out.new_files.entry(dir.clone()).or_default().push(f);
                continue;
            };
            kept.insert(id);
            let path = path_in(&dir, &f.name);
            out.moves.extend(moved(id, &path, b));
            out.modified.extend(modified(path, &f, b));
        }
    }
    out.moves.sort_by_key(|m| depth(&m.from));
    out.removed = base.entries.iter().filter(|(id, _)| !kept.contains(id)).map(|(id, b)| (*id, b.clone())).collect();
    out.removed.sort_by_key(|(_, b)| (b.kind == FileKind::Dir, std::cmp::Reverse(depth(&b.path))));
    out
}

/// What of base entry `b` the private file `f` changed.
fn modified(path: String, f: &BatchFile, b: &BaseEntry) -> Option<Modify> {
    let a = &f.inode.attr;
    let inline = f.inode.data.as_ref().and_then(|d| d.inline.as_ref());
    let rewrite = match (inline, b.digest) {
        (Some(bytes), Some(d)) => fnv1a64(bytes) != d,
        (Some(_), None) => true,
        _ => false,
    };
    let spilled = inline.is_none() && b.digest.is_some();
    let differs = |now: u32, then: u32| (now != then).then_some(now);
    let set = SetAttr {
        // A rewrite's truncation may clear setuid: the mode is set again.
        mode: if rewrite { Some(a.mode) } else { differs(a.mode, b.mode) },
        uid: differs(a.uid, b.uid),
        gid: differs(a.gid, b.gid),
        size: (a.size != b.size || rewrite).then_some(a.size),
        atime: (a.atime != b.atime).then_some(TimeSet::At(a.atime)),
        mtime: (a.mtime != b.mtime || rewrite || a.size != b.size).then_some(TimeSet::At(a.mtime)),
        kill_suid: false,
    };
    let changed = rewrite || spilled || set != SetAttr::default();
    let refuse = spilled.then_some(Errno::EFBIG);
    changed.then(|| Modify { path, global_ino: b.global_ino, set, inline: if rewrite { inline.cloned() } else { None }, refuse })
}

#[cfg(test)]
mod tests {
    use super::*;
    use canopy_proto::msg::{FileData, Inode};
    use canopy_proto::{Attr, Fid};

    fn base_file(path: &str, parent: u64, ino: u64) -> BaseEntry {
        BaseEntry { path: path.into(), parent, global_ino: ino, kind: FileKind::File, mode: 0o644, uid: 1, gid: 1, size: 3, atime: 5, mtime: 6, digest: Some(fnv1a64(b"abc")) }
    }

    fn file(name: &str, id: u64, mode: u32, bytes: &[u8]) -> BatchFile {
        let attr = Attr { ino: id, kind: FileKind::File, mode, uid: 1, gid: 1, size: bytes.len() as u64, nlink: 1, rdev: 0, atime: 5, mtime: 6, ctime: 7 };
        BatchFile { name: name.into(), inode: Inode { attr, target: None, data: Some(FileData { fid: Fid(id.into()), inline: Some(bytes.to_vec()) }) } }
    }

    fn dir(id: u64) -> DirLookup {
        DirLookup { id, mode: 0o755, uid: 1, gid: 1 }
    }

    fn base_dir(path: &str, parent: u64, ino: u64) -> BaseEntry {
        BaseEntry { kind: FileKind::Dir, mode: 0o755, size: 0, digest: None, ..base_file(path, parent, ino) }
    }

    /// Base: /d (id 10) holding f (11), g (12) and h (13); /e (14).
    fn base() -> Base {
        let entries = [(10, base_dir("/d", ROOT_ID, 100)), (11, base_file("/d/f", 10, 101)), (12, base_file("/d/g", 10, 102)), (13, base_file("/d/h", 10, 103)), (14, base_dir("/e", ROOT_ID, 104))];
        Base { entries: entries.into_iter().collect() }
    }

    #[test]
    fn nothing_changed_is_no_change() {
        let mut tree = Tree { dirs: vec![("/d".into(), dir(10)), ("/e".into(), dir(14))], ..Tree::default() };
        tree.files.insert("/d".into(), vec![file("f", 11, 0o644, b"abc"), file("g", 12, 0o644, b"abc"), file("h", 13, 0o644, b"abc")]);
        assert!(changes(&base(), tree).is_empty());
    }

    #[test]
    fn moves_removals_modifications_and_new_entries_are_told_apart() {
        // /d renamed /e2 (and /e removed); f renamed to k in it; g chmod'ed and
        // rewritten; h removed; a new directory /n with a new file, and a new
        // file in the moved directory.
        let mut tree = Tree { dirs: vec![("/e2".into(), dir(10)), ("/n".into(), dir(20))], ..Tree::default() };
        tree.files.insert("/e2".into(), vec![file("k", 11, 0o644, b"abc"), file("g", 12, 0o600, b"abcd"), file("new", 21, 0o644, b"")]);
        tree.files.insert("/n".into(), vec![file("x", 22, 0o644, b"")]);
        let c = changes(&base(), tree);
        let moves: Vec<(&str, &str)> = c.moves.iter().map(|m| (m.from.as_str(), m.to.as_str())).collect();
        assert_eq!(moves, vec![("/d", "/e2"), ("/d/f", "/e2/k")], "shallowest first; g follows its directory");
        let removed: Vec<&str> = c.removed.iter().map(|(_, b)| b.path.as_str()).collect();
        assert_eq!(removed, vec!["/d/h", "/e"], "files before directories");
        assert_eq!(c.modified.len(), 1);
        let m = &c.modified[0];
        assert_eq!((m.path.as_str(), m.set.mode, m.set.size, m.inline.as_deref()), ("/e2/g", Some(0o600), Some(4), Some(&b"abcd"[..])));
        assert_eq!(c.new_dirs.iter().map(|d| d.0.as_str()).collect::<Vec<_>>(), vec!["/n"]);
        let new: Vec<(&str, usize)> = c.new_files.iter().map(|(d, f)| (d.as_str(), f.len())).collect();
        assert_eq!(new, vec![("/e2", 1), ("/n", 1)]);
        assert!(c.changed_dirs.is_empty());
    }

    #[test]
    fn a_base_file_linked_in_the_batch_is_neither_removed_nor_changed() {
        let mut tree = Tree { dirs: vec![("/d".into(), dir(10)), ("/e".into(), dir(14))], linked: vec![11], ..Tree::default() };
        tree.files.insert("/d".into(), vec![file("g", 12, 0o644, b"abc"), file("h", 13, 0o644, b"abc")]);
        assert!(changes(&base(), tree).is_empty());
    }

    #[test]
    fn contents_that_left_inline_storage_are_refused() {
        let mut tree = Tree { dirs: vec![("/d".into(), dir(10)), ("/e".into(), dir(14))], ..Tree::default() };
        let mut spilled = file("f", 11, 0o644, b"");
        spilled.inode.data.as_mut().unwrap().inline = None;
        spilled.inode.attr.size = 1 << 20;
        tree.files.insert("/d".into(), vec![spilled, file("g", 12, 0o644, b"abc"), file("h", 13, 0o644, b"abc")]);
        let c = changes(&base(), tree);
        assert_eq!(c.modified.iter().map(|m| (m.path.as_str(), m.refuse)).collect::<Vec<_>>(), vec![("/d/f", Some(Errno::EFBIG))]);
    }

    #[test]
    fn removed_directories_go_deepest_first() {
        let entries = [(10, base_dir("/a", ROOT_ID, 1)), (11, base_dir("/a/b", 10, 2)), (12, base_dir("/a/b/c", 11, 3)), (13, base_file("/a/b/c/f", 12, 4))];
        let c = changes(&Base { entries: entries.into_iter().collect() }, Tree::default());
        let removed: Vec<&str> = c.removed.iter().map(|(_, b)| b.path.as_str()).collect();
        assert_eq!(removed, vec!["/a/b/c/f", "/a/b/c", "/a/b", "/a"]);
    }
}
