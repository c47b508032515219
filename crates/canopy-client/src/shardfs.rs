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

use crate::core::{dir_attr_from, lookup_part, pick_error, times_part, unexpected, ClientCore, NsOptions};
use crate::data::{DataRead, DataWrite};
use crate::fsck::FsckSummary;
use crate::follow::LinkFailed;
use crate::monotonic::{self, Change};
use crate::recovery::{revokes, By};
use crate::namespace::{Namespace, Res};
use crate::counters::ClientCounters;
use crate::touches::{DirTouches, TouchedDir};
use crate::txn::{after_commit, first_unknown, left_to_recovery, outcome_unknown, stopped_for_recovery, Handed, Step, Txn};
use canopy_posix::lockset::{path_locks, path_read_locks};
use canopy_posix::perm;
use canopy_posix::setattr;
use canopy_proto::msg::{dir_id_of_txn, At, DirLookup, DirTimes, IfExists, Intent, LockMode, MovedItem, NewKind, RenameDirStep, ServerStats};
use canopy_proto::path::NsPath;
use canopy_proto::placement;
use canopy_proto::{Attr, Creds, DirEntry, Errno, FileKind, Reply, Request, SetAttr};
use canopy_rpc::Transport;
use futures::future::{join_all, BoxFuture};
use std::collections::HashMap;
use std::sync::Arc;

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

impl ShardFs {
    /// A ShardFS client over `t` (see [`crate::open_namespace`], which callers
    /// outside this crate use).
    pub(crate) fn open(t: Arc<dyn Transport>, opts: &NsOptions) -> ShardFs {
        ShardFs { core: ClientCore::new(t, opts) }
    }

    /// Runs `attempt` optimistically; on an error a replica mid-mutation could have
    /// caused, runs it again holding read locks on `path`, then settles EREMOTE.
    async fn optimistic<T, F, Fut>(&self, c: &Creds, path: &NsPath, attempt: F) -> Res<T>
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
    async fn under_read_locks<T, F, Fut>(&self, path: &NsPath, attempt: F) -> Res<T>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Res<T>>,
    {
        self.counters.retried();
        let txn = self.lock_with(path_read_locks(path), Intent::Retry { path: path.to_string() }).await?;
        // Holding a read lock on `path`, no transaction that fenced it is
        // still running: a fence is stale (a mkdir's unfence is posted).
        let r = self.lifting_stale_fences(path, attempt).await;
        self.unlock(txn).await;
        r
    }

    /// Runs `attempt`, and once more after lifting the fences over `path` if
    /// it met one (`EAGAIN`): for a caller whose locks prove every such
    /// fence stale.
    async fn lifting_stale_fences<T, F, Fut>(&self, path: &NsPath, attempt: F) -> Res<T>
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
    async fn under_own_locks(&self, c: &Creds, path: &NsPath, req: Request) -> Res<Reply> {
        self.lifting_stale_fences(path, || self.rpc(self.primary(path), c, req.clone())).await
    }

