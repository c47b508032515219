//! Path resolution against the directory table, with POSIX search checks on every
//! ancestor. Pure: no store, no I/O.
//!
//! A component missing from the table may be a file (files are not replicated), so
//! resolution of an intermediate component that is not a directory reports
//! [`Miss`]; the caller, which may hold the file entry, turns it into `ENOTDIR` or
//! `ENOENT`.

use super::dirtable::{DirNode, DirTable, ROOT_ID};
use canopy_posix::perm::{self, Owner};
use canopy_proto::attr::access;
use canopy_proto::path::NsPath;
use canopy_proto::{Creds, Errno};

pub fn owner(node: &DirNode) -> Owner {
    Owner::of_dir(&node.lookup)
}

/// Why resolution stopped short.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Miss {
    /// Search permission denied.
    Denied,
    /// `parent` has no subdirectory `name` (it may have a file of that name).
    NotADir { parent: u64, name: String },
    /// The table lists directory `id` but holds no node for it: a broken
    /// invariant, answered EIO and reported by fsck, never a panic.
    Broken { id: u64 },
}

/// Walks to the directory `path` names, checking search permission on each
/// directory it passes through (not on the last).
pub fn resolve_dir(table: &DirTable, creds: &Creds, path: &NsPath) -> Result<u64, Miss> {
    let mut cur = ROOT_ID;
    for name in path.components() {
        let node = table.get(cur).ok_or(Miss::Broken { id: cur })?;
        if !perm::allows(creds, owner(node), true, access::X) {
            return Err(Miss::Denied);
        }
        cur = node.subdirs.get(name).copied().ok_or_else(|| Miss::NotADir { parent: cur, name: name.to_string() })?;
    }
    Ok(cur)
}

/// Resolves the parent of `path` and checks search permission on it: the state
/// every operation on a name needs. Returns (parent id, last name).
pub fn resolve_parent<'p>(table: &DirTable, creds: &Creds, path: &'p NsPath) -> Result<(u64, &'p str), Miss> {
    let (parent_path, name) = path.split().ok_or(Miss::NotADir { parent: 0, name: String::new() })?;
    let parent = resolve_dir(table, creds, &parent_path)?;
    let node = table.get(parent).ok_or(Miss::Broken { id: parent })?;
    if !perm::allows(creds, owner(node), true, access::X) {
        return Err(Miss::Denied);
    }
    Ok((parent, name))
}

/// The errno for a miss when the caller holds no file entry that explains it.
/// `EREMOTE` says "a component is not a directory here; its primary knows whether
/// it is a file (ENOTDIR) or nothing (ENOENT)": clients resolve it, users never
/// see it.
pub fn miss_errno(miss: &Miss) -> Errno {
    match miss {
        Miss::Denied => Errno::EACCES,
        Miss::NotADir { .. } => Errno::EREMOTE,
        Miss::Broken { .. } => Errno::EIO,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use canopy_proto::msg::DirLookup;

    fn table() -> DirTable {
        let mut t = DirTable::new(DirLookup { id: ROOT_ID, mode: 0o755, uid: 0, gid: 0 });
        t.insert(ROOT_ID, "pub", DirLookup { id: 2, mode: 0o755, uid: 0, gid: 0 });
        t.insert(ROOT_ID, "priv", DirLookup { id: 3, mode: 0o700, uid: 0, gid: 0 });
        t.insert(3, "in", DirLookup { id: 4, mode: 0o777, uid: 0, gid: 0 });
        t
    }

    fn p(s: &str) -> NsPath {
        NsPath::parse(s).unwrap()
    }

    #[test]
    fn resolves_and_checks_search_on_every_ancestor() {
        let t = table();
        let user = Creds::user(1000, 1000);
        assert_eq!(resolve_dir(&t, &user, &p("/pub")), Ok(2));
        assert_eq!(resolve_dir(&t, &user, &p("/priv")), Ok(3), "no search needed on the last");
        assert_eq!(resolve_dir(&t, &user, &p("/priv/in")), Err(Miss::Denied));
        assert_eq!(resolve_dir(&t, &Creds::root(), &p("/priv/in")), Ok(4));
        assert_eq!(resolve_parent(&t, &user, &p("/priv/x")), Err(Miss::Denied));
        assert_eq!(resolve_parent(&t, &user, &p("/pub/x")), Ok((2, "x")));
    }

    #[test]
    fn missing_components_are_reported_with_their_parent() {
        let t = table();
        let miss = resolve_parent(&t, &Creds::root(), &p("/pub/f/x")).unwrap_err();
        assert_eq!(miss, Miss::NotADir { parent: 2, name: "f".into() });
        assert_eq!(miss_errno(&miss), Errno::EREMOTE);
    }
}
