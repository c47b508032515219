//! Translations between Canopy's types and the kernel's: attributes, errnos,
//! times, and who is asking.

use crate::groups::{ProcessCache, Process};
use canopy_proto::attr::access;
use canopy_proto::{Attr, DirEntry, Errno, FileKind, TimeSet};
use fuser::{FileAttr, FileType, INodeNo, TimeOrNow};
use std::ffi::OsStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The errno a program is told for a Canopy error.
pub fn errno(e: Errno) -> fuser::Errno {
    if reaches_programs_as_eio(e) {
        fuser::Errno::from_i32(libc::EIO)
    } else {
        fuser::Errno::from_i32(e.code())
    }
}

/// Errors about reaching the cluster rather than about the file: the
/// transport's (refused, timed out, connection lost, a frame that would not
/// encode or decode) and Canopy's internal routing answers (EREMOTE, ENXIO). No file
/// system call documents them, and programs handle EIO as "the storage failed",
/// as it did.
pub fn reaches_programs_as_eio(e: Errno) -> bool {
    matches!(e, Errno::ECONNREFUSED | Errno::ETIMEDOUT | Errno::ENOTCONN | Errno::EPROTO | Errno::EMSGSIZE | Errno::EREMOTE | Errno::ENXIO)
}

/// A name or symlink target from the kernel as Canopy's UTF-8. Other bytes are
/// refused with `EILSEQ`, as UTF-8-only file systems refuse them (Canopy names
/// are strings end to end; nothing is stored under a lossy conversion).
pub fn utf8(name: &OsStr) -> Result<&str, fuser::Errno> {
    name.to_str().ok_or(fuser::Errno::from_i32(libc::EILSEQ))
}

pub fn io_errno(e: &std::io::Error) -> fuser::Errno {
    fuser::Errno::from_i32(e.raw_os_error().unwrap_or(libc::EIO))
}

pub fn time(ns: i64) -> SystemTime {
    if ns >= 0 {
        UNIX_EPOCH + Duration::from_nanos(ns as u64)
    } else {
        UNIX_EPOCH - Duration::from_nanos(ns.unsigned_abs())
    }
}

pub fn nanos(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_nanos() as i64,
        Err(e) => -(e.duration().as_nanos() as i64),
    }
}

pub fn time_set(t: TimeOrNow) -> TimeSet {
    match t {
        TimeOrNow::Now => TimeSet::Now,
        TimeOrNow::SpecificTime(t) => TimeSet::At(nanos(t)),
    }
}

pub fn file_type(kind: FileKind) -> FileType {
    match kind {
        FileKind::Dir => FileType::Directory,
        FileKind::File => FileType::RegularFile,
        FileKind::Symlink => FileType::Symlink,
        FileKind::Fifo => FileType::NamedPipe,
        FileKind::Socket => FileType::Socket,
        FileKind::CharDev => FileType::CharDevice,
        FileKind::BlockDev => FileType::BlockDevice,
    }
}

/// The kernel's mark on the open an execve(2) makes of its program
/// (`__FMODE_EXEC` in the open flags a FUSE OPEN carries). Only the kernel
/// sets it: open(2) and openat(2) clear it from a program's flags (since
/// Linux 4.13), openat2(2) refuses it.
const OPEN_FOR_EXEC: i32 = 0x20;

/// The access an open(2) with `flags` asks for, as R, W and X bits: read and/or
/// write from `O_ACCMODE`, and write for `O_TRUNC` (as the kernel's own check);
/// execute alone for a program execve(2) opens, which POSIX lets run without
/// read permission (mode 0711).
pub fn open_access(flags: i32) -> u32 {
    if flags & OPEN_FOR_EXEC != 0 {
        return access::X;
    }
    let mode = match flags & libc::O_ACCMODE {
        libc::O_RDONLY => access::R,
        libc::O_WRONLY => access::W,
        _ => access::R | access::W,
    };
    if flags & libc::O_TRUNC != 0 {
        mode | access::W
    } else {
        mode
    }
}

/// The kind mknod(2) asks for, from the file-type bits of its mode.
pub fn mknod_kind(mode: u32) -> Option<FileKind> {
    match mode & libc::S_IFMT {
        libc::S_IFREG | 0 => Some(FileKind::File),
        libc::S_IFIFO => Some(FileKind::Fifo),
        libc::S_IFSOCK => Some(FileKind::Socket),
        libc::S_IFCHR => Some(FileKind::CharDev),
        libc::S_IFBLK => Some(FileKind::BlockDev),
        _ => None,
    }
}

pub fn file_attr(a: &Attr) -> FileAttr {
    FileAttr {
        ino: INodeNo(a.ino),
        size: a.size,
        blocks: a.size.div_ceil(512),
        atime: time(a.atime),
        mtime: time(a.mtime),
        ctime: time(a.ctime),
        crtime: time(a.ctime),
        kind: file_type(a.kind),
        perm: (a.mode & 0o7777) as u16,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: a.rdev as u32,
        blksize: 4096,
        flags: 0,
    }
}

