//! The seam between what every mode's server does and what a mode decides.
//!
//! The generic operations (`ops_*`: files, symlinks, special files, hard links,
//! data, setattr, readdir of entries, directory times) act on a [`Located`]
//! entry and never ask where it came from. A [`Mode`] decides the rest: how a
//! [`Target`] (a path, or a directory id and a name) resolves on this server and
//! with which search checks, what this server knows of a directory's lookup state,
//! which directory a mutation serialises on, and the mode's own requests
//! (ShardFS: replicated directory transactions, fences, migration). Adding a mode
//! means implementing this trait (see `docs/architecture.md`, "Adding a mode").

use crate::core::Core;
use canopy_proto::msg::{At, DirLookup, FileRef, FsckReport, Record};
use canopy_proto::path::{check_name, NsPath};
use canopy_proto::{Creds, DirEntry, Errno, Reply, Request};
use canopy_rpc::BlockingCaller;

/// What a mode's server is opened with: each mode's `open` (the registry's
/// way in, `crate::open_mode`) takes its options and this.
pub struct Opening<'a> {
    /// The server's store, configuration and clock.
    pub core: &'a Core,
    /// The key the cluster's servers sign directory proofs with (Giraffa).
    pub proof_key: [u8; 32],
}

/// What an admitted single-RPC operation holds while it runs (see
/// [`Mode::admit`]).
pub(crate) type Admission<'a> = Option<parking_lot::RwLockReadGuard<'a, ()>>;

/// What a mode holds while the request it unwrapped is served (dropped after).
pub(crate) type Held = Box<dyn std::any::Any>;

/// Where a target led on this server.
#[derive(Debug, Clone)]
pub(crate) enum Located {
    Root,
    /// A directory; `parent` and `name` are 0 and "" when it was named by id.
    Dir { parent: u64, name: String, id: u64 },
    File { parent: u64, name: String, record: Record },
    Absent { parent: u64, name: String },
}

/// A request's [`At`], checked: a parsed path, or a directory id and a valid name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Path(NsPath),
    Entry { dir: u64, name: String },
    Dir(u64),
}

impl Target {
    pub fn parse(at: &At) -> Result<Target, Errno> {
        match at {
            At::Path(p) => NsPath::parse(p).map(Target::Path),
            At::Entry { dir, name } => Target::entry(*dir, name),
            At::Dir(id) => Ok(Target::Dir(*id)),
        }
    }

    /// Whether the target names its entry by a directory id rather than a path.
    pub fn by_id(&self) -> bool {
        !matches!(self, Target::Path(_))
    }

    /// A data request's file, unless it names a shared inode.
    pub fn of_file(at: &FileRef) -> Result<Option<Target>, Errno> {
        match at {
            FileRef::Path(p) => NsPath::parse(p).map(|p| Some(Target::Path(p))),
            FileRef::Entry { dir, name } => Target::entry(*dir, name).map(Some),
            FileRef::Ino(_) => Ok(None),
        }
    }

    fn entry(dir: u64, name: &str) -> Result<Target, Errno> {
        check_name(name)?;
        if name == "." || name == ".." {
            return Err(Errno::EINVAL);
        }
        Ok(Target::Entry { dir, name: name.to_string() })
    }
}

impl From<NsPath> for Target {
    fn from(p: NsPath) -> Target {
        Target::Path(p)
    }
}

/// An entry a request names by directory id: its directory and its name's
/// hash (`None`: names of the directory, as a bulk insertion carries).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Named {
    pub dir: u64,
    pub hash: Option<u64>,
}

impl Named {
    /// Entry `name` of directory `dir`.
    pub fn entry(dir: u64, name: &str) -> Option<Named> {
        Some(Named { dir, hash: Some(canopy_proto::giga::name_hash(name)) })
    }

    /// The entry `at` names by directory id, if it does.
    pub fn at(at: &At) -> Option<Named> {
        match at {
            At::Entry { dir, name } => Named::entry(*dir, name),
            _ => None,
        }
    }
}

