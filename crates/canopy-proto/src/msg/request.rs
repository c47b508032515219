//! Every request a daemon accepts: one enum, each variant with its wire
//! opcode (append-only, see the module doc of `msg`), and the ids a ShardFS
//! mkdir makes from its transaction's.

use super::*;
use serde::{Deserialize, Serialize};

macro_rules! requests {
    ($($(#[$doc:meta])* $name:ident $({ $($(#[$fattr:meta])* $field:ident : $ty:ty),* $(,)? })? = $op:literal,)*) => {
        #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
        pub enum Request { $($(#[$doc])* $name $({ $($(#[$fattr])* $field: $ty),* })?,)* }

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
    /// Replica groups: a message between members of one group (its Raft's,
    /// opaque here). Only from the cluster key.
    Peer { #[serde(with = "serde_bytes")] call: Vec<u8> } = 0x0601,
    /// Replica groups: the request encoded in `inner` (not itself a `Once`),
    /// applied at most once: it is request `seq` of client session
    /// `session`, whose client has heard the answer of every request of the
    /// session below `done_below`. Sent again (same session and `seq`), it
    /// is answered what it was first, not applied again. `ESTALE`: the group
    /// no longer knows the session's answer for `seq` (heard and forgotten,
    /// or the session expired) and did not apply it again.
    Once { session: u64, seq: u64, done_below: u64, #[serde(with = "serde_bytes")] inner: Vec<u8> } = 0x0602,
    /// Replica groups: this member's view of its group (`Reply::Group`).
    GroupStatus = 0x0603,
    /// Replica groups, to the leader: change the group's voting members
    /// (`Reply::Group` once the group runs with the new set; `NotLeader`
    /// from any other member; `EBUSY` while another change is under way).
    /// Only from the cluster key.
    GroupChange { change: GroupChange } = 0x0604,
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
