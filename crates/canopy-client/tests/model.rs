//! A reference model of the namespace, and a property test holding a real cluster
//! to it: random sequences of operations over a small name space (so collisions and
//! errors are frequent), each result compared with the model's, then the whole tree.
//!
//! The model is a map from canonical path to object id, plus the objects (kind,
//! mode, owner, link count, symlink target). Hard links are several paths mapping to
//! one object. It knows nothing of servers.
//!
//! # Error precedence
//!
//! When several errors apply, the first in this order is reported:
//!
//! 1. Bad arguments: paths with `EINVAL` (relative, empty component, NUL) or
//!    `ENAMETOOLONG`, and bad symlink targets (empty `ENOENT`, too long
//!    `ENAMETOOLONG`, NUL `EINVAL`). The generator makes only valid ones; the
//!    semantics suite covers these.
//! 2. Resolution of the ancestors, from the root down. On each directory passed
//!    through (the parent included): `EACCES` without search (x) permission, checked
//!    before the next name is looked up; then `ENOENT` if the next ancestor is
//!    missing, `ENOTDIR` if it is not a directory (symlinks are never followed).
//! 3. Per-operation checks, in the order each operation below lists. In general the
//!    existence and kind of the last component come before permission on its parent
//!    (so `mkdir` of an existing name in a read-only directory is `EEXIST`), and
//!    emptiness (`ENOTEMPTY`) comes last.
//!
//! Two-path operations:
//! - `rename`: the source is resolved and must exist (`ENOENT`), then the
//!   destination's ancestors are resolved; then `EINVAL` for a directory moved into
//!   its own subtree; `ENOTDIR` for a directory onto a non-directory, `EISDIR` for a
//!   non-directory onto a directory; `EACCES` without write+search on the source's
//!   parent, then the destination's; `EPERM` (sticky) for the source; `EACCES` without
//!   write on a directory that changes parent; then, when both names are the same
//!   file, success doing nothing; `EPERM` (sticky) for a replaced name; `ENOTEMPTY`
//!   for a non-empty replaced directory. A name renamed to itself is a `stat`.
//! - `link`: the source is resolved, must exist (`ENOENT`) and be a regular file
//!   (`EPERM` for a directory or a symlink) the caller may link (`EPERM` unless
//!   root, its owner, or, for a file neither setuid nor executable-setgid, a
//!   reader and writer of it: Linux's `protected_hardlinks`); then the
//!   destination is resolved, must not exist (`EEXIST`), and its parent needs
//!   write+search (`EACCES`).
//!
//! Documented limits kept out of the random operations: directory times (not
//! compared), the sticky bit (its check for hard links homed on another server is
//! weaker). Symlinks in the middle of a path are never followed: the model treats
//! them as the non-directories they are.

use canopy_client::Client;
use canopy_proto::attr::{S_ISGID, S_ISUID, S_ISVTX};
use canopy_proto::{Attr, Creds, Errno, FileKind};
use canopy_proto::modes::{IndexFsOptions, ModeOptions};
use canopy_testkit::InProcCluster;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use std::collections::{BTreeMap, HashMap};

const ROOT_INO: u64 = 1;
const USER: u32 = 1000;

fn user() -> Creds {
    Creds::user(USER, USER)
}

// ---------------------------------------------------------------- the model ----

#[derive(Debug, Clone)]
struct Obj {
    kind: FileKind,
    mode: u32,
    uid: u32,
    gid: u32,
    /// Names of a file or symlink (directories compute theirs).
    links: u32,
    target: Option<String>,
}

/// What a successful operation returns, comparable between model and cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    kind: FileKind,
    mode: u32,
    uid: u32,
    gid: u32,
    nlink: u32,
    size: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Out {
    Unit,
    /// Attributes and the object's id (the model's or the cluster's inode number).
    Attr(Seen, u64),
    /// (name, kind, id) in name order.
    Entries(Vec<(String, FileKind, u64)>),
}

