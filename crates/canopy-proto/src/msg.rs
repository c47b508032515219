//! Requests and replies. One enum for every request a Canopy daemon accepts (metadata
//! servers and the lock service share the codec; each answers `ENOSYS` to what is not
//! its own), and one for every reply. The opcode on the wire is the variant's index
//! ([`Request::opcode`]); a frame whose opcode disagrees with its payload is rejected.

use crate::attr::{Attr, DirEntry, FileKind, SetAttr};
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
    /// Made by the creating client; names the back-end file once contents spill.
    pub fid: Fid,
    /// The contents, while the file is small. Bytes past the end of the vector and
    /// below `attr.size` read as zeros (a truncate that extends stores nothing).
    /// `None`: the contents are in back-end storage.
    pub inline: Option<Vec<u8>>,
}

/// What `create` makes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum NewKind {
    File { fid: Fid },
    Symlink(String),
    /// A FIFO, socket, or character or block device (mknod).
    Special { kind: FileKind, rdev: u64 },
}

/// The most bytes a file keeps inline, whatever `inline_max` a client asks for:
/// servers answer `Spill` to a write whose end would pass it (so no request can
/// make a server allocate more), and `ReadData` returns at most this many bytes
/// (1 MiB, well inside a frame).
pub const INLINE_LIMIT: u32 = 1 << 20;

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

/// How a data request names its file: by path on the path's primary, or by a
/// shared (hard-linked) inode on its home server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum FileRef {
    Path(String),
    Ino(u64),
}

/// Non-replicated attributes of a directory, kept on its primary server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirTimes {
    pub atime: i64,
    pub mtime: i64,
    pub ctime: i64,
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
        }
    }
}

/// A distributed transaction the lock service holds locks and a redo record for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxnInfo {
    pub txn: u64,
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

/// Per-server counters.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerStats {
    pub server: u32,
    /// RPCs received, by operation name.
    pub rpcs: Vec<(String, u64)>,
    pub dirs: u64,
    pub files: u64,
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
}

