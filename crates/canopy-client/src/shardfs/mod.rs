//! The ShardFS strategy (seed 000 §3.3).
//!
//! Every server holds the directory lookup state, so file operations are one RPC
//! to the primary server of the path. Directory mutations are transactions under
//! the lock service: mkdir and chmod/chown of a directory run on the primary first
//! and then on every replica (Procedure 1); rmdir runs on the replicas first and
//! then on the primary, rolled back on failure (Procedure 2); a directory rename is
//! checked on every server, applied on every server, and followed by moving the
//! objects whose primary changed.
//!
//! Single-RPC operations take no locks (optimistic). The server that answers one is
//! the primary of its target, which is also the commit point of every directory
//! mutation of that path, so its ENOENT, ENOTDIR and EEXIST are authoritative. Only
//! an EACCES (permission state replicated from elsewhere, possibly mid-change), an
//! EREMOTE (a replica that may not have seen a mkdir yet) or an EAGAIN (the path is
//! fenced off by a non-monotonic transaction) can come from a directory mutation in
//! flight; those are retried once under read locks on the whole path
//! (pessimistic), and the retry is counted.
//!
//! Directory setattr picks its procedure by how it changes the permitted
//! operations (`monotonic.rs`): only adding, Procedure 1; only removing, Procedure
//! 2; both (and every chown, and every directory rename), fenced: every server
//! answers single-RPC operations on the affected subtrees EAGAIN until it ends.

use crate::recover::Recovers;
use crate::core::{dir_attr_from, lookup_part, pick_error, times_part, unexpected, ClientCore, NsOptions};
use crate::data::{DataRead, DataWrite};
use crate::fsck::FsckSummary;
use crate::follow::LinkFailed;
use crate::monotonic::{self, Change};

use crate::namespace::{Namespace, Res};
use crate::counters::ClientCounters;
use crate::touches::{DirTouches, TouchedDir};
use crate::txn::{after_commit, first_unknown, left_to_recovery, outcome_unknown, stopped_for_recovery, Step, Txn};
use canopy_posix::lockset::{path_locks, path_read_locks};
use canopy_posix::perm;
use canopy_posix::setattr;
use canopy_proto::msg::{dir_id_of_txn, At, DirLookup, DirTimes, IfExists, Intent, MovedItem, NewKind, RenameDirStep, ServerStats};
use canopy_proto::path::NsPath;
use canopy_proto::placement;
use canopy_proto::{Attr, Creds, DirEntry, Errno, FileKind, Reply, Request, SetAttr};
use canopy_rpc::Transport;
use futures::future::{join_all, BoxFuture};
use std::collections::HashMap;
use std::sync::Arc;

mod data;
mod dirs;
mod fences;
mod files;
mod namespace;
mod recovery;
mod rename;
mod repair;

pub(crate) use recovery::By;

/// Objects moved per step of a directory rename's migration.
const MIGRATE_BATCH: u32 = 1024;

/// The ShardFS client: the mode-generic [`ClientCore`] (reached through `Deref`:
/// `self.rpc`, `self.counters`, `self.lock_with` below are the core's), and the
/// ShardFS protocol on top of it.
pub struct ShardFs {
    core: ClientCore,
}

impl std::ops::Deref for ShardFs {
    type Target = ClientCore;

    fn deref(&self) -> &ClientCore {
        &self.core
    }
}

/// Errors that may come from a replica caught mid-way through a directory mutation.
/// EAGAIN: the server fenced the path off for a non-monotonic transaction.
fn may_be_transient(e: &Errno) -> bool {
    matches!(e, Errno::EACCES | Errno::EREMOTE | Errno::EAGAIN)
}

/// The registry's way in: ShardFS's client (`canopy_proto::for_each_mode!`).
pub(crate) fn open(_: &canopy_proto::modes::ShardFsOptions, backend: crate::Backend, opts: &NsOptions) -> Result<Arc<dyn Namespace>, String> {
    let t = backend.cluster("shardfs")?;
    Ok(crate::factory::delegated_if_asked(Arc::new(ShardFs::open(t.clone(), opts)), t, opts, None))
}

impl ShardFs {
    /// A ShardFS client over `t` (see [`crate::open_namespace`], which callers
    /// outside this crate use).
    pub(crate) fn open(t: Arc<dyn Transport>, opts: &NsOptions) -> ShardFs {
        ShardFs { core: ClientCore::new(t, opts) }
    }