fn seen_of(a: &Attr) -> Seen {
    Seen { kind: a.kind, mode: a.mode, uid: a.uid, gid: a.gid, nlink: a.nlink, size: a.size }
}

type Res<T> = Result<T, Errno>;

fn split(path: &str) -> (&str, &str) {
    let cut = path.rfind('/').expect("absolute");
    (if cut == 0 { "/" } else { &path[..cut] }, &path[cut + 1..])
}

fn join(dir: &str, name: &str) -> String {
    if dir == "/" {
        format!("/{name}")
    } else {
        format!("{dir}/{name}")
    }
}

fn components(path: &str) -> impl Iterator<Item = &str> {
    path.split('/').filter(|c| !c.is_empty())
}

/// True if `path` is strictly below `dir`.
fn strictly_below(path: &str, dir: &str) -> bool {
    path.len() > dir.len() && path.starts_with(dir) && path.as_bytes()[dir.len()] == b'/'
}

/// POSIX permission: root reads and writes anything and searches directories and
/// anything with some x bit; others get the owner, group or other class.
fn allows(c: &Creds, o: &Obj, want: u32) -> bool {
    if c.is_root() {
        return want & 1 == 0 || o.kind == FileKind::Dir || o.mode & 0o111 != 0;
    }
    let class = if c.uid == o.uid {
        (o.mode >> 6) & 7
    } else if c.in_group(o.gid) {
        (o.mode >> 3) & 7
    } else {
        o.mode & 7
    };
    class & want == want
}

fn require(c: &Creds, o: &Obj, want: u32) -> Res<()> {
    if allows(c, o, want) {
        Ok(())
    } else {
        Err(Errno::EACCES)
    }
}

/// Linux's `protected_hardlinks`, for a regular file (the model's only kind
/// that may be linked).
fn check_hardlink(c: &Creds, o: &Obj) -> Res<()> {
    let privileged = o.mode & S_ISUID != 0 || o.mode & (S_ISGID | 0o010) == (S_ISGID | 0o010);
    if c.is_root() || c.uid == o.uid || (!privileged && allows(c, o, 6)) {
        Ok(())
    } else {
        Err(Errno::EPERM)
    }
}

fn check_sticky(c: &Creds, dir: &Obj, entry: &Obj) -> Res<()> {
    if dir.mode & S_ISVTX == 0 || c.is_root() || c.uid == dir.uid || c.uid == entry.uid {
        Ok(())
    } else {
        Err(Errno::EPERM)
    }
}

struct Model {
    names: BTreeMap<String, u64>,
    objs: HashMap<u64, Obj>,
    next: u64,
}

impl Model {
    fn new() -> Model {
        let root = Obj { kind: FileKind::Dir, mode: 0o755, uid: 0, gid: 0, links: 0, target: None };
        Model { names: BTreeMap::from([("/".to_string(), ROOT_INO)]), objs: HashMap::from([(ROOT_INO, root)]), next: 2 }
    }

    fn obj_at(&self, path: &str) -> Option<(u64, &Obj)> {
        self.names.get(path).map(|id| (*id, &self.objs[id]))
    }

    fn children(&self, dir: &str) -> Vec<(String, u64)> {
        let prefix = if dir == "/" { "/".to_string() } else { format!("{dir}/") };
        self.names
            .range(prefix.clone()..)
            .take_while(|(p, _)| p.starts_with(&prefix))
            .filter(|(p, _)| p.len() > prefix.len() && !p[prefix.len()..].contains('/'))
            .map(|(p, id)| (p[prefix.len()..].to_string(), *id))
            .collect()
    }

    fn seen(&self, path: &str) -> Out {
        let (id, o) = self.obj_at(path).expect("exists");
        let nlink = match o.kind {
            FileKind::Dir => 2 + self.children(path).iter().filter(|(_, c)| self.objs[c].kind == FileKind::Dir).count() as u32,
            _ => o.links,
        };
        let size = o.target.as_ref().map_or(0, |t| t.len() as u64);
        Out::Attr(Seen { kind: o.kind, mode: o.mode, uid: o.uid, gid: o.gid, nlink, size }, id)
    }

