//! POSIX permission checks, pure functions of the caller and an object's owner and
//! mode. Root may read and write anything, and search/execute anything that has
//! an execute bit set for someone (or is a directory).

use canopy_proto::attr::{access, S_ISGID, S_ISUID, S_ISVTX};
use canopy_proto::msg::DirLookup;
use canopy_proto::{Attr, Creds, Errno, FileKind};

/// The owner, group and mode that permission checks need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner {
    pub uid: u32,
    pub gid: u32,
    pub mode: u32,
}

impl Owner {
    pub fn of_attr(a: &Attr) -> Owner {
        Owner { uid: a.uid, gid: a.gid, mode: a.mode }
    }

    pub fn of_dir(l: &DirLookup) -> Owner {
        Owner { uid: l.uid, gid: l.gid, mode: l.mode }
    }
}

/// True if `creds` may do everything in `want` (R/W/X bits) to the object.
pub fn allows(creds: &Creds, obj: Owner, is_dir: bool, want: u32) -> bool {
    if creds.is_root() {
        let needs_x = want & access::X != 0;
        return !needs_x || is_dir || obj.mode & 0o111 != 0;
    }
    let class = if creds.uid == obj.uid {
        (obj.mode >> 6) & 7
    } else if creds.in_group(obj.gid) {
        (obj.mode >> 3) & 7
    } else {
        obj.mode & 7
    };
    class & want == want
}

/// `EACCES` unless `allows`.
pub fn require(creds: &Creds, obj: Owner, is_dir: bool, want: u32) -> Result<(), Errno> {
    if allows(creds, obj, is_dir, want) {
        Ok(())
    } else {
        Err(Errno::EACCES)
    }
}

/// Write and search on a directory, as creating or removing a name in it needs.
pub fn require_dir_write(creds: &Creds, dir: Owner) -> Result<(), Errno> {
    require(creds, dir, true, access::W | access::X)
}

/// Whether an open with `O_CREAT` but not `O_EXCL` may have the existing object
/// `attr`: a regular file, if the caller may read and/or write it as `want` (its R
/// and W bits) asks, as open(2) checks (`EACCES`). A directory is `EISDIR` (open(2)
/// refuses `O_CREAT` on one); anything else is `EEXIST`, as for an exclusive
/// create: servers do not follow symlinks or open special files.
pub fn check_open_existing(creds: &Creds, attr: &Attr, want: u32) -> Result<(), Errno> {
    match attr.kind {
        FileKind::File => require(creds, Owner::of_attr(attr), false, want & (access::R | access::W)),
        FileKind::Dir => Err(Errno::EISDIR),
        _ => Err(Errno::EEXIST),
    }
}

/// The sticky-bit rule: in a sticky directory only root, the directory's owner or
/// the entry's owner may remove or rename the entry (`EPERM` otherwise).
pub fn check_sticky(creds: &Creds, dir: Owner, entry_uid: u32) -> Result<(), Errno> {
    if dir.mode & S_ISVTX == 0 || creds.is_root() || creds.uid == dir.uid || creds.uid == entry_uid {
        Ok(())
    } else {
        Err(Errno::EPERM)
    }
}

/// Device nodes need root (`CAP_MKNOD`), as mknod(2) on Linux (`EPERM`);
/// FIFOs, sockets and everything else anyone may make.
pub fn require_may_make(creds: &Creds, kind: FileKind) -> Result<(), Errno> {
    if matches!(kind, FileKind::CharDev | FileKind::BlockDev) && !creds.is_root() {
        return Err(Errno::EPERM);
    }
    Ok(())
}

