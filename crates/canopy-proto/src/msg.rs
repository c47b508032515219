//! Requests and replies. One enum for every request a Canopy daemon accepts (metadata
//! servers and the lock service share the codec; each answers `ENOSYS` to what is not
//! its own), and one for every reply.
//!
//! Wire stability: every request has an explicit opcode, grouped by family —
//! `0x00xx` generic (file operations every mode serves, data, stats, delegation),
//! `0x01xx` ShardFS (replicated directory transactions, fences, migration,
//! recovery), `0x02xx` the lock service; `0x03xx` is kept for IndexFS, `0x04xx` for
//! Giraffa, `0x05xx` for BatchFS. A frame whose opcode disagrees with its payload
//! is rejected. The payload is postcard, whose enum tag is the variant's position,
//! so both enums are append-only: a new request or reply goes at the end of its
//! enum, never between others, and no existing opcode changes. `tests` below pins
//! both (the opcode table and every reply's tag) and fails on any such change.

use crate::attr::{Attr, DirEntry, FileKind, SetAttr};
use crate::fid::Fid;
use crate::Errno;
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
const DIR_ENTRY_MAX: usize = 255 + 16;

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

macro_rules! requests {
    ($($(#[$doc:meta])* $name:ident $({ $($field:ident : $ty:ty),* $(,)? })? = $op:literal,)*) => {
        #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
        pub enum Request { $($(#[$doc])* $name $({ $($field: $ty),* })?,)* }

        /// Every request's name and wire opcode, in declaration order (which is
        /// also the payload's variant tag: see the module doc).
        pub const OPCODES: &[(&str, u16)] = &[$((stringify!($name), $op),)*];

        impl Request {
            /// The wire opcode, fixed per request (see [`OPCODES`]).
            pub fn opcode(&self) -> u16 {
                match self { $(Request::$name { .. } => $op,)* }
            }

            /// The request's position in [`OPCODES`], for dense per-request tables.
            pub fn index(&self) -> usize {
                let op = self.opcode();
                OPCODES.iter().position(|(_, o)| *o == op).unwrap_or(0)
            }

            pub fn name(&self) -> &'static str {
                OPCODES[self.index()].0
            }
        }
    };
}

/// What a small reply takes at most: attributes, a unit, an errno, a lock
/// grant, a symlink's target.
const SMALL_REPLY: usize = 8 << 10;

impl NsCall {
    /// As [`Request::reply_bound`], for a call a server runs for a user.
    pub fn reply_bound(&self) -> usize {
        match self {
            NsCall::ReadData { len, .. } => SMALL_REPLY + (*len).min(READ_REPLY_MAX) as usize,
            NsCall::WriteData { .. } => SMALL_REPLY + INLINE_LIMIT as usize,
            NsCall::ReadDir { limit, .. } => SMALL_REPLY + (*limit).min(crate::msg::MAX_PAGE) as usize * DIR_ENTRY_MAX,
            _ => SMALL_REPLY,
        }
    }
}

/// The most names one readdir page answers.
pub const MAX_PAGE: u32 = 4096;

impl Request {
    /// The most bytes this request's reply can take on the wire: an upper
    /// bound, not an estimate, so a daemon can bound what the replies of one
    /// connection, and of all, make it hold before it has worked them out
    /// (`canopy-rpc/src/server.rs`). Requests whose reply holds a listing or
    /// contents count as large as their limit allows; anything not named
    /// here, as large as a frame.
    pub fn reply_bound(&self) -> usize {
        match self {
            Request::ReadData { len, .. } => SMALL_REPLY + (*len).min(READ_REPLY_MAX) as usize,
            // `Spill` carries the inline contents; a file's old record moves with `RenameOut`.
            Request::WriteData { .. } | Request::RenameOut { .. } => SMALL_REPLY + INLINE_LIMIT as usize,
            Request::ReadDir { limit, .. } | Request::IxReadDir { limit, .. } => SMALL_REPLY + (*limit).min(MAX_PAGE) as usize * DIR_ENTRY_MAX,
            Request::Delegate { call } => call.reply_bound(),
            Request::GfVouched { inner, .. } => postcard::from_bytes::<Request>(inner).map_or(SMALL_REPLY, |r| r.reply_bound().min(crate::frame::MAX_FRAME)),
            Request::Ping
            | Request::Stat { .. }
            | Request::Create { .. }
            | Request::Unlink { .. }
            | Request::SetAttr { .. }
            | Request::Readlink { .. }
            | Request::Access { .. }
            | Request::TouchDir { .. }
            | Request::LinkShare { .. }
            | Request::LinkInsert { .. }
            | Request::InodeStat { .. }
            | Request::InodeSetAttr { .. }
            | Request::InodeLinkDelta { .. }
            | Request::LinkSettle { .. }
            | Request::Spilled { .. }
            | Request::Extend { .. }
            | Request::RenameLocal { .. }
            | Request::RenameIn { .. }
            | Request::RenameOutCommit { .. }
            | Request::RecoveryStat { .. }
            | Request::Mkdir { .. }
            | Request::Rmdir { .. }
            | Request::DirSetAttr { .. }
            | Request::RenameDir { .. }
            | Request::DirSync { .. }
            | Request::Fence { .. }
            | Request::Unfence { .. }
            | Request::Adopt { .. }
            | Request::Release { .. }
            | Request::ClearFences { .. }
            | Request::Revoke { .. }
            | Request::Lock { .. }
            | Request::Renew { .. }
            | Request::Unlock { .. }
            | Request::Amend { .. }
            | Request::IxLookup { .. }
            | Request::IxMkdir { .. }
            | Request::IxMkHeader { .. }
            | Request::IxSeal { .. }
            | Request::IxRmdir { .. }
            | Request::IxDropHeader { .. }
            | Request::IxDirSetAttr { .. }
            | Request::IxRenameDir { .. }
            | Request::IxRenameDirIn { .. }
            | Request::IxRenameDirCommit { .. }
            | Request::GfProof { .. }
            | Request::GfMkdir { .. }
            | Request::GfRmdirBegin { .. }
            | Request::GfEmpty { .. }
            | Request::GfRmdirEnd { .. }
            | Request::GfDirSetAttr { .. }
            | Request::GfPutRows { .. }
            | Request::GfDeleteRows { .. }
            | Request::GfSetSubdirs { .. }
            | Request::BatchOpen { .. }
            | Request::BatchStage { .. }
            | Request::BatchClose { .. } => SMALL_REPLY,
            _ => crate::frame::MAX_FRAME,
        }
    }

    /// Whether a connection bound to one user (a user key) may send this. Those
    /// requests act on one object with the caller's rights, which the server
    /// checks in full. Everything else (transaction steps, recovery, fences,
    /// migration, fsck, the lock service) is internal and needs the cluster key:
    /// it either trusts its sender to have checked (a replica's step) or acts as
    /// root.
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

/// The name of the request with wire opcode `op`, if there is one.
pub fn op_name(op: u16) -> Option<&'static str> {
    OPCODES.iter().find(|(_, o)| *o == op).map(|(n, _)| *n)
}

requests! {
    /// Liveness and identity check.
    Ping = 0x0001,
    /// Attributes of the object at `path` (a file on its primary, or a directory).
    Stat { at: At } = 0x0002,
    /// Create a file, symlink or special file at `path`; `if_exists` says what
    /// to do if the name is taken.
    Create { at: At, mode: u32, kind: NewKind, if_exists: IfExists } = 0x0003,
    /// Remove a file or symlink.
    Unlink { at: At } = 0x0004,
    /// Change attributes of a file, or the times of a directory on its primary.
    SetAttr { at: At, set: SetAttr } = 0x0005,
    Readlink { at: At } = 0x0006,
    /// Check `mask` (R/W/X bits, 0 for existence) against the caller.
    Access { at: At, mask: u32 } = 0x0007,
    /// A page of a directory: names strictly after `after`, at most `limit`.
    /// `with_dirs` includes subdirectories (asked of one server only).
    ReadDir { at: At, after: Option<String>, limit: u32, with_dirs: bool } = 0x0008,
    /// Make the file at `path` share its inode for a new hard link (nlink + 1).
    /// `txn`: the link's transaction (every mode's client names one): the
    /// count it adds here is recorded as its own until `LinkSettle`, and the
    /// step is refused once recovery revoked `txn` (`ESTALE`; Giraffa
    /// `ECANCELED`).
    LinkShare { at: At, txn: Option<u64> } = 0x0009,
    /// Insert a hard link at `path` to the shared inode `ino` homed on `home`.
    /// `txn` as in `LinkShare` (refused once revoked); the server records
    /// that `txn` made its name, in the same write, until `LinkSettle`.
    LinkInsert { at: At, ino: u64, home: u32, txn: Option<u64> } = 0x000A,
    /// Operations on a shared inode on its home server.
    InodeStat { ino: u64 } = 0x000B,
    InodeSetAttr { ino: u64, set: SetAttr } = 0x000C,
    /// `txn` as in `LinkShare`: a count added (`delta` 1) is recorded as the
    /// transaction's own.
    InodeLinkDelta { ino: u64, delta: i32, txn: Option<u64> } = 0x000D,
    /// Rename of a file within one server. `txn`: the transaction doing it
    /// (ShardFS: refused `ESTALE` once recovery has revoked it here).
    RenameLocal { src: At, dst: At, txn: Option<u64> } = 0x000E,
    /// Rename of a file across servers, on the source's primary: check, return the record.
    RenameOut { src: At, dst: At } = 0x000F,
    /// ...on the destination's primary: check, replace, insert the record.
    /// `txn` as for `RenameLocal`.
    RenameIn { src: At, dst: At, record: Record, txn: Option<u64> } = 0x0010,
    /// ...on the source's primary: remove the source entry if it is still `ino`.
    /// `txn` as for `RenameLocal` (the recoverer's own in recovery).
    RenameOutCommit { src: At, ino: u64, txn: Option<u64> } = 0x0011,
    /// Make directory `path` with id `id` (see [`dir_id_of_txn`]), sent to every
    /// server at once: each derives the owner, group and mode from its own
    /// replica of the parent, so all agree. A replica's step carries
    /// `fence: Some(txn)`: until `Unfence`, single-RPC operations on the new
    /// directory and below are answered EAGAIN there, for the primary (the
    /// commit point) may still refuse. The primary answers `Attr`, times and
    /// all; a replica `Dir`.
    Mkdir { path: String, mode: u32, id: u64, fence: Option<u64> } = 0x0101,
    /// Remove directory `path` here, as transaction `txn` (refused `ESTALE`
    /// once `txn` is revoked here: see `Revoke`).
    Rmdir { path: String, txn: u64 } = 0x0102,
    /// Change a directory's mode or ownership (replicated lookup state), as
    /// transaction `txn` (refused `ESTALE` once `txn` is revoked here).
    DirSetAttr { path: String, set: SetAttr, txn: u64 } = 0x0103,
    /// Rename a directory in the replicated state: `step` says which of the
    /// transaction's steps on this server.
    RenameDir { src: String, dst: String, step: RenameDirStep } = 0x0104,
    /// Up to `limit` local objects below directory `root` whose primary changed.
    Migrate { root: String, limit: u32 } = 0x0105,
    /// The directory at `path` on this server, if any (no permission checks): what
    /// recovery compares replicas against.
    DirProbe { path: String } = 0x0106,
    /// What `path` holds here, as root and through any fence: recovery's view of a
    /// half-applied file rename.
    RecoveryStat { at: At } = 0x0107,
    /// Make this server's directory state at `path` equal `want`: recovery's
    /// repair (`txn` none), or a coordinator putting back what its own
    /// transaction `txn` applied (refused `ESTALE` once `txn` is revoked here).
    DirSync { path: String, want: Option<DirLookup>, txn: Option<u64> } = 0x0108,
    /// Fence off single-RPC operations on `paths` and below for transaction `txn`
    /// (a non-monotonic directory mutation): they are answered EAGAIN until
    /// `Unfence`.
    Fence { txn: u64, paths: Vec<String> } = 0x0109,
    Unfence { txn: u64 } = 0x010A,
    /// Store objects moved here by a migration, for the rename of transaction
    /// `txn` (refused `ESTALE` once recovery revoked it; none from tools).
    Adopt { items: Vec<MovedItem>, txn: Option<u64> } = 0x010B,
    /// Drop objects that were adopted elsewhere (as `Adopt` for `txn`).
    Release { items: Vec<MovedItem>, txn: Option<u64> } = 0x010C,
    /// Read up to `len` bytes (at most [`INLINE_LIMIT`]) of an inline file at
    /// `offset`: `Data`, or `Backend` when the contents are in back-end storage.
    /// Needs read permission on the file (root passes); every data request is
    /// checked against the file, like open(2) (the FUSE mount, which checks at
    /// open, sends them as root).
    ReadData { at: FileRef, offset: u64, len: u32 } = 0x0012,
    /// Write to an inline file, if the result stays within `inline_max` bytes
    /// (never more than [`INLINE_LIMIT`]): `Attr`. `Backend` when the contents are already in back-end storage, and
    /// `Spill` when this write would make the file too big to stay inline (and
    /// always when `inline_max` is 0: a spill on demand). Needs write permission,
    /// as do `Spilled` and `Extend`. `kill_suid`: the writer
    /// may not keep setuid and setgid (see [`SetAttr::kill_suid`]); implied when
    /// the caller is not root.
    WriteData { at: FileRef, offset: u64, data: Vec<u8>, inline_max: u32, kill_suid: bool } = 0x0013,
    /// The client copied the inline contents (`len` bytes with `digest`) to the
    /// back-end file: from now on the contents live there. `ESTALE` if the inline
    /// contents changed in the meantime (the client copies again).
    Spilled { at: FileRef, len: u64, digest: u64 } = 0x0014,
    /// The client wrote back-end bytes up to `end`: size = max(size, end), and
    /// mtime and ctime are now. `kill_suid` as for `WriteData`.
    Extend { at: FileRef, end: u64, kill_suid: bool } = 0x0015,
    /// Record `change` in a directory's times, on the server keeping them: a
    /// name added or removed inside it (entries live on other servers), or
    /// the directory renamed. `at_ns` is when the change was made (the
    /// client may send it later, coalesced with others): the times become
    /// it (never later than the server's now), unless the directory's ctime
    /// already records something later.
    TouchDir { at: At, change: DirChange, at_ns: i64 } = 0x0016,
    Stats = 0x0017,
    Fsck = 0x0018,
    /// Lock service: take `locks` for a transaction described by `intent`.
    Lock { locks: Vec<(String, LockMode)>, intent: Intent, lease_ms: u32, wait_ms: u32 } = 0x0201,
    /// Lock service: extend a live transaction's lease (ESTALE if it expired and
    /// was handed to a recoverer, or is unknown; EPERM with another's ticket).
    Renew { txn: u64, ticket: u64, lease_ms: u32 } = 0x0202,
    /// Lock service: release a transaction's locks and end its redo record
    /// (EPERM with another's ticket).
    Unlock { txn: u64, ticket: u64 } = 0x0203,
    /// Lock service: the transactions in flight.
    ListTxns = 0x0204,
    /// Lock service: replace a live transaction's intent (durably, before the
    /// answer) with one that says more of what it does, such as the directory
    /// a rename replaces, learnt under its locks (ESTALE if its lease ran out
    /// or it is unknown; EPERM with another's ticket).
    Amend { txn: u64, ticket: u64, intent: Intent } = 0x0205,
    /// Run a namespace operation here, as the caller (a user key's connection:
    /// as that user), with this server's own cluster-key client.
    Delegate { call: NsCall } = 0x0019,
    /// IndexFS, on the server of `name`'s partition of directory `dir`: the
    /// subdirectory `name` (at `depth` below the root) for the client's lookup
    /// cache, with a lease. `dir` 0 and name "" ask the root's home. `client`
    /// (random, per client) lets a mutation by the only holder of live leases
    /// on an entry skip the wait: it dropped its own copy.
    IxLookup { dir: u64, name: String, depth: u32, client: u64 } = 0x0301,
    /// IndexFS's directory transactions' steps below (the ones that change
    /// something) name their transaction (`txn`, the recoverer's own in
    /// recovery): once recovery revoked it (`Revoke`), a server refuses them
    /// `ESTALE`. `None` outside a transaction.
    /// IndexFS: make subdirectory `name` of `dir` (its entry; the commit point).
    IxMkdir { dir: u64, name: String, mode: u32, txn: Option<u64> } = 0x0302,
    /// IndexFS, on a new directory's home: its header (partition 0) and times.
    /// Idempotent.
    IxMkHeader { lookup: DirLookup, parent: u64, depth: u32, txn: Option<u64> } = 0x0303,
    /// IndexFS, on a directory's home: refuse (`seal`) or admit again new names
    /// in `dir`; sealing answers `ENOTEMPTY` if it holds any.
    IxSeal { dir: u64, seal: bool, txn: Option<u64> } = 0x0304,
    /// IndexFS: remove subdirectory `name` of `dir` (its entry; the commit
    /// point), once no lease on it is live; `check_only`: only the caller's
    /// rights. Its emptiness was checked by sealing it (`IxSeal`).
    IxRmdir { dir: u64, name: String, check_only: bool, client: u64, txn: Option<u64> } = 0x0305,
    /// IndexFS, on a directory's home: drop its header and times. Idempotent.
    IxDropHeader { dir: u64, txn: Option<u64> } = 0x0306,
    /// IndexFS: chmod/chown of subdirectory `name` of `dir` (its entry), once no
    /// lease on it is live.
    IxDirSetAttr { dir: u64, name: String, set: SetAttr, client: u64, txn: Option<u64> } = 0x0307,
    /// IndexFS, on a directory's home: copy its entry's lookup state into its
    /// header. Idempotent.
    IxHeaderSet { lookup: DirLookup, txn: Option<u64> } = 0x0308,
    /// IndexFS: rename subdirectory `src` to `dst` (both on this server), once no
    /// lease on it is live; `dst` may be an empty directory it replaces.
    IxRenameDir { src: At, dst: At, client: u64, txn: Option<u64> } = 0x0309,
    /// IndexFS, a directory rename between two servers, on the source's: check
    /// the caller may move subdirectory `src`; answers its lookup state.
    IxRenameDirOut { src: At, dst: At } = 0x030A,
    /// ...on the destination's: insert the entry `lookup` at `dst` (the commit
    /// point), replacing an empty directory sealed on its home beforehand.
    IxRenameDirIn { dst: At, lookup: DirLookup, txn: Option<u64> } = 0x030B,
    /// ...on the source's: once no lease on it is live, drop the entry `src`
    /// if it still names directory `id`. Idempotent.
    IxRenameDirCommit { src: At, id: u64, client: u64, txn: Option<u64> } = 0x030C,
    /// IndexFS bulk insertion (seed 001): new regular files of mode `mode` in
    /// directory `dir`, named `names` (the server issues their FIDs). The
    /// server checks the caller may write there and that no name is taken, then
    /// ingests the rest as one table; taken or invalid names are answered one
    /// by one in `Reply::Bulk`. At most [`BULK_MAX`] files.
    IxBulkInsert { dir: u64, names: Vec<String>, mode: u32 } = 0x030D,
    /// IndexFS, server to server: one step of a GIGA+ split, on the server of
    /// the new partition `part` of directory `dir`. `entries` and `dirs` are
    /// SST files of the moved key range (empty: none); chunk 0 first clears
    /// the range, the `last` chunk writes the partition's header (`lookup`,
    /// `parent`, `depth`, `subdirs`, the bitmap `parts`). Once that header
    /// exists the partition is the destination's and a repeat is answered
    /// `Unit` with nothing done.
    IxSplitIn {
        dir: u64,
        part: u32,
        lookup: DirLookup,
        parent: u64,
        depth: u32,
        subdirs: u64,
        parts: crate::giga::PartMap,
        chunk: u32,
        last: bool,
        entries: Vec<u8>,
        dirs: Vec<u8>,
    } = 0x030E,
    /// IndexFS: one page of the partitions of directory `dir` held by this
    /// server, names after `after` in name order; answered with the bitmap
    /// this server knows, so a client reading every partition finds them all.
    IxReadDir { dir: u64, after: Option<String>, limit: u32 } = 0x030F,
    /// IndexFS: `IxLookup` of each (directory, name, depth), all held by this
    /// server, answered one by one (`Reply::IxRenewed`): a client renews
    /// the leases of the entries it is using that run out soon in one RPC.
    /// At most [`MAX_RENEW`] items.
    IxRenew { items: Vec<(u64, String, u32)>, client: u64 } = 0x0310,
    /// Giraffa: a signed proof of directory `path`'s permissions, from the
    /// server holding its row (`Reply::GfProof`), for a request to the server
    /// holding its entries. `EAGAIN` while the directory is being removed.
    GfProof { path: String, adds: bool } = 0x0401,
    /// Giraffa: `inner` (an encoded `Request`: a create, unlink, listing or
    /// rename of an entry, or a Giraffa mkdir or rmdir step) checked against
    /// the directories `proofs` vouch for (at most [`crate::giraffa::MAX_PROOFS`]).
    GfVouched { proofs: Vec<crate::giraffa::DirProof>, inner: Vec<u8> } = 0x0402,
    /// Giraffa: make directory `path` (its row, on the server holding its
    /// parent's entries, checked against the parent's proof).
    GfMkdir { path: String, mode: u32, proof: crate::giraffa::DirProof } = 0x0403,
    /// Giraffa: the first step of removing directory `path`, checked against
    /// its parent's proof: stop proofs of it, wait out those already issued;
    /// answers its lookup state (`Reply::Dir`).
    GfRmdirBegin { path: String, proof: crate::giraffa::DirProof } = 0x0404,
    /// Giraffa: whether the directory whose entries have prefix `prefix` has
    /// none (`ENOTEMPTY` otherwise), on the server holding them.
    GfEmpty { prefix: u64 } = 0x0405,
    /// Giraffa: the last step of removing `path`, whose begun removal found
    /// directory `ino`: remove its row if `commit`, else let it be used again.
    GfRmdirEnd { path: String, ino: u64, commit: bool } = 0x0406,
    /// Giraffa: change directory `path`'s mode or owner in its row, then wait
    /// out the proofs issued with the old ones.
    GfDirSetAttr { path: String, set: SetAttr } = 0x0407,
    /// Giraffa: directory `path` (its row is here) gained (`delta` 1) or lost
    /// (-1) a subdirectory, whose row is on the server of its entries.
    GfSubdirs { path: String, delta: i32 } = 0x0408,
    /// Giraffa: the checks of renaming directory `src` (its row is here) to
    /// `dst`, with the proofs of both parents; answers its lookup state.
    GfRenameDirCheck { src: String, dst: String, proofs: Vec<crate::giraffa::DirProof> } = 0x0409,
    /// Giraffa: a directory rename's freeze, on every server: no change
    /// (`EAGAIN`) to rows with a prefix in `prefixes` or to the rows of
    /// `paths` until `thaw` (or a minute); answered once no change that began
    /// before is still writing. `txn`: the rename's transaction (the
    /// coordinator's, or its recoverer's own), refused `ECANCELED` once
    /// revoked.
    GfFreeze { prefixes: Vec<u64>, paths: Vec<String>, thaw: bool, txn: Option<u64> } = 0x040A,
    /// Giraffa: the rows with `prefix` held here, names after `after`, at most
    /// `limit` (`Reply::GfRows`), whatever is frozen.
    GfScan { prefix: u64, after: Option<String>, limit: u32 } = 0x040B,
    /// Giraffa: write `rows` under `prefix` here (a directory rename's copy:
    /// a row already there is replaced, unless `fresh`, then `EEXIST`);
    /// `txn` as in `GfFreeze`.
    GfPutRows { prefix: u64, rows: Vec<crate::giraffa::GfRow>, fresh: bool, txn: Option<u64> } = 0x040C,
    /// Giraffa: delete the rows `names` under `prefix` here, with the times
    /// of the directories among them unless `keep_times` (their new rows,
    /// with the same inodes, are on this server too); `txn` as in `GfFreeze`.
    GfDeleteRows { prefix: u64, names: Vec<String>, keep_times: bool, txn: Option<u64> } = 0x040D,
    /// Giraffa: set directory `path`'s subdirectory count (recovery's recount).
    GfSetSubdirs { path: String, subdirs: u64 } = 0x040E,
    /// BatchFS: record here that the caller opened batch `batch`, a private
    /// namespace rooted at `root` (every server holds the record). `EEXIST`
    /// if another user's batch has the number.
    BatchOpen { batch: u64, root: String } = 0x0501,
    /// BatchFS: the batches recorded here (`Reply::Batches`).
    BatchList = 0x0502,
    /// BatchFS: keep chunk `chunk` of batch `batch` here until `BatchApply`:
    /// `files` to be made in directory `dir`. A chunk sent again replaces
    /// itself. At most [`crate::batch::CHUNK_MAX`] files; only from the batch's owner.
    BatchStage { batch: u64, chunk: u32, dir: At, files: Vec<crate::batch::BatchFile> } = 0x0503,
    /// BatchFS: check every staged file of `batch` as a create by its owner
    /// making it with those attributes would be checked, ingest those that
    /// pass as one table, and forget the chunks (`Reply::BatchApplied`).
    BatchApply { batch: u64 } = 0x0504,
    /// BatchFS: forget batch `batch` here, with whatever it staged.
    BatchClose { batch: u64 } = 0x0505,
    /// ShardFS: lift every fence that covers `path`. Sent only by a client
    /// holding a read lock on `path`, which no transaction that fenced it can
    /// still hold: such a fence is stale (its `Unfence`, posted, not yet
    /// read, or lost with its connection).
    ClearFences { path: String } = 0x010D,
    /// Recovery (ShardFS, Giraffa), before it reads what a dead coordinator's
    /// transaction `txn` (its original id, or a dead recoverer's own) left:
    /// from now on this server refuses the steps naming `txn` (ShardFS:
    /// `Mkdir`, by the directory id it makes; `Rmdir`, `DirSetAttr`,
    /// `DirSync`, `Fence`, a directory rename's check and apply, its
    /// migration's `Adopt` and `Release`; Giraffa: `GfFreeze`, `GfPutRows`,
    /// `GfDeleteRows`; both: a file rename's `RenameLocal` and `RenameIn`)
    /// with `ESTALE` (Giraffa: `ECANCELED`), durably, so a step sent in time but arriving late
    /// cannot land behind recovery's decision. Answers once every step of
    /// `txn` already under way here has ended.
    Revoke { txn: u64 } = 0x010E,
    /// The link transaction `txn` on inode `ino` ended: what it recorded
    /// here (a count on the inode's home, its name on the new name's server)
    /// is forgotten. `undo`: its name was not made, so the count it added
    /// here is taken back. Settling again, or what `txn` never recorded
    /// here, changes nothing.
    LinkSettle { ino: u64, txn: u64, undo: bool } = 0x010F,
    /// What link transaction `txn` recorded here and has not settled
    /// (`Reply::Pending`): what recovery of a dead link settles.
    LinkPending { txn: u64 } = 0x0110,
}

/// The id of the directory a ShardFS mkdir makes as transaction `txn`: the lock
/// service never hands out a transaction id twice, so no two mkdirs share one,
/// and no id a server allocates (its index + 1 in the top 16 bits) is ever one.
/// `None` past the 2^47 transactions this leaves room for.
pub fn dir_id_of_txn(txn: u64) -> Option<u64> {
    (txn < DIR_ID_FROM_TXN).then_some(DIR_ID_FROM_TXN | txn)
}

/// Whether `id` is one [`dir_id_of_txn`] makes.
pub fn is_txn_dir_id(id: u64) -> bool {
    id >> DIR_ID_FROM_TXN.trailing_zeros() == 1
}

/// The transaction whose mkdir made directory `id` (one [`dir_id_of_txn`]
/// makes), if any.
pub fn txn_of_dir_id(id: u64) -> Option<u64> {
    is_txn_dir_id(id).then_some(id & !DIR_ID_FROM_TXN)
}

const DIR_ID_FROM_TXN: u64 = 1 << 47;

/// The most entries one `IxRenew` may name.
pub const MAX_RENEW: usize = 1024;

/// The most files one `IxBulkInsert` may carry (a frame bounds it too).
pub const BULK_MAX: usize = 200_000;

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
    /// ask again. `lapsed` is the id whose lease ran out: `was` if the
    /// coordinator died, else the id of a recoverer that died in turn, whose
    /// own steps (a migration's) name it.
    Recover { txn: u64, ticket: u64, was: u64, lapsed: u64, intent: Intent },
    Probe(Option<DirLookup>),
    Txns(Vec<TxnInfo>),
    /// Inline file contents (shorter than asked at the end of the file).
    Data(Vec<u8>),
    /// The file's contents are in back-end storage under `fid`.
    Backend { fid: Fid, size: u64 },
    /// Copy these inline contents (`size` bytes long, the rest zeros) to the
    /// back-end file `fid`, then send `Spilled`.
    Spill { fid: Fid, data: Vec<u8>, size: u64 },
    /// IndexFS: a directory entry for the client's lookup cache, valid for
    /// `lease_ms` (0: do not cache), and the partitions of the directory known.
    IxEntry { lookup: DirLookup, depth: u32, parts: crate::giga::PartMap, lease_ms: u32 },
    /// What a bulk insertion did: how many files it made, and each name it
    /// refused with why (`EEXIST`, `EINVAL`, `ENAMETOOLONG`).
    Bulk { inserted: u64, rejected: Vec<(String, Errno)> },
    /// IndexFS: this server does not hold the partition of directory `dir`
    /// that the request's name belongs to; `parts` is what it knows of the
    /// directory's partitions (GIGA+'s redirect: merge and resend).
    IxMoved { dir: u64, parts: crate::giga::PartMap },
    /// IndexFS: the partitions of a directory this server knows.
    IxParts(crate::giga::PartMap),
    /// IndexFS: a page of a directory's entries on one server, with the
    /// partitions it knows.
    IxEntries { entries: Vec<DirEntry>, more: bool, parts: crate::giga::PartMap },
    /// IndexFS: each `IxRenew` item's entry (lookup state, depth, lease), or
    /// why not.
    IxRenewed(Vec<Result<(DirLookup, u32, u32), Errno>>),
    /// Giraffa: what the server holding a directory's row vouches for.
    GfProof(crate::giraffa::DirProof),
    /// Giraffa: rows of a directory's entries, and whether more follow.
    GfRows { rows: Vec<crate::giraffa::GfRow>, more: bool },
    /// BatchFS: the batches a server records.
    Batches(Vec<crate::batch::BatchInfo>),
    /// BatchFS: what an apply did: files made, files an earlier apply had
    /// made already (same name, same FID), and each staged file refused.
    BatchApplied { inserted: u64, landed: u64, rejected: Vec<crate::batch::Rejected> },
    /// A directory rename's step on one server: whether this server holds
    /// anything below the directory that migration may move (a subdirectory
    /// anywhere, a file entry here), and the directory's times kept here.
    RenameChecked { below: bool, times: Option<DirTimes> },
    /// A directory rename's check found the source a file here (its
    /// primary): the client renames it as a file, under the fences the
    /// check put up.
    RenameOfFile,
    /// What a link transaction recorded here and has not settled: the
    /// inodes it added a count to, and those it made a name for.
    Pending { counted: Vec<u64>, named: Vec<u64> },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directory_ids_from_transactions_never_meet_server_allocated_ones() {
        let server_ids = [1u64 << 48, (1 << 48) | ((1 << 48) - 1), (0xFFFF << 48) | 5];
        for txn in [1, 2, 12_345, (1 << 47) - 1] {
            let id = dir_id_of_txn(txn).unwrap();
            assert!(is_txn_dir_id(id) && id != 1 && !server_ids.contains(&id));
            assert_eq!(txn_of_dir_id(id), Some(txn));
            assert_ne!(dir_id_of_txn(txn + 1), Some(id));
        }
        assert!(server_ids.iter().all(|id| !is_txn_dir_id(*id) && txn_of_dir_id(*id).is_none()));
        assert!(!is_txn_dir_id(1), "the root");
        assert_eq!(dir_id_of_txn(1 << 47), None);
    }

    /// The wire's request table. Append new requests at the end (of the enum and
    /// of this list); never change or reuse a line.
    const PINNED: &[(&str, u16)] = &[
        ("Ping", 0x0001),
        ("Stat", 0x0002),
        ("Create", 0x0003),
        ("Unlink", 0x0004),
        ("SetAttr", 0x0005),
        ("Readlink", 0x0006),
        ("Access", 0x0007),
        ("ReadDir", 0x0008),
        ("LinkShare", 0x0009),
        ("LinkInsert", 0x000A),
        ("InodeStat", 0x000B),
        ("InodeSetAttr", 0x000C),
        ("InodeLinkDelta", 0x000D),
        ("RenameLocal", 0x000E),
        ("RenameOut", 0x000F),
        ("RenameIn", 0x0010),
        ("RenameOutCommit", 0x0011),
        ("Mkdir", 0x0101),
        ("Rmdir", 0x0102),
        ("DirSetAttr", 0x0103),
        ("RenameDir", 0x0104),
        ("Migrate", 0x0105),
        ("DirProbe", 0x0106),
        ("RecoveryStat", 0x0107),
        ("DirSync", 0x0108),
        ("Fence", 0x0109),
        ("Unfence", 0x010A),
        ("Adopt", 0x010B),
        ("Release", 0x010C),
        ("ReadData", 0x0012),
        ("WriteData", 0x0013),
        ("Spilled", 0x0014),
        ("Extend", 0x0015),
        ("TouchDir", 0x0016),
        ("Stats", 0x0017),
        ("Fsck", 0x0018),
        ("Lock", 0x0201),
        ("Renew", 0x0202),
        ("Unlock", 0x0203),
        ("ListTxns", 0x0204),
        ("Amend", 0x0205),
        ("Delegate", 0x0019),
        ("IxLookup", 0x0301),
        ("IxMkdir", 0x0302),
        ("IxMkHeader", 0x0303),
        ("IxSeal", 0x0304),
        ("IxRmdir", 0x0305),
        ("IxDropHeader", 0x0306),
        ("IxDirSetAttr", 0x0307),
        ("IxHeaderSet", 0x0308),
        ("IxRenameDir", 0x0309),
        ("IxRenameDirOut", 0x030A),
        ("IxRenameDirIn", 0x030B),
        ("IxRenameDirCommit", 0x030C),
        ("IxBulkInsert", 0x030D),
        ("IxSplitIn", 0x030E),
        ("IxReadDir", 0x030F),
        ("IxRenew", 0x0310),
        ("GfProof", 0x0401),
        ("GfVouched", 0x0402),
        ("GfMkdir", 0x0403),
        ("GfRmdirBegin", 0x0404),
        ("GfEmpty", 0x0405),
        ("GfRmdirEnd", 0x0406),
        ("GfDirSetAttr", 0x0407),
        ("GfSubdirs", 0x0408),
        ("GfRenameDirCheck", 0x0409),
        ("GfFreeze", 0x040A),
        ("GfScan", 0x040B),
        ("GfPutRows", 0x040C),
        ("GfDeleteRows", 0x040D),
        ("GfSetSubdirs", 0x040E),
        ("BatchOpen", 0x0501),
        ("BatchList", 0x0502),
        ("BatchStage", 0x0503),
        ("BatchApply", 0x0504),
        ("BatchClose", 0x0505),
        ("ClearFences", 0x010D),
        ("Revoke", 0x010E),
        ("LinkSettle", 0x010F),
        ("LinkPending", 0x0110),
    ];

    #[test]
    fn the_opcode_table_is_append_only() {
        assert!(OPCODES.len() >= PINNED.len(), "a request was removed");
        assert_eq!(&OPCODES[..PINNED.len()], PINNED, "an existing request moved or changed its opcode");
        let mut ops: Vec<u16> = OPCODES.iter().map(|(_, o)| *o).collect();
        ops.sort_unstable();
        ops.dedup();
        assert_eq!(ops.len(), OPCODES.len(), "two requests share an opcode");
        for (name, op) in OPCODES {
            assert!(matches!(op >> 8, 0x00..=0x05), "{name}: {op:#06x} is in no family");
            assert_eq!(op_name(*op), Some(*name));
        }
        assert_eq!(op_name(0x0300), None, "no request is 0x0300");
        // The opcode names the payload's variant: a request's postcard tag is its
        // position in the table.
        let stat = Request::Stat { at: "/".into() };
        assert_eq!((stat.opcode(), stat.index(), stat.name()), (0x0002, 1, "Stat"));
        assert_eq!(postcard::to_stdvec(&stat).unwrap()[0] as usize, stat.index());
        let delegate = Request::Delegate { call: NsCall::Stat { path: "/".into() } };
        assert_eq!(postcard::to_stdvec(&delegate).unwrap()[0] as usize, delegate.index());
    }

    /// Each reply's postcard tag, pinned: a reply inserted before another would
    /// change every later tag.
    fn pinned_tag(r: &Reply) -> u8 {
        match r {
            Reply::Unit => 0,
            Reply::Pong { .. } => 1,
            Reply::Attr(_) => 2,
            Reply::Redirect { .. } => 3,
            Reply::Dropped { .. } => 4,
            Reply::Target(_) => 5,
            Reply::Entries { .. } => 6,
            Reply::Shared { .. } => 7,
            Reply::Record(_) => 8,
            Reply::Dir(_) => 9,
            Reply::Moved(_) => 10,
            Reply::Stats(_) => 11,
            Reply::Fsck(_) => 12,
            Reply::Locked { .. } => 13,
            Reply::Recover { .. } => 14,
            Reply::Probe(_) => 15,
            Reply::Txns(_) => 16,
            Reply::Data(_) => 17,
            Reply::Backend { .. } => 18,
            Reply::Spill { .. } => 19,
            Reply::IxEntry { .. } => 20,
            Reply::Bulk { .. } => 21,
            Reply::IxMoved { .. } => 22,
            Reply::IxParts(_) => 23,
            Reply::IxEntries { .. } => 24,
            Reply::IxRenewed(_) => 25,
            Reply::GfProof(_) => 26,
            Reply::GfRows { .. } => 27,
            Reply::Batches(_) => 28,
            Reply::BatchApplied { .. } => 29,
            Reply::RenameChecked { .. } => 30,
            Reply::RenameOfFile => 31,
            Reply::Pending { .. } => 32,
        }
    }

    #[test]
    fn reply_tags_are_append_only() {
        let attr = Attr { ino: 1, kind: FileKind::File, mode: 0, uid: 0, gid: 0, size: 0, nlink: 1, rdev: 0, atime: 0, mtime: 0, ctime: 0 };
        let fid = Fid::new(1, 2);
        let dir = DirLookup { id: 1, mode: 0, uid: 0, gid: 0 };
        let samples = vec![
            Reply::Unit,
            Reply::Pong { server: 0, servers: 1 },
            Reply::Attr(attr.clone()),
            Reply::Redirect { ino: 1, home: 0 },
            Reply::Dropped { remote: None, freed: None },
            Reply::Target("t".into()),
            Reply::Entries { entries: vec![], more: false },
            Reply::Shared { ino: 1, home: 0 },
            Reply::Record(Record::Linked { ino: 1, home: 0 }),
            Reply::Dir(dir.clone()),
            Reply::Moved(vec![]),
            Reply::Stats(ServerStats::default()),
            Reply::Fsck(FsckReport::default()),
            Reply::Locked { txn: 1, ticket: 2, waited: false },
            Reply::Recover { txn: 1, ticket: 2, was: 1, lapsed: 1, intent: Intent::Retry { path: "/".into() } },
            Reply::Probe(Some(dir)),
            Reply::Txns(vec![]),
            Reply::Data(vec![]),
            Reply::Backend { fid, size: 0 },
            Reply::Spill { fid, data: vec![], size: 0 },
            Reply::IxEntry { lookup: DirLookup { id: 1, mode: 0, uid: 0, gid: 0 }, depth: 1, parts: crate::giga::PartMap::new(), lease_ms: 1 },
            Reply::Bulk { inserted: 0, rejected: vec![] },
            Reply::IxMoved { dir: 1, parts: crate::giga::PartMap::new() },
            Reply::IxParts(crate::giga::PartMap::new()),
            Reply::IxEntries { entries: vec![], more: false, parts: crate::giga::PartMap::new() },
            Reply::IxRenewed(vec![]),
            Reply::GfProof(crate::giraffa::DirProof { prefix: 1, ino: 1, mode: 0, uid: 0, gid: 0, expires: 0, adds: false, mac: [0; 32] }),
            Reply::GfRows { rows: vec![], more: false },
            Reply::Batches(vec![]),
            Reply::BatchApplied { inserted: 0, landed: 0, rejected: vec![] },
            Reply::RenameChecked { below: false, times: None },
            Reply::RenameOfFile,
            Reply::Pending { counted: vec![], named: vec![] },
        ];
        for r in &samples {
            assert_eq!(postcard::to_stdvec(r).unwrap()[0], pinned_tag(r), "{r:?}");
        }
    }
}