    /// Step 2 of the precedence: walks to the parent of `path` (which must not be
    /// the root), checking search permission on every directory passed through.
    fn resolve_parent<'p>(&self, c: &Creds, path: &'p str) -> Res<(String, &'p str)> {
        let (parent, name) = split(path);
        let mut cur = "/".to_string();
        for comp in components(parent) {
            require(c, &self.objs[&self.names[&cur]], 1)?;
            let next = join(&cur, comp);
            match self.obj_at(&next) {
                None => return Err(Errno::ENOENT),
                Some((_, o)) if o.kind != FileKind::Dir => return Err(Errno::ENOTDIR),
                Some(_) => cur = next,
            }
        }
        require(c, &self.objs[&self.names[&cur]], 1)?;
        Ok((cur, name))
    }

    fn dir(&self, path: &str) -> &Obj {
        &self.objs[&self.names[path]]
    }

    fn add(&mut self, path: String, obj: Obj) -> Out {
        let id = self.next;
        self.next += 1;
        self.objs.insert(id, obj);
        self.names.insert(path.clone(), id);
        self.seen(&path)
    }

    /// Owner and group of a new object in `parent` (setgid directories pass theirs on).
    fn new_owner(&self, c: &Creds, parent: &str) -> (u32, u32, u32) {
        let p = self.dir(parent);
        if p.mode & S_ISGID != 0 {
            (c.uid, p.gid, S_ISGID)
        } else {
            (c.uid, c.gid, 0)
        }
    }

    fn stat(&self, c: &Creds, path: &str) -> Res<Out> {
        if path != "/" {
            self.resolve_parent(c, path)?;
        }
        self.obj_at(path).ok_or(Errno::ENOENT)?;
        Ok(self.seen(path))
    }

    /// mkdir: EEXIST, then EACCES on the parent.
    fn mkdir(&mut self, c: &Creds, path: &str, mode: u32) -> Res<Out> {
        let (parent, _) = self.resolve_parent(c, path)?;
        if self.names.contains_key(path) {
            return Err(Errno::EEXIST);
        }
        require(c, self.dir(&parent), 3)?;
        let (uid, gid, setgid) = self.new_owner(c, &parent);
        Ok(self.add(path.to_string(), Obj { kind: FileKind::Dir, mode: (mode & 0o7777) | setgid, uid, gid, links: 0, target: None }))
    }

    /// create (exclusive) and symlink: EEXIST, then EACCES on the parent.
    fn create(&mut self, c: &Creds, path: &str, mode: u32, target: Option<&str>) -> Res<Out> {
        let (parent, _) = self.resolve_parent(c, path)?;
        if self.names.contains_key(path) {
            return Err(Errno::EEXIST);
        }
        require(c, self.dir(&parent), 3)?;
        let (uid, gid, _) = self.new_owner(c, &parent);
        let (kind, mode) = match target {
            Some(_) => (FileKind::Symlink, 0o777),
            None => (FileKind::File, mode & 0o7777),
        };
        Ok(self.add(path.to_string(), Obj { kind, mode, uid, gid, links: 1, target: target.map(str::to_string) }))
    }

    /// Drops one name of a file or symlink.
    fn drop_name(&mut self, path: &str) {
        let id = self.names.remove(path).expect("exists");
        let o = self.objs.get_mut(&id).expect("exists");
        o.links -= 1;
        if o.links == 0 {
            self.objs.remove(&id);
        }
    }

    /// unlink: ENOENT, EISDIR, then EACCES on the parent, EPERM (sticky).
    fn unlink(&mut self, c: &Creds, path: &str) -> Res<Out> {
        let (parent, _) = self.resolve_parent(c, path)?;
        let (_, o) = self.obj_at(path).ok_or(Errno::ENOENT)?;
        if o.kind == FileKind::Dir {
            return Err(Errno::EISDIR);
        }
        require(c, self.dir(&parent), 3)?;
        check_sticky(c, self.dir(&parent), o)?;
        self.drop_name(path);
        Ok(Out::Unit)
    }

    /// rmdir: ENOENT, ENOTDIR, then EACCES on the parent, EPERM (sticky), ENOTEMPTY.
    fn rmdir(&mut self, c: &Creds, path: &str) -> Res<Out> {
        let (parent, _) = self.resolve_parent(c, path)?;
        let (_, o) = self.obj_at(path).ok_or(Errno::ENOENT)?;
        if o.kind != FileKind::Dir {
            return Err(Errno::ENOTDIR);
        }
        require(c, self.dir(&parent), 3)?;
        check_sticky(c, self.dir(&parent), o)?;
        if !self.children(path).is_empty() {
            return Err(Errno::ENOTEMPTY);
        }
        let id = self.names.remove(path).expect("exists");
        self.objs.remove(&id);
        Ok(Out::Unit)
    }

    /// chmod: ENOENT, then EPERM unless owner or root. Outside the file's group a
    /// non-root caller cannot set setgid.
    fn chmod(&mut self, c: &Creds, path: &str, mode: u32) -> Res<Out> {
        if path != "/" {
            self.resolve_parent(c, path)?;
        }
        let (id, o) = self.obj_at(path).ok_or(Errno::ENOENT)?;
        if !c.is_root() && c.uid != o.uid {
            return Err(Errno::EPERM);
        }
        let mut mode = mode & 0o7777;
        if !c.is_root() && !c.in_group(o.gid) {
            mode &= !S_ISGID;
        }
        self.objs.get_mut(&id).expect("exists").mode = mode;
        Ok(self.seen(path))
    }

    /// readdir: ENOENT, ENOTDIR, then EACCES without read permission.
    fn readdir(&self, c: &Creds, path: &str) -> Res<Out> {
        if path != "/" {
            self.resolve_parent(c, path)?;
        }
        let (_, o) = self.obj_at(path).ok_or(Errno::ENOENT)?;
        if o.kind != FileKind::Dir {
            return Err(Errno::ENOTDIR);
        }
        require(c, o, 4)?;
        Ok(Out::Entries(self.children(path).into_iter().map(|(n, id)| (n, self.objs[&id].kind, id)).collect()))
    }

    /// link: see the precedence at the top.
    fn link(&mut self, c: &Creds, src: &str, dst: &str) -> Res<Out> {
        self.resolve_parent(c, src)?;
        let (id, o) = self.obj_at(src).ok_or(Errno::ENOENT)?;
        if o.kind != FileKind::File {
            return Err(Errno::EPERM);
        }
        check_hardlink(c, o)?;
        let (dparent, _) = self.resolve_parent(c, dst)?;
        if self.names.contains_key(dst) {
            return Err(Errno::EEXIST);
        }
        require(c, self.dir(&dparent), 3)?;
        self.objs.get_mut(&id).expect("exists").links += 1;
        self.names.insert(dst.to_string(), id);
        Ok(self.seen(dst))
    }

    /// rename: see the precedence at the top.
    fn rename(&mut self, c: &Creds, src: &str, dst: &str) -> Res<Out> {
        if src == dst {
            return self.stat(c, src).map(|_| Out::Unit);
        }
        let (sparent, _) = self.resolve_parent(c, src)?;
        let (sid, so) = self.obj_at(src).ok_or(Errno::ENOENT)?;
        let (dparent, _) = self.resolve_parent(c, dst)?;
        let is_dir = so.kind == FileKind::Dir;
        if is_dir && strictly_below(dst, src) {
            return Err(Errno::EINVAL);
        }
        let replaced = self.obj_at(dst);
        match replaced {
            Some((_, d)) if is_dir && d.kind != FileKind::Dir => return Err(Errno::ENOTDIR),
            Some((_, d)) if !is_dir && d.kind == FileKind::Dir => return Err(Errno::EISDIR),
            _ => {}
        }
        require(c, self.dir(&sparent), 3)?;
        require(c, self.dir(&dparent), 3)?;
        check_sticky(c, self.dir(&sparent), so)?;
        if is_dir && sparent != dparent {
            require(c, so, 2)?;
        }
        if let Some((did, d)) = replaced {
            if did == sid {
                return Ok(Out::Unit);
            }
            check_sticky(c, self.dir(&dparent), d)?;
            if is_dir && !self.children(dst).is_empty() {
                return Err(Errno::ENOTEMPTY);
            }
            if is_dir {
                self.names.remove(dst);
                self.objs.remove(&did);
            } else {
                self.drop_name(dst);
            }
        }
        // Move the name and everything below it.
        let moved: Vec<(String, u64)> = self
            .names
            .iter()
            .filter(|(p, _)| p.as_str() == src || strictly_below(p, src))
            .map(|(p, id)| (p.clone(), *id))
            .collect();
        for (p, id) in moved {
            self.names.remove(&p);
            self.names.insert(format!("{dst}{}", &p[src.len()..]), id);
        }
        Ok(Out::Unit)
    }

    fn apply(&mut self, c: &Creds, op: &Op) -> Res<Out> {
        match op {
            Op::Mkdir(p, m) => self.mkdir(c, p, *m),
            Op::Rmdir(p) => self.rmdir(c, p),
            Op::Create(p, m) => self.create(c, p, *m, None),
            Op::Unlink(p) => self.unlink(c, p),
            Op::Rename(s, d) => self.rename(c, s, d),
            Op::Chmod(p, m) => self.chmod(c, p, *m),
            Op::Symlink(t, p) => self.create(c, p, 0, Some(t)),
            Op::Link(s, d) => self.link(c, s, d),
            Op::Stat(p) => self.stat(c, p),
            Op::Readdir(p) => self.readdir(c, p),
        }
    }
}

