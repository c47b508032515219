//! Object attributes as clients see them.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum FileKind {
    Dir,
    /// A regular file.
    File,
    Symlink,
    /// Special files (mknod): metadata only, no contents.
    Fifo,
    Socket,
    CharDev,
    BlockDev,
}

impl FileKind {
    /// Special files carry a device number and no data.
    pub fn is_special(self) -> bool {
        matches!(self, FileKind::Fifo | FileKind::Socket | FileKind::CharDev | FileKind::BlockDev)
    }
}

/// The attributes `stat` returns. Times are nanoseconds since the Unix epoch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attr {
    pub ino: u64,
    pub kind: FileKind,
    /// Permission bits including setuid, setgid and sticky (`0o7777`).
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    pub nlink: u32,
    /// The device number of a character or block special file (0 otherwise).
    pub rdev: u64,
    pub atime: i64,
    pub mtime: i64,
    pub ctime: i64,
}

/// One name in a directory listing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirEntry {
    pub name: String,
    pub ino: u64,
    pub kind: FileKind,
}

/// How `utimens` sets a timestamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TimeSet {
    /// The server's clock (needs only write permission).
    Now,
    /// An explicit time in nanoseconds (needs ownership).
    At(i64),
}

/// A setattr request: every `Some` field is changed, atomically.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetAttr {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<TimeSet>,
    pub mtime: Option<TimeSet>,
    /// Clear setuid, and setgid if group-executable, as a data change by a process
    /// without the privilege to keep them does (Linux: `CAP_FSETID`). A size
    /// change by a caller other than root implies it; a client acting as root for
    /// an unprivileged process (the FUSE mount's ftruncate of an open file) sets
    /// it. Needs write permission; regular files only.
    pub kill_suid: bool,
}

impl SetAttr {
    pub fn mode(mode: u32) -> SetAttr {
        SetAttr { mode: Some(mode), ..SetAttr::default() }
    }

    pub fn owner(uid: Option<u32>, gid: Option<u32>) -> SetAttr {
        SetAttr { uid, gid, ..SetAttr::default() }
    }

    pub fn size(size: u64) -> SetAttr {
        SetAttr { size: Some(size), ..SetAttr::default() }
    }

    /// True when the change touches directory lookup state (mode or ownership),
    /// which ShardFS replicates on every server.
    pub fn touches_lookup_state(&self) -> bool {
        self.mode.is_some() || self.uid.is_some() || self.gid.is_some()
    }
}

/// Permission bit masks used by `access` and the permission checks.
pub mod access {
    pub const R: u32 = 4;
    pub const W: u32 = 2;
    pub const X: u32 = 1;
    /// `F_OK`: existence only.
    pub const F: u32 = 0;
}

pub const S_ISUID: u32 = 0o4000;
pub const S_ISGID: u32 = 0o2000;
pub const S_ISVTX: u32 = 0o1000;
pub const PERM_MASK: u32 = 0o7777;
