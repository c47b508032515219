//! The rules of chmod, chown, truncate and utimens, as one pure function over an
//! attribute record. Every mode and every server applies the same rules.

use crate::perm::{self, Owner};
use canopy_proto::attr::{access, PERM_MASK, S_ISGID, S_ISUID};
use canopy_proto::{Attr, Creds, Errno, FileKind, SetAttr, TimeSet};

fn is_owner_or_root(creds: &Creds, attr: &Attr) -> bool {
    creds.is_root() || creds.uid == attr.uid
}

/// A non-directory's mode after a change by a process that may not keep setuid
/// and setgid (a write or truncate without `CAP_FSETID`, any chown): setuid goes,
/// and setgid when the file is group-executable (without group execute, setgid
/// marks mandatory locking, not privilege, and stays), as Linux does.
pub fn drop_suid(mode: u32) -> u32 {
    let mode = mode & !S_ISUID;
    if mode & 0o010 != 0 {
        mode & !S_ISGID
    } else {
        mode
    }
}

/// The id chown(2) reads as "leave it" (-1): no object may be owned by it.
pub const NO_ID: u32 = u32::MAX;

/// Applies `set` to `attr` as `creds`, at time `now`, or says why not.
pub fn apply(creds: &Creds, attr: &mut Attr, set: &SetAttr, now: i64) -> Result<(), Errno> {
    if set.uid == Some(NO_ID) || set.gid == Some(NO_ID) {
        return Err(Errno::EINVAL); // as Linux: before any permission check
    }
    let is_dir = attr.kind == FileKind::Dir;
    let mut next = attr.clone();
    if let Some(size) = set.size {
        match attr.kind {
            FileKind::File => {}
            FileKind::Dir => return Err(Errno::EISDIR),
            _ => return Err(Errno::EINVAL),
        }
        perm::require(creds, Owner::of_attr(attr), false, access::W)?;
        next.size = size;
        next.mtime = now;
    }
    if set.uid.is_some() || set.gid.is_some() {
        let uid_changes = set.uid.is_some_and(|u| u != attr.uid);
        let gid_changes = set.gid.is_some_and(|g| g != attr.gid);
        if !creds.is_root() {
            if uid_changes || (set.uid.is_some() && creds.uid != attr.uid) {
                return Err(Errno::EPERM);
            }
            if set.gid.is_some() && (creds.uid != attr.uid || (gid_changes && !creds.in_group(set.gid.unwrap()))) {
                return Err(Errno::EPERM);
            }
        }
        next.uid = set.uid.unwrap_or(attr.uid);
        next.gid = set.gid.unwrap_or(attr.gid);
        if !is_dir {
            // As Linux (chown_common): a change of owner drops setuid and
            // setgid of every non-directory, even by root.
            next.mode = drop_suid(next.mode);
        }
    }
    if set.kill_suid || (set.size.is_some() && !creds.is_root()) {
        perm::require(creds, Owner::of_attr(attr), is_dir, access::W)?;
        if attr.kind == FileKind::File {
            next.mode = drop_suid(next.mode);
        }
    }
    if let Some(mode) = set.mode {
        if !is_owner_or_root(creds, attr) {
            return Err(Errno::EPERM);
        }
        let mut mode = mode & PERM_MASK;
        if !creds.is_root() && !creds.in_group(next.gid) {
            mode &= !S_ISGID;
        }
        next.mode = mode;
    }
    for (time, slot) in [(set.atime, &mut next.atime), (set.mtime, &mut next.mtime)] {
        match time {
            None => {}
            Some(TimeSet::At(t)) => {
                if !is_owner_or_root(creds, attr) {
                    return Err(Errno::EPERM);
                }
                *slot = t;
            }
            Some(TimeSet::Now) => {
                if !is_owner_or_root(creds, attr) {
                    perm::require(creds, Owner::of_attr(attr), is_dir, access::W)?;
                }
                *slot = now;
            }
        }
    }
    next.ctime = now;
    *attr = next;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(uid: u32, gid: u32, mode: u32) -> Attr {
        Attr { ino: 9, kind: FileKind::File, mode, uid, gid, size: 0, nlink: 1, rdev: 0, atime: 0, mtime: 0, ctime: 0 }
    }

    #[test]
    fn chmod_needs_owner_or_root() {
        let mut a = file(1000, 100, 0o644);
        assert_eq!(apply(&Creds::user(2000, 100), &mut a, &SetAttr::mode(0o777), 5), Err(Errno::EPERM));
        assert_eq!(a.mode, 0o644, "a refused change leaves the record untouched");
        apply(&Creds::user(1000, 100), &mut a, &SetAttr::mode(0o600), 5).unwrap();
        assert_eq!((a.mode, a.ctime), (0o600, 5));
    }

    #[test]
    fn chmod_drops_setgid_outside_the_group() {
        let mut a = file(1000, 100, 0o644);
        apply(&Creds::user(1000, 7), &mut a, &SetAttr::mode(0o2755), 1).unwrap();
        assert_eq!(a.mode, 0o755);
    }

    #[test]
    fn chown_rules() {
        let mut a = file(1000, 100, 0o4755);
        let alice = Creds { uid: 1000, gid: 100, groups: vec![200] };
        assert_eq!(apply(&alice, &mut a, &SetAttr::owner(Some(2000), None), 1), Err(Errno::EPERM));
        assert_eq!(apply(&alice, &mut a, &SetAttr::owner(None, Some(300)), 1), Err(Errno::EPERM));
        apply(&alice, &mut a, &SetAttr::owner(None, Some(200)), 1).unwrap();
        assert_eq!((a.gid, a.mode), (200, 0o755));
        apply(&Creds::root(), &mut a, &SetAttr::owner(Some(5), Some(5)), 1).unwrap();
        assert_eq!((a.uid, a.gid), (5, 5));
    }

    #[test]
    fn chown_drops_setuid_of_every_non_directory() {
        for kind in [FileKind::File, FileKind::Fifo, FileKind::Socket, FileKind::CharDev, FileKind::BlockDev] {
            let mut a = Attr { kind, ..file(65534, 65533, 0o6555) };
            let user = Creds { uid: 65534, gid: 65533, groups: vec![65532] };
            apply(&user, &mut a, &SetAttr::owner(None, Some(65532)), 1).unwrap();
            assert_eq!(a.mode, 0o555, "{kind:?}");
        }
        let mut d = Attr { kind: FileKind::Dir, ..file(65534, 65533, 0o6555) };
        apply(&Creds::user(65534, 65533), &mut d, &SetAttr::owner(None, Some(65533)), 1).unwrap();
        assert_eq!(d.mode, 0o6555, "a directory keeps them");
    }

    #[test]
    fn setuid_goes_with_data_changes_by_the_unprivileged() {
        assert_eq!(drop_suid(0o6755), 0o755);
        assert_eq!(drop_suid(0o6745), 0o2745, "setgid without group execute stays");
        assert_eq!(drop_suid(0o1777), 0o1777);
        let bob = Creds::user(2000, 2);
        let mut a = file(1000, 100, 0o6777);
        apply(&bob, &mut a, &SetAttr::size(0), 1).unwrap();
        assert_eq!(a.mode, 0o777, "a truncate by a non-owner without privilege");
        let mut r = file(1000, 100, 0o6777);
        apply(&Creds::root(), &mut r, &SetAttr::size(0), 1).unwrap();
        assert_eq!(r.mode, 0o6777, "root keeps them");
        let kill = SetAttr { kill_suid: true, ..SetAttr::size(0) };
        apply(&Creds::root(), &mut r, &kill, 1).unwrap();
        assert_eq!(r.mode, 0o777, "unless acting for an unprivileged process");
        let mut ro = file(1000, 100, 0o4744);
        let only_kill = SetAttr { kill_suid: true, ..SetAttr::default() };
        assert_eq!(apply(&bob, &mut ro, &only_kill, 1), Err(Errno::EACCES), "only a writer may");
        assert_eq!(apply(&bob, &mut ro, &SetAttr::mode(0o744), 1), Err(Errno::EPERM), "chmod stays the owner's");
        assert_eq!(ro.mode, 0o4744);
    }

    #[test]
    fn the_no_change_id_is_invalid_for_anyone() {
        let mut a = file(1000, 100, 0o644);
        for set in [SetAttr::owner(Some(NO_ID), None), SetAttr::owner(None, Some(NO_ID)), SetAttr::owner(Some(5), Some(NO_ID))] {
            assert_eq!(apply(&Creds::root(), &mut a, &set, 1), Err(Errno::EINVAL));
            assert_eq!(apply(&Creds::user(2000, 2), &mut a, &set, 1), Err(Errno::EINVAL));
        }
        assert_eq!((a.uid, a.gid), (1000, 100));
    }

    #[test]
    fn truncate_needs_write_and_a_regular_file() {
        let mut a = file(1000, 100, 0o444);
        assert_eq!(apply(&Creds::user(1000, 100), &mut a, &SetAttr::size(10), 1), Err(Errno::EACCES));
        let mut d = Attr { kind: FileKind::Dir, ..file(0, 0, 0o777) };
        assert_eq!(apply(&Creds::root(), &mut d, &SetAttr::size(1), 1), Err(Errno::EISDIR));
        let mut w = file(1000, 100, 0o644);
        apply(&Creds::user(1000, 100), &mut w, &SetAttr::size(10), 3).unwrap();
        assert_eq!((w.size, w.mtime), (10, 3));
    }

    #[test]
    fn utimens_now_needs_write_explicit_needs_owner() {
        let mut a = file(1000, 100, 0o666);
        let bob = Creds::user(2000, 2);
        let now = SetAttr { mtime: Some(TimeSet::Now), ..SetAttr::default() };
        apply(&bob, &mut a, &now, 9).unwrap();
        assert_eq!(a.mtime, 9);
        let at = SetAttr { mtime: Some(TimeSet::At(1)), ..SetAttr::default() };
        assert_eq!(apply(&bob, &mut a, &at, 9), Err(Errno::EPERM));
        let mut ro = file(1000, 100, 0o644);
        assert_eq!(apply(&bob, &mut ro, &now, 9), Err(Errno::EACCES));
    }
}