// ----------------------------------------------------------- the operations ----

#[derive(Debug, Clone)]
enum Op {
    Mkdir(String, u32),
    Rmdir(String),
    Create(String, u32),
    Unlink(String),
    Rename(String, String),
    Chmod(String, u32),
    Symlink(String, String),
    Link(String, String),
    Stat(String),
    Readdir(String),
}

async fn run_real(c: &Client, op: &Op) -> Res<Out> {
    let attr = |a: Attr| Out::Attr(seen_of(&a), a.ino);
    match op {
        Op::Mkdir(p, m) => c.mkdir(p, *m).await.map(attr),
        Op::Rmdir(p) => c.rmdir(p).await.map(|_| Out::Unit),
        Op::Create(p, m) => c.create(p, *m).await.map(attr),
        Op::Unlink(p) => c.unlink(p).await.map(|_| Out::Unit),
        Op::Rename(s, d) => c.rename(s, d).await.map(|_| Out::Unit),
        Op::Chmod(p, m) => c.chmod(p, *m).await.map(attr),
        Op::Symlink(t, p) => c.symlink(t, p).await.map(attr),
        Op::Link(s, d) => c.link(s, d).await.map(attr),
        Op::Stat(p) => c.stat(p).await.map(attr),
        Op::Readdir(p) => c.readdir(p).await.map(|es| Out::Entries(es.into_iter().map(|e| (e.name, e.kind, e.ino)).collect())),
    }
}

