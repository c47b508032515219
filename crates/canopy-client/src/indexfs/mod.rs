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

use crate::core::{lookup_part, times_part, unexpected, ClientCore, NsOptions};
use crate::counters::ClientCounters;
use crate::data::{DataRead, DataWrite};
use crate::fsck::FsckSummary;
use crate::follow::LinkFailed;
use crate::namespace::{BulkOutcome, Namespace, Res};
use crate::touches::{DirTouches, TouchedDir};
use crate::txn::{after_commit, file_ino, outcome_unknown, stopped_for_recovery, unless_absent, Handed, Step, Txn};
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
struct Cached {
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
struct Place {
    server: u32,
    at: At,
    /// The directory holding it and its name (`None` for the root).
    parent: Option<(DirLookup, String)>,
}

impl IndexFs {
    pub(crate) fn open(t: Arc<dyn Transport>, opts: &NsOptions) -> IndexFs {
        IndexFs { core: ClientCore::new(t, opts), cache: Mutex::new(HashMap::new()), maps: Mutex::new(HashMap::new()) }
    }

    fn home(&self, dir: u64) -> u32 {
        giga::home(dir, self.n)
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, HashMap<(u64, String), Cached>> {
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn forget(&self, dir: u64, name: &str) {
        self.cache().remove(&(dir, name.to_string()));
    }

    /// Directory `name` in directory `dir` (0 and "" for the root), from the
    /// cache while its lease lasts, else from the server holding it.
    async fn lookup(&self, c: &Creds, dir: u64, name: &str, depth: u32) -> Res<DirLookup> {
        let key = (dir, name.to_string());
        let now = self.clock.now_ms();
        if let Some(hit) = self.cache().get_mut(&key).filter(|h| h.until_ms > now) {
            self.counters.cache_hit();
            hit.used = true;
            return Ok(hit.lookup.clone());
        }
        self.counters.cache_miss();
        let server = self.server_of_entry(dir, name);
        let renew = self.due_for_renewal(server, &key, now);
        if !renew.is_empty() {
            match self.lookup_renewing(c, server, (dir, name.to_string(), depth), renew, now).await {
                // Moved by a split, or about to be: asked alone, the server
                // says where to, or the wait below covers it.
                Err(Errno::EREMCHG | Errno::EINPROGRESS) => {}
                r => return r,
            }
        }
        // A split about to move the entry is waited out, and a redirect
        // followed, here: no caller (recovery among them) sees either.
        let mut split = SplitWait::new();
        loop {
            let server = self.server_of_entry(dir, name);
            match self.rpc_ix(server, c, Request::IxLookup { dir, name: name.to_string(), depth, client: self.client_id }).await {
                Err(Errno::EINPROGRESS) => split.pause(&self.counters).await?,
                // Moved: the bitmap it taught names the server to ask next.
                Err(Errno::EREMCHG) => split.redirected(&self.counters).await?,
                Ok(Reply::IxEntry { lookup, lease_ms, depth, .. }) => {
                    self.cache_entry(key, &lookup, depth, lease_ms, now);
                    return Ok(lookup);
                }
                Ok(other) => return Err(unexpected(other)),
                Err(e) => return Err(e),
            }
        }
    }

    /// The server holding the entry `name` of `dir` (the root's: its home).
    fn server_of_entry(&self, dir: u64, name: &str) -> u32 {
        if dir == 0 {
            self.home(ROOT_ID)
        } else {
            self.server_for(dir, name)
        }
    }

    fn cache_entry(&self, key: (u64, String), lookup: &DirLookup, depth: u32, lease_ms: u32, now: u64) {
        if lease_ms > 0 {
            let lease_ms = lease_ms as u64;
            self.cache().insert(key, Cached { lookup: lookup.clone(), until_ms: now + lease_ms, lease_ms, depth, used: false });
        }
    }

    /// Other cached entries held by `server` that were used since they were
    /// fetched and whose leases have run out or pass their middle: a lookup
    /// that must ask `server` anyway renews them in the same RPC, so a client
    /// using many directories pays one RPC per server per lease, not one per
    /// directory.
    fn due_for_renewal(&self, server: u32, missed: &(u64, String), now: u64) -> Vec<(u64, String, u32)> {
        let cache = self.cache();
        cache
            .iter()
            .filter(|(k, v)| v.used && v.until_ms <= now + v.lease_ms / 2 && *k != missed)
            .filter(|(k, _)| self.server_of_entry(k.0, &k.1) == server)
            .take(RENEW_MAX)
            .map(|(k, v)| (k.0, k.1.clone(), v.depth))
            .collect()
    }

    /// The lookup of `first` with `others` renewed in one `IxRenew`.
    async fn lookup_renewing(&self, c: &Creds, server: u32, first: (u64, String, u32), others: Vec<(u64, String, u32)>, now: u64) -> Res<DirLookup> {
        let mut items = vec![first];
        items.extend(others);
        let answers = match self.rpc_ix(server, c, Request::IxRenew { items: items.clone(), client: self.client_id }).await? {
            Reply::IxRenewed(a) if a.len() == items.len() => a,
            other => return Err(unexpected(other)),
        };
        let mut mine = Err(Errno::EIO);
        for (i, ((dir, name, _), answer)) in items.into_iter().zip(answers).enumerate() {
            match &answer {
                Ok((lookup, depth, lease_ms)) => self.cache_entry((dir, name), lookup, *depth, *lease_ms, now),
                // Gone, moved or no longer ours to see: ask again when needed.
                Err(_) => self.forget(dir, &name),
            }
            if i == 0 {
                mine = answer.map(|(l, _, _)| l);
            }
        }
        mine
    }

    /// The directory `p` names, checking search permission on each directory
    /// passed through (not on the last), as path resolution does.
    async fn resolve_dir(&self, c: &Creds, p: &NsPath) -> Res<DirLookup> {
        let mut cur = self.lookup(c, 0, "", 0).await?;
        for (i, name) in p.components().enumerate() {
            if !perm::allows(c, Owner::of_dir(&cur), true, access::X) {
                return Err(Errno::EACCES);
            }
            cur = self.lookup(c, cur.id, name, i as u32 + 1).await?;
        }
        Ok(cur)
    }

    async fn place(&self, c: &Creds, p: &NsPath) -> Res<Place> {
        let Some((parent_path, name)) = p.split() else {
            return Ok(Place { server: self.home(ROOT_ID), at: At::Dir(ROOT_ID), parent: None });
        };
        let parent = self.resolve_dir(c, &parent_path).await?;
        if !perm::allows(c, Owner::of_dir(&parent), true, access::X) {
            return Err(Errno::EACCES);
        }
        let at = At::Entry { dir: parent.id, name: name.to_string() };
        Ok(Place { server: self.server_for(parent.id, name), at, parent: Some((parent, name.to_string())) })
    }

    /// `req` to the server of `place`'s partition, following redirects: for
    /// the steps of a transaction after its commit point, which must reach
    /// the name wherever a split moved it.
    async fn place_rpc(&self, place: &Place, c: &Creds, req: Request) -> Res<Reply> {
        match &place.parent {
            Some((dir, name)) => self.entry_rpc(dir.id, name, c, req).await,
            None => self.rpc_ix(place.server, c, req).await,
        }
    }

    /// Drops the cached entries along `p`, so a retry asks the servers.
    fn forget_path(&self, p: &NsPath) {
        let names: Vec<&str> = p.components().collect();
        self.cache().retain(|(_, name), _| !names.contains(&name.as_str()));
    }

    /// Runs `attempt`, again after each redirect to a moved partition (the
    /// bitmap it taught is merged); on an error a directory mutation in flight
    /// could explain, drops the path's cached entries and runs it again holding
    /// read locks on `p` (which waits for that mutation to end).
    async fn optimistic<T, F, Fut>(&self, p: &NsPath, attempt: F) -> Res<T>
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
    async fn transacted<T, F, Fut>(&self, p: &NsPath, attempt: F) -> Res<T>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Res<T>>,
    {
        self.tried_again(p, attempt, false).await
    }

    async fn tried_again<T, F, Fut>(&self, p: &NsPath, attempt: F, read_locked: bool) -> Res<T>
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
                    let txn = self.lock_with(path_read_locks(p), Intent::Retry { path: p.to_string() }).await?;
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
    async fn following<T, F, Fut>(&self, attempt: &F) -> Res<T>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Res<T>>,
    {
        let mut split = SplitWait::new();
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
    async fn single(&self, c: &Creds, p: &NsPath, req: impl Fn(At) -> Request) -> Res<Reply> {
        self.optimistic(p, || async {
            let place = self.place(c, p).await?;
            self.rpc_ix(place.server, c, req(place.at)).await
        })
        .await
    }

    pub(crate) async fn lock_with(&self, locks: Vec<(String, LockMode)>, intent: Intent) -> Res<Txn> {
        let recover = |txn: Txn, handed: Handed, failed: Intent| -> BoxFuture<'_, Res<()>> { Box::pin(async move { self.recover(txn, handed, &failed).await }) };
        self.core.lock_with(locks, intent, &recover).await
    }

    /// Runs `body` under a transaction holding `locks` for `intent` (it
    /// gets the transaction, for its steps and to amend its intent), then
    /// unlocks it or leaves it to recovery.
    async fn locked_as<T, F>(&self, locks: Vec<(String, LockMode)>, intent: Intent, body: impl FnOnce(Txn) -> F) -> Res<T>
    where
        F: std::future::Future<Output = Res<T>>,
    {
        let txn = self.lock_with(locks, intent).await?;
        let r = stopped_for_recovery(txn, body(txn).await);
        self.finish(txn, &r).await;
        r
    }

    /// Directory `id` was renamed: what this client owes its times first,
    /// then its new ctime, both on its home.
    async fn renamed_dir_by_id(&self, c: &Creds, id: u64) {
        self.send_owed_touch(|| TouchedDir::Id(id)).await;
        self.renamed_dir(c, TouchedDir::Id(id), self.home(id)).await;
    }

    async fn stat_dir(&self, c: &Creds, id: u64) -> Res<Attr> {
        self.send_owed_touch(|| TouchedDir::Id(id)).await;
        let reply = self.rpc_ix(self.home(id), c, Request::Stat { at: At::Dir(id) }).await?;
        self.attr_or_follow(reply).await
    }

    /// The subdirectory `name` of `parent`, if it is one: a file is `ENOTDIR`.
    async fn subdir(&self, c: &Creds, parent: &DirLookup, name: &str, p: &NsPath) -> Res<DirLookup> {
        self.lookup(c, parent.id, name, p.components().count() as u32).await
    }

    async fn stat_path(&self, c: &Creds, p: &NsPath) -> Res<Attr> {
        self.optimistic(p, || async {
            let place = self.place(c, p).await?;
            let Some((parent, name)) = &place.parent else { return self.stat_dir(c, ROOT_ID).await };
            match self.rpc_ix(place.server, c, Request::Stat { at: place.at.clone() }).await {
                // A directory: its attributes are on its home.
                Err(Errno::EREMOTE) => {
                    let l = self.subdir(c, parent, name, p).await?;
                    self.stat_dir(c, l.id).await
                }
                r => self.attr_or_follow(r?).await,
            }
        })
        .await
    }

    /// With directory times on: after a name was added or removed in `p`'s
    /// directory, sets its mtime and ctime on its home, not waiting for it.
    async fn touch_parent(&self, c: &Creds, p: &NsPath) {
        if !self.dir_times {
            return;
        }
        let Some((pp, _)) = p.split() else { return };
        if let Ok(parent) = self.resolve_dir(c, &pp).await {
            self.touch_dir(c, &parent).await;
        }
    }

    /// [`IndexFs::touch_parent`] of a directory already resolved: its times
    /// live on its home (`touches.rs`).
    async fn touch_dir(&self, c: &Creds, parent: &DirLookup) {
        self.touched(c, TouchedDir::Id(parent.id), self.home(parent.id)).await;
    }


    async fn do_mkdir(&self, c: &Creds, p: &NsPath, mode: u32, txn: Txn) -> Res<Attr> {
        let intent = || Intent::Mkdir { path: p.to_string() };
        self.step(txn, || Step::Locked(intent())).await?;
        let place = self.place(c, p).await?;
        let Some((parent, name)) = place.parent else { return Err(Errno::EEXIST) };
        let lookup = match self.rpc_ix(place.server, c, Request::IxMkdir { dir: parent.id, name, mode, txn: Some(txn.id) }).await? {
            Reply::Dir(l) => l,
            other => return Err(unexpected(other)),
        };
        self.step(txn, || Step::PrimaryDone(intent())).await?;
        let depth = p.components().count() as u32;
        let header = Request::IxMkHeader { lookup: lookup.clone(), parent: parent.id, depth, txn: Some(txn.id) };
        match self.rpc_ix(self.home(lookup.id), &Creds::root(), header).await.map_err(|e| after_commit("mkdir", e))? {
            Reply::Attr(a) => Ok(a),
            other => Err(unexpected(other)),
        }
    }

    async fn do_rmdir(&self, c: &Creds, p: &NsPath, txn: Txn) -> Res<()> {
        let intent = || Intent::Rmdir { path: p.to_string() };
        self.step(txn, || Step::Locked(intent())).await?;
        let place = self.place(c, p).await?;
        let Some((parent, name)) = place.parent else { return Err(Errno::EBUSY) };
        let check = Request::IxRmdir { dir: parent.id, name: name.clone(), check_only: true, client: self.client_id, txn: Some(txn.id) };
        let child = match self.rpc_ix(place.server, c, check).await? {
            Reply::Dir(l) => l,
            other => return Err(unexpected(other)),
        };
        let home = self.home(child.id);
        let root = Creds::root();
        self.seal_all(child.id, txn.id).await?;
        if let Err(e) = self.drop_all(child.id, false, txn.id).await {
            if self.rpc_ix(home, &root, Request::Stat { at: At::Dir(child.id) }).await.is_ok() {
                return Err(self.unseal_after(child.id, e, txn.id).await);
            }
            // Its home dropped it (the point recovery decides by): finish.
            return Err(after_commit("rmdir", e));
        }
        self.step(txn, || Step::ReplicasDone(intent())).await?;
        // Our own copy goes first: the server then need not wait for our lease.
        self.forget(parent.id, &name);
        let remove = Request::IxRmdir { dir: parent.id, name: name.clone(), check_only: false, client: self.client_id, txn: Some(txn.id) };
        let r = self.entry_rpc(parent.id, &name, c, remove).await;
        match r {
            Ok(_) => self.last_step(|| Step::PrimaryDone(intent())).await,
            Err(e) if outcome_unknown(&e) => Err(Errno::EIO),
            Err(e) => {
                // Refused: the directory stays; put its header back.
                let depth = p.components().count() as u32;
                let back = Request::IxMkHeader { lookup: child, parent: parent.id, depth, txn: Some(txn.id) };
                self.rpc_ix(home, &root, back).await.map_err(|_| Errno::EIO)?;
                Err(e)
            }
        }
    }

    /// A step of `txn` after sealing failed with `e`: unseal, unless its
    /// outcome is unknown.
    async fn unseal_after(&self, dir: u64, e: Errno, txn: u64) -> Errno {
        if outcome_unknown(&e) {
            return Errno::EIO;
        }
        match self.unseal_all(dir, txn).await {
            Ok(_) => e,
            Err(_) => Errno::EIO,
        }
    }

    async fn do_dir_setattr(&self, c: &Creds, p: &NsPath, set: &SetAttr, txn: Txn) -> Res<Attr> {
        let intent = || Intent::DirSetAttr { path: p.to_string() };
        self.step(txn, || Step::Locked(intent())).await?;
        let place = self.place(c, p).await?;
        match &place.parent {
            None => self.forget(0, ""),
            Some((parent, name)) => self.forget(parent.id, name),
        }
        let (dir, name) = place.parent.as_ref().map_or((0, String::new()), |(parent, name)| (parent.id, name.clone()));
        let req = Request::IxDirSetAttr { dir, name, set: set.clone(), client: self.client_id, txn: Some(txn.id) };
        // The entry's partition may have split away since `place` (splits take
        // no locks): the request follows it.
        let attr = match self.place_rpc(&place, c, req).await? {
            Reply::Attr(a) => a,
            other => return Err(unexpected(other)),
        };
        self.step(txn, || Step::PrimaryDone(intent())).await?;
        if let Some((parent, name)) = &place.parent {
            self.forget(parent.id, name);
        }
        // The root's home header changed with its entry; its other partitions
        // (and every partition of another directory) take the copy.
        let lookup = DirLookup { id: attr.ino, mode: attr.mode, uid: attr.uid, gid: attr.gid };
        self.header_set_all(&lookup, txn.id).await.map_err(|e| after_commit("directory setattr", e))?;
        Ok(attr)
    }

    async fn do_setattr(&self, c: &Creds, p: &NsPath, set: &SetAttr) -> Res<Attr> {
        let r = self.single(c, p, |at| Request::SetAttr { at, set: set.clone() }).await;
        match r {
            Ok(Reply::Redirect { ino, home }) => match self.rpc_ix(home, c, Request::InodeSetAttr { ino, set: set.clone() }).await? {
                Reply::Attr(a) => Ok(a),
                other => Err(unexpected(other)),
            },
            Ok(other) => self.attr_or_follow(other).await,
            // A directory: times on its home; mode and owner a transaction.
            Err(Errno::EISDIR | Errno::EREMOTE) if set.size.is_none() => {
                let dir = match p.split() {
                    None => ROOT_ID,
                    Some((pp, name)) => {
                        let parent = self.resolve_dir(c, &pp).await?;
                        self.subdir(c, &parent, name, p).await?.id
                    }
                };
                if set.touches_lookup_state() {
                    let lookup = lookup_part(set);
                    self.locked_as(path_locks(&[p]), Intent::DirSetAttr { path: p.to_string() }, |txn| self.do_dir_setattr(c, p, &lookup, txn)).await?;
                }
                match times_part(set) {
                    Some(times) => {
                        // What this client owes its times first: a late touch would undo a utimens.
                        self.send_owed_touch(|| TouchedDir::Id(dir)).await;
                        self.attr_or_follow(self.rpc_ix(self.home(dir), c, Request::SetAttr { at: At::Dir(dir), set: times }).await?).await
                    }
                    None => self.stat_dir(c, dir).await,
                }
            }
            Err(e) => Err(e),
        }
    }

    async fn do_rename(&self, c: &Creds, s: &NsPath, d: &NsPath, txn: Txn) -> Res<()> {
        if s.is_root() || d.is_root() {
            return Err(Errno::EBUSY);
        }
        self.step(txn, || Step::Locked(Intent::Rename { src: s.to_string(), dst: d.to_string() })).await?;
        // The source first: its errors come before the destination's, as on Linux.
        let sp = self.place(c, s).await?;
        let Some((sdir, sname)) = &sp.parent else { return Err(Errno::EBUSY) };
        let moving = match self.subdir(c, sdir, sname, s).await {
            Ok(l) => Some(l.id),
            Err(Errno::ENOTDIR) => None,
            Err(e) => return Err(e),
        };
        let dp = self.place(c, d).await?;
        let Some((ddir, dname)) = &dp.parent else { return Err(Errno::EBUSY) };
        let Some(moving) = moving else {
            return match self.rename_file(c, &sp, &dp, txn, &Intent::Rename { src: s.to_string(), dst: d.to_string() }).await {
                // Onto a directory: EISDIR before any rights error (the
                // order `tests/model.rs` states). A server that cannot see the
                // destination (it is on another server, or its partition moved
                // in a split since this client placed it) checks the source's
                // rights first.
                Err(Errno::EACCES | Errno::EPERM) if self.subdir(c, ddir, dname, d).await.is_ok() => Err(Errno::EISDIR),
                renamed => renamed,
            };
        };
        if d.is_within(s) {
            return Err(Errno::EINVAL);
        }
        // A directory it replaces must be empty: seal it on its home first.
        let replaced = match self.subdir(c, ddir, dname, d).await {
            Ok(l) => Some(l),
            Err(Errno::ENOENT) => None,
            // A file there: a directory cannot replace it.
            Err(e) => return Err(e),
        };
        if let Some(r) = &replaced {
            // Rights first (EACCES, EPERM before ENOTEMPTY, as on Linux): to move
            // the source, and to replace the destination.
            if r.id != self.subdir(c, sdir, sname, s).await?.id {
                self.rpc_ix(sp.server, c, Request::IxRenameDirOut { src: sp.at.clone(), dst: dp.at.clone() }).await?;
                let check = Request::IxRmdir { dir: ddir.id, name: dname.clone(), check_only: true, client: self.client_id, txn: Some(txn.id) };
                self.rpc_ix(dp.server, c, check).await?;
            }
            // Recovery must know it: once the destination names the source,
            // nothing else leads to the sealed directory left to drop. (The
            // lease renewed first if it is due: the rights checks may have
            // waited out others' leases, and an amend past its own is refused.)
            self.keep_alive(txn).await?;
            self.amend(txn, Intent::RenameOver { src: s.to_string(), dst: d.to_string(), replaced: r.id }).await?;
            self.seal_all(r.id, txn.id).await?;
        }
        self.forget(sdir.id, sname);
        self.forget(ddir.id, dname);
        let result = if sp.server == dp.server {
            self.rpc_ix(sp.server, c, Request::IxRenameDir { src: sp.at.clone(), dst: dp.at.clone(), client: self.client_id, txn: Some(txn.id) }).await
        } else {
            self.rename_dir_between(c, &sp, &dp, txn, &Intent::Rename { src: s.to_string(), dst: d.to_string() }).await
        };
        self.forget(sdir.id, sname);
        self.forget(ddir.id, dname);
        match (result, replaced) {
            (Ok(Reply::Dir(gone)), _) => {
                self.renamed_dir_by_id(c, moving).await;
                self.drop_all(gone.id, false, txn.id).await.map_err(|e| after_commit("rename", e))?;
                Ok(())
            }
            (Ok(_), Some(r)) => {
                // Renamed onto itself: nothing replaced, nothing changed.
                self.unseal_all(r.id, txn.id).await?;
                Ok(())
            }
            (Ok(_), None) => {
                self.renamed_dir_by_id(c, moving).await;
                Ok(())
            }
            (Err(e), Some(r)) => Err(self.unseal_after(r.id, e, txn.id).await),
            (Err(e), None) => Err(e),
        }
    }

    /// A directory rename between two servers: check at the source, insert at
    /// the destination (the commit point), drop the source once its leases ran
    /// out. Answers as `IxRenameDir` does.
    async fn rename_dir_between(&self, c: &Creds, sp: &Place, dp: &Place, txn: Txn, intent: &Intent) -> Res<Reply> {
        let intent = || intent.clone();
        let lookup = match self.rpc_ix(sp.server, c, Request::IxRenameDirOut { src: sp.at.clone(), dst: dp.at.clone() }).await? {
            Reply::Dir(l) => l,
            other => return Err(unexpected(other)),
        };
        let id = lookup.id;
        let inserted = self.rpc_ix(dp.server, c, Request::IxRenameDirIn { dst: dp.at.clone(), lookup, txn: Some(txn.id) }).await?;
        self.step(txn, || Step::PrimaryDone(intent())).await?;
        let commit = Request::IxRenameDirCommit { src: sp.at.clone(), id, client: self.client_id, txn: Some(txn.id) };
        self.place_rpc(sp, &Creds::root(), commit).await.map_err(|e| after_commit("directory rename", e))?;
        Ok(inserted)
    }

    async fn rename_file(&self, c: &Creds, sp: &Place, dp: &Place, txn: Txn, intent: &Intent) -> Res<()> {
        if sp.server == dp.server {
            let r = self.rpc_ix(sp.server, c, Request::RenameLocal { src: sp.at.clone(), dst: dp.at.clone(), txn: Some(txn.id) }).await?;
            return self.drop_remote(r).await;
        }
        let record = match self.rpc_ix(sp.server, c, Request::RenameOut { src: sp.at.clone(), dst: dp.at.clone() }).await? {
            Reply::Record(r) => r,
            other => return Err(unexpected(other)),
        };
        let ino = record.ino();
        let inserted = self.rpc_ix(dp.server, c, Request::RenameIn { src: sp.at.clone(), dst: dp.at.clone(), record, txn: Some(txn.id) }).await?;
        if inserted == Reply::Unit {
            return Ok(());
        }
        self.step(txn, || Step::PrimaryDone(intent.clone())).await?;
        self.place_rpc(sp, &Creds::root(), Request::RenameOutCommit { src: sp.at.clone(), ino, txn: Some(txn.id) }).await.map_err(|e| after_commit("file rename", e))?;
        self.drop_remote(inserted).await
    }

    /// The source is shared first, so its errors (a directory: `EPERM`) come
    /// before the destination's, as on Linux; a destination that then fails
    /// takes the extra link back.
    /// (`ClientCore::link_steps`, as transaction `txn`.)
    async fn do_link(&self, c: &Creds, s: &NsPath, d: &NsPath, txn: Txn) -> Result<Attr, LinkFailed> {
        let sp = self.place(c, s).await?;
        let shared = self.rpc_ix(sp.server, c, Request::LinkShare { at: sp.at, txn: Some(txn.id) }).await?;
        let intent = || Intent::Link { src: s.to_string(), dst: d.to_string() };
        let insert = |ino, home| async move {
            match self.place(c, d).await? {
                Place { parent: None, .. } => Err(Errno::EEXIST),
                dp => Ok(self.rpc_ix(dp.server, c, Request::LinkInsert { at: dp.at, ino, home, txn: Some(txn.id) }).await.map(|_| dp.server)),
            }
        };
        self.link_steps(c, shared, txn.id, self.step(txn, || Step::PrimaryDone(intent())), insert).await
    }

    async fn data_rpc(&self, c: &Creds, path: &str, make: impl Fn(FileRef) -> Request) -> Res<Reply> {
        let p = NsPath::parse(path)?;
        if p.is_root() {
            return Err(Errno::EISDIR);
        }
        let reply = self
            .single(c, &p, |at| {
                make(match at {
                    At::Entry { dir, name } => FileRef::Entry { dir, name },
                    At::Path(p) => FileRef::Path(p),
                    At::Dir(_) => FileRef::Ino(0),
                })
            })
            .await;
        match reply {
            Ok(Reply::Redirect { ino, home }) => self.rpc_ix(home, c, make(FileRef::Ino(ino))).await,
            r => r,
        }
    }

    /// Recovers a dead coordinator's transaction from what the servers hold,
    /// once they refuse its late steps (`revoke`), with steps of its own
    /// (`txn`), which the next recoverer revokes in turn if this one dies.
    async fn recover(&self, txn: Txn, handed: Handed, intent: &Intent) -> Res<()> {
        let root = Creds::root();
        if !matches!(intent, Intent::Retry { .. }) {
            self.revoke(handed).await?;
        }
        let mine = txn.id;
        match intent {
            Intent::Link { .. } => self.recover_link(handed.was).await,
            Intent::Mkdir { path } => {
                let p = NsPath::parse(path)?;
                let Some(parent) = self.fresh_parent(&p).await? else { return Ok(()) };
                let name = p.name().unwrap_or_default();
                let Some(l) = unless_absent(self.fresh_lookup(parent.id, name).await)? else { return Ok(()) };
                let depth = p.components().count() as u32;
                self.rpc_ix(self.home(l.id), &root, Request::IxMkHeader { lookup: l, parent: parent.id, depth, txn: Some(mine) }).await?;
                Ok(())
            }
            Intent::Rmdir { path } => {
                let p = NsPath::parse(path)?;
                let Some(parent) = self.fresh_parent(&p).await? else { return Ok(()) };
                let name = p.name().unwrap_or_default();
                let Some(child) = unless_absent(self.fresh_lookup(parent.id, name).await)? else { return Ok(()) };
                match self.rpc_ix(self.home(child.id), &root, Request::Stat { at: At::Dir(child.id) }).await {
                    // The header is still there: undo (unseal).
                    Ok(_) => self.unseal_all(child.id, mine).await,
                    // Dropped on its home: the directory was empty and sealed;
                    // finish (its other partitions, then its entry).
                    Err(Errno::ENXIO) => {
                        self.drop_all(child.id, true, mine).await?;
                        let req = Request::IxRmdir { dir: parent.id, name: name.to_string(), check_only: false, client: self.client_id, txn: Some(mine) };
                        self.entry_rpc(parent.id, name, &root, req).await.map(|_| ())
                    }
                    Err(e) => Err(e),
                }
            }
            Intent::DirSetAttr { path } => {
                let p = NsPath::parse(path)?;
                let Some(parent) = self.fresh_parent(&p).await? else { return Ok(()) };
                match unless_absent(self.fresh_lookup(parent.id, p.name().unwrap_or_default()).await)? {
                    Some(l) => self.header_set_all(&l, mine).await,
                    None => Ok(()),
                }
            }
            Intent::Rename { src, dst } | Intent::RenameOver { src, dst, .. } => {
                let (s, d) = (NsPath::parse(src)?, NsPath::parse(dst)?);
                self.cache().clear();
                // A parent gone: neither name holds anything to finish.
                let (Some(sp), Some(dp)) = (unless_absent(self.place(&root, &s).await)?, unless_absent(self.place(&root, &d).await)?) else { return Ok(()) };
                let was_dir = self.recover_dir_rename(&sp, &dp, mine).await?;
                match intent {
                    Intent::RenameOver { replaced, .. } => self.recover_replaced(&dp, *replaced, mine).await,
                    _ if was_dir => Ok(()),
                    _ => self.recover_file_rename(&sp, &dp, mine).await,
                }
            }
            Intent::Retry { .. } => Ok(()),
        }
    }

    /// A directory rename between servers that died after its insert (the
    /// commit point) left one directory under both names: drop the source.
    /// One that died before it may have sealed a directory it was to replace:
    /// unseal it. False if the source is no directory (a file rename, or
    /// nothing to do).
    async fn recover_dir_rename(&self, sp: &Place, dp: &Place, txn: u64) -> Res<bool> {
        let (Some((sdir, sname)), Some((ddir, dname))) = (&sp.parent, &dp.parent) else { return Ok(false) };
        let Some(src) = unless_absent(self.fresh_lookup(sdir.id, sname).await)? else { return Ok(false) };
        if let Some(dst) = unless_absent(self.fresh_lookup(ddir.id, dname).await)? {
            if dst.id == src.id {
                let commit = Request::IxRenameDirCommit { src: sp.at.clone(), id: src.id, client: self.client_id, txn: Some(txn) };
                self.place_rpc(sp, &Creds::root(), commit).await?;
            } else {
                self.unseal_all(dst.id, txn).await?;
            }
        }
        Ok(true)
    }

    /// The directory a rename was to replace, once the rename itself is
    /// recovered: still named by the destination, the rename did not commit
    /// and it is unsealed (if it was sealed); named no more, the rename
    /// committed (it was sealed, and empty, before the insert) and its
    /// partitions go, on every server since no bitmap is left to say where.
    async fn recover_replaced(&self, dp: &Place, replaced: u64, txn: u64) -> Res<()> {
        let Some((ddir, dname)) = &dp.parent else { return Ok(()) };
        match unless_absent(self.fresh_lookup(ddir.id, dname).await)? {
            Some(l) if l.id == replaced => self.unseal_all(replaced, txn).await,
            _ => self.drop_all(replaced, true, txn).await,
        }
    }

    /// A file rename that died between inserting the destination and dropping
    /// the source left one inode under both names: drop the source.
    async fn recover_file_rename(&self, sp: &Place, dp: &Place, txn: u64) -> Res<()> {
        if let (Some(a), Some(b)) = (self.ino_at(sp).await?, self.ino_at(dp).await?) {
            if a == b {
                self.place_rpc(sp, &Creds::root(), Request::RenameOutCommit { src: sp.at.clone(), ino: a, txn: Some(txn) }).await?;
            }
        }
        Ok(())
    }

    /// The inode number of the file at `place`, if a server says there is one.
    async fn ino_at(&self, place: &Place) -> Res<Option<u64>> {
        file_ino(self.place_rpc(place, &Creds::root(), Request::RecoveryStat { at: place.at.clone() }).await)
    }

    /// One batch of a bulk insertion into `p`: (files made, names refused).
    async fn bulk_batch(&self, c: &Creds, p: &NsPath, names: &[String], mode: u32) -> Res<(u64, Vec<(String, Errno)>)> {
        let d = self.optimistic(p, || self.resolve_dir(c, p)).await?;
        // Shares land one by one, so the batch is not sent again whole: a
        // directory gone meanwhile (its bitmap stale) is just gone.
        self.bulk_shares(c, d.id, names.to_vec(), mode).await.map_err(|e| if e == Errno::ENXIO { Errno::ENOENT } else { e })
    }

    /// `p`'s parent, resolved as root without the cache (`None`: gone).
    async fn fresh_parent(&self, p: &NsPath) -> Res<Option<DirLookup>> {
        let Some((pp, _)) = p.split() else { return Ok(None) };
        self.cache().clear();
        unless_absent(self.resolve_dir(&Creds::root(), &pp).await)
    }

    async fn fresh_lookup(&self, dir: u64, name: &str) -> Res<DirLookup> {
        self.forget(dir, name);
        self.lookup(&Creds::root(), dir, name, 1).await
    }
}

impl Namespace for IndexFs {
    fn mkdir<'a>(&'a self, c: &'a Creds, path: &'a str, mode: u32) -> BoxFuture<'a, Res<Attr>> {
        Box::pin(async move {
            let p = NsPath::parse(path)?;
            if p.is_root() {
                return Err(Errno::EEXIST);
            }
            let attr = self.transacted(&p, || self.locked_as(path_locks(&[&p]), Intent::Mkdir { path: p.to_string() }, |txn| self.do_mkdir(c, &p, mode, txn))).await?;
            self.touch_parent(c, &p).await;
            Ok(attr)
        })
    }

    fn rmdir<'a>(&'a self, c: &'a Creds, path: &'a str) -> BoxFuture<'a, Res<()>> {
        Box::pin(async move {
            let p = NsPath::parse(path)?;
            if p.is_root() {
                return Err(Errno::EBUSY);
            }
            self.transacted(&p, || self.locked_as(path_locks(&[&p]), Intent::Rmdir { path: p.to_string() }, |txn| self.do_rmdir(c, &p, txn))).await?;
            self.touch_parent(c, &p).await;
            Ok(())
        })
    }