macro_rules! requests {
    ($($(#[$doc:meta])* $name:ident $({ $($field:ident : $ty:ty),* $(,)? })?,)*) => {
        #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
        pub enum Request { $($(#[$doc])* $name $({ $($field: $ty),* })?,)* }

        /// Names of every operation, indexed by opcode.
        pub const OP_NAMES: &[&str] = &[$(stringify!($name),)*];

        impl Request {
            /// The wire opcode: the variant's index in [`OP_NAMES`].
            pub fn opcode(&self) -> u16 {
                let mut i = 0u16;
                $(
                    #[allow(unused_variables)]
                    if let Request::$name { .. } = self { return i; }
                    i += 1;
                )*
                unreachable!("{i} variants")
            }

            pub fn name(&self) -> &'static str {
                OP_NAMES[self.opcode() as usize]
            }

            /// Whether a connection bound to one user (a user key) may send this.
            /// Those requests act on one object with the caller's rights, which
            /// the server checks in full. Everything else (transaction steps,
            /// recovery, fences, migration, fsck, the lock service) is internal
            /// and needs the cluster key: it either trusts its sender to have
            /// checked (a replica's step) or acts as root.
            pub fn user_may_send(&self) -> bool {
                matches!(
                    self,
                    Request::Ping
                        | Request::Stat { .. }
                        | Request::Create { .. }
                        | Request::Unlink { .. }
                        | Request::SetAttr { .. }
                        | Request::Readlink { .. }
                        | Request::Access { .. }
                        | Request::ReadDir { .. }
                        | Request::ReadData { .. }
                        | Request::WriteData { .. }
                        | Request::Spilled { .. }
                        | Request::Extend { .. }
                        | Request::Stats
                        | Request::Delegate { .. }
                )
            }
        }
    };
}

requests! {
    /// Liveness and identity check.
    Ping,
    /// Attributes of the object at `path` (a file on its primary, or a directory).
    Stat { path: String },
    /// Create a file, symlink or special file at `path`; `if_exists` says what
    /// to do if the name is taken.
    Create { path: String, mode: u32, kind: NewKind, if_exists: IfExists },
    /// Remove a file or symlink.
    Unlink { path: String },
    /// Change attributes of a file, or the times of a directory on its primary.
    SetAttr { path: String, set: SetAttr },
    Readlink { path: String },
    /// Check `mask` (R/W/X bits, 0 for existence) against the caller.
    Access { path: String, mask: u32 },
    /// A page of a directory: names strictly after `after`, at most `limit`.
    /// `with_dirs` includes subdirectories (asked of one server only).
    ReadDir { path: String, after: Option<String>, limit: u32, with_dirs: bool },
    /// Make the file at `path` share its inode for a new hard link (nlink + 1).
    LinkShare { path: String },
    /// Insert a hard link at `path` to the shared inode `ino` homed on `home`.
    LinkInsert { path: String, ino: u64, home: u32 },
    /// Operations on a shared inode on its home server.
    InodeStat { ino: u64 },
    InodeSetAttr { ino: u64, set: SetAttr },
    InodeLinkDelta { ino: u64, delta: i32 },
    /// Rename of a file within one server.
    RenameLocal { src: String, dst: String },
    /// Rename of a file across servers, on the source's primary: check, return the record.
    RenameOut { src: String, dst: String },
    /// ...on the destination's primary: check, replace, insert the record.
    RenameIn { src: String, dst: String, record: Record },
    /// ...on the source's primary: remove the source entry if it is still `ino`.
    RenameOutCommit { src: String, ino: u64 },
    /// Directory mutation applied on every server. `assign` is None on the primary
    /// (which allocates the id) and the primary's answer on the replicas.
    Mkdir { path: String, mode: u32, assign: Option<DirLookup> },
    Rmdir { path: String },
    /// Change a directory's mode or ownership (replicated lookup state).
    DirSetAttr { path: String, set: SetAttr },
    /// Rename a directory in the replicated state; with `check_only` nothing changes.
    RenameDir { src: String, dst: String, check_only: bool },
    /// Up to `limit` local objects below directory `root` whose primary changed.
    Migrate { root: String, limit: u32 },
    /// The directory at `path` on this server, if any (no permission checks): what
    /// recovery compares replicas against.
    DirProbe { path: String },
    /// What `path` holds here, as root and through any fence: recovery's view of a
    /// half-applied file rename.
    RecoveryStat { path: String },
    /// Make this server's directory state at `path` equal `want` (recovery).
    DirSync { path: String, want: Option<DirLookup> },
    /// Fence off single-RPC operations on `paths` and below for transaction `txn`
    /// (a non-monotonic directory mutation): they are answered EAGAIN until
    /// `Unfence`.
    Fence { txn: u64, paths: Vec<String> },
    Unfence { txn: u64 },
    /// Store objects moved here by a migration.
    Adopt { items: Vec<MovedItem> },
    /// Drop objects that were adopted elsewhere.
    Release { items: Vec<MovedItem> },
    /// Read up to `len` bytes (at most [`INLINE_LIMIT`]) of an inline file at
    /// `offset`: `Data`, or `Backend` when the contents are in back-end storage.
    /// Needs read permission on the file (root passes); every data request is
    /// checked against the file, like open(2) (the FUSE mount, which checks at
    /// open, sends them as root).
    ReadData { at: FileRef, offset: u64, len: u32 },
    /// Write to an inline file, if the result stays within `inline_max` bytes
    /// (never more than [`INLINE_LIMIT`]): `Attr`. `Backend` when the contents are already in back-end storage, and
    /// `Spill` when this write would make the file too big to stay inline (and
    /// always when `inline_max` is 0: a spill on demand). Needs write permission,
    /// as do `Spilled` and `Extend`. `kill_suid`: the writer
    /// may not keep setuid and setgid (see [`SetAttr::kill_suid`]); implied when
    /// the caller is not root.
    WriteData { at: FileRef, offset: u64, data: Vec<u8>, inline_max: u32, kill_suid: bool },
    /// The client copied the inline contents (`len` bytes with `digest`) to the
    /// back-end file: from now on the contents live there. `ESTALE` if the inline
    /// contents changed in the meantime (the client copies again).
    Spilled { at: FileRef, len: u64, digest: u64 },
    /// The client wrote back-end bytes up to `end`: size = max(size, end), and
    /// mtime and ctime are now. `kill_suid` as for `WriteData`.
    Extend { at: FileRef, end: u64, kill_suid: bool },
    /// Set a directory's mtime and ctime to now, on its primary: the effect of a
    /// name added or removed inside it (entries live on other servers).
    TouchDir { path: String },
    Stats,
    Fsck,
    /// Lock service: take `locks` for a transaction described by `intent`.
    Lock { locks: Vec<(String, LockMode)>, intent: Intent, lease_ms: u32, wait_ms: u32 },
    /// Lock service: extend a live transaction's lease (ESTALE if it expired and
    /// was handed to a recoverer, or is unknown; EPERM with another's ticket).
    Renew { txn: u64, ticket: u64, lease_ms: u32 },
    /// Lock service: release a transaction's locks and end its redo record
    /// (EPERM with another's ticket).
    Unlock { txn: u64, ticket: u64 },
    /// Lock service: the transactions in flight.
    ListTxns,
    /// Run a namespace operation here, as the caller (a user key's connection:
    /// as that user), with this server's own cluster-key client.
    Delegate { call: NsCall },
}

/// The successful answer to a request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Reply {
    Unit,
    Pong { server: u32, servers: u32 },
    Attr(Attr),
    /// The entry is a hard link; its inode lives on server `home`.
    Redirect { ino: u64, home: u32 },
    /// An unlink or rename dropped a name. `remote`: a link to a shared inode on
    /// another server, which the client must decrement. `freed`: the last name of a
    /// file whose contents are in back-end storage, which the client may delete.
    Dropped { remote: Option<(u64, u32)>, freed: Option<Fid> },
    Target(String),
    Entries { entries: Vec<DirEntry>, more: bool },
    Shared { ino: u64, home: u32 },
    Record(Record),
    Dir(DirLookup),
    Moved(Vec<Moved>),
    Stats(ServerStats),
    Fsck(FsckReport),
    /// Granted; `waited` if the grant had to wait for another transaction. The
    /// `ticket` (random) proves ownership to `Renew` and `Unlock`: a transaction
    /// id alone, which fences and listings show, is not enough.
    Locked { txn: u64, ticket: u64, waited: bool },
    /// Not granted: a transaction whose coordinator's lease ran out holds
    /// conflicting locks. The caller now owns it under the new id `txn` (it was
    /// `was`, the id its fences carry): it must repair `intent`, unlock `txn`, and
    /// ask again.
    Recover { txn: u64, ticket: u64, was: u64, intent: Intent },
    Probe(Option<DirLookup>),
    Txns(Vec<TxnInfo>),
    /// Inline file contents (shorter than asked at the end of the file).
    Data(Vec<u8>),
    /// The file's contents are in back-end storage under `fid`.
    Backend { fid: Fid, size: u64 },
    /// Copy these inline contents (`size` bytes long, the rest zeros) to the
    /// back-end file `fid`, then send `Spilled`.
    Spill { fid: Fid, data: Vec<u8>, size: u64 },
}