/// The model's object ids and the cluster's inode numbers must be in one-to-one
/// correspondence: an object keeps its inode number across renames and links.
#[derive(Default)]
struct Inos {
    to_real: HashMap<u64, u64>,
    to_model: HashMap<u64, u64>,
    /// A directory may answer link count 1: its subdirectories are not counted.
    uncounted_dirs: bool,
}

impl Inos {
    /// What the model says, as the cluster may say it: a directory's link
    /// count 1 stands for any count where counts may be left out.
    fn as_counted(&self, model: &Seen, real: &Seen) -> Seen {
        match self.uncounted_dirs && real.kind == FileKind::Dir && real.nlink == 1 {
            true => Seen { nlink: 1, ..model.clone() },
            false => model.clone(),
        }
    }

    fn check(&mut self, model: u64, real: u64) -> Result<(), String> {
        let a = *self.to_real.entry(model).or_insert(real);
        let b = *self.to_model.entry(real).or_insert(model);
        if a != real || b != model {
            return Err(format!("object {model} has inode {real:#x}, seen before as {a:#x} (inode {real:#x} was object {b})"));
        }
        Ok(())
    }

    /// Compares two outcomes ignoring ids, then records the ids.
    fn compare(&mut self, model: &Res<Out>, real: &Res<Out>) -> Result<(), String> {
        match (model, real) {
            (Ok(Out::Attr(m, mi)), Ok(Out::Attr(r, ri))) if self.as_counted(m, r) == *r => self.check(*mi, *ri),
            (Ok(Out::Entries(m)), Ok(Out::Entries(r)))
                if m.len() == r.len() && m.iter().zip(r).all(|(a, b)| a.0 == b.0 && a.1 == b.1) =>
            {
                m.iter().zip(r).try_for_each(|(a, b)| self.check(a.2, b.2))
            }
            (Ok(Out::Unit), Ok(Out::Unit)) => Ok(()),
            (Err(a), Err(b)) if a == b => Ok(()),
            _ => Err(format!("model {model:?}\ncluster {real:?}")),
        }
    }
}