/// Whether `creds` may give the object `attr` another name: Linux's
/// `protected_hardlinks` (on by default), which a mount meets in the kernel
/// and every other client at the servers. The owner and root may; anyone
/// else only a regular file that is neither setuid nor executable-setgid and
/// that they may both read and write (`EPERM` otherwise).
pub fn check_hardlink(creds: &Creds, attr: &Attr) -> Result<(), Errno> {
    if creds.is_root() || creds.uid == attr.uid {
        return Ok(());
    }
    let executable_setgid = attr.mode & (S_ISGID | 0o010) == (S_ISGID | 0o010);
    let safe = attr.kind == FileKind::File && attr.mode & S_ISUID == 0 && !executable_setgid;
    if safe && allows(creds, Owner::of_attr(attr), false, access::R | access::W) {
        Ok(())
    } else {
        Err(Errno::EPERM)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use access::{R, W, X};

    const ALICE: u32 = 1000;
    const STAFF: u32 = 50;

    fn owned(mode: u32) -> Owner {
        Owner { uid: ALICE, gid: STAFF, mode }
    }

    #[test]
    fn owner_group_other_classes() {
        let alice = Creds::user(ALICE, 1);
        let staff = Creds { uid: 2000, gid: 1, groups: vec![STAFF] };
        let other = Creds::user(3000, 3);
        let obj = owned(0o640);
        assert!(allows(&alice, obj, false, R | W));
        assert!(allows(&staff, obj, false, R));
        assert!(!allows(&staff, obj, false, W));
        assert!(!allows(&other, obj, false, R));
        // The owner class applies even when it grants less than the group class.
        assert!(!allows(&alice, owned(0o070), false, R));
    }

    #[test]
    fn root_bypasses_rw_but_needs_some_x_on_files() {
        let root = Creds::root();
        assert!(allows(&root, owned(0), false, R | W));
        assert!(!allows(&root, owned(0o644), false, X));
        assert!(allows(&root, owned(0o100), false, X));
        assert!(allows(&root, owned(0), true, X));
    }

    #[test]
    fn opening_an_existing_file_checks_what_the_open_asks_for() {
        let attr = |kind, mode| Attr { ino: 2, kind, mode, uid: ALICE, gid: STAFF, size: 0, nlink: 1, rdev: 0, atime: 0, mtime: 0, ctime: 0 };
        let (alice, bob) = (Creds::user(ALICE, 1), Creds::user(2000, 2));
        let private = attr(FileKind::File, 0o600);
        assert_eq!(check_open_existing(&alice, &private, R | W), Ok(()));
        assert_eq!(check_open_existing(&bob, &private, R), Err(Errno::EACCES));
        assert_eq!(check_open_existing(&bob, &private, W), Err(Errno::EACCES));
        let readable = attr(FileKind::File, 0o644);
        assert_eq!(check_open_existing(&bob, &readable, R), Ok(()));
        assert_eq!(check_open_existing(&bob, &readable, R | W), Err(Errno::EACCES));
        assert_eq!(check_open_existing(&bob, &readable, R | X), Ok(()), "open never asks for execute");
        assert_eq!(check_open_existing(&Creds::root(), &private, R | W), Ok(()));
        assert_eq!(check_open_existing(&alice, &attr(FileKind::Dir, 0o777), R), Err(Errno::EISDIR));
        assert_eq!(check_open_existing(&alice, &attr(FileKind::Fifo, 0o666), R), Err(Errno::EEXIST));
    }

    #[test]
    fn sticky_rules() {
        let dir = Owner { uid: 0, gid: 0, mode: 0o1777 };
        let bob = Creds::user(2000, 1);
        assert_eq!(check_sticky(&bob, dir, ALICE), Err(Errno::EPERM));
        assert_eq!(check_sticky(&bob, dir, 2000), Ok(()));
        assert_eq!(check_sticky(&Creds::root(), dir, ALICE), Ok(()));
        let plain = Owner { mode: 0o777, ..dir };
        assert_eq!(check_sticky(&bob, plain, ALICE), Ok(()));
    }

    #[test]
    fn device_nodes_need_root() {
        let alice = Creds::user(ALICE, 1);
        for kind in [FileKind::CharDev, FileKind::BlockDev] {
            assert_eq!(require_may_make(&alice, kind), Err(Errno::EPERM));
            assert_eq!(require_may_make(&Creds::root(), kind), Ok(()));
        }
        for kind in [FileKind::Fifo, FileKind::Socket, FileKind::File, FileKind::Symlink] {
            assert_eq!(require_may_make(&alice, kind), Ok(()));
        }
    }

    #[test]
    fn hard_links_need_ownership_or_read_and_write() {
        let file = |mode: u32| Attr { ino: 9, kind: FileKind::File, mode, uid: ALICE, gid: STAFF, size: 0, nlink: 1, rdev: 0, atime: 0, mtime: 0, ctime: 0 };
        let bob = Creds::user(2000, 2);
        assert_eq!(check_hardlink(&Creds::user(ALICE, 1), &file(0o600)), Ok(()), "the owner");
        assert_eq!(check_hardlink(&Creds::root(), &file(0o000)), Ok(()), "root");
        assert_eq!(check_hardlink(&bob, &file(0o600)), Err(Errno::EPERM), "another user's private file");
        assert_eq!(check_hardlink(&bob, &file(0o644)), Err(Errno::EPERM), "read alone is not enough");
        assert_eq!(check_hardlink(&bob, &file(0o666)), Ok(()), "read and write is");
        assert_eq!(check_hardlink(&bob, &file(0o4666)), Err(Errno::EPERM), "never a setuid file");
        assert_eq!(check_hardlink(&bob, &file(0o2676)), Err(Errno::EPERM), "nor an executable setgid one");
        assert_eq!(check_hardlink(&bob, &file(0o2666)), Ok(()), "setgid without group execute is no privilege");
        let fifo = Attr { kind: FileKind::Fifo, ..file(0o666) };
        assert_eq!(check_hardlink(&bob, &fifo), Err(Errno::EPERM), "special files only their owner's");
    }
}
