//! Every answer a daemon gives: one enum, append-only (see `msg`).

use super::*;
use serde::{Deserialize, Serialize};

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
    LinkTarget(String),
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
    /// Replica groups: the answer to a `Peer` message, opaque.
    PeerReply(#[serde(with = "serde_bytes")] Vec<u8>),
    /// Replica groups: this member does not lead its group and applied
    /// nothing; `leader` is the member it believes does.
    NotLeader { leader: Option<u64> },
    /// Replica groups: a member's view of its group.
    Group(GroupInfo),
}