/// Every object of the cluster, by path: what a full walk with readdir + stat +
/// readlink sees, as root.
async fn walk(c: &Client) -> Res<BTreeMap<String, (Seen, u64, Option<String>)>> {
    let mut out = BTreeMap::new();
    let root = c.stat("/").await?;
    out.insert("/".to_string(), (seen_of(&root), root.ino, None));
    let mut todo = vec!["/".to_string()];
    while let Some(dir) = todo.pop() {
        for e in c.readdir(&dir).await? {
            let path = join(&dir, &e.name);
            let a = c.stat(&path).await?;
            assert_eq!((a.kind, a.ino), (e.kind, e.ino), "readdir and stat of {path} agree");
            let target = match a.kind {
                FileKind::Symlink => Some(c.readlink(&path).await?),
                FileKind::Dir => {
                    todo.push(path.clone());
                    None
                }
                _ => None,
            };
            out.insert(path, (seen_of(&a), a.ino, target));
        }
    }
    Ok(out)
}

fn model_tree(m: &Model) -> BTreeMap<String, (Seen, u64, Option<String>)> {
    m.names
        .keys()
        .map(|p| match m.seen(p) {
            Out::Attr(s, id) => (p.clone(), (s, id, m.objs[&id].target.clone())),
            _ => unreachable!(),
        })
        .collect()
}

// ---------------------------------------------------------- the generators ----

fn path_of_depth(depth: std::ops::RangeInclusive<usize>) -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(vec!["a", "b", "c"]), depth).prop_map(|v| format!("/{}", v.join("/")))
}

/// Mostly shallow, so that operations often find what earlier ones made.
fn path() -> impl Strategy<Value = String> {
    prop_oneof![3 => path_of_depth(1..=1), 4 => path_of_depth(2..=2), 2 => path_of_depth(3..=3)]
}

fn path_or_root() -> impl Strategy<Value = String> {
    prop_oneof![9 => path(), 1 => Just("/".to_string())]
}

/// No sticky bit (see the limits above); setgid to exercise group inheritance.
fn dir_mode() -> impl Strategy<Value = u32> {
    prop::sample::select(vec![0o755, 0o777, 0o777, 0o700, 0o711, 0o755, 0o555, 0o733, 0o2777, 0o000])
}

