//! The IndexFS strategy (seed 000 §3.1, seed 001).
//!
//! A directory lives on its home server (`giga::home` of its id): its header,
//! attributes and the entries of its children. The client resolves a path one
//! component at a time (`IxLookup` to the server holding the parent's entries)
//! and caches each directory it learns (id, mode, owner) until the lease the
//! server granted runs out, checking search permission on cached ancestors
//! itself. Then the operation is one RPC naming its entry by (directory id,
//! name) on that directory's server.
//!
//! Directory mutations run under the lock service like ShardFS's, so a dead
//! coordinator's transaction is finished or undone from what servers hold
//! (`recover`):
//! - mkdir: the entry in the parent (allocates the id; the commit point), then
//!   the new directory's header on its home;
//! - rmdir: check the caller's rights on the entry, seal the directory on its
//!   home (refusing new names; `ENOTEMPTY` if it has any), drop its header, then
//!   remove the entry (the commit point, once the leases on it ran out);
//! - chmod/chown: the entry (after its leases ran out; the commit point), then
//!   the copy in its header;
//! - rename of a directory: one RPC when both parents are on one server.
//!
//! An `ENXIO` (a directory named by id that its server does not hold: a
//! concurrent mkdir or rmdir) or `EAGAIN` (a sealed directory) is retried once
//! under read locks on the path, with the path's cached entries dropped. An
//! `EREMOTE` answers an operation on a name that is a directory: its attributes
//! are on its home, which the client asks next.
//!
//! GIGA+ (`parts.rs`): a directory's names are spread over partitions on
//! several servers. The client keeps a bitmap of each directory's partitions,
//! sends a name to the server of its partition by that bitmap, and merges the
//! newer bitmap a server answers with when the partition has moved
//! (`IxMoved`), then resends. A name whose partition is recorded as
//! splitting but whose split is not running is refused with `EINPROGRESS`
//! (the client pauses and resends) until the split has been failing for a
//! while, then with `EAGAIN` (passed on). readdir, rmdir's seal and chmod's
//! header update visit every partition, learning of more from each answer.

use crate::recover::Recovers;
use crate::core::{lookup_part, times_part, unexpected, ClientCore, NsOptions};
use crate::counters::ClientCounters;
use crate::data::{DataRead, DataWrite};
use crate::fsck::FsckSummary;
use crate::follow::LinkFailed;
use crate::namespace::{BulkOutcome, Namespace, Res};
use crate::touches::{DirTouches, TouchedDir};
use crate::txn::{after_commit, outcome_unknown, stopped_for_recovery, unless_absent, Step, Txn};
use canopy_posix::lockset::{path_locks, path_read_locks};
use canopy_posix::perm::{self, Owner};
use canopy_proto::attr::access;
use canopy_proto::giga::{self, PartMap};
use canopy_proto::msg::{At, DirLookup, FileRef, IfExists, Intent, LockMode, NewKind, ServerStats};
use canopy_proto::path::NsPath;
use canopy_proto::{Attr, Creds, DirEntry, Errno, FileKind, Reply, Request, SetAttr};
use canopy_rpc::Transport;
use futures::future::BoxFuture;
use parts::SplitWait;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

mod parts;
mod data;
mod dirs;
mod namespace;
mod recovery;
mod rename;
mod resolve;

const ROOT_ID: u64 = 1;

/// How many times a bulk insertion's shares are redirected before it gives
/// up (`EIO`): a directory splits at most 16 levels deep.
const MAX_REDIRECTS: u32 = 64;

/// Names per bulk insertion batch once the directory has spread: each
/// server's share is one ingest (cut to fit frames if need be), so larger
/// batches mean fewer overlapping tables to check and compact. 1M names:
/// 100,000 a batch took 2.0 s, 250,000 1.6 s.
const BULK_BATCH: usize = 250_000;

/// `names` in batches growing from 8,192 to [`BULK_BATCH`]: the first land
/// while the directory is still one partition, and it splits (and the client
/// learns where) before the big ones are sent.
fn ramped(names: &[String]) -> Vec<&[String]> {
    let mut out = Vec::new();
    let (mut rest, mut size) = (names, 8_192);
    while !rest.is_empty() {
        let (batch, tail) = rest.split_at(size.min(rest.len()));
        out.push(batch);
        rest = tail;
        size = (size * 2).min(BULK_BATCH);
    }
    out
}

/// Bulk insertion batches sent at once: while the servers ingest some, the
/// next are built and sent.
const IN_FLIGHT: usize = 2;

#[derive(Debug, Clone)]
pub(super) struct Cached {
    lookup: DirLookup,
    /// Client-clock milliseconds: the lease ran from when the lookup was sent.
    until_ms: u64,
    lease_ms: u64,
    /// Its depth below the root, as the lookup named it.
    depth: u32,
    /// Read from the cache since it was fetched: worth renewing.
    used: bool,
}

/// Most entries one lookup renews besides its own (`IxRenew`).
const RENEW_MAX: usize = 255;

pub struct IndexFs {
    core: ClientCore,
    cache: Mutex<HashMap<(u64, String), Cached>>,
    /// The partitions known of each directory (GIGA+ bitmaps).
    maps: Mutex<HashMap<u64, PartMap>>,
}

impl std::ops::Deref for IndexFs {
    type Target = ClientCore;

