//! The values requests and replies carry: lookup state, records and inodes,
//! how a request names an entry, transaction intents, stats and fsck reports.

use crate::attr::{Attr, FileKind, SetAttr};
use crate::fid::Fid;
use serde::{Deserialize, Serialize};


/// The replicated directory lookup state of one directory: what path resolution
/// needs (ShardFS keeps it on every server).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirLookup {
    pub id: u64,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
}

/// What a file entry holds: its inode inline, or a reference to a shared inode that
/// lives on its home server (hard links).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Record {
    Inode(Inode),
    Linked { ino: u64, home: u32 },
}

impl Record {
    /// The inode number the entry names, inline or shared.
    pub fn ino(&self) -> u64 {
        match self {
            Record::Inode(i) => i.attr.ino,
            Record::Linked { ino, .. } => *ino,
        }
    }
}

/// A file, symlink or special file inode.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Inode {
    pub attr: Attr,
    /// The target of a symlink.
    pub target: Option<String>,
    /// A regular file's contents; `None` for other kinds.
    pub data: Option<FileData>,
}

/// Where a regular file's contents live (seed 001 keeps small files inside the
/// metadata; seed 003 keeps the rest on back-end storage under a FID).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileData {
    /// Issued by the server that made the file (`fid.rs`); names the back-end
    /// file once contents spill.
    pub fid: Fid,
    /// The contents, while the file is small. Bytes past the end of the vector and
    /// below `attr.size` read as zeros (a truncate that extends stores nothing).
    /// `None`: the contents are in back-end storage.
    pub inline: Option<Vec<u8>>,
}

/// What `create` makes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum NewKind {
    /// A regular file; its server issues its FID.
    File,
    Symlink(String),
    /// A FIFO, socket, or character or block device (mknod).
    Special { kind: FileKind, rdev: u64 },
}

/// The most bytes a file keeps inline, whatever `inline_max` a client asks for:
/// servers answer `Spill` to a write whose end would pass it (so no request can
/// make a server allocate more): 1 MiB, well inside a frame.
pub const INLINE_LIMIT: u32 = 1 << 20;

/// The most bytes one `ReadData` answers (a longer read is answered in part:
/// fewer bytes than asked and short of the end of the file; the client asks
/// for the rest). As much as the kernel reads at once through a mount, and
/// small enough that replies a peer asks for and does not read cost little
/// to hold (`Request::reply_bound`).
pub const READ_REPLY_MAX: u32 = 128 << 10;

/// The most bytes one directory entry takes in a listing's reply (a name of
/// at most 255 bytes, its inode number and kind, and their lengths).
pub(super) const DIR_ENTRY_MAX: usize = 255 + 16;

/// What a `TouchDir` records of a directory's times.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum DirChange {
    /// A name was added to it or removed from it: its mtime and ctime.
    Names,
    /// It was renamed: its ctime (as ext4), for a mode whose rename steps run
    /// where its parents live rather than where its times are.
    Renamed,
}

/// What a create does when its name is already taken: open(2) with and without
/// `O_EXCL`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum IfExists {
    /// `EEXIST` (`O_EXCL`; also mknod and symlink).
    Fail,
    /// Answer the existing regular file, if the caller may open it as asked:
    /// `access` holds the R and W bits ([`crate::attr::access`]) the open wants
    /// (from `O_ACCMODE`, and W for `O_TRUNC`), checked as open(2) checks them
    /// (`EACCES`). An existing directory is `EISDIR`; a symlink or special file is
    /// `EEXIST` (a server neither follows nor opens those: the kernel does).
    Open { access: u32 },
}

/// How a request names an entry. By full path, which the server resolves,
/// checking search permission on every ancestor (ShardFS); or by the id of its
/// directory and its name, for a client that resolved the directory itself
/// (IndexFS's clients, from their lease cache). Either way the server checks the
/// caller's rights on what it finds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum At {
    Path(String),
    Entry { dir: u64, name: String },
    /// A directory by its id, on a server holding one of its partitions
    /// (IndexFS: its attributes live on its home, its entry elsewhere).
    Dir(u64),
}

impl From<String> for At {
    fn from(path: String) -> At {
        At::Path(path)
    }
}

impl From<&str> for At {
    fn from(path: &str) -> At {
        At::Path(path.to_string())
    }
}

impl std::fmt::Display for At {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            At::Path(p) => f.write_str(p),
            At::Entry { dir, name } => write!(f, "{name:?} in directory {dir:#x}"),
            At::Dir(id) => write!(f, "directory {id:#x}"),
        }
    }
}

/// How a data request names its file: as [`At`] does (`Path`, `Entry`), or by a
/// shared (hard-linked) inode on its home server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum FileRef {
    Path(String),
    Ino(u64),
    Entry { dir: u64, name: String },
}