/// What a mode decides on a server. Methods that touch the store get the
/// server's [`Core`]; none may panic on input.
pub(crate) trait Mode: Send + Sync {
    /// The mode's name, as cluster files spell it.
    fn name(&self) -> &'static str;

    /// What this server knows of the entry `at` names, with the search checks
    /// the mode owes on the way (`EACCES`), or the errno that explains why it
    /// cannot tell (`ENOENT`, `ENOTDIR`, `EREMOTE`: ask another server).
    fn locate(&self, core: &Core, creds: &Creds, at: &Target) -> Result<Located, Errno>;

    /// Where file entry `name` of directory `dir` is kept in the `entries`
    /// column family; every key of a directory starts with its id (big-endian).
    fn entry_key(&self, dir: u64, name: &str) -> Vec<u8>;

    /// The name an entry key holds.
    fn entry_name(&self, key: &[u8]) -> Option<String>;

    /// Whether a directory's entry keys sort as their names do (readdir pages
    /// are in name order; otherwise a page is sorted from the whole directory).
    fn keys_in_name_order(&self) -> bool;

    /// Whether `locate` checks search permission on every ancestor of an entry
    /// named by directory id (a user key's requests may then name entries so).
    fn checks_ancestors(&self) -> bool;

    /// `ENXIO` unless the entry `at` names belongs on this server (ShardFS:
    /// this is its path's primary). A single-RPC operation sent elsewhere
    /// would make an entry no other request finds (a second file of one
    /// name, a file under a directory's name on one replica), so every mode
    /// refuses it: the default for a mode whose `locate` already does
    /// (IndexFS's partitions, Giraffa's regions).
    fn check_placement(&self, _core: &Core, _at: &Target) -> Result<(), Errno> {
        Ok(())
    }