fn file_mode() -> impl Strategy<Value = u32> {
    prop::sample::select(vec![0o644, 0o600, 0o755, 0o666, 0o2755, 0o000])
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (path(), dir_mode()).prop_map(|(p, m)| Op::Mkdir(p, m)),
        2 => path().prop_map(Op::Rmdir),
        5 => (path(), file_mode()).prop_map(|(p, m)| Op::Create(p, m)),
        2 => path().prop_map(Op::Unlink),
        4 => (path(), path()).prop_map(|(s, d)| Op::Rename(s, d)),
        2 => (path_or_root(), prop_oneof![dir_mode(), file_mode()]).prop_map(|(p, m)| Op::Chmod(p, m)),
        1 => (prop::sample::select(vec!["a", "/a/b", "../c", "x"]), path()).prop_map(|(t, p)| Op::Symlink(t.to_string(), p)),
        4 => (path(), path()).prop_map(|(s, d)| Op::Link(s, d)),
        2 => path_or_root().prop_map(Op::Stat),
        2 => path_or_root().prop_map(Op::Readdir),
    ]
}

/// A few objects made by root first (open modes, mostly directories), so that the
/// random operations start from a populated tree.
fn seed() -> impl Strategy<Value = Vec<(bool, Op)>> {
    let open_mode = prop::sample::select(vec![0o777, 0o755, 0o2777]);
    let made = prop_oneof![
        3 => (path_of_depth(1..=2), open_mode).prop_map(|(p, m)| Op::Mkdir(p, m)),
        2 => path_of_depth(1..=3).prop_map(|p| Op::Create(p, 0o666)),
    ];
    prop::collection::vec(made.prop_map(|op| (false, op)), 6..=10)
}

/// The steps: a seed, then about 40 operations, each with whether the
/// unprivileged user runs it.
fn steps() -> impl Strategy<Value = Vec<(bool, Op)>> {
    // Random names seldom pair an existing file with a free name: some steps make
    // a file and link it at once.
    let linked = (path_of_depth(1..=2), file_mode(), path_of_depth(1..=2))
        .prop_map(|(s, m, d)| vec![Op::Create(s.clone(), m), Op::Link(s, d)]);
    let segment = prop_oneof![8 => op().prop_map(|o| vec![o]), 2 => linked];
    (seed(), prop::collection::vec((prop::bool::weighted(0.2), segment), 32..=40)).prop_map(|(mut s, segments)| {
        s.extend(segments.into_iter().flat_map(|(u, ops)| ops.into_iter().map(move |o| (u, o))));
        s
    })
}

/// The clusters the model is checked against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Variant {
    ShardFs,
    IndexFs,
    /// IndexFS whose partitions split past 2 entries, on 3 servers (so a
    /// directory's fourth partition shares its home): splits run during the
    /// steps. A split directory's link count is 1 ("not counted").
    IndexFsSplitting,
}

fn cluster_of(v: Variant) -> InProcCluster {
    match v {
        Variant::ShardFs => InProcCluster::memory_mode("shardfs", 3),
        Variant::IndexFs => InProcCluster::memory_mode("indexfs", 3),
        Variant::IndexFsSplitting => InProcCluster::memory_with(3, ModeOptions::Indexfs(IndexFsOptions { split_threshold: 2, ..IndexFsOptions::default() })),
    }
}