/// Non-replicated attributes of a directory, kept on its primary server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirTimes {
    pub atime: i64,
    pub mtime: i64,
    pub ctime: i64,
}

/// A directory rename's step on one server (`Request::RenameDir`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RenameDirStep {
    /// Fence both names for transaction `txn` (as `Fence` does, waiting for
    /// the operations already admitted below them), then check the rename
    /// could be applied here; nothing changes. Answers `RenameChecked`, or
    /// `RenameOfFile` from the primary of a source that is a file (the
    /// client sends this step before it knows what the source is).
    Check { txn: u64 },
    /// Apply it. `times`: the moved directory's times, which the
    /// destination's primary keeps from now on and the source's drops (none
    /// from recovery, whose migration moves them; none in a coordinator's
    /// undo, sent with the names swapped, where the source's primary takes
    /// back what it parked). `unfence`: lift that transaction's fences here
    /// once applied, if nothing below the directory here is left to migrate.
    /// `txn`: the transaction applying (or undoing) it, whose fence must
    /// still be up here and which must not be revoked here (else `ESTALE`:
    /// recovery has taken the transaction over); the source's primary parks
    /// the times it drops for it until the transaction ends here (it applies
    /// before the commit point answers). Answers `RenameChecked` (its `times`
    /// none).
    Apply { times: Option<DirTimes>, unfence: Option<u64>, txn: Option<u64> },
    /// Recovery's undo of transaction `txn`'s apply (sent with the names
    /// swapped): as a coordinator's undo (`Apply` with no times and no
    /// unfence, where the source's primary takes back what `txn` parked),
    /// but accepted once `txn` is revoked; refused `ESTALE` once its fence
    /// here is down.
    Undo { txn: u64 },
    /// Recovery's roll forward of transaction `txn`'s apply: as `Apply` with
    /// no times (its migration moves them), no unfence and nothing parked,
    /// accepted once `txn` is revoked; refused `ESTALE` once its fence here
    /// is down, so a dead recoverer's apply that arrives after the
    /// transaction ended moves nothing.
    Redo { txn: u64 },
}

/// An object moved between servers when a directory rename changes primaries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum MovedItem {
    File { parent: u64, name: String, record: Record },
    DirTimes { id: u64, times: DirTimes },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Moved {
    pub target: u32,
    pub item: MovedItem,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum LockMode {
    Read,
    Write,
}

/// What a distributed transaction does: recorded durably by the lock service
/// before its locks are granted, so whoever recovers it knows what to repair.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Intent {
    Mkdir { path: String },
    Rmdir { path: String },
    /// chmod/chown of a directory.
    DirSetAttr { path: String },
    Rename { src: String, dst: String },
    Link { src: String, dst: String },
    /// A single-RPC operation's pessimistic retry: reads only, nothing to repair.
    Retry { path: String },
    /// A directory rename onto the empty directory `replaced` (its id), which
    /// it seals and, once committed, drops: what recovery must finish or undo
    /// for it, which `dst` no longer names after the commit point. (IndexFS.)
    RenameOver { src: String, dst: String, replaced: u64 },
}

impl Intent {
    /// The paths it names, which whoever recovers it parses.
    pub fn paths(&self) -> Vec<&str> {
        match self {
            Intent::Mkdir { path } | Intent::Rmdir { path } | Intent::DirSetAttr { path } | Intent::Retry { path } => vec![path],
            Intent::Rename { src, dst } | Intent::Link { src, dst } | Intent::RenameOver { src, dst, .. } => vec![src, dst],
        }
    }
}

impl std::fmt::Display for Intent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Intent::Mkdir { path } => write!(f, "mkdir {path}"),
            Intent::Rmdir { path } => write!(f, "rmdir {path}"),
            Intent::DirSetAttr { path } => write!(f, "setattr {path}"),
            Intent::Rename { src, dst } => write!(f, "rename {src} {dst}"),
            Intent::Link { src, dst } => write!(f, "link {src} {dst}"),
            Intent::Retry { path } => write!(f, "retry {path}"),
            Intent::RenameOver { src, dst, replaced } => write!(f, "rename {src} {dst} (replacing directory {replaced})"),
        }
    }
}

/// A distributed transaction the lock service holds locks and a redo record for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxnInfo {
    pub txn: u64,
    /// The id it was first granted under (its fences carry it); `txn` differs
    /// once a recoverer took it over.
    pub origin: u64,
    pub intent: Intent,
    pub locks: Vec<(String, LockMode)>,
    pub expires_in_ms: i64,
}

