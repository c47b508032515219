//! The Giraffa strategy (seed 000 §3.2, Table 1): the table-partitioned
//! baseline. A path names its row directly (`canopy_proto::giraffa`), so the
//! client resolves nothing and caches nothing:
//!
//! - stat, chmod, chown, utimes, readlink, access and data of an object: one
//!   RPC to the server holding its row;
//! - create, mknod, symlink, unlink, mkdir and a listing: two, a proof of the
//!   parent directory from the server holding the parent's row, then the
//!   request with the proof to the server holding the parent's entries (only
//!   the parent's permissions are checked: the paper's relaxed semantics);
//! - rmdir: the parent's proof, then begin (the directory gets no more proofs
//!   and the live ones expire), a check that its entries are gone, and the end;
//! - a rename of a file between servers: a transaction under the lock service
//!   (out, in, commit), recovered like ShardFS's from what the servers hold;
//! - a hard link: a transaction too (count, name), so recovery takes back a
//!   count whose name a dead coordinator never made.
//!
//! A proof that expired on its way (`ESTALE`) is asked for again, and a
//! directory in the middle of an rmdir (`EAGAIN`) is waited for, both counted
//! as retries.

use crate::recover::Recovers;
use crate::core::{unexpected, ClientCore, NsOptions};
use crate::counters::ClientCounters;
use crate::data::{DataRead, DataWrite};
use crate::fsck::FsckSummary;
use crate::follow::LinkFailed;
use crate::namespace::{Namespace, Res};
use crate::touches::{DirTouches, TouchedDir};
use crate::file_data::{FileData, MakeRequest};
use crate::txn::{after_commit, Step, Txn};
use canopy_posix::lockset::path_locks;
use canopy_posix::perm;
use canopy_proto::giraffa::{self, DirProof};
use canopy_proto::msg::{At, FileRef, IfExists, Intent, NewKind, ServerStats};
use canopy_proto::path::NsPath;
use canopy_proto::{Attr, Creds, DirEntry, Errno, FileKind, Reply, Request, SetAttr};
use canopy_rpc::Transport;