    fn create<'a>(&'a self, c: &'a Creds, path: &'a str, mode: u32, if_exists: IfExists) -> BoxFuture<'a, Res<Attr>> {
        Box::pin(async move {
            let p = NsPath::parse(path)?;
            let reply = self.single(c, &p, |at| Request::Create { at, mode, kind: NewKind::File, if_exists }).await?;
            let redirected = matches!(reply, Reply::Redirect { .. });
            let attr = self.attr_or_follow(reply).await?;
            if let (true, IfExists::Open { access }) = (redirected, if_exists) {
                perm::check_open_existing(c, &attr, access)?;
            }
            self.touch_parent(c, &p).await;
            Ok(attr)
        })
    }

    fn mknod<'a>(&'a self, c: &'a Creds, path: &'a str, mode: u32, kind: FileKind, rdev: u64) -> BoxFuture<'a, Res<Attr>> {
        Box::pin(async move {
            let p = NsPath::parse(path)?;
            let reply = self.single(c, &p, |at| Request::Create { at, mode, kind: NewKind::Special { kind, rdev }, if_exists: IfExists::Fail }).await?;
            let attr = self.attr_or_follow(reply).await?;
            self.touch_parent(c, &p).await;
            Ok(attr)
        })
    }

    fn unlink<'a>(&'a self, c: &'a Creds, path: &'a str) -> BoxFuture<'a, Res<()>> {
        Box::pin(async move {
            let p = NsPath::parse(path)?;
            let reply = match self.single(c, &p, |at| Request::Unlink { at }).await {
                // A directory: its attributes are elsewhere, and unlink refuses it.
                Err(Errno::EREMOTE) => return Err(Errno::EISDIR),
                r => r?,
            };
            self.drop_remote(reply).await?;
            self.touch_parent(c, &p).await;
            Ok(())
        })
    }

    fn read_data<'a>(&'a self, c: &'a Creds, path: &'a str, offset: u64, len: u32) -> BoxFuture<'a, Res<DataRead>> {
        Box::pin(async move {
            DataRead::from_reply(self.data_rpc(c, path, |at| Request::ReadData { at, offset, len }).await?)
        })
    }

    fn write_data<'a>(&'a self, c: &'a Creds, path: &'a str, offset: u64, data: &'a [u8], inline_max: u32, kill_suid: bool) -> BoxFuture<'a, Res<DataWrite>> {
        Box::pin(async move {
            let make = |at| Request::WriteData { at, offset, data: data.to_vec(), inline_max, kill_suid };
            DataWrite::from_reply(self.data_rpc(c, path, make).await?)
        })
    }

    fn spilled<'a>(&'a self, c: &'a Creds, path: &'a str, len: u64, digest: u64) -> BoxFuture<'a, Res<Attr>> {
        Box::pin(async move {
            match self.data_rpc(c, path, |at| Request::Spilled { at, len, digest }).await? {
                Reply::Attr(a) => Ok(a),
                other => Err(unexpected(other)),
            }
        })
    }

    fn extend<'a>(&'a self, c: &'a Creds, path: &'a str, end: u64, kill_suid: bool) -> BoxFuture<'a, Res<Attr>> {
        Box::pin(async move {
            match self.data_rpc(c, path, |at| Request::Extend { at, end, kill_suid }).await? {
                Reply::Attr(a) => Ok(a),
                other => Err(unexpected(other)),
            }
        })
    }

    fn stat<'a>(&'a self, c: &'a Creds, path: &'a str) -> BoxFuture<'a, Res<Attr>> {
        Box::pin(async move { self.stat_path(c, &NsPath::parse(path)?).await })
    }

    fn readdir_page<'a>(&'a self, c: &'a Creds, path: &'a str, after: Option<&'a str>, limit: u32) -> BoxFuture<'a, Res<(Vec<DirEntry>, bool)>> {
        Box::pin(async move {
            let p = NsPath::parse(path)?;
            self.optimistic(&p, || async {
                let dir = self.resolve_dir(c, &p).await?;
                self.list_page(c, dir.id, after, limit).await
            })
            .await
        })
    }

    fn rename<'a>(&'a self, c: &'a Creds, src: &'a str, dst: &'a str) -> BoxFuture<'a, Res<()>> {
        Box::pin(async move {
            let (s, d) = (NsPath::parse(src)?, NsPath::parse(dst)?);
            if s == d {
                return self.stat_path(c, &s).await.map(|_| ());
            }
            let intent = Intent::Rename { src: s.to_string(), dst: d.to_string() };
            self.transacted(&s, || self.locked_as(path_locks(&[&s, &d]), intent.clone(), |txn| self.do_rename(c, &s, &d, txn))).await?;
            self.touch_parent(c, &s).await;
            self.touch_parent(c, &d).await;
            Ok(())
        })
    }

    fn setattr<'a>(&'a self, c: &'a Creds, path: &'a str, set: &'a SetAttr) -> BoxFuture<'a, Res<Attr>> {
        Box::pin(async move { self.do_setattr(c, &NsPath::parse(path)?, set).await })
    }

    fn symlink<'a>(&'a self, c: &'a Creds, target: &'a str, path: &'a str) -> BoxFuture<'a, Res<Attr>> {
        Box::pin(async move {
            let p = NsPath::parse(path)?;
            canopy_proto::path::check_symlink_target(target)?;
            let kind = NewKind::Symlink(target.to_string());
            let reply = self.single(c, &p, |at| Request::Create { at, mode: 0o777, kind: kind.clone(), if_exists: IfExists::Fail }).await?;
            let attr = self.attr_or_follow(reply).await?;
            self.touch_parent(c, &p).await;
            Ok(attr)
        })
    }

    fn readlink<'a>(&'a self, c: &'a Creds, path: &'a str) -> BoxFuture<'a, Res<String>> {
        Box::pin(async move {
            let p = NsPath::parse(path)?;
            match self.single(c, &p, |at| Request::Readlink { at }).await {
                Ok(Reply::Target(t)) => Ok(t),
                Err(Errno::EREMOTE) => Err(Errno::EINVAL),
                Ok(other) => Err(unexpected(other)),
                Err(e) => Err(e),
            }
        })
    }

    fn link<'a>(&'a self, c: &'a Creds, src: &'a str, dst: &'a str) -> BoxFuture<'a, Res<Attr>> {
        Box::pin(async move {
            let (s, d) = (NsPath::parse(src)?, NsPath::parse(dst)?);
            let intent = Intent::Link { src: s.to_string(), dst: d.to_string() };
            let attr = self
                .transacted(&s, || async {
                    let txn = self.lock_with(path_locks(&[&s, &d]), intent.clone()).await?;
                    let steps = self.do_link(c, &s, &d, txn).await;
                    self.end_link(txn, steps).await
                })
                .await?;
            self.touch_parent(c, &d).await;
            Ok(attr)
        })
    }

    fn access<'a>(&'a self, c: &'a Creds, path: &'a str, mask: u32) -> BoxFuture<'a, Res<()>> {
        Box::pin(async move {
            let p = NsPath::parse(path)?;
            match self.single(c, &p, |at| Request::Access { at, mask }).await {
                // A directory: check it against its attributes on its home.
                Err(Errno::EREMOTE) => {
                    let a = self.stat_path(c, &p).await?;
                    if mask & 7 == access::F || perm::allows(c, Owner::of_attr(&a), true, mask & 7) {
                        Ok(())
                    } else {
                        Err(Errno::EACCES)
                    }
                }
                r => self.access_or_follow(c, r?, mask).await,
            }
        })
    }

    fn server_stats(&self) -> BoxFuture<'_, Res<Vec<ServerStats>>> {
        Box::pin(self.all_stats())
    }

    /// Servers are checked one after another, so a split that moves names
    /// between two of them meanwhile could show them twice or not at all: the
    /// check waits for splits under way and runs again if one happened.
    fn fsck(&self) -> BoxFuture<'_, Res<FsckSummary>> {
        Box::pin(async move {
            for _ in 0..100 {
                let (done, busy) = self.split_activity().await?;
                if busy > 0 {
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
                let report = self.fsck_all(crate::fsck::DirLayout::Partitioned).await?;
                if self.split_activity().await? == (done, 0) {
                    return Ok(report);
                }
            }
            self.fsck_all(crate::fsck::DirLayout::Partitioned).await
        })
    }

    fn repair(&self) -> BoxFuture<'_, Res<u64>> {
        Box::pin(self.core.repair_expired(|locks| self.lock_with(locks, Intent::Retry { path: "/".into() })))
    }

    fn counters(&self) -> &ClientCounters {
        &self.counters
    }

    fn drop_caches(&self) {
        self.cache().clear();
        self.forget_maps();
    }

    /// Bulk insertion: the names go in batches of [`BULK_BATCH`], each split
    /// into one share per partition's server (sent at once), checked there and
    /// ingested as one table.
    fn bulk_create<'a>(&'a self, c: &'a Creds, dir: &'a str, names: &'a [String], mode: u32) -> BoxFuture<'a, Res<BulkOutcome>> {
        Box::pin(async move {
            let p = NsPath::parse(dir)?;
            let mut out = BulkOutcome::default();
            let batches = ramped(names);
            for group in batches.chunks(IN_FLIGHT) {
                let replies = futures::future::join_all(group.iter().map(|b| self.bulk_batch(c, &p, b, mode))).await;
                for reply in replies {
                    let (created, rejected) = reply?;
                    out.created += created;
                    out.rejected.extend(rejected);
                }
            }
            if out.created > 0 {
                self.touch_dir(c, &self.resolve_dir(c, &p).await?).await;
            }
            Ok(out)
        })
    }

    /// A file's server holds its name's partition by the client's bitmap
    /// (asked afresh of every partition's server if `fresh`); chunks name
    /// the directory by id.
    fn batch_route<'a>(&'a self, c: &'a Creds, dir: &'a str, names: &'a [&'a str], fresh: bool) -> BoxFuture<'a, Res<(At, Vec<u32>)>> {
        Box::pin(async move {
            let p = NsPath::parse(dir)?;
            let d = self.optimistic(&p, || self.resolve_dir(c, &p)).await?;
            if fresh {
                self.refresh_parts(c, d.id).await;
            }
            Ok((At::Dir(d.id), names.iter().map(|n| self.server_for(d.id, n)).collect()))
        })
    }

    fn batch_call<'a>(&'a self, c: &'a Creds, server: u32, req: Request) -> BoxFuture<'a, Res<Reply>> {
        Box::pin(self.rpc(server, c, req))
    }

    fn holds_grants(&self) -> bool {
        true
    }

    fn dir_touches(&self) -> Option<Arc<DirTouches>> {
        self.touches.clone()
    }

    fn mode_name(&self) -> &'static str {
        "indexfs"
    }

    fn servers(&self) -> u32 {
        self.n
    }
}