    /// Lifts the stale fences covering `path` on every server (see `under_read_locks`).
    async fn clear_fences(&self, path: &NsPath) {
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
    async fn on_replicas(&self, txn: Txn, prim: u32, c: &Creds, intent: &Intent, req: impl Fn(u32) -> Request) -> Res<Vec<(u32, Res<Reply>)>> {
        if self.hook.is_none() {
            return Ok(self.fan_out(self.all_but(prim), c, req).await);
        }
        self.one_by_one(txn, self.all_but(prim), c, intent, req).await
    }

    /// A transaction step on `others` and on its commit point `prim`: all in
    /// parallel, or, under a test hook, `others` one at a time (a
    /// [`Step::ReplicaDone`] after each), then `prim`.
    async fn with_commit_point(&self, txn: Txn, others: impl Iterator<Item = u32>, prim: u32, c: &Creds, intent: &Intent, req: impl Fn(u32) -> Request) -> Res<Vec<(u32, Res<Reply>)>> {
        if self.hook.is_none() {
            return Ok(self.fan_out(others.chain([prim]), c, req).await);
        }
        let mut results = self.one_by_one(txn, others, c, intent, &req).await?;
        results.push((prim, self.rpc(prim, c, req(prim)).await));
        Ok(results)
    }

    /// A transaction step on `servers` one at a time, with a
    /// [`Step::ReplicaDone`] after each.
    async fn one_by_one(&self, txn: Txn, servers: impl Iterator<Item = u32>, c: &Creds, intent: &Intent, req: impl Fn(u32) -> Request) -> Res<Vec<(u32, Res<Reply>)>> {
        let mut results = Vec::new();
        for i in servers {
            results.push((i, self.rpc(i, c, req(i)).await));
            self.step(txn, || Step::ReplicaDone(intent.clone(), i)).await?;
        }
        Ok(results)
    }

    async fn lock(&self, paths: &[&NsPath], intent: Intent) -> Res<Txn> {
        self.lock_with(path_locks(paths), intent).await
    }

    /// Takes `locks` for a transaction doing `intent`, recovering (ShardFS's way)
    /// a dead coordinator's transaction the lock service hands over.
    pub(crate) async fn lock_with(&self, locks: Vec<(String, LockMode)>, intent: Intent) -> Res<Txn> {
        let recover = |txn: Txn, handed: Handed, failed: Intent| -> BoxFuture<'_, Res<()>> { Box::pin(async move { self.recover(txn, handed, &failed).await }) };
        self.core.lock_with(locks, intent, &recover).await
    }

    /// Runs `body` (given the transaction's id) holding the path locks of `paths`.
    async fn locked<T, Fut>(&self, paths: &[&NsPath], intent: Intent, body: impl FnOnce(Txn) -> Fut) -> Res<T>
    where
        Fut: std::future::Future<Output = Res<T>>,
    {
        let taken_over_means_stop = revokes(&intent);
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
    async fn settle<T>(&self, c: &Creds, path: &NsPath, r: Res<T>) -> Res<T> {
        match r {
            Err(Errno::EREMOTE) => Err(self.classify_missing(c, path).await),
            other => other,
        }
    }

    /// `settle` for an operation on two paths: the source is checked first, so its
    /// error wins; otherwise the destination's path is classified.
    async fn settle_two<T>(&self, c: &Creds, src: &NsPath, dst: &NsPath, r: Res<T>) -> Res<T> {
        match r {
            Err(Errno::EREMOTE) => match self.stat_path(c, src).await {
                Err(e) => Err(e),
                Ok(_) => Err(self.classify_missing(c, dst).await),
            },
            other => other,
        }
    }

    async fn classify_missing(&self, c: &Creds, path: &NsPath) -> Errno {
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

    async fn stat_path(&self, c: &Creds, p: &NsPath) -> Res<Attr> {
        self.send_owed_touch(|| TouchedDir::Path(p.clone())).await;
        let reply = self.single(c, p, Request::Stat { at: p.to_string().into() }).await?;
        self.attr_or_follow(reply).await
    }

    /// One page of a directory: every server's names after `after`, merged.
    async fn readdir_once(&self, c: &Creds, p: &NsPath, after: Option<&str>, limit: u32) -> Res<(Vec<DirEntry>, bool)> {
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

    /// mkdir as transaction `txn` (Procedure 1 with the primary and the replicas
    /// at once): the new directory's id comes from `txn`, so every server can
    /// apply it in the same round trip; each replica fences it until the
    /// primary's answer (the commit point) is known, so no file is made below
    /// a directory that may yet be rolled back.
    async fn do_mkdir(&self, c: &Creds, p: &NsPath, mode: u32, txn: Txn) -> Res<Attr> {
        let prim = self.primary(p);
        let id = dir_id_of_txn(txn.id).ok_or(Errno::ENOSPC)?;
        let path = p.to_string();
        let intent = || Intent::Mkdir { path: p.to_string() };
        self.step(txn, || Step::Locked(intent())).await?;
        let req = |i: u32| Request::Mkdir { path: path.clone(), mode, id, fence: (i != prim).then_some(txn.id) };
        let results = self.with_commit_point(txn, self.all_but(prim), prim, c, &intent(), req).await?;
        let applied: Vec<u32> = results.iter().filter(|(i, r)| *i != prim && r.is_ok()).map(|(i, _)| *i).collect();
        let made = match results.iter().find(|(i, _)| *i == prim).map(|(_, r)| r) {
            Some(Ok(Reply::Attr(a))) if a.kind == FileKind::Dir => a.clone(),
            Some(Ok(other)) => return Err(unexpected(other.clone())),
            _ => return self.mkdir_refused(p, prim, txn.id, results, applied).await,
        };
        self.last_step(|| Step::PrimaryDone(intent())).await?;
        if let Some(e) = pick_error(&results, prim) {
            eprintln!("canopy-client: mkdir {p} committed but a replica failed: {e}");
            return Err(Errno::EIO);
        }
        self.last_step(|| Step::ReplicasDone(intent())).await?;
        self.post_unfence(applied, txn.id).await;
        Ok(made)
    }

    /// A mkdir the primary did not apply: the replicas that did are put back
    /// and their fences lifted, and the primary's error answered; if an answer
    /// was lost, recovery decides.
    async fn mkdir_refused(&self, p: &NsPath, prim: u32, txn: u64, results: Vec<(u32, Res<Reply>)>, applied: Vec<u32>) -> Res<Attr> {
        if let Some((i, e)) = first_unknown(&results) {
            return Err(self.undecided(p, i, e));
        }
        let err = pick_error(&results, prim).unwrap_or(Errno::EIO);
        let err = self.roll_back(p, txn, applied.iter().map(|i| (*i, None)), err).await;
        if !outcome_unknown(&err) {
            self.post_unfence(applied, txn).await;
        }
        Err(err)
    }

    /// Lifts transaction `txn`'s fences on `servers` without waiting, and
    /// perhaps a little late (with this client's next request to each:
    /// `Transport::post_soon`): this client's later requests to them are
    /// served after it. Another client may still meet such a fence for a
    /// moment (or for good, if the post is lost with its connection): it
    /// retries under read locks, which prove the transaction over, and clears
    /// it then (`under_read_locks`).
    async fn post_unfence(&self, servers: Vec<u32>, txn: u64) {
        for i in servers {
            self.post_soon(i, &Creds::root(), Request::Unfence { txn }, || format!("the unfence of transaction {txn} to server {i}")).await;
        }
    }

    async fn do_rmdir(&self, c: &Creds, p: &NsPath, txn: Txn) -> Res<()> {
        let prim = self.primary(p);
        let path = p.to_string();
        let intent = || Intent::Rmdir { path: p.to_string() };
        self.step(txn, || Step::Locked(intent())).await?;
        let mut results = self.on_replicas(txn, prim, c, &intent(), |_| Request::Rmdir { path: path.clone(), txn: txn.id }).await?;
        self.step(txn, || Step::ReplicasDone(intent())).await?;
        if pick_error(&results, prim).is_none() {
            let r = self.rpc(prim, c, Request::Rmdir { path: path.clone(), txn: txn.id }).await;
            if r.is_ok() {
                return self.last_step(|| Step::PrimaryDone(intent())).await;
            }
            results.push((prim, r));
        }
        if let Some((i, e)) = first_unknown(&results) {
            return Err(self.undecided(p, i, e));
        }
        let Some(mut err) = pick_error(&results, prim) else { return Err(Errno::EIO) };
        if err == Errno::ENOENT && !results.iter().any(|(i, _)| *i == prim) {
            err = self.rmdir_absent(c, p).await;
        }
        let removed = results.iter().filter_map(|(i, r)| match r {
            Ok(Reply::Dir(l)) => Some((*i, Some(l.clone()))),
            _ => None,
        });
        Err(self.roll_back(p, txn.id, removed, err).await)
    }

    /// Procedure 2 met a server whose answer was lost: whether the primary (the
    /// commit point) applied the change is unknown, so nothing is rolled back by
    /// guess. EIO leaves the transaction to recovery, which reads the primary's
    /// durable state and rolls forward or back from it.
    fn undecided(&self, p: &NsPath, server: u32, e: Errno) -> Errno {
        eprintln!("canopy-client: {p}: server {server} answered {e}; outcome unknown, left to recovery");
        Errno::EIO
    }

    /// Procedure 2's rollback: puts each server that applied the change back to
    /// its old lookup state, and answers `err`. If an undo fails, the outcome is
    /// uncertain: EIO, so the transaction is left to recovery (which makes the
    /// replicas equal the unchanged primary) instead of being unlocked.
    /// Each undo names transaction `txn`, so a server where recovery has
    /// taken it over refuses it (recovery decides there).
    async fn roll_back(&self, p: &NsPath, txn: u64, applied: impl Iterator<Item = (u32, Option<DirLookup>)>, err: Errno) -> Errno {
        for (i, old) in applied {
            let undo = Request::DirSync { path: p.to_string(), want: old, txn: Some(txn) };
            if let Err(e) = self.rpc(i, &Creds::root(), undo).await {
                eprintln!("canopy-client: rollback of {p} on server {i} failed: {e}; left to recovery");
                return Errno::EIO;
            }
        }
        err
    }

    /// The error of an rmdir whose replicas found no directory: they know only
    /// directories, so a file of that name (ENOTDIR) lives on the primary alone.
    /// Only the primary's own answer tells: a stat it did not answer (down,
    /// connection lost) is that error, not a guess of ENOENT. Nothing was
    /// applied either way.
    async fn rmdir_absent(&self, c: &Creds, p: &NsPath) -> Errno {
        match self.rpc(self.primary(p), c, Request::Stat { at: p.to_string().into() }).await {
            Ok(Reply::Attr(_) | Reply::Redirect { .. }) => Errno::ENOTDIR,
            Ok(other) => unexpected(other),
            Err(e) => e,
        }
    }

    /// chmod/chown of a directory, holding its lock: picks the procedure by how
    /// the change moves the permitted operations.
    async fn do_dir_setattr(&self, c: &Creds, p: &NsPath, set: &SetAttr, txn: Txn) -> Res<Attr> {
        let prim = self.primary(p);
        let old = match self.rpc(prim, &Creds::root(), Request::DirProbe { path: p.to_string() }).await? {
            Reply::Probe(Some(l)) => l,
            // Missing here: the primary-first path reports the caller's error.
            Reply::Probe(None) => return self.dir_setattr_primary_first(c, p, set, txn).await,
            other => return Err(unexpected(other)),
        };
        let mut attr = dir_attr_from(&old);
        if setattr::apply(c, &mut attr, set, 0).is_err() {
            return self.dir_setattr_primary_first(c, p, set, txn).await; // refused on the primary
        }
        let new = DirLookup { id: old.id, mode: attr.mode, uid: attr.uid, gid: attr.gid };
        match monotonic::classify(&old, &new) {
            Change::Neutral | Change::Increasing => self.dir_setattr_primary_first(c, p, set, txn).await,
            Change::Decreasing => self.dir_setattr_replicas_first(c, p, set, &old, txn).await,
            Change::NonMonotonic => self.fenced(txn.id, &[p], self.dir_setattr_primary_first(c, p, set, txn)).await,
        }
    }

    /// Procedure 1: the primary (the commit point), then every replica.
    async fn dir_setattr_primary_first(&self, c: &Creds, p: &NsPath, set: &SetAttr, txn: Txn) -> Res<Attr> {
        let prim = self.primary(p);
        let path = p.to_string();
        let intent = || Intent::DirSetAttr { path: p.to_string() };
        self.step(txn, || Step::Locked(intent())).await?;
        let attr = match self.rpc(prim, c, Request::DirSetAttr { path: path.clone(), set: set.clone(), txn: txn.id }).await? {
            Reply::Attr(a) => a,
            other => return Err(unexpected(other)),
        };
        self.step(txn, || Step::PrimaryDone(intent())).await?;
        let results = self.on_replicas(txn, prim, c, &intent(), |_| Request::DirSetAttr { path: path.clone(), set: set.clone(), txn: txn.id }).await?;
        if let Some(e) = pick_error(&results, prim) {
            eprintln!("canopy-client: setattr of directory {p} committed but a replica failed: {e}");
            return Err(Errno::EIO);
        }
        self.last_step(|| Step::ReplicasDone(intent())).await?;
        Ok(attr)
    }

    /// Procedure 2: every replica, then the primary (the commit point); on any
    /// failure the replicas are put back to `old`.
    async fn dir_setattr_replicas_first(&self, c: &Creds, p: &NsPath, set: &SetAttr, old: &DirLookup, txn: Txn) -> Res<Attr> {
        let prim = self.primary(p);
        let path = p.to_string();
        let intent = || Intent::DirSetAttr { path: p.to_string() };
        self.step(txn, || Step::Locked(intent())).await?;
        let mut results = self.on_replicas(txn, prim, c, &intent(), |_| Request::DirSetAttr { path: path.clone(), set: set.clone(), txn: txn.id }).await?;
        self.step(txn, || Step::ReplicasDone(intent())).await?;
        if pick_error(&results, prim).is_none() {
            match self.rpc(prim, c, Request::DirSetAttr { path: path.clone(), set: set.clone(), txn: txn.id }).await {
                Ok(Reply::Attr(a)) => {
                    self.last_step(|| Step::PrimaryDone(intent())).await?;
                    return Ok(a);
                }
                Ok(other) => return Err(unexpected(other)),
                Err(e) => results.push((prim, Err(e))),
            }
        }
        if let Some((i, e)) = first_unknown(&results) {
            return Err(self.undecided(p, i, e));
        }
        let Some(err) = pick_error(&results, prim) else { return Err(Errno::EIO) };
        let applied = results.iter().filter(|(_, r)| r.is_ok()).map(|(i, _)| (*i, Some(old.clone())));
        Err(self.roll_back(p, txn.id, applied, err).await)
    }

    /// Runs `body` with single-RPC operations on `paths` and below fenced off on
    /// every server (a non-monotonic transaction `txn`).
    async fn fenced<T>(&self, txn: u64, paths: &[&NsPath], body: impl std::future::Future<Output = Res<T>>) -> Res<T> {
        self.fenced_on(0..self.n, txn, paths, body).await
    }

    /// `fenced`, on `servers` only.
    async fn fenced_on<T>(
        &self,
        servers: impl Iterator<Item = u32>,
        txn: u64,
        paths: &[&NsPath],
        body: impl std::future::Future<Output = Res<T>>,
    ) -> Res<T> {
        let paths: Vec<String> = paths.iter().map(|p| p.to_string()).collect();
        let servers: Vec<u32> = servers.collect();
        let fenced = self.fan_out(servers.iter().copied(), &Creds::root(), |_| Request::Fence { txn, paths: paths.clone() }).await;
        let r = match fenced.iter().find_map(|(_, r)| r.as_ref().err()) {
            Some(e) => Err(*e),
            None => body.await,
        };
        // Only where fences went up (a file rename fences two servers, not N).
        self.unfenced_after(servers.into_iter(), txn, r).await
    }

    /// Lifts transaction `txn`'s fences on `servers` once its work ended with
    /// `r`, and answers `r` (or why a fence may still stand). Work left to
    /// recovery (its outcome unknown) keeps them: its change may be half
    /// made, a request that meets a fence waits for the transaction under
    /// read locks, and recovery lifts them once it has decided.
    async fn unfenced_after<T>(&self, servers: impl Iterator<Item = u32>, txn: u64, r: Res<T>) -> Res<T> {
        if r.as_ref().is_err_and(left_to_recovery) {
            return r;
        }
        match self.unfence_on(servers, txn).await {
            Ok(()) => r,
            // A fence may still stand: recovery lifts it.
            Err(e) => Err(after_commit("unfence", e)),
        }
    }

    /// Lifts transaction `txn`'s fences on every server. A server that refuses the
    /// connection is not running: when it starts, it fences what the transactions
    /// still open lock, and a fence of one ended since is cleared by the first
    /// operation that meets it (`under_read_locks`).
    pub(crate) async fn unfence(&self, txn: u64) -> Res<()> {
        self.unfence_on(0..self.n, txn).await
    }

    /// `unfence`, on `servers` only.
    async fn unfence_on(&self, servers: impl Iterator<Item = u32>, txn: u64) -> Res<()> {
        for (_, r) in self.fan_out(servers, &Creds::root(), |_| Request::Unfence { txn }).await {
            match r {
                Ok(_) | Err(Errno::ECONNREFUSED) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// A directory rename under transaction `txn`'s locks, once `checks` (one
    /// per server, each fencing both names) found it a directory.
    async fn rename_dir(&self, c: &Creds, src: &NsPath, dst: &NsPath, txn: Txn, checks: Vec<(u32, Res<Reply>)>) -> Res<()> {
        let found = match rename_checks(checks, self.primary(src), self.primary(dst)) {
            Ok(found) => found,
            Err(e) => return self.unfenced_after(0..self.n, txn.id, Err(e)).await,
        };
        match self.rename_dir_apply(c, src, dst, txn, found).await {
            Ok(Fences::Lifted) => Ok(()),
            Ok(Fences::Up) => self.unfenced_after(0..self.n, txn.id, Ok(())).await,
            // Whether it committed, or finished, is for recovery to find out
            // from the servers' state; it lifts the fences too.
            Err(e) if left_to_recovery(&e) => Err(e),
            Err(e) => self.unfenced_after(0..self.n, txn.id, Err(e)).await,
        }
    }

    /// Applies a checked directory rename: every server at once. The
    /// destination's primary is the commit point recovery rolls forward
    /// from; the others keep their fences until it answered. The source's
    /// primary drops the directory's times, which the destination's primary
    /// keeps from now on, but parks them until the transaction ends there, so
    /// an undo can take them back (the server's `parked.rs`). Then the
    /// objects below whose primary changed migrate. When nothing is below (a
    /// leaf without files), the fences still up are lifted by posts: the lock,
    /// the check and one fan-out.
    async fn rename_dir_apply(&self, c: &Creds, src: &NsPath, dst: &NsPath, txn: Txn, found: Vec<(u32, Checked)>) -> Res<Fences> {
        let (s, d) = (src.to_string(), dst.to_string());
        let (prim, old_prim) = (self.primary(dst), self.primary(src));
        let below = found.iter().any(|(_, k)| k.below);
        let times = found.iter().find(|(i, _)| *i == old_prim).and_then(|(_, k)| k.times);
        let req = |i: u32| {
            let step = RenameDirStep::Apply { times, unfence: (i == prim && !below).then_some(txn.id), txn: Some(txn.id) };
            Request::RenameDir { src: s.clone(), dst: d.clone(), step }
        };
        let intent = || Intent::Rename { src: s.clone(), dst: d.clone() };
        self.step(txn, || Step::Locked(intent())).await?;
        let early: Vec<u32> = self.all_but(prim).collect();
        let mut applied = self.with_commit_point(txn, early.iter().copied(), prim, c, &intent(), &req).await?;
        let at_prim = match applied.iter().position(|(i, _)| *i == prim).map(|k| applied.remove(k).1) {
            Some(Ok(r)) => checked(r)?,
            Some(Err(e)) if left_to_recovery(&e) => return Err(self.undecided(dst, prim, e)),
            // Refused after all: put back the servers that applied it (if
            // that fails, EIO leaves the transaction to recovery).
            Some(Err(e)) => {
                return match self.recover_rename(src, dst, txn, txn.id, By::Coordinator).await {
                    Ok(()) => Err(e),
                    Err(_) => Err(Errno::EIO),
                }
            }
            None => return Err(Errno::EIO),
        };
        self.step(txn, || Step::PrimaryDone(intent())).await?;
        if let Some(e) = pick_error(&applied, prim) {
            eprintln!("canopy-client: rename {src} -> {dst} passed its checks but failed on a server: {e}");
            return Err(Errno::EIO);
        }
        self.last_step(|| Step::ReplicasDone(intent())).await?;
        // A server that found something below after all kept its fence.
        let found_below = at_prim.below || applied.into_iter().any(|(_, r)| r.ok().and_then(|r| checked(r).ok()).is_some_and(|k| k.below));
        if !below && !found_below {
            self.post_unfence(early, txn.id).await;
            return Ok(Fences::Lifted);
        }
        self.migrate_all(dst, txn).await.map_err(|e| after_commit("directory rename", e))?;
        Ok(Fences::Up)
    }

    /// Moves the objects below `root` whose primary changed, from every server
    /// at once. Idempotent: recovery runs it again after a coordinator died
    /// mid-way.
    pub(crate) async fn migrate_all(&self, root: &NsPath, txn: Txn) -> Res<()> {
        join_all((0..self.n).map(|server| self.migrate_from(server, root, txn))).await.into_iter().collect()
    }

    /// Moves the objects below `root` on `server` whose primary changed: each
    /// batch is copied to its new primaries at once, then dropped here.
    async fn migrate_from(&self, server: u32, root: &NsPath, txn: Txn) -> Res<()> {
        let root_s = root.to_string();
        let txn_id = Some(txn.id);
        loop {
            self.keep_alive(txn).await?;
            let moved = match self.rpc(server, &Creds::root(), Request::Migrate { root: root_s.clone(), limit: MIGRATE_BATCH }).await? {
                Reply::Moved(m) => m,
                other => return Err(unexpected(other)),
            };
            // A server also stops short of the limit by bytes (inline file
            // contents): only an empty answer says it has listed all.
            if moved.is_empty() {
                return Ok(());
            }
            let mut by_target: HashMap<u32, Vec<MovedItem>> = HashMap::new();
            for m in &moved {
                by_target.entry(m.target).or_default().push(m.item.clone());
            }
            let root = Creds::root();
            let adopted = join_all(by_target.into_iter().map(|(target, items)| self.rpc(target, &root, Request::Adopt { items, txn: txn_id }))).await;
            for r in adopted {
                r?;
            }
            let items = moved.into_iter().map(|m| m.item).collect();
            self.rpc(server, &Creds::root(), Request::Release { items, txn: txn_id }).await?;
        }
    }

    async fn do_rename_file(&self, c: &Creds, src: &NsPath, dst: &NsPath, txn: Txn) -> Res<()> {
        let (a, b) = (self.primary(src), self.primary(dst));
        let (s, d) = (src.to_string(), dst.to_string());
        if a == b {
            let r = self.rpc(a, c, Request::RenameLocal { src: s.into(), dst: d.into(), txn: Some(txn.id) }).await?;
            return self.drop_remote(r).await;
        }
        let record = match self.rpc(a, c, Request::RenameOut { src: s.clone().into(), dst: d.clone().into() }).await? {
            Reply::Record(r) => r,
            other => return Err(unexpected(other)),
        };
        let ino = record.ino();
        let intent = || Intent::Rename { src: s.clone(), dst: d.clone() };
        self.step(txn, || Step::Locked(intent())).await?;
        let inserted = self.rpc(b, c, Request::RenameIn { src: s.clone().into(), dst: d.clone().into(), record, txn: Some(txn.id) }).await?;
        if inserted == Reply::Unit {
            return Ok(()); // Both names are links to one file: POSIX says do nothing.
        }
        self.step(txn, || Step::PrimaryDone(intent())).await?;
        self.rpc(a, &Creds::root(), Request::RenameOutCommit { src: s.into(), ino, txn: Some(txn.id) }).await.map_err(|e| after_commit("file rename", e))?;
        self.drop_remote(inserted).await
    }

    /// `seen_dir`: the caller saw `src` as a directory, so no stat goes
    /// first (a directory rename is a round trip shorter); else a file is
    /// renamed touching its two primaries only.
    async fn do_rename(&self, c: &Creds, src: &NsPath, dst: &NsPath, txn: Txn, seen_dir: bool) -> Res<()> {
        if src.is_root() || dst.is_root() {
            return Err(Errno::EBUSY);
        }
        if !seen_dir {
            // The transaction holds this path's locks: no optimistic retry here (it would
            // wait for its own locks); an EREMOTE is settled after unlocking.
            let reply = self.under_own_locks(c, src, Request::Stat { at: src.to_string().into() }).await?;
            if self.attr_or_follow(reply).await?.kind != FileKind::Dir {
                return self.rename_file(c, src, dst, txn).await;
            }
        }
        // One fan-out fences both names everywhere and checks a directory
        // rename; the source's primary says instead if the source is a file.
        let (s, d) = (src.to_string(), dst.to_string());
        let check = RenameDirStep::Check { txn: txn.id };
        let checks = self.fan_out(0..self.n, c, |_| Request::RenameDir { src: s.clone(), dst: d.clone(), step: check }).await;
        if checks.iter().any(|(_, r)| *r == Err(Errno::ESTALE)) {
            return Err(Errno::ESTALE); // recovery has taken it over
        }
        if checks.iter().any(|(_, r)| matches!(r, Ok(Reply::RenameOfFile))) {
            self.rename_file_fenced(c, src, dst, txn).await
        } else {
            self.rename_dir(c, src, dst, txn, checks).await
        }
    }

    /// A file rename: one atomic RPC when both names have one primary; else
    /// its steps with both primaries fenced (between them the file is under
    /// both names, and no single-RPC operation may see that).
    async fn rename_file(&self, c: &Creds, src: &NsPath, dst: &NsPath, txn: Txn) -> Res<()> {
        let (a, b) = (self.primary(src), self.primary(dst));
        if a == b {
            return self.do_rename_file(c, src, dst, txn).await;
        }
        self.fenced_on([a, b].into_iter(), txn.id, &[src, dst], self.do_rename_file(c, src, dst, txn)).await
    }

    /// A file rename, once the checks fenced both names everywhere: only the
    /// two primaries keep their fences (between its steps the file is under
    /// both names, and no single-RPC operation may see that); one primary
    /// for both names renames in one atomic RPC and keeps none.
    async fn rename_file_fenced(&self, c: &Creds, src: &NsPath, dst: &NsPath, txn: Txn) -> Res<()> {
        let (a, b) = (self.primary(src), self.primary(dst));
        let keep = |i: &u32| a != b && (*i == a || *i == b);
        self.post_unfence((0..self.n).filter(|i| !keep(i)).collect(), txn.id).await;
        let r = self.do_rename_file(c, src, dst, txn).await;
        if a == b {
            return r;
        }
        self.unfenced_after([a, b].into_iter(), txn.id, r).await
    }

    async fn rename_as(&self, c: &Creds, src: &str, dst: &str, seen_dir: bool) -> Res<()> {
        let (s, d) = (NsPath::parse(src)?, NsPath::parse(dst)?);
        if s == d {
            return self.stat_path(c, &s).await.map(|_| ());
        }
        // On this client's connections, so each is served before the rename.
        self.send_owed_touches_below(&s).await;
        let intent = Intent::Rename { src: s.to_string(), dst: d.to_string() };
        let r = self.locked(&[&s, &d], intent, |txn| self.do_rename(c, &s, &d, txn, seen_dir)).await;
        self.settle_two(c, &s, &d, r).await?;
        self.touch_parents(c, &[&s, &d]).await;
        Ok(())
    }

    /// A hard link as transaction `txn` (`ClientCore::link_steps`).
    async fn do_link(&self, c: &Creds, src: &NsPath, dst: &NsPath, txn: Txn) -> Result<Attr, LinkFailed> {
        let shared = self.under_own_locks(c, src, Request::LinkShare { at: src.to_string().into(), txn: Some(txn.id) }).await?;
        let intent = || Intent::Link { src: src.to_string(), dst: dst.to_string() };
        let insert = |ino, home| async move {
            let made = self.under_own_locks(c, dst, Request::LinkInsert { at: dst.to_string().into(), ino, home, txn: Some(txn.id) }).await;
            Ok(made.map(|_| self.primary(dst)))
        };
        self.link_steps(c, shared, txn.id, self.step(txn, || Step::PrimaryDone(intent())), insert).await
    }

    async fn do_setattr(&self, c: &Creds, p: &NsPath, set: &SetAttr) -> Res<Attr> {
        // What this client owes a directory's times goes first: a late touch
        // would undo a utimens (`tar` sets a directory's times last).
        self.send_owed_touch(|| TouchedDir::Path(p.clone())).await;
        match self.single(c, p, Request::SetAttr { at: p.to_string().into(), set: set.clone() }).await {
            Ok(Reply::Redirect { ino, home }) => match self.rpc(home, c, Request::InodeSetAttr { ino, set: set.clone() }).await? {
                Reply::Attr(a) => Ok(a),
                other => Err(unexpected(other)),
            },
            Ok(other) => self.attr_or_follow(other).await,
            // A directory's mode and owner are replicated: a transaction.
            Err(Errno::EISDIR) if set.size.is_none() && set.touches_lookup_state() => {
                let intent = Intent::DirSetAttr { path: p.to_string() };
                let lookup = lookup_part(set);
                let attr = self.locked(&[p], intent, |txn| self.do_dir_setattr(c, p, &lookup, txn)).await?;
                match times_part(set) {
                    None => Ok(attr),
                    Some(times) => {
                        let r = self.rpc(self.primary(p), c, Request::SetAttr { at: p.to_string().into(), set: times }).await?;
                        self.attr_or_follow(r).await
                    }
                }
            }
            Err(e) => Err(e),
        }
    }
}

/// Whether a directory rename's fences are still up when its steps end.
enum Fences {
    /// Lifted, or their lifting posted (nothing migrated).
    Lifted,
    Up,
}

/// One server's answer to a directory rename's step.
struct Checked {
    below: bool,
    times: Option<DirTimes>,
}

/// Every server's check of a directory rename, or the error to answer: the
/// destination's primary's first (it alone knows whether a file has the new
/// name), unless the source's primary did not answer at all (it alone knows
/// whether the source is a file).
fn rename_checks(checks: Vec<(u32, Res<Reply>)>, src_primary: u32, dst_primary: u32) -> Res<Vec<(u32, Checked)>> {
    let unanswered = |e: &Errno| outcome_unknown(e) || *e == Errno::ECONNREFUSED;
    if let Some((_, Err(e))) = checks.iter().find(|(i, r)| *i == src_primary && r.as_ref().is_err_and(unanswered)) {
        return Err(*e);
    }
    if let Some(e) = pick_error(&checks, dst_primary) {
        return Err(e);
    }
    checks.into_iter().map(|(i, r)| Ok((i, checked(r?)?))).collect()
}

fn checked(r: Reply) -> Res<Checked> {
    match r {
        Reply::RenameChecked { below, times } => Ok(Checked { below, times }),
        // The destination already names the moved directory: the server
        // changed nothing, its fences included, so they are lifted after.
        Reply::Unit => Ok(Checked { below: true, times: None }),
        other => Err(unexpected(other)),
    }
}

impl Namespace for ShardFs {
    fn mkdir<'a>(&'a self, c: &'a Creds, path: &'a str, mode: u32) -> BoxFuture<'a, Res<Attr>> {
        Box::pin(async move {
            let p = NsPath::parse(path)?;
            if p.is_root() {
                return Err(Errno::EEXIST);
            }
            let r = self.locked(&[&p], Intent::Mkdir { path: p.to_string() }, |txn| self.do_mkdir(c, &p, mode, txn)).await;
            let attr = self.settle(c, &p, r).await?;
            self.touch_parents(c, &[&p]).await;
            Ok(attr)
        })
    }

    fn rmdir<'a>(&'a self, c: &'a Creds, path: &'a str) -> BoxFuture<'a, Res<()>> {
        Box::pin(async move {
            let p = NsPath::parse(path)?;
            if p.is_root() {
                return Err(Errno::EBUSY);
            }
            let r = self.locked(&[&p], Intent::Rmdir { path: p.to_string() }, |txn| self.do_rmdir(c, &p, txn)).await;
            self.settle(c, &p, r).await?;
            self.touch_parents(c, &[&p]).await;
            Ok(())
        })
    }

    fn create<'a>(&'a self, c: &'a Creds, path: &'a str, mode: u32, if_exists: IfExists) -> BoxFuture<'a, Res<Attr>> {
        Box::pin(async move {
            let p = NsPath::parse(path)?;
            let kind = NewKind::File;
            let reply = self.single(c, &p, Request::Create { at: p.to_string().into(), mode, kind, if_exists }).await?;
            let redirected = matches!(reply, Reply::Redirect { .. });
            let attr = self.attr_or_follow(reply).await?;
            if let (true, IfExists::Open { access }) = (redirected, if_exists) {
                // An existing hard-linked file whose inode lives on another
                // server: the server that answered could not check it.
                perm::check_open_existing(c, &attr, access)?;
            }
            // Without O_EXCL the file may have existed already; touching its
            // directory then is a harmless extra update, and saves asking.
            self.touch_parents(c, &[&p]).await;
            Ok(attr)
        })
    }

    fn mknod<'a>(&'a self, c: &'a Creds, path: &'a str, mode: u32, kind: FileKind, rdev: u64) -> BoxFuture<'a, Res<Attr>> {
        Box::pin(async move {
            let p = NsPath::parse(path)?;
            let req = Request::Create { at: p.to_string().into(), mode, kind: NewKind::Special { kind, rdev }, if_exists: IfExists::Fail };
            let attr = self.attr_or_follow(self.single(c, &p, req).await?).await?;
            self.touch_parents(c, &[&p]).await;
            Ok(attr)
        })
    }

    fn unlink<'a>(&'a self, c: &'a Creds, path: &'a str) -> BoxFuture<'a, Res<()>> {
        Box::pin(async move {
            let p = NsPath::parse(path)?;
            let reply = self.single(c, &p, Request::Unlink { at: p.to_string().into() }).await?;
            self.drop_remote(reply).await?;
            self.touch_parents(c, &[&p]).await;
            Ok(())
        })
    }

    fn read_data<'a>(&'a self, c: &'a Creds, path: &'a str, offset: u64, len: u32) -> BoxFuture<'a, Res<DataRead>> {
        Box::pin(self.do_read_data(c, path, offset, len))
    }

    fn write_data<'a>(&'a self, c: &'a Creds, path: &'a str, offset: u64, data: &'a [u8], inline_max: u32, kill_suid: bool) -> BoxFuture<'a, Res<DataWrite>> {
        Box::pin(self.do_write_data(c, path, offset, data, inline_max, kill_suid))
    }

    fn spilled<'a>(&'a self, c: &'a Creds, path: &'a str, len: u64, digest: u64) -> BoxFuture<'a, Res<Attr>> {
        Box::pin(self.do_spilled(c, path, len, digest))
    }

    fn extend<'a>(&'a self, c: &'a Creds, path: &'a str, end: u64, kill_suid: bool) -> BoxFuture<'a, Res<Attr>> {
        Box::pin(self.do_extend(c, path, end, kill_suid))
    }

    fn stat<'a>(&'a self, c: &'a Creds, path: &'a str) -> BoxFuture<'a, Res<Attr>> {
        Box::pin(async move { self.stat_path(c, &NsPath::parse(path)?).await })
    }

    fn readdir_page<'a>(&'a self, c: &'a Creds, path: &'a str, after: Option<&'a str>, limit: u32) -> BoxFuture<'a, Res<(Vec<DirEntry>, bool)>> {
        Box::pin(async move {
            let p = NsPath::parse(path)?;
            self.optimistic(c, &p, || self.readdir_once(c, &p, after, limit.clamp(1, 4096))).await
        })
    }

    fn rename<'a>(&'a self, c: &'a Creds, src: &'a str, dst: &'a str) -> BoxFuture<'a, Res<()>> {
        Box::pin(self.rename_as(c, src, dst, false))
    }

    fn rename_dir<'a>(&'a self, c: &'a Creds, src: &'a str, dst: &'a str) -> BoxFuture<'a, Res<()>> {
        Box::pin(self.rename_as(c, src, dst, true))
    }

    fn setattr<'a>(&'a self, c: &'a Creds, path: &'a str, set: &'a SetAttr) -> BoxFuture<'a, Res<Attr>> {
        Box::pin(async move { self.do_setattr(c, &NsPath::parse(path)?, set).await })
    }

    fn symlink<'a>(&'a self, c: &'a Creds, target: &'a str, path: &'a str) -> BoxFuture<'a, Res<Attr>> {
        Box::pin(async move {
            let p = NsPath::parse(path)?;
            let req = Request::Create { at: p.to_string().into(), mode: 0o777, kind: NewKind::Symlink(target.to_string()), if_exists: IfExists::Fail };
            let attr = self.attr_or_follow(self.single(c, &p, req).await?).await?;
            self.touch_parents(c, &[&p]).await;
            Ok(attr)
        })
    }

    fn readlink<'a>(&'a self, c: &'a Creds, path: &'a str) -> BoxFuture<'a, Res<String>> {
        Box::pin(async move {
            let p = NsPath::parse(path)?;
            match self.single(c, &p, Request::Readlink { at: p.to_string().into() }).await? {
                Reply::Target(t) => Ok(t),
                other => Err(unexpected(other)),
            }
        })
    }

    fn link<'a>(&'a self, c: &'a Creds, src: &'a str, dst: &'a str) -> BoxFuture<'a, Res<Attr>> {
        Box::pin(async move {
            let (s, d) = (NsPath::parse(src)?, NsPath::parse(dst)?);
            let r = async {
                let txn = self.lock(&[&s, &d], Intent::Link { src: s.to_string(), dst: d.to_string() }).await?;
                let steps = self.do_link(c, &s, &d, txn).await;
                self.end_link(txn, steps).await
            }
            .await;
            let attr = self.settle_two(c, &s, &d, r).await?;
            self.touch_parents(c, &[&d]).await;
            Ok(attr)
        })
    }

    fn access<'a>(&'a self, c: &'a Creds, path: &'a str, mask: u32) -> BoxFuture<'a, Res<()>> {
        Box::pin(async move {
            let p = NsPath::parse(path)?;
            let reply = self.single(c, &p, Request::Access { at: p.to_string().into(), mask }).await?;
            self.access_or_follow(c, reply, mask).await
        })
    }

    fn server_stats(&self) -> BoxFuture<'_, Res<Vec<ServerStats>>> {
        Box::pin(self.all_stats())
    }

    fn fsck(&self) -> BoxFuture<'_, Res<FsckSummary>> {
        Box::pin(self.fsck_all(crate::fsck::DirLayout::Replicated))
    }

    fn repair(&self) -> BoxFuture<'_, Res<u64>> {
        Box::pin(self.core.repair_expired(|locks| self.lock_with(locks, Intent::Retry { path: "/".into() })))
    }

    fn repair_placement(&self) -> BoxFuture<'_, Res<u64>> {
        Box::pin(ShardFs::repair_placement(self))
    }

    fn counters(&self) -> &ClientCounters {
        &self.counters
    }

    /// A file's server is its primary; chunks name the directory by path
    /// (the server resolves it with every search check).
    fn batch_route<'a>(&'a self, _c: &'a Creds, dir: &'a str, names: &'a [&'a str], _fresh: bool) -> BoxFuture<'a, Res<(At, Vec<u32>)>> {
        Box::pin(async move {
            let d = NsPath::parse(dir)?;
            let servers = names.iter().map(|n| Ok(self.primary(&d.join(n)?))).collect::<Res<Vec<u32>>>()?;
            Ok((At::Path(d.as_str().to_string()), servers))
        })
    }

    fn batch_call<'a>(&'a self, c: &'a Creds, server: u32, req: Request) -> BoxFuture<'a, Res<Reply>> {
        Box::pin(self.rpc(server, c, req))
    }

    fn dir_touches(&self) -> Option<Arc<DirTouches>> {
        self.touches.clone()
    }

    fn mode_name(&self) -> &'static str {
        "shardfs"
    }

    fn servers(&self) -> u32 {
        self.n
    }
}