mod rename;
use futures::future::BoxFuture;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How long a client waits for a directory in the middle of an rmdir (whose
/// removal may lapse after 10 s) before it answers `EAGAIN`.
const BUSY_WAIT: Duration = Duration::from_secs(12);

pub struct Giraffa {
    core: ClientCore,
}

impl std::ops::Deref for Giraffa {
    type Target = ClientCore;

    fn deref(&self) -> &ClientCore {
        &self.core
    }
}

/// The registry's way in: Giraffa's client (`canopy_proto::for_each_mode!`).
pub(crate) fn open(_: &canopy_proto::modes::GiraffaOptions, backend: crate::Backend, opts: &NsOptions) -> Result<Arc<dyn Namespace>, String> {
    let t = backend.cluster("giraffa")?;
    Ok(crate::factory::delegated_if_asked(Arc::new(Giraffa::open(t.clone(), opts)), t, opts, None))
}

impl Giraffa {
    pub(crate) fn open(t: Arc<dyn Transport>, opts: &NsOptions) -> Giraffa {
        Giraffa { core: ClientCore::new(t, opts) }
    }

    fn row_server(&self, p: &NsPath) -> u32 {
        giraffa::row_server(p, self.n)
    }

    fn entries_server(&self, dir: &NsPath) -> u32 {
        giraffa::entries_server(dir, self.n)
    }

    /// Runs `attempt` until it is not refused with an errno `again` accepts,
    /// pausing 1 ms doubling to 64 ms, for at most [`BUSY_WAIT`]; each retry
    /// is counted.
    async fn retry_while<T, F, Fut>(&self, again: fn(&Errno) -> bool, attempt: F) -> Res<T>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Res<T>>,
    {
        let start = self.clock.now_ms();
        let mut pause = Duration::from_millis(1);
        loop {
            match attempt().await {
                Err(e) if again(&e) && self.clock.now_ms().saturating_sub(start) < BUSY_WAIT.as_millis() as u64 => {
                    self.counters.retried();
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_millis(64));
                }
                r => return r,
            }
        }
    }

    /// A request with proofs: again while a directory is being removed or
    /// renamed (`EAGAIN`) or a proof expired before it was used (`ESTALE`).
    async fn retrying<T, F, Fut>(&self, attempt: F) -> Res<T>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Res<T>>,
    {
        self.retry_while(|e| matches!(e, Errno::EAGAIN | Errno::ESTALE), attempt).await
    }

    /// `req` to the server of `p`'s row, again while a directory rename holds
    /// the row (`EAGAIN`).
    async fn row_rpc(&self, c: &Creds, p: &NsPath, req: Request) -> Res<Reply> {
        let server = self.row_server(p);
        self.retry_while(|e| *e == Errno::EAGAIN, || self.rpc(server, c, req.clone())).await
    }

    /// A proof of directory `dir` from the server holding its row, good for
    /// adding entries if `adds`.
    async fn proof(&self, c: &Creds, dir: &NsPath, adds: bool) -> Res<DirProof> {
        match self.rpc(self.row_server(dir), c, Request::GfProof { path: dir.to_string(), adds }).await? {
            Reply::GfProof(p) => Ok(p),
            other => Err(unexpected(other)),
        }
    }

    /// `req` about entries of `dirs` (the parents it touches), sent to `server`
    /// with a fresh proof of each.
    async fn vouched(&self, c: &Creds, dirs: &[&NsPath], server: u32, req: &Request) -> Res<Reply> {
        self.vouched_noting(c, dirs, server, req, &AtomicBool::new(false)).await
    }

    /// `vouched`, setting `sent` once the request goes out: a failure before
    /// that (fetching a proof) certainly changed nothing.
    async fn vouched_noting(&self, c: &Creds, dirs: &[&NsPath], server: u32, req: &Request, sent: &AtomicBool) -> Res<Reply> {
        let inner = postcard::to_stdvec(req).map_err(|_| Errno::EINVAL)?;
        let adds = giraffa::adds_entry(req);
        self.retrying(|| async {
            let mut proofs = Vec::with_capacity(dirs.len());
            for d in dirs {
                proofs.push(self.proof(c, d, adds).await?);
            }
            sent.store(true, Ordering::Release);
            self.rpc(server, c, Request::GfVouched { proofs, inner: inner.clone() }).await
        })
        .await
    }

    /// A request about the entry `p` in its parent (create, unlink, link).
    async fn in_parent(&self, c: &Creds, p: &NsPath, req: Request) -> Res<Reply> {
        let (parent, _) = p.split().ok_or(Errno::EEXIST)?;
        self.vouched(c, &[&parent], self.row_server(p), &req).await
    }

    /// `p`'s attributes, its times with this client's changes below it.
    async fn stat_path(&self, c: &Creds, p: &NsPath) -> Res<Attr> {
        self.send_owed_touch(|| TouchedDir::Path(p.clone())).await;
        self.stat_row(c, p).await
    }

    /// `p`'s attributes as its row holds them, for its kind and permissions:
    /// a directory's times may lag this client's changes in it by the touch
    /// window (`touches.rs`).
    async fn stat_row(&self, c: &Creds, p: &NsPath) -> Res<Attr> {
        let reply = self.row_rpc(c, p, Request::Stat { at: p.to_string().into() }).await?;
        self.attr_or_follow(reply).await
    }

    async fn make(&self, c: &Creds, p: &NsPath, mode: u32, kind: NewKind, if_exists: IfExists) -> Res<Attr> {
        // Bad arguments are reported before the path is looked at (as servers do).
        match &kind {
            NewKind::Symlink(target) => canopy_proto::path::check_symlink_target(target)?,
            NewKind::Special { kind, .. } if !kind.is_special() => return Err(Errno::EINVAL),
            _ => {}
        }
        let reply = self.in_parent(c, p, Request::Create { at: p.to_string().into(), mode, kind, if_exists }).await?;
        let redirected = matches!(reply, Reply::Redirect { .. });
        let attr = self.attr_or_follow(reply).await?;
        if let (true, IfExists::Open { access }) = (redirected, if_exists) {
            perm::check_open_existing(c, &attr, access)?;
        }
        self.touch_parent(c, p).await;
        Ok(attr)
    }

    /// After a name was added or removed in `p`'s parent: its times, on the
    /// server of its row (`touches.rs`).
    async fn touch_parent(&self, c: &Creds, p: &NsPath) {
        if let Some((parent, _)) = p.split() {
            let server = self.row_server(&parent);
            self.touched(c, TouchedDir::Path(parent), server).await;
        }
    }

    /// [`Giraffa::settle`] for a request naming two paths.
    async fn settle_two<T>(&self, c: &Creds, a: &NsPath, b: &NsPath, r: Res<T>) -> Res<T> {
        match self.settle(c, a, r).await {
            Err(Errno::ENOENT) => self.settle(c, b, Err(Errno::ENOENT)).await,
            other => other,
        }
    }

    async fn do_mkdir(&self, c: &Creds, p: &NsPath, mode: u32) -> Res<Attr> {
        let (parent, _) = p.split().ok_or(Errno::EEXIST)?;
        let attr = self
            .retrying(|| async {
                let proof = self.proof(c, &parent, true).await?;
                self.rpc(self.row_server(p), c, Request::GfMkdir { path: p.to_string(), mode, proof }).await
            })
            .await?;
        self.count_subdir(&parent, 1).await;
        self.touch_parent(c, p).await;
        self.attr_or_follow(attr).await
    }

    /// Tells the server of `dir`'s row that it gained or lost a subdirectory
    /// (its link count; the subdirectory's row is on another server). The
    /// mkdir or rmdir is done whatever this answers: a failure (the parent
    /// renamed or removed meanwhile) leaves the count off, which a rename's
    /// recovery recounts, and is logged, not returned.
    async fn count_subdir(&self, dir: &NsPath, delta: i32) {
        let req = Request::GfSubdirs { path: dir.to_string(), delta };
        if let Err(e) = self.row_rpc(&Creds::root(), dir, req).await {
            eprintln!("canopy-client: the subdirectory count of {dir} was not updated: {e}");
        }
    }

    /// `r`, with an `ENOENT` from a request that consulted no ancestor told
    /// apart from `ENOTDIR`: the nearest existing ancestor says which (extra
    /// RPCs on this error path only).
    async fn settle<T>(&self, c: &Creds, p: &NsPath, r: Res<T>) -> Res<T> {
        if r.as_ref().err() != Some(&Errno::ENOENT) {
            return r;
        }
        let mut at = p.clone();
        while let Some((parent, _)) = at.split() {
            match self.stat_row(c, &parent).await {
                Ok(a) if a.kind == FileKind::Dir => return r,
                Ok(_) => return Err(Errno::ENOTDIR),
                Err(Errno::ENOENT) => at = parent,
                Err(e) => return Err(e),
            }
        }
        r
    }

    async fn do_rmdir(&self, c: &Creds, p: &NsPath) -> Res<()> {
        let (parent, _) = p.split().ok_or(Errno::EBUSY)?;
        let home = self.row_server(p);
        self.retrying(|| async {
            let proof = self.proof(c, &parent, false).await?;
            let ino = match self.rpc(home, c, Request::GfRmdirBegin { path: p.to_string(), proof }).await? {
                Reply::Dir(l) => l.id,
                other => return Err(unexpected(other)),
            };
            let empty = self.rpc(self.entries_server(p), c, Request::GfEmpty { prefix: giraffa::prefix(p) }).await;
            let end = Request::GfRmdirEnd { path: p.to_string(), ino, commit: empty.is_ok() };
            let ended = self.rpc(home, c, end).await;
            empty?;
            ended.map(|_| ())
        })
        .await?;
        self.count_subdir(&parent, -1).await;
        self.touch_parent(c, p).await;
        Ok(())
    }

    async fn do_readdir(&self, c: &Creds, p: &NsPath, after: Option<&str>, limit: u32) -> Res<(Vec<DirEntry>, bool)> {
        let req = Request::ReadDir { at: p.to_string().into(), after: after.map(str::to_string), limit, with_dirs: true };
        match self.vouched(c, &[p], self.entries_server(p), &req).await? {
            Reply::Entries { entries, more } => Ok((entries, more)),
            other => Err(unexpected(other)),
        }
    }

    async fn do_setattr(&self, c: &Creds, p: &NsPath, set: &SetAttr) -> Res<Attr> {
        // What this client owes a directory's times goes first: a late touch
        // would undo a utimens (`tar` sets a directory's times last).
        self.send_owed_touch(|| TouchedDir::Path(p.clone())).await;
        match self.row_rpc(c, p, Request::SetAttr { at: p.to_string().into(), set: set.clone() }).await {
            Ok(Reply::Redirect { ino, home }) => match self.rpc(home, c, Request::InodeSetAttr { ino, set: set.clone() }).await? {
                Reply::Attr(a) => Ok(a),
                other => Err(unexpected(other)),
            },
            Ok(other) => self.attr_or_follow(other).await,
            // A directory's mode or owner: its row changes and the proofs of
            // the old permissions are waited out.
            Err(Errno::EISDIR) if set.size.is_none() && set.touches_lookup_state() => {
                self.attr_or_follow(self.row_rpc(c, p, Request::GfDirSetAttr { path: p.to_string(), set: set.clone() }).await?).await
            }
            Err(e) => Err(e),
        }
    }

    /// A hard link as a transaction under both names' locks, as in the other
    /// modes: the count it adds and the name it makes are recorded with it
    /// (`ClientCore::link_steps`), so a coordinator that dies between the
    /// two, or whose insert's answer is lost, leaves recovery to take the
    /// count back unless the name was made ([`ClientCore::recover_link`]).
    async fn do_link(&self, c: &Creds, src: &NsPath, dst: &NsPath) -> Res<Attr> {
        let intent = Intent::Link { src: src.to_string(), dst: dst.to_string() };
        let txn = self.lock_recovering(path_locks(&[src, dst]), intent.clone()).await?;
        let steps = self.link_under(c, src, dst, intent, txn).await.map_err(|f| LinkFailed { errno: rename::taken_over(f.errno), ..f });
        let attr = self.end_link(txn, steps).await?;
        self.touch_parent(c, dst).await;
        Ok(attr)
    }

    async fn link_under(&self, c: &Creds, src: &NsPath, dst: &NsPath, intent: Intent, txn: Txn) -> Result<Attr, LinkFailed> {
        let shared = self.row_rpc(c, src, Request::LinkShare { at: src.to_string().into(), txn: Some(txn.id) }).await?;
        let insert = |ino, home| async move {
            let (parent, _) = dst.split().ok_or(Errno::EEXIST)?;
            let sent = AtomicBool::new(false);
            let req = Request::LinkInsert { at: dst.to_string().into(), ino, home, txn: Some(txn.id) };
            match self.vouched_noting(c, &[&parent], self.row_server(dst), &req, &sent).await {
                Err(e) if !sent.load(Ordering::Acquire) => Err(e),
                r => Ok(r.map(|_| self.row_server(dst))),
            }
        };
        let between = self.step(txn, || Step::PrimaryDone(intent));
        self.link_steps(c, shared, txn.id, between, insert).await
    }

    async fn do_rename(&self, c: &Creds, src: &NsPath, dst: &NsPath) -> Res<()> {
        if src.is_root() || dst.is_root() {
            return Err(Errno::EBUSY);
        }
        if self.stat_row(c, src).await?.kind == FileKind::Dir {
            // On this client's connections, so each is served before the rows move.
            self.send_owed_touches_below(src).await;
            let txn = self.lock_recovering(path_locks(&[src, dst]), Intent::Rename { src: src.to_string(), dst: dst.to_string() }).await?;
            let r = self.rename_dir(c, src, dst, txn).await;
            self.finish(txn, &r).await;
            if r.is_ok() && src != dst {
                self.renamed_dir(c, TouchedDir::Path(dst.clone()), self.row_server(dst)).await;
            }
            return r;
        }
        match self.rename_file(c, src, dst).await {
            // Onto a directory: EISDIR before any rights error (the order
            // `tests/model.rs` states). The source's server, when the
            // destination's row is on another, checks the source's rights
            // without seeing it.
            Err(Errno::EACCES | Errno::EPERM) if self.stat_row(c, dst).await.is_ok_and(|a| a.kind == FileKind::Dir) => Err(Errno::EISDIR),
            renamed => renamed,
        }
    }

    async fn rename_file(&self, c: &Creds, src: &NsPath, dst: &NsPath) -> Res<()> {
        let (sp, _) = src.split().ok_or(Errno::EBUSY)?;
        let (dp, _) = dst.split().ok_or(Errno::EBUSY)?;
        let (a, b) = (self.row_server(src), self.row_server(dst));
        let (s, d) = (src.to_string(), dst.to_string());
        if a == b {
            let dirs: Vec<&NsPath> = if sp == dp { vec![&sp] } else { vec![&sp, &dp] };
            let r = self.vouched(c, &dirs, a, &Request::RenameLocal { src: s.into(), dst: d.into(), txn: None }).await?;
            return self.drop_remote(r).await;
        }
        let txn = self.lock_recovering(path_locks(&[src, dst]), Intent::Rename { src: s.clone(), dst: d.clone() }).await?;
        let r = self.rename_between(c, src, dst, &sp, &dp, txn).await;
        self.finish(txn, &r).await;
        r
    }

    /// A file rename between two servers, under the transaction's locks: the
    /// source checks and hands over its record, the destination inserts it
    /// (the commit point, refused once recovery revoked `txn`), the source
    /// drops it.
    async fn rename_between(&self, c: &Creds, src: &NsPath, dst: &NsPath, sp: &NsPath, dp: &NsPath, txn: Txn) -> Res<()> {
        let (s, d) = (src.to_string(), dst.to_string());
        let out = Request::RenameOut { src: s.clone().into(), dst: d.clone().into() };
        let record = match self.vouched(c, &[sp], self.row_server(src), &out).await? {
            Reply::Record(r) => r,
            other => return Err(unexpected(other)),
        };
        let ino = record.ino();
        let into = Request::RenameIn { src: s.clone().into(), dst: d.into(), record, txn: Some(txn.id) };
        let inserted = self.vouched(c, &[dp], self.row_server(dst), &into).await.map_err(rename::taken_over)?;
        if inserted == Reply::Unit {
            return Ok(()); // both names are links to one file: nothing to do
        }
        let commit = Request::RenameOutCommit { src: s.into(), ino, txn: Some(txn.id) };
        self.rpc(self.row_server(src), &Creds::root(), commit).await.map_err(|e| after_commit("file rename", e))?;
        self.drop_remote(inserted).await
    }

    /// What `p`'s row holds, read through any freeze.
    async fn attr_at(&self, p: &NsPath) -> Res<Option<Attr>> {
        match self.rpc(self.row_server(p), &Creds::root(), Request::RecoveryStat { at: p.to_string().into() }).await {
            Ok(Reply::Attr(a)) => Ok(Some(a)),
            Ok(Reply::Redirect { ino, home }) => self.inode_stat(ino, home).await.map(Some),
            Ok(_) => Err(Errno::EPROTO),
            Err(Errno::ENOENT | Errno::ENOTDIR | Errno::EREMOTE) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

impl Recovers for Giraffa {
    type Name = NsPath;

    fn name_ref(path: &NsPath) -> At {
        path.to_string().into()
    }

    fn at_name<'a>(&'a self, path: &'a NsPath, req: Request) -> BoxFuture<'a, Res<Reply>> {
        Box::pin(async move { self.rpc(self.row_server(path), &Creds::root(), req).await })
    }

    /// Giraffa's transactions are links and directory renames; its
    /// mkdir, rmdir and chmod of a directory take locks but change one row,
    /// atomically, and leave nothing to revoke.
    fn revokes(&self, intent: &Intent) -> bool {
        matches!(intent, Intent::Link { .. } | Intent::Rename { .. } | Intent::RenameOver { .. })
    }

    /// A recovery's step refused because another recoverer took the
    /// transaction over answers `ECANCELED` (Giraffa's word for a revoked
    /// transaction's step), or `EIO` where the step is one a coordinator
    /// shares (`rename::taken_over`): both `ESTALE`, which
    /// `ClientCore::lock_with` takes for a takeover only once the lock
    /// service shows the recovery's lease gone, and otherwise answers `EIO`.
    fn recovery_error(&self, e: Errno) -> Errno {
        if matches!(e, Errno::ECANCELED | Errno::EIO) {
            Errno::ESTALE
        } else {
            e
        }
    }

    /// A directory rename's by [`Giraffa::recover_dir_rename`]; a file's
    /// finished if both names hold the same inode, else untouched.
    fn rename_recovered<'a>(&'a self, src: &'a str, dst: &'a str, _replaced: Option<u64>, txn: Txn, _was: u64) -> BoxFuture<'a, Res<()>> {
        Box::pin(async move {
            let (src, dst) = (NsPath::parse(src)?, NsPath::parse(dst)?);
            let (a, b) = (self.attr_at(&src).await?, self.attr_at(&dst).await?);
            let dir = |x: &Option<Attr>| x.as_ref().is_some_and(|a| a.kind == FileKind::Dir);
            if dir(&a) || dir(&b) {
                let ino = |x: &Option<Attr>| x.as_ref().map(|a| a.ino);
                return self.recover_dir_rename(&src, &dst, ino(&a), ino(&b), txn).await;
            }
            self.finish_file_rename(&src, &dst, txn.id).await
        })
    }
}

impl FileData for Giraffa {
    fn at_name<'a>(&'a self, c: &'a Creds, p: &'a NsPath, make: MakeRequest<'a>) -> BoxFuture<'a, Res<Reply>> {
        Box::pin(async move {
            let r = self.row_rpc(c, p, make(FileRef::Path(p.to_string()))).await;
            self.settle(c, p, r).await
        })
    }

    fn at_server<'a>(&'a self, server: u32, c: &'a Creds, req: Request) -> BoxFuture<'a, Res<Reply>> {
        Box::pin(self.rpc(server, c, req))
    }
}

impl Namespace for Giraffa {
    fn mkdir<'a>(&'a self, c: &'a Creds, path: &'a str, mode: u32) -> BoxFuture<'a, Res<Attr>> {
        Box::pin(async move {
            let p = NsPath::parse(path)?;
            let r = self.do_mkdir(c, &p, mode).await;
            self.settle(c, &p, r).await
        })
    }

    fn rmdir<'a>(&'a self, c: &'a Creds, path: &'a str) -> BoxFuture<'a, Res<()>> {
        Box::pin(async move {
            let p = NsPath::parse(path)?;
            let r = self.do_rmdir(c, &p).await;
            self.settle(c, &p, r).await
        })
    }

    fn create<'a>(&'a self, c: &'a Creds, path: &'a str, mode: u32, if_exists: IfExists) -> BoxFuture<'a, Res<Attr>> {
        Box::pin(async move {
            let p = NsPath::parse(path)?;
            let r = self.make(c, &p, mode, NewKind::File, if_exists).await;
            self.settle(c, &p, r).await
        })
    }

    fn mknod<'a>(&'a self, c: &'a Creds, path: &'a str, mode: u32, kind: FileKind, rdev: u64) -> BoxFuture<'a, Res<Attr>> {
        Box::pin(async move {
            let p = NsPath::parse(path)?;
            let r = self.make(c, &p, mode, NewKind::Special { kind, rdev }, IfExists::Fail).await;
            self.settle(c, &p, r).await
        })
    }

    fn unlink<'a>(&'a self, c: &'a Creds, path: &'a str) -> BoxFuture<'a, Res<()>> {
        Box::pin(async move {
            let p = NsPath::parse(path)?;
            if p.is_root() {
                return Err(Errno::EISDIR);
            }
            let r = self.in_parent(c, &p, Request::Unlink { at: p.to_string().into() }).await;
            self.drop_remote(self.settle(c, &p, r).await?).await?;
            self.touch_parent(c, &p).await;
            Ok(())
        })
    }

    fn read_data<'a>(&'a self, c: &'a Creds, path: &'a str, offset: u64, len: u32) -> BoxFuture<'a, Res<DataRead>> {
        self.read_file(c, path, offset, len)
    }

    fn write_data<'a>(&'a self, c: &'a Creds, path: &'a str, offset: u64, data: &'a [u8], inline_max: u32, kill_suid: bool) -> BoxFuture<'a, Res<DataWrite>> {
        self.write_file(c, path, offset, data, inline_max, kill_suid)
    }

    fn spilled<'a>(&'a self, c: &'a Creds, path: &'a str, len: u64, digest: u64) -> BoxFuture<'a, Res<Attr>> {
        self.spill_file(c, path, len, digest)
    }

    fn extend<'a>(&'a self, c: &'a Creds, path: &'a str, end: u64, kill_suid: bool) -> BoxFuture<'a, Res<Attr>> {
        self.extend_file(c, path, end, kill_suid)
    }

    fn stat<'a>(&'a self, c: &'a Creds, path: &'a str) -> BoxFuture<'a, Res<Attr>> {
        Box::pin(async move {
            let p = NsPath::parse(path)?;
            let r = self.stat_path(c, &p).await;
            self.settle(c, &p, r).await
        })
    }

    fn readdir_page<'a>(&'a self, c: &'a Creds, path: &'a str, after: Option<&'a str>, limit: u32) -> BoxFuture<'a, Res<(Vec<DirEntry>, bool)>> {
        Box::pin(async move {
            let p = NsPath::parse(path)?;
            let r = self.do_readdir(c, &p, after, limit.clamp(1, 4096)).await;
            self.settle(c, &p, r).await
        })
    }

    fn rename<'a>(&'a self, c: &'a Creds, src: &'a str, dst: &'a str) -> BoxFuture<'a, Res<()>> {
        Box::pin(async move {
            let (s, d) = (NsPath::parse(src)?, NsPath::parse(dst)?);
            if s == d {
                return self.stat_path(c, &s).await.map(|_| ());
            }
            let r = self.do_rename(c, &s, &d).await;
            self.settle_two(c, &s, &d, r).await?;
            self.touch_parent(c, &s).await;
            self.touch_parent(c, &d).await;
            Ok(())
        })
    }

    fn setattr<'a>(&'a self, c: &'a Creds, path: &'a str, set: &'a SetAttr) -> BoxFuture<'a, Res<Attr>> {
        Box::pin(async move {
            let p = NsPath::parse(path)?;
            let r = self.do_setattr(c, &p, set).await;
            self.settle(c, &p, r).await
        })
    }

    fn symlink<'a>(&'a self, c: &'a Creds, target: &'a str, path: &'a str) -> BoxFuture<'a, Res<Attr>> {
        Box::pin(async move {
            let p = NsPath::parse(path)?;
            let r = self.make(c, &p, 0o777, NewKind::Symlink(target.to_string()), IfExists::Fail).await;
            self.settle(c, &p, r).await
        })
    }

    fn readlink<'a>(&'a self, c: &'a Creds, path: &'a str) -> BoxFuture<'a, Res<String>> {
        Box::pin(async move {
            let p = NsPath::parse(path)?;
            let r = self.row_rpc(c, &p, Request::Readlink { at: p.to_string().into() }).await;
            match self.settle(c, &p, r).await? {
                Reply::LinkTarget(t) => Ok(t),
                other => Err(unexpected(other)),
            }
        })
    }

    fn link<'a>(&'a self, c: &'a Creds, src: &'a str, dst: &'a str) -> BoxFuture<'a, Res<Attr>> {
        Box::pin(async move {
            let (s, d) = (NsPath::parse(src)?, NsPath::parse(dst)?);
            let r = self.do_link(c, &s, &d).await;
            self.settle_two(c, &s, &d, r).await
        })
    }

    fn access<'a>(&'a self, c: &'a Creds, path: &'a str, mask: u32) -> BoxFuture<'a, Res<()>> {
        Box::pin(async move {
            let p = NsPath::parse(path)?;
            let r = self.row_rpc(c, &p, Request::Access { at: p.to_string().into(), mask }).await;
            let reply = self.settle(c, &p, r).await?;
            self.access_or_follow(c, reply, mask).await
        })
    }

    fn server_stats(&self) -> BoxFuture<'_, Res<Vec<ServerStats>>> {
        Box::pin(self.all_stats())
    }

    fn fsck(&self) -> BoxFuture<'_, Res<FsckSummary>> {
        Box::pin(self.fsck_all(crate::fsck::DirLayout::Partitioned))
    }

    fn repair(&self) -> BoxFuture<'_, Res<u64>> {
        Box::pin(self.core.repair_expired(|locks| self.lock_recovering(locks, Intent::Retry { path: "/".into() })))
    }

    fn counters(&self) -> &ClientCounters {
        &self.counters
    }

    fn holds_grants(&self) -> bool {
        true
    }

    fn dir_touches(&self) -> Option<Arc<DirTouches>> {
        self.touches.clone()
    }

    fn mode_name(&self) -> &'static str {
        "giraffa"
    }

    fn servers(&self) -> u32 {
        self.n
    }
}