/// Attributes that say no more than a directory listing does (inode number and
/// kind): for a listed name the caller may not stat.
pub fn listed_only(e: &DirEntry) -> Attr {
    Attr { ino: e.ino, kind: e.kind, mode: 0, uid: 0, gid: 0, size: 0, nlink: 1, rdev: 0, atime: 0, mtime: 0, ctime: 0 }
}

/// What the mount knows of process `pid` (the thread that made a request)
/// running as `uid`:`gid`, through `cache`: its supplementary groups (FUSE
/// does not pass them) and capabilities, from /proc. Pid 0 (a process in a
/// pid namespace the mount cannot see): nothing.
pub fn process(cache: &ProcessCache, uid: u32, gid: u32, pid: u32) -> Process {
    cache.process(pid, uid, gid, std::time::Instant::now(), || status_of(pid))
}

fn status_of(pid: u32) -> Process {
    if pid == 0 {
        return Process::default();
    }
    let status = task_file(pid, "status", std::fs::read_to_string).unwrap_or_default();
    let mut process = Process::parse(&status);
    // Capabilities count only in the mount's own user namespace: any process
    // may make a namespace of its own and hold every capability in it, with
    // no right over the files of users it does not map.
    process.file_caps = process.file_caps && in_our_user_namespace(pid);
    process
}

fn in_our_user_namespace(pid: u32) -> bool {
    static OURS: std::sync::OnceLock<Option<std::path::PathBuf>> = std::sync::OnceLock::new();
    let ours = OURS.get_or_init(|| std::fs::read_link("/proc/self/ns/user").ok());
    let theirs = task_file(pid, "ns/user", std::fs::read_link);
    matches!((ours, theirs), (Some(a), Ok(b)) if *a == b)
}

/// Reads `name` under /proc for thread `pid` (the request's pid is the
/// calling thread's), else under its process's directory.
fn task_file<T>(pid: u32, name: &str, read: impl Fn(String) -> std::io::Result<T>) -> std::io::Result<T> {
    read(format!("/proc/{pid}/task/{pid}/{name}")).or_else(|_| read(format!("/proc/{pid}/{name}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_round_trip_both_sides_of_the_epoch() {
        for ns in [0i64, 1, 1_700_000_000_123_456_789, -1_500_000_000] {
            assert_eq!(nanos(time(ns)), ns);
        }
    }

    #[test]
    fn a_process_the_mount_cannot_see_has_no_groups_and_no_capabilities() {
        assert_eq!(process(&ProcessCache::default(), 0, 0, 0), Process::default());
    }

    #[test]
    fn names_must_be_utf8() {
        use std::os::unix::ffi::OsStrExt;
        assert_eq!(utf8(OsStr::new("caf\u{e9}")).unwrap(), "caf\u{e9}");
        assert_eq!(utf8(OsStr::from_bytes(b"caf\xe9")).unwrap_err().code(), libc::EILSEQ);
    }

    #[test]
    fn open_flags_to_access() {
        use access::{R, W, X};
        assert_eq!(open_access(libc::O_RDONLY), R);
        assert_eq!(open_access(libc::O_RDONLY | libc::O_LARGEFILE | OPEN_FOR_EXEC), X);
        assert_eq!(open_access(libc::O_WRONLY | libc::O_CREAT), W);
        assert_eq!(open_access(libc::O_RDWR | libc::O_APPEND), R | W);
        assert_eq!(open_access(libc::O_RDONLY | libc::O_TRUNC), R | W);
        assert_eq!(open_access(libc::O_WRONLY | libc::O_TRUNC | libc::O_CREAT), W);
    }

    #[test]
    fn mknod_kinds_and_the_internal_errno() {
        assert_eq!(mknod_kind(libc::S_IFIFO | 0o644), Some(FileKind::Fifo));
        assert_eq!(mknod_kind(libc::S_IFDIR | 0o755), None);
        assert_eq!(errno(Errno::EREMOTE).code(), libc::EIO);
        assert_eq!(errno(Errno::ENOENT).code(), libc::ENOENT);
    }

    #[test]
    fn transport_failures_are_eio_and_file_errors_pass_through() {
        for e in [Errno::ECONNREFUSED, Errno::ETIMEDOUT, Errno::ENOTCONN, Errno::EPROTO, Errno::EMSGSIZE, Errno::EREMOTE] {
            assert_eq!(errno(e).code(), libc::EIO, "{e:?}");
        }
        for e in [Errno::ENOENT, Errno::EACCES, Errno::EPERM, Errno::EEXIST, Errno::ENOTEMPTY, Errno::EIO, Errno::ESTALE, Errno::EAGAIN] {
            assert_eq!(errno(e).code(), e.code(), "{e:?}");
        }
    }
}