fn check_run(steps: &[(bool, Op)], variant: Variant) -> Result<(), TestCaseError> {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    rt.block_on(async {
        let cluster = cluster_of(variant);
        let root = cluster.client();
        let usr = root.as_user(user());
        let mut model = Model::new();
        let mut inos = Inos { uncounted_dirs: variant == Variant::IndexFsSplitting, ..Inos::default() };
        for (i, (as_user, op)) in steps.iter().enumerate() {
            let (creds, client) = if *as_user { (user(), &usr) } else { (Creds::root(), &root) };
            let want = model.apply(&creds, op);
            let got = run_real(client, op).await;
            if let Err(why) = inos.compare(&want, &got) {
                return Err(TestCaseError::fail(format!("step {i}: {op:?} as uid {}:\n{why}", creds.uid)));
            }
        }
        let fsck0 = root.fsck().await.map_err(|e| TestCaseError::fail(format!("fsck: {e}")))?;
        prop_assert!(fsck0.is_clean(), "fsck before: {:#?}", fsck0.problems);
        let got = walk(&root).await.map_err(|e| TestCaseError::fail(format!("walking the tree: {e}")))?;
        let want = model_tree(&model);
        let (gk, wk): (Vec<&String>, Vec<&String>) = (got.keys().collect(), want.keys().collect());
        prop_assert_eq!(gk, wk, "the trees hold the same paths");
        for (path, (seen, real, target)) in &got {
            let (mseen, mid, mtarget) = &want[path];
            let mseen = inos.as_counted(mseen, seen);
            prop_assert_eq!((seen, target), (&mseen, mtarget), "{}", path);
            inos.check(*mid, *real).map_err(|e| TestCaseError::fail(format!("{path}: {e}")))?;
        }
        let fsck = root.fsck().await.map_err(|e| TestCaseError::fail(format!("fsck: {e}")))?;
        prop_assert!(fsck.is_clean(), "fsck: {:#?}", fsck.problems);
        Ok(())
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, max_shrink_iters: 4096, ..ProptestConfig::default() })]

    #[test]
    fn cluster_matches_model(steps in steps()) {
        check_run(&steps, Variant::ShardFs)?;
    }

    #[test]
    fn indexfs_cluster_matches_model(steps in steps()) {
        check_run(&steps, Variant::IndexFs)?;
    }

    #[test]
    fn splitting_indexfs_cluster_matches_model(steps in steps()) {
        check_run(&steps, Variant::IndexFsSplitting)?;
    }
}

/// The model agrees with itself on a few hand-checked cases, so a failure of the
/// property above points at the cluster rather than the model.
#[test]
fn model_sanity() {
    let mut m = Model::new();
    let root = Creds::root();
    let u = user();
    assert!(m.mkdir(&root, "/a", 0o755).is_ok());
    assert_eq!(m.mkdir(&root, "/a", 0o755), Err(Errno::EEXIST));
    assert_eq!(m.mkdir(&root, "/x/y", 0o755), Err(Errno::ENOENT));
    assert!(m.create(&root, "/a/f", 0o644, None).is_ok());
    assert_eq!(m.stat(&root, "/a/f/x"), Err(Errno::ENOTDIR));
    assert_eq!(m.rmdir(&root, "/a"), Err(Errno::ENOTEMPTY));
    assert_eq!(m.create(&u, "/a/g", 0o644, None), Err(Errno::EACCES));
    assert_eq!(m.rename(&root, "/a", "/a/b"), Err(Errno::EINVAL));
    assert_eq!(m.rename(&root, "/a", "/a/f/b"), Err(Errno::ENOTDIR));
    assert!(m.link(&root, "/a/f", "/g").is_ok());
    assert!(matches!(m.stat(&root, "/g"), Ok(Out::Attr(Seen { nlink: 2, .. }, _))));
    assert_eq!(m.rename(&root, "/g", "/a/f"), Ok(Out::Unit));
    assert!(m.names.contains_key("/g"), "same file: nothing happens");
    assert!(m.mkdir(&root, "/a/d", 0o755).is_ok());
    assert!(matches!(m.stat(&root, "/a"), Ok(Out::Attr(Seen { nlink: 3, .. }, _))));
    assert!(m.rename(&root, "/a", "/b").is_ok());
    assert!(m.names.contains_key("/b/d") && m.names.contains_key("/b/f") && !m.names.contains_key("/a"));
    m.unlink(&root, "/b/f").unwrap();
    assert!(matches!(m.stat(&root, "/g"), Ok(Out::Attr(Seen { nlink: 1, .. }, _))));
    assert_eq!(m.chmod(&u, "/g", 0o777), Err(Errno::EPERM));
}
