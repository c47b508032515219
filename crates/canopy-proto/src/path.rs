//! The one definition of a valid Canopy path.
//!
//! Rules (documented in docs/architecture.md, tested below):
//! - absolute: starts with `/`;
//! - at most [`NS_PATH_MAX`] bytes and each name at most [`NAME_MAX`] bytes, else
//!   `ENAMETOOLONG`;
//! - no NUL byte and no empty component (`//`, or a trailing `/`), else `EINVAL`;
//! - `.` components are dropped and `..` removes the component before it (`..` at the
//!   root stays at the root). This is lexical: `/a/missing/../b` is `/a/b`. Canopy
//!   paths are physical (symlinks in the middle of a path are not followed by
//!   servers; the FUSE layer gets POSIX symlink walking from the kernel).
//!
//! Servers parse every path they receive again: a client is never trusted to have
//! canonicalised it.

use crate::Errno;

/// What one system call may name (a symlink target, a path relative to a working
/// directory): Linux's PATH_MAX.
pub const PATH_MAX: usize = 4096;
/// The longest absolute path in a Canopy namespace. Longer than [`PATH_MAX`]: as on
/// a local file system, an application reaches a deep object through a working
/// directory, so the depth of the tree is not limited by what one call may name
/// (a mount serves `cd deep; touch <4095 bytes>`). Still bounded, since requests
/// carry full paths and ShardFS places objects by them.
pub const NS_PATH_MAX: usize = 8 * PATH_MAX;
pub const NAME_MAX: usize = 255;