    /// Runs `attempt` optimistically; on an error a replica mid-mutation could have
    /// caused, runs it again holding read locks on `path`, then settles EREMOTE.
    pub(super) async fn optimistic<T, F, Fut>(&self, c: &Creds, path: &NsPath, attempt: F) -> Res<T>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Res<T>>,
    {
        let r = match attempt().await {
            Err(e) if may_be_transient(&e) => self.under_read_locks(path, attempt).await,
            other => other,
        };
        self.settle(c, path, r).await
    }

    /// Runs `attempt` again holding read locks on `path`, so after any
    /// directory mutation on it ended (a counted retry).
    pub(super) async fn under_read_locks<T, F, Fut>(&self, path: &NsPath, attempt: F) -> Res<T>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Res<T>>,
    {
        self.counters.retried();
        let txn = self.lock_recovering(path_read_locks(path), Intent::Retry { path: path.to_string() }).await?;
        // Holding a read lock on `path`, no transaction that fenced it is
        // still running: a fence is stale (a mkdir's unfence is posted).
        let r = self.lifting_stale_fences(path, attempt).await;
        self.unlock(txn).await;
        r
    }

    /// Runs `attempt`, and once more after lifting the fences over `path` if
    /// it met one (`EAGAIN`): for a caller whose locks prove every such
    /// fence stale.
    pub(super) async fn lifting_stale_fences<T, F, Fut>(&self, path: &NsPath, attempt: F) -> Res<T>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Res<T>>,
    {
        match attempt().await {
            Err(Errno::EAGAIN) => {
                self.clear_fences(path).await;
                attempt().await
            }
            r => r,
        }
    }

    /// `req` about `path` to its primary, from a transaction that holds the
    /// write lock of `path` and has fenced nothing yet. A fence over `path`
    /// is then stale (an unfence lost with its connection), or one a restarted
    /// server put back for this very transaction: it is lifted and `req` sent
    /// again, as `under_read_locks` does.
    pub(super) async fn under_own_locks(&self, c: &Creds, path: &NsPath, req: Request) -> Res<Reply> {
        self.lifting_stale_fences(path, || self.rpc(self.primary(path), c, req.clone())).await
    }

    /// Lifts the stale fences covering `path` on every server (see `under_read_locks`).
    pub(super) async fn clear_fences(&self, path: &NsPath) {
        let clear = |_| Request::ClearFences { path: path.to_string() };
        for (i, r) in self.fan_out(0..self.n, &Creds::root(), clear).await {
            if let Err(e) = r {
                eprintln!("canopy-client: could not clear the stale fences over {path} on server {i}: {e}");
            }
        }
    }

    /// One request to the primary of `path`, optimistically.
    pub(crate) async fn single(&self, c: &Creds, path: &NsPath, req: Request) -> Res<Reply> {
        let prim = self.primary(path);
        self.optimistic(c, path, || self.rpc(prim, c, req.clone())).await
    }

    pub(crate) fn primary(&self, p: &NsPath) -> u32 {
        placement::primary(p, self.n)
    }

    /// Applies a transaction step on every server but `prim`: in parallel, or,
    /// under a test hook, one at a time with a [`Step::ReplicaDone`] after each.
    pub(super) async fn on_replicas(&self, txn: Txn, prim: u32, c: &Creds, intent: &Intent, req: impl Fn(u32) -> Request) -> Res<Vec<(u32, Res<Reply>)>> {
        if self.hook.is_none() {
            return Ok(self.fan_out(self.all_but(prim), c, req).await);
        }
        self.one_by_one(txn, self.all_but(prim), c, intent, req).await
    }

    /// A transaction step on `others` and on its commit point `prim`: all in
    /// parallel, or, under a test hook, `others` one at a time (a
    /// [`Step::ReplicaDone`] after each), then `prim`.
    pub(super) async fn with_commit_point(&self, txn: Txn, others: impl Iterator<Item = u32>, prim: u32, c: &Creds, intent: &Intent, req: impl Fn(u32) -> Request) -> Res<Vec<(u32, Res<Reply>)>> {
        if self.hook.is_none() {
            return Ok(self.fan_out(others.chain([prim]), c, req).await);
        }
        let mut results = self.one_by_one(txn, others, c, intent, &req).await?;
        results.push((prim, self.rpc(prim, c, req(prim)).await));
        Ok(results)
    }