/// A namespace operation a server runs on its caller's behalf (`Request::Delegate`):
/// how a client holding only a user key gets transactions done, since their steps
/// need the cluster key. One variant per operation of the client API.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum NsCall {
    Mkdir { path: String, mode: u32 },
    Rmdir { path: String },
    Create { path: String, mode: u32, if_exists: IfExists },
    Mknod { path: String, mode: u32, kind: FileKind, rdev: u64 },
    Unlink { path: String },
    Stat { path: String },
    ReadDir { path: String, after: Option<String>, limit: u32 },
    Rename { src: String, dst: String },
    SetAttr { path: String, set: SetAttr },
    Symlink { target: String, path: String },
    Readlink { path: String },
    Link { src: String, dst: String },
    Access { path: String, mask: u32 },
    ReadData { path: String, offset: u64, len: u32 },
    WriteData { path: String, offset: u64, data: Vec<u8>, inline_max: u32, kill_suid: bool },
    Spilled { path: String, len: u64, digest: u64 },
    Extend { path: String, end: u64, kill_suid: bool },
}

impl NsCall {
    /// The path the call is routed by (the first it names).
    pub fn path(&self) -> &str {
        match self {
            NsCall::Mkdir { path, .. }
            | NsCall::Rmdir { path }
            | NsCall::Create { path, .. }
            | NsCall::Mknod { path, .. }
            | NsCall::Unlink { path }
            | NsCall::Stat { path }
            | NsCall::ReadDir { path, .. }
            | NsCall::SetAttr { path, .. }
            | NsCall::Symlink { path, .. }
            | NsCall::Readlink { path }
            | NsCall::Access { path, .. }
            | NsCall::ReadData { path, .. }
            | NsCall::WriteData { path, .. }
            | NsCall::Spilled { path, .. }
            | NsCall::Extend { path, .. } => path,
            NsCall::Rename { src, .. } | NsCall::Link { src, .. } => src,
        }
    }
}

/// A change of a replica group's voting members (`Request::GroupChange`).
/// Each is idempotent: adding a voter, or removing a non-member, again
/// changes nothing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum GroupChange {
    /// Member `id`, listening at `addr`, catches up (from a snapshot if the
    /// log it needs was purged) to within the group's replication lag
    /// threshold, then votes.
    Add { id: u64, addr: String },
    /// Member `id` no longer votes nor receives the log.
    Remove { id: u64 },
}

/// Longest member address a group change may name.
pub const MAX_MEMBER_ADDR: usize = 256;

impl GroupChange {
    /// Whether the change is well formed: a member id is never 0, an address
    /// never empty nor longer than [`MAX_MEMBER_ADDR`].
    pub fn valid(&self) -> bool {
        match self {
            GroupChange::Add { id, addr } => *id != 0 && !addr.is_empty() && addr.len() <= MAX_MEMBER_ADDR,
            GroupChange::Remove { id } => *id != 0,
        }
    }
}

/// One member's view of its replica group (`Request::GroupStatus`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupInfo {
    /// This member's id.
    pub member: u64,
    /// The member it believes leads, and the term.
    pub leader: Option<u64>,
    pub term: u64,
    /// The last entry of its log, and the last it applied.
    pub last_log: u64,
    pub applied: u64,
    /// Voting members and learners: id and address.
    pub voters: Vec<(u64, String)>,
    pub learners: Vec<(u64, String)>,
    /// On a leader: each member's last entry known to match its own.
    pub matched: Vec<(u64, Option<u64>)>,
    /// Times this member began to lead, and proposals it gave up on
    /// because it stopped leading.
    pub terms_led: u64,
    pub deposed: u64,
}

/// Per-server counters.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerStats {
    pub server: u32,
    /// RPCs received, by operation name.
    pub rpcs: Vec<(String, u64)>,
    pub dirs: u64,
    pub files: u64,
    /// The mode's own counters (IndexFS: lease waits and their total ms).
    pub counters: Vec<(String, u64)>,
}

impl ServerStats {
    /// The mode's counter `name` summed over every server (0 where a mode
    /// has none).
    pub fn total(stats: &[ServerStats], name: &str) -> u64 {
        stats.iter().flat_map(|s| &s.counters).filter(|(c, _)| c == name).map(|(_, n)| n).sum()
    }
}

/// One server's view for `canopy fsck`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FsckReport {
    pub server: u32,
    /// Digest of the replicated directory lookup state (equal on every server).
    pub dir_digest: u64,
    pub dirs: u64,
    pub files: u64,
    /// Problems found locally, worded for a person.
    pub problems: Vec<String>,
    /// Entries referring to shared inodes: (ino, home server).
    pub links: Vec<(u64, u32)>,
    /// Shared inodes homed here: (ino, nlink, inline entries referring to it here).
    pub inodes: Vec<(u64, u32)>,
    /// Partitioned directories (IndexFS): the ids the subdirectory entries
    /// held here name, and the directories whose home partition is here (the
    /// root's excepted), for the check that each has exactly one name.
    pub dir_names: Vec<u64>,
    pub dir_homes: Vec<u64>,
}