/// True if canonical path `path` is `dir` or lies below it (for callers that
/// keep paths as text, such as the mount's node table).
pub fn is_within(path: &str, dir: &str) -> bool {
    dir == "/" || path.strip_prefix(dir).is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// A validated, canonical absolute path (`/` or `/a/b`, never a trailing slash).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NsPath(String);

impl NsPath {
    pub fn root() -> NsPath {
        NsPath("/".to_string())
    }

    /// Validates and canonicalises `raw`.
    pub fn parse(raw: &str) -> Result<NsPath, Errno> {
        if raw.len() > NS_PATH_MAX {
            return Err(Errno::ENAMETOOLONG);
        }
        if raw.as_bytes().contains(&0) {
            return Err(Errno::EINVAL);
        }
        let rest = raw.strip_prefix('/').ok_or(Errno::EINVAL)?;
        let mut parts: Vec<&str> = Vec::new();
        if !rest.is_empty() {
            for comp in rest.split('/') {
                match comp {
                    "" => return Err(Errno::EINVAL),
                    "." => {}
                    ".." => {
                        parts.pop();
                    }
                    name => {
                        check_name(name)?;
                        parts.push(name);
                    }
                }
            }
        }
        let mut out = String::with_capacity(raw.len());
        for p in &parts {
            out.push('/');
            out.push_str(p);
        }
        if out.is_empty() {
            out.push('/');
        }
        Ok(NsPath(out))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn is_root(&self) -> bool {
        self.0 == "/"
    }

    /// The names from the root down (empty for `/`).
    pub fn components(&self) -> impl Iterator<Item = &str> {
        self.0.split('/').filter(|c| !c.is_empty())
    }

    /// The parent path and the last name; `None` for the root.
    pub fn split(&self) -> Option<(NsPath, &str)> {
        if self.is_root() {
            return None;
        }
        let cut = self.0.rfind('/').expect("canonical paths start with /");
        let parent = if cut == 0 { "/".to_string() } else { self.0[..cut].to_string() };
        Some((NsPath(parent), &self.0[cut + 1..]))
    }

    pub fn name(&self) -> Option<&str> {
        self.split().map(|(_, n)| n)
    }

    /// `self/name`, checking the name and the length limit.
    pub fn join(&self, name: &str) -> Result<NsPath, Errno> {
        check_name(name)?;
        if name == "." || name == ".." {
            return Err(Errno::EINVAL);
        }
        let joined = if self.is_root() { format!("/{name}") } else { format!("{}/{name}", self.0) };
        if joined.len() > NS_PATH_MAX {
            return Err(Errno::ENAMETOOLONG);
        }
        Ok(NsPath(joined))
    }

    /// True if `self` is `other` or lies below it.
    pub fn is_within(&self, other: &NsPath) -> bool {
        is_within(&self.0, &other.0)
    }

    /// Replaces the prefix `from` (which `self` must be within) by `to`.
    pub fn rebase(&self, from: &NsPath, to: &NsPath) -> NsPath {
        debug_assert!(self.is_within(from));
        let tail = if from.is_root() { &self.0[..] } else { &self.0[from.0.len()..] };
        if tail.is_empty() {
            return to.clone();
        }
        if to.is_root() {
            NsPath(tail.to_string())
        } else {
            NsPath(format!("{}{}", to.0, tail))
        }
    }
}

impl std::fmt::Display for NsPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A symlink target, as symlink(2) checks it: not empty (`ENOENT`), not longer
/// than a path (`ENAMETOOLONG`), no NUL (`EINVAL`).
pub fn check_symlink_target(target: &str) -> Result<(), Errno> {
    if target.is_empty() {
        return Err(Errno::ENOENT);
    }
    if target.len() > PATH_MAX {
        return Err(Errno::ENAMETOOLONG);
    }
    if target.contains('\0') {
        return Err(Errno::EINVAL);
    }
    Ok(())
}

/// Checks one name: not empty, at most NAME_MAX bytes, no `/` and no NUL.
pub fn check_name(name: &str) -> Result<(), Errno> {
    if name.is_empty() || name.contains('/') || name.as_bytes().contains(&0) {
        return Err(Errno::EINVAL);
    }
    if name.len() > NAME_MAX {
        return Err(Errno::ENAMETOOLONG);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Result<String, Errno> {
        NsPath::parse(s).map(|p| p.0)
    }

    #[test]
    fn canonical_forms() {
        assert_eq!(p("/").unwrap(), "/");
        assert_eq!(p("/a/b").unwrap(), "/a/b");
        assert_eq!(p("/a/./b").unwrap(), "/a/b");
        assert_eq!(p("/a/x/../b").unwrap(), "/a/b");
        assert_eq!(p("/..").unwrap(), "/");
        assert_eq!(p("/../../a").unwrap(), "/a");
        assert_eq!(p("/a/..").unwrap(), "/");
    }

    #[test]
    fn rejects_bad_paths() {
        assert_eq!(p(""), Err(Errno::EINVAL));
        assert_eq!(p("a/b"), Err(Errno::EINVAL));
        assert_eq!(p("/a//b"), Err(Errno::EINVAL));
        assert_eq!(p("/a/"), Err(Errno::EINVAL));
        assert_eq!(p("/a\0b"), Err(Errno::EINVAL));
        assert_eq!(p(&format!("/{}", "x".repeat(256))), Err(Errno::ENAMETOOLONG));
        assert!(p(&format!("/{}", "x".repeat(255))).is_ok());
        let deep = "/abcdefg".repeat(513); // 4104 bytes: beyond one call's PATH_MAX, within a namespace's
        assert_eq!(p(&deep).unwrap().len(), 4104);
        let long = "/abcdefg".repeat(NS_PATH_MAX / 8 + 1);
        assert_eq!(p(&long), Err(Errno::ENAMETOOLONG));
        assert_eq!(NsPath::parse(&"/abcdefg".repeat(NS_PATH_MAX / 8)).unwrap().join("x"), Err(Errno::ENAMETOOLONG));
    }

    #[test]
    fn split_join_within_rebase() {
        let ab = NsPath::parse("/a/b").unwrap();
        let (parent, name) = ab.split().unwrap();
        assert_eq!((parent.as_str(), name), ("/a", "b"));
        assert_eq!(NsPath::parse("/a").unwrap().split().unwrap().0, NsPath::root());
        assert!(NsPath::root().split().is_none());
        assert_eq!(parent.join("b").unwrap(), ab);
        assert_eq!(parent.join(".."), Err(Errno::EINVAL));
        assert!(ab.is_within(&parent));
        assert!(ab.is_within(&ab));
        assert!(!NsPath::parse("/ab").unwrap().is_within(&NsPath::parse("/a").unwrap()));
        assert!(ab.is_within(&NsPath::root()));
        assert!(is_within("/a", "/a") && is_within("/a/b", "/a") && is_within("/a", "/"));
        assert!(!is_within("/ab", "/a") && !is_within("/", "/a"));
        let moved = ab.rebase(&parent, &NsPath::parse("/x/y").unwrap());
        assert_eq!(moved.as_str(), "/x/y/b");
        assert_eq!(ab.rebase(&ab, &NsPath::parse("/z").unwrap()).as_str(), "/z");
        assert_eq!(ab.rebase(&NsPath::root(), &NsPath::parse("/r").unwrap()).as_str(), "/r/a/b");
    }
}
