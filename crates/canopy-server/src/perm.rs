//! POSIX permission checks, pure functions of the caller and an object's owner and
//! mode. Root may read and write anything, and search/execute anything that has
//! an execute bit set for someone (or is a directory).

use canopy_proto::attr::{access, S_ISVTX};
use canopy_proto::msg::DirLookup;
use canopy_proto::{Attr, Creds, Errno};

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

/// The sticky-bit rule: in a sticky directory only root, the directory's owner or
/// the entry's owner may remove or rename the entry (`EPERM` otherwise).
pub fn check_sticky(creds: &Creds, dir: Owner, entry_uid: u32) -> Result<(), Errno> {
    if dir.mode & S_ISVTX == 0 || creds.is_root() || creds.uid == dir.uid || creds.uid == entry_uid {
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
    fn sticky_rules() {
        let dir = Owner { uid: 0, gid: 0, mode: 0o1777 };
        let bob = Creds::user(2000, 1);
        assert_eq!(check_sticky(&bob, dir, ALICE), Err(Errno::EPERM));
        assert_eq!(check_sticky(&bob, dir, 2000), Ok(()));
        assert_eq!(check_sticky(&Creds::root(), dir, ALICE), Ok(()));
        let plain = Owner { mode: 0o777, ..dir };
        assert_eq!(check_sticky(&bob, plain, ALICE), Ok(()));
    }
}