    fn deref(&self) -> &ClientCore {
        &self.core
    }
}

/// A directory mutation in flight elsewhere may explain these (a directory
/// named by id that its server does not hold, or one sealed by an rmdir):
/// retry under locks.
fn may_be_transient(e: &Errno) -> bool {
    matches!(e, Errno::ENXIO | Errno::EAGAIN)
}

/// Where an operation's entry is: the server holding its directory's entries
/// and how to name it there.
pub(crate) struct Place {
    server: u32,
    at: At,
    /// The directory holding it and its name (`None` for the root).
    parent: Option<(DirLookup, String)>,
}

/// The registry's way in: IndexFS's client (`canopy_proto::for_each_mode!`).
/// Delegated, every operation goes to one server, picked at random, so that
/// its lookups and its mutations share one cache.
pub(crate) fn open(_: &canopy_proto::modes::IndexFsOptions, backend: crate::Backend, opts: &NsOptions) -> Result<Arc<dyn Namespace>, String> {
    let t = backend.cluster("indexfs")?;
    let sticky = (canopy_rpc::random::u64().unwrap_or(0) % t.servers().max(1) as u64) as u32;
    Ok(crate::factory::delegated_if_asked(Arc::new(IndexFs::open(t.clone(), opts)), t, opts, Some(sticky)))
}

impl IndexFs {
    pub(crate) fn open(t: Arc<dyn Transport>, opts: &NsOptions) -> IndexFs {
        IndexFs { core: ClientCore::new(t, opts), cache: Mutex::new(HashMap::new()), maps: Mutex::new(HashMap::new()) }
    }

    pub(super) fn home(&self, dir: u64) -> u32 {
        giga::home(dir, self.n)
    }

    pub(super) fn cache(&self) -> std::sync::MutexGuard<'_, HashMap<(u64, String), Cached>> {
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn forget(&self, dir: u64, name: &str) {
        self.cache().remove(&(dir, name.to_string()));
    }

    /// Runs `attempt`, again after each redirect to a moved partition (the
    /// bitmap it taught is merged); on an error a directory mutation in flight
    /// could explain, drops the path's cached entries and runs it again holding
    /// read locks on `p` (which waits for that mutation to end).
    pub(super) async fn optimistic<T, F, Fut>(&self, p: &NsPath, attempt: F) -> Res<T>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Res<T>>,
    {
        self.tried_again(p, attempt, true).await
    }

    /// [`IndexFs::optimistic`] for an `attempt` that is a transaction under
    /// write locks on `p` (and so read locks on its ancestors): its retry
    /// holds no read locks of its own, which that write lock would wait out
    /// until their lease ran out; the transaction's own locks wait for any
    /// directory mutation on the path.
    pub(super) async fn transacted<T, F, Fut>(&self, p: &NsPath, attempt: F) -> Res<T>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Res<T>>,
    {
        self.tried_again(p, attempt, false).await
    }

    pub(super) async fn tried_again<T, F, Fut>(&self, p: &NsPath, attempt: F, read_locked: bool) -> Res<T>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Res<T>>,
    {
        match self.following(&attempt).await {
            Err(e) if may_be_transient(&e) => {
                self.counters.retried();
                self.forget_path(p);
                if e == Errno::ENXIO {
                    // A directory named by a stale bitmap (one made again).
                    self.forget_maps();
                }
                let r = if read_locked {
                    let txn = self.lock_recovering(path_read_locks(p), Intent::Retry { path: p.to_string() }).await?;
                    let r = self.following(&attempt).await;
                    self.unlock(txn).await;
                    r
                } else {
                    self.following(&attempt).await
                };
                r.map_err(|e| if e == Errno::ENXIO { Errno::ENOENT } else { e })
            }
            other => other,
        }
    }

    /// Runs `attempt` until it ends other than by a redirect or a split
    /// about to move its name (waited out).
    pub(super) async fn following<T, F, Fut>(&self, attempt: &F) -> Res<T>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Res<T>>,
    {
        let mut split = SplitWait::new(&self.clock);
        loop {
            match attempt().await {
                Err(Errno::EREMCHG) => split.redirected(&self.counters).await?,
                // Pauses are bounded by their own clock, not the redirect count.
                Err(Errno::EINPROGRESS) => split.pause(&self.counters).await?,
                other => return other,
            }
        }
    }

    /// One request naming `p`'s entry, optimistically.
    pub(super) async fn single(&self, c: &Creds, p: &NsPath, req: impl Fn(At) -> Request) -> Res<Reply> {
        self.optimistic(p, || async {
            let place = self.place(c, p).await?;
            self.rpc_ix(place.server, c, req(place.at)).await
        })
        .await
    }


    /// Runs `body` under a transaction holding `locks` for `intent` (it
    /// gets the transaction, for its steps and to amend its intent), then
    /// unlocks it or leaves it to recovery.
    pub(super) async fn locked_as<T, F>(&self, locks: Vec<(String, LockMode)>, intent: Intent, body: impl FnOnce(Txn) -> F) -> Res<T>
    where
        F: std::future::Future<Output = Res<T>>,
    {
        let txn = self.lock_recovering(locks, intent).await?;
        let r = stopped_for_recovery(txn, body(txn).await);
        self.finish(txn, &r).await;
        r
    }
}
