//! Whether a file a batch commit carries is one its owner could have made.
//!
//! BatchFS (seed 002) accepts a private namespace's files if some legal
//! sequence of operations by the batch's owner yields them. For one new file
//! in a directory that sequence is: create it (write and search on the
//! directory), then chmod, chgrp, truncate or write, and utimens it. So the file
//! must be owned by the caller, its group one a chgrp by the caller may give
//! (or the directory's, which a create in a setgid directory gives), its mode
//! one a chmod by the owner may set, a single link (hard links are not
//! carried), and its kind one the caller may make (device nodes need root).

use crate::perm::{self, Owner};
use canopy_proto::attr::{S_ISGID, S_ISUID};
use canopy_proto::msg::Inode;
use canopy_proto::path::check_symlink_target;
use canopy_proto::{Creds, Errno, FileKind};

/// `Ok` if `creds` may make `inode` as a new entry of directory `dir`; else the
/// errno the operation that could not be done would have given.
pub fn check_new_file(creds: &Creds, dir: Owner, inode: &Inode) -> Result<(), Errno> {
    perm::require_dir_write(creds, dir)?;
    check_shape(inode)?;
    let a = &inode.attr;
    if creds.is_root() {
        return Ok(());
    }
    perm::require_may_make(creds, a.kind)?;
    if a.uid != creds.uid {
        return Err(Errno::EPERM);
    }
    let inherited = dir.mode & S_ISGID != 0 && a.gid == dir.gid;
    if !inherited && !creds.in_group(a.gid) {
        return Err(Errno::EPERM);
    }
    // chmod by a non-member of the group clears setgid rather than set it.
    if a.mode & S_ISGID != 0 && !creds.in_group(a.gid) {
        return Err(Errno::EPERM);
    }
    Ok(())
}

/// The checks that do not depend on who asks: a well-formed, singly linked
/// inode of a kind a create or mknod makes.
fn check_shape(inode: &Inode) -> Result<(), Errno> {
    let a = &inode.attr;
    if a.mode & !0o7777 != 0 || a.nlink != 1 {
        return Err(Errno::EINVAL);
    }
    match a.kind {
        FileKind::Dir => Err(Errno::EISDIR),
        FileKind::File => {
            let data = inode.data.as_ref().ok_or(Errno::EINVAL)?;
            let inline = data.inline.as_ref().map_or(0, |d| d.len() as u64);
            (inode.target.is_none() && inline <= a.size && a.rdev == 0).then_some(()).ok_or(Errno::EINVAL)
        }
        FileKind::Symlink => {
            let target = inode.target.as_deref().ok_or(Errno::EINVAL)?;
            check_symlink_target(target)?;
            (inode.data.is_none() && a.size == target.len() as u64 && a.mode & (S_ISUID | S_ISGID) == 0).then_some(()).ok_or(Errno::EINVAL)
        }
        _ => (inode.data.is_none() && inode.target.is_none() && a.size == 0).then_some(()).ok_or(Errno::EINVAL),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use canopy_proto::msg::FileData;
    use canopy_proto::{Attr, Fid};

    fn file(uid: u32, gid: u32, mode: u32) -> Inode {
        let attr = Attr { ino: 0, kind: FileKind::File, mode, uid, gid, size: 3, nlink: 1, rdev: 0, atime: 1, mtime: 2, ctime: 3 };
        Inode { attr, target: None, data: Some(FileData { fid: Fid(9), inline: Some(b"abc".to_vec()) }) }
    }

    const DIR: Owner = Owner { uid: 1000, gid: 100, mode: 0o755 };

    #[test]
    fn the_owner_may_make_what_a_create_then_chmod_and_chgrp_make() {
        let me = Creds { uid: 1000, gid: 100, groups: vec![200] };
        assert_eq!(check_new_file(&me, DIR, &file(1000, 100, 0o644)), Ok(()));
        assert_eq!(check_new_file(&me, DIR, &file(1000, 200, 0o2755)), Ok(()), "chgrp to a group of mine, then setgid");
        assert_eq!(check_new_file(&me, DIR, &file(1000, 100, 0o4700)), Ok(()), "setuid on my own file");
        assert_eq!(check_new_file(&me, DIR, &file(1001, 100, 0o644)), Err(Errno::EPERM), "a file given away");
        assert_eq!(check_new_file(&me, DIR, &file(1000, 300, 0o644)), Err(Errno::EPERM), "a group I am not in");
        let setgid_dir = Owner { uid: 0, gid: 300, mode: 0o2777 };
        assert_eq!(check_new_file(&me, setgid_dir, &file(1000, 300, 0o644)), Ok(()), "inherited from a setgid directory");
        assert_eq!(check_new_file(&me, setgid_dir, &file(1000, 300, 0o2644)), Err(Errno::EPERM), "setgid for a group I am not in");
    }

    #[test]
    fn the_directory_must_be_writable_and_the_inode_well_formed() {
        let other = Creds { uid: 1001, gid: 101, groups: vec![] };
        assert_eq!(check_new_file(&other, DIR, &file(1001, 101, 0o644)), Err(Errno::EACCES));
        let me = Creds::user(1000, 100);
        let mut linked = file(1000, 100, 0o644);
        linked.attr.nlink = 2;
        assert_eq!(check_new_file(&me, DIR, &linked), Err(Errno::EINVAL));
        let mut short = file(1000, 100, 0o644);
        short.attr.size = 1;
        assert_eq!(check_new_file(&me, DIR, &short), Err(Errno::EINVAL), "more inline bytes than the size");
        let mut dev = file(1000, 100, 0o644);
        (dev.attr.kind, dev.attr.size, dev.data) = (FileKind::CharDev, 0, None);
        assert_eq!(check_new_file(&me, DIR, &dev), Err(Errno::EPERM));
        assert_eq!(check_new_file(&Creds::root(), DIR, &dev), Ok(()));
        let mut link = file(1000, 100, 0o777);
        (link.attr.kind, link.attr.size, link.data, link.target) = (FileKind::Symlink, 2, None, Some("/x".into()));
        assert_eq!(check_new_file(&me, DIR, &link), Ok(()));
        link.attr.size = 5;
        assert_eq!(check_new_file(&me, DIR, &link), Err(Errno::EINVAL));
        let mut dir = file(1000, 100, 0o755);
        dir.attr.kind = FileKind::Dir;
        assert_eq!(check_new_file(&me, DIR, &dir), Err(Errno::EISDIR));
    }
}