    /// `EAGAIN` if `at` may not be served now (ShardFS: a transaction fenced
    /// it off; the client retries under locks). What it answers is held while
    /// the operation runs (ShardFS: a new fence waits for the operations
    /// admitted before it).
    fn admit(&self, _at: &Target) -> Result<Admission<'_>, Errno> {
        Ok(None)
    }

    /// `EAGAIN` if a mutation of `targets` may not go on now that it holds
    /// their directories' stripes (Giraffa: a directory rename froze a row;
    /// checked under the stripes, so a freeze that then takes them knows no
    /// mutation that passed this check is still writing).
    fn admit_locked(&self, _targets: &[&Target]) -> Result<(), Errno> {
        Ok(())
    }

    /// Whether BatchFS commits may land here (`ops_batch.rs`). Giraffa's rows
    /// are checked against proofs a batch does not carry: `ENOSYS` there.
    fn takes_batches(&self) -> bool {
        true
    }

    /// Whether a user key may send requests about entries here directly. A
    /// mode whose servers check only what the request carries (Giraffa: a
    /// client's proofs) serves users through delegation only.
    fn serves_users_directly(&self) -> bool {
        true
    }

    /// The lookup state of directory `id`, if this server knows it, and its
    /// link count (2 + its subdirectories; 1, as btrfs answers, where the mode
    /// does not count them) if this server keeps its attributes.
    fn dir(&self, core: &Core, id: u64) -> Result<Option<(DirLookup, Option<u32>)>, Errno>;

    /// The ids of the directories holding `targets` (0 where unknown), which a
    /// mutation of them serialises on.
    fn parent_ids(&self, targets: &[&Target]) -> Vec<u64>;

    /// Subdirectories of `id` this server lists in a readdir, names after
    /// `after`, at most `limit`.
    fn subdirs(&self, core: &Core, id: u64, after: Option<&str>, limit: usize) -> Result<Vec<DirEntry>, Errno>;

    /// Whether `req`, one of the mode's own, may block its thread (a lease
    /// wait, a table ingest): it then runs off the reactor.
    fn blocks(&self, req: &Request) -> bool;

    /// Whether `req`, one of the mode's own, may wait a long time (for a lease
    /// to run out): it is then answered apart from the requests that came with
    /// it, which are not held behind it.
    fn waits(&self, _req: &Request) -> bool {
        false
    }

    /// How many directories this server holds (for `Stats`).
    fn dirs(&self) -> u64;

    /// The mode's own counters, reported with the RPC counts in `Stats`.
    fn counters(&self) -> Vec<(String, u64)>;

    /// `ESTALE` if a transaction's step naming `txn` must not land here
    /// (ShardFS: recovery has revoked it). Called under the mutation locks.
    fn refuse_step(&self, _txn: Option<u64>) -> Result<(), Errno> {
        Ok(())
    }

    /// The mode's own requests; `ENOSYS` for any other.
    fn handle(&self, core: &Core, creds: &Creds, req: Request) -> Result<Reply, Errno>;

    /// The mode's part of fsck: its own state and where entries belong.
    fn fsck(&self, core: &Core, report: &mut FsckReport) -> Result<(), Errno>;

    /// Whether a directory's names are spread over partitions that may move
    /// (then a request refused with `EREMCHG` is answered by [`Mode::moved`]).
    fn partitioned(&self) -> bool {
        false
    }

    /// The redirect for a request that named `named` and was refused with
    /// `EREMCHG`.
    fn moved(&self, _core: &Core, _named: &[Option<Named>]) -> Option<Reply> {
        None
    }

    /// `n` names were added to directory `dir` here.
    fn grew(&self, _core: &Core, _dir: u64, _n: u64) {}

    /// One round of the mode's background work, reaching other servers
    /// through `peers`; false when there was none.
    fn background(&self, _core: &Core, _peers: &BlockingCaller) -> bool {
        false
    }

    /// When background work falls due with nobody ringing for it (a retry),
    /// from now; `None`: only when rung.
    fn background_due(&self) -> Option<std::time::Duration> {
        None
    }

    /// The request to serve for `req`, and what is held while it is served:
    /// `req` itself, unless it is one of the mode's that carries another
    /// (Giraffa: `GfVouched`, a request with the directory proofs that vouch
    /// for it, checked here and held while it runs). A refused envelope is
    /// an errno, and nothing inside it is served.
    fn unwrap(&self, _core: &Core, req: Request) -> Result<(Request, Option<Held>), Errno> {
        Ok((req, None))
    }

    /// The entries one of the mode's own requests names by directory id, for
    /// [`Mode::moved`] (only asked of a [`Mode::partitioned`] mode).
    fn named(&self, _req: &Request) -> [Option<Named>; 2] {
        [None, None]
    }

    /// The mode itself, for what only its own module asks of it (IndexFS's
    /// split hook for tests).
    fn as_any(&self) -> &dyn std::any::Any;

    /// Whether this mode must hear of the transactions open at the lock
    /// service before it serves a request after a start: what it guarded for
    /// them in memory is gone (ShardFS: fences).
    fn needs_open_transactions(&self) -> bool {
        false
    }

    /// The transactions open at the lock service as this server starts:
    /// guard what their steps here may have left half done.
    fn open_transactions(&self, _core: &Core, _txns: &[canopy_proto::msg::TxnInfo]) -> Result<(), String> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_are_checked_as_paths_are() {
        assert_eq!(Target::parse(&At::Path("/a/b".into())), Ok(Target::Path(NsPath::parse("/a/b").unwrap())));
        assert_eq!(Target::parse(&At::Path("a".into())), Err(Errno::EINVAL));
        assert_eq!(Target::parse(&At::Entry { dir: 7, name: "x".into() }), Ok(Target::Entry { dir: 7, name: "x".into() }));
        for bad in ["", ".", "..", "a/b", "a\0b"] {
            assert!(Target::parse(&At::Entry { dir: 7, name: bad.into() }).is_err(), "{bad:?}");
        }
        assert_eq!(Target::parse(&At::Entry { dir: 7, name: "n".repeat(256) }), Err(Errno::ENAMETOOLONG));
        assert_eq!(Target::of_file(&FileRef::Ino(3)), Ok(None));
    }
}