    /// A transaction step on `servers` one at a time, with a
    /// [`Step::ReplicaDone`] after each.
    pub(super) async fn one_by_one(&self, txn: Txn, servers: impl Iterator<Item = u32>, c: &Creds, intent: &Intent, req: impl Fn(u32) -> Request) -> Res<Vec<(u32, Res<Reply>)>> {
        let mut results = Vec::new();
        for i in servers {
            results.push((i, self.rpc(i, c, req(i)).await));
            self.step(txn, || Step::ReplicaDone(intent.clone(), i)).await?;
        }
        Ok(results)
    }

    pub(super) async fn lock(&self, paths: &[&NsPath], intent: Intent) -> Res<Txn> {
        self.lock_recovering(path_locks(paths), intent).await
    }


    /// Runs `body` (given the transaction's id) holding the path locks of `paths`.
    pub(super) async fn locked<T, Fut>(&self, paths: &[&NsPath], intent: Intent, body: impl FnOnce(Txn) -> Fut) -> Res<T>
    where
        Fut: std::future::Future<Output = Res<T>>,
    {
        let taken_over_means_stop = self.revokes(&intent);
        let txn = self.lock(paths, intent).await?;
        // A step refused because recovery has taken the transaction over
        // (revoked it, or lifted its fence): recovery decides.
        let r = body(txn).await;
        let r = if taken_over_means_stop { stopped_for_recovery(txn, r) } else { r };
        self.finish(txn, &r).await;
        r
    }

    /// Turns `EREMOTE` (a component is not a directory on the server that
    /// answered) into `ENOTDIR` or `ENOENT` by asking the primaries of the path's
    /// ancestors, deepest first.
    pub(super) async fn settle<T>(&self, c: &Creds, path: &NsPath, r: Res<T>) -> Res<T> {
        match r {
            Err(Errno::EREMOTE) => Err(self.classify_missing(c, path).await),
            other => other,
        }
    }

    /// `settle` for an operation on two paths: the source is checked first, so its
    /// error wins; otherwise the destination's path is classified.
    pub(super) async fn settle_two<T>(&self, c: &Creds, src: &NsPath, dst: &NsPath, r: Res<T>) -> Res<T> {
        match r {
            Err(Errno::EREMOTE) => match self.stat_path(c, src).await {
                Err(e) => Err(e),
                Ok(_) => Err(self.classify_missing(c, dst).await),
            },
            other => other,
        }
    }

    pub(super) async fn classify_missing(&self, c: &Creds, path: &NsPath) -> Errno {
        let mut cur = path.split().map(|(p, _)| p);
        while let Some(p) = cur {
            // A fence (a rename of an ancestor in flight) is waited out, not
            // answered: EAGAIN is no error of the caller's operation.
            let stat = || self.rpc(self.primary(&p), c, Request::Stat { at: p.to_string().into() });
            let r = match stat().await {
                Err(Errno::EAGAIN) => self.under_read_locks(&p, stat).await,
                r => r,
            };
            match r {
                Ok(Reply::Attr(a)) if a.kind == FileKind::Dir => return Errno::ENOENT,
                Ok(Reply::Attr(_)) | Ok(Reply::Redirect { .. }) => return Errno::ENOTDIR,
                Err(Errno::ENOENT) | Err(Errno::EREMOTE) => cur = p.split().map(|(q, _)| q),
                Err(e) => return e,
                Ok(other) => return unexpected(other),
            }
        }
        Errno::ENOENT
    }

    pub(super) async fn stat_path(&self, c: &Creds, p: &NsPath) -> Res<Attr> {
        self.send_owed_touch(|| TouchedDir::Path(p.clone())).await;
        let reply = self.single(c, p, Request::Stat { at: p.to_string().into() }).await?;
        self.attr_or_follow(reply).await
    }

    /// One page of a directory: every server's names after `after`, merged.
    pub(super) async fn readdir_once(&self, c: &Creds, p: &NsPath, after: Option<&str>, limit: u32) -> Res<(Vec<DirEntry>, bool)> {
        let prim = self.primary(p);
        let path_s = p.to_string();
        let after_s = after.map(str::to_string);
        let results = self
            .fan_out(0..self.n, c, |i| Request::ReadDir { at: path_s.clone().into(), after: after_s.clone(), limit, with_dirs: i == prim })
            .await;
        if let Some(e) = pick_error(&results, prim) {
            return Err(e);
        }
        let mut entries = Vec::new();
        let mut more = false;
        for (_, r) in results {
            match r? {
                Reply::Entries { entries: e, more: m } => {
                    entries.extend(e);
                    more |= m;
                }
                other => return Err(unexpected(other)),
            }
        }
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        if entries.len() > limit as usize {
            entries.truncate(limit as usize);
            more = true;
        }
        Ok((entries, more))
    }
}
