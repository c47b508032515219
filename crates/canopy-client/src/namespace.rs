//! The mode-generic client API.

use crate::counters::ClientCounters;
use crate::data::{DataRead, DataWrite};
use crate::fsck::FsckSummary;
use canopy_proto::msg::{At, IfExists, ServerStats, INLINE_LIMIT, READ_REPLY_MAX};
use canopy_proto::{Attr, Creds, DirEntry, Errno, FileKind, Reply, Request, SetAttr, TimeSet};
use futures::future::BoxFuture;
use std::sync::Arc;

pub type Res<T> = Result<T, Errno>;

/// What a bulk create did: how many files it made, and each name it refused.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BulkOutcome {
    pub created: u64,
    pub rejected: Vec<(String, Errno)>,
}

/// Errors a create gives about one name rather than its directory.
fn refuses_the_name(e: Errno) -> bool {
    matches!(e, Errno::EEXIST | Errno::EINVAL | Errno::ENAMETOOLONG | Errno::EISDIR)
}

/// A namespace strategy: every POSIX operation, with the caller's credentials.
/// Paths are absolute Canopy paths (see `canopy_proto::path`).
pub trait Namespace: Send + Sync + 'static {
    fn mkdir<'a>(&'a self, c: &'a Creds, path: &'a str, mode: u32) -> BoxFuture<'a, Res<Attr>>;
    fn rmdir<'a>(&'a self, c: &'a Creds, path: &'a str) -> BoxFuture<'a, Res<()>>;
    /// Creates a regular file; if the name is taken, `if_exists` says whether that
    /// is `EEXIST` or the existing file is opened (after open(2)'s checks).
    fn create<'a>(&'a self, c: &'a Creds, path: &'a str, mode: u32, if_exists: IfExists) -> BoxFuture<'a, Res<Attr>>;
    /// Makes a FIFO, socket or device node (`kind` must be one of those).
    fn mknod<'a>(&'a self, c: &'a Creds, path: &'a str, mode: u32, kind: FileKind, rdev: u64) -> BoxFuture<'a, Res<Attr>>;
    fn unlink<'a>(&'a self, c: &'a Creds, path: &'a str) -> BoxFuture<'a, Res<()>>;
    /// lstat: symlinks are not followed.
    fn stat<'a>(&'a self, c: &'a Creds, path: &'a str) -> BoxFuture<'a, Res<Attr>>;
    /// One page: entries named after `after`, at most `limit`, and whether more follow.
    fn readdir_page<'a>(&'a self, c: &'a Creds, path: &'a str, after: Option<&'a str>, limit: u32) -> BoxFuture<'a, Res<(Vec<DirEntry>, bool)>>;
    fn rename<'a>(&'a self, c: &'a Creds, src: &'a str, dst: &'a str) -> BoxFuture<'a, Res<()>>;
    /// `rename`, from a caller that saw `src` as a directory (a hint only: a
    /// mode may then skip finding out what `src` is, and the servers still
    /// decide; a file renamed so costs more than through `rename`).
    fn rename_dir<'a>(&'a self, c: &'a Creds, src: &'a str, dst: &'a str) -> BoxFuture<'a, Res<()>> {
        self.rename(c, src, dst)
    }
    fn setattr<'a>(&'a self, c: &'a Creds, path: &'a str, set: &'a SetAttr) -> BoxFuture<'a, Res<Attr>>;
    fn symlink<'a>(&'a self, c: &'a Creds, target: &'a str, path: &'a str) -> BoxFuture<'a, Res<Attr>>;
    fn readlink<'a>(&'a self, c: &'a Creds, path: &'a str) -> BoxFuture<'a, Res<String>>;
    fn link<'a>(&'a self, c: &'a Creds, src: &'a str, dst: &'a str) -> BoxFuture<'a, Res<Attr>>;
    fn access<'a>(&'a self, c: &'a Creds, path: &'a str, mask: u32) -> BoxFuture<'a, Res<()>>;
    /// File contents (see [`crate::data`]). Each is checked against the file as
    /// an open would be (read permission for `read_data`, write for the others;
    /// root passes): a client serving open descriptors, whose permission was
    /// checked at open, sends them as root.
    fn read_data<'a>(&'a self, c: &'a Creds, path: &'a str, offset: u64, len: u32) -> BoxFuture<'a, Res<DataRead>>;
    /// `kill_suid`: the writer may not keep setuid and setgid (a client acting as
    /// root for an unprivileged process says so; any other caller implies it).
    fn write_data<'a>(&'a self, c: &'a Creds, path: &'a str, offset: u64, data: &'a [u8], inline_max: u32, kill_suid: bool) -> BoxFuture<'a, Res<DataWrite>>;
    /// Confirms a spill: the inline contents (`len` bytes with digest `digest`)
    /// were copied to the back-end file. `ESTALE`: they changed meanwhile.
    fn spilled<'a>(&'a self, c: &'a Creds, path: &'a str, len: u64, digest: u64) -> BoxFuture<'a, Res<Attr>>;
    /// Back-end contents were written up to `end`: grows the size, sets mtime;
    /// `kill_suid` as for `write_data`.
    fn extend<'a>(&'a self, c: &'a Creds, path: &'a str, end: u64, kill_suid: bool) -> BoxFuture<'a, Res<Attr>>;
    fn server_stats(&self) -> BoxFuture<'_, Res<Vec<ServerStats>>>;
    fn fsck(&self) -> BoxFuture<'_, Res<FsckSummary>>;
    /// Recovers every transaction whose coordinator's lease ran out; returns how
    /// many it recovered.
    fn repair(&self) -> BoxFuture<'_, Res<u64>>;
    /// Mends what requests that reached a server not holding their entry
    /// left (ShardFS: entries away from their primary, replicas' tables that
    /// differ); returns how many objects it moved, dropped or synced. For
    /// `fsck --repair`, not the sweep: it reads every server whole.
    fn repair_placement(&self) -> BoxFuture<'_, Res<u64>> {
        Box::pin(async { Ok(0) })
    }
    fn counters(&self) -> &ClientCounters;

    /// Forgets whatever the client caches of the namespace (IndexFS: its
    /// lookup leases and partition bitmaps), as a fresh client would start.
    fn drop_caches(&self) {}

    /// Creates regular files `names` of mode `mode` in directory `dir` at once
    /// (IndexFS: bulk insertion). A name taken or invalid is refused on its own
    /// and the rest are made; an error about the directory (it is missing, or
    /// the caller may not write it) fails the call. By default, one create each.
    fn bulk_create<'a>(&'a self, c: &'a Creds, dir: &'a str, names: &'a [String], mode: u32) -> BoxFuture<'a, Res<BulkOutcome>> {
        Box::pin(async move {
            let mut out = BulkOutcome::default();
            for name in names {
                if let Err(e) = canopy_proto::path::check_name(name).and_then(|_| if name == "." || name == ".." { Err(Errno::EINVAL) } else { Ok(()) }) {
                    out.rejected.push((name.clone(), e));
                    continue;
                }
                match self.create(c, &format!("{}/{name}", dir.trim_end_matches('/')), mode, IfExists::Fail).await {
                    Ok(_) => out.created += 1,
                    Err(e) if refuses_the_name(e) => out.rejected.push((name.clone(), e)),
                    Err(e) => return Err(e),
                }
            }
            Ok(out)
        })
    }

    /// BatchFS: how a commit's chunks name directory `dir`, and the server of
    /// each of `names` in it; `fresh`: ask the servers rather than trust what
    /// the client knows (a split moved names). `ENOSYS` where batches do not
    /// land (Giraffa; a user key, whose requests go through delegation).
    fn batch_route<'a>(&'a self, _c: &'a Creds, _dir: &'a str, _names: &'a [&'a str], _fresh: bool) -> BoxFuture<'a, Res<(At, Vec<u32>)>> {
        Box::pin(async { Err(Errno::ENOSYS) })
    }

    /// BatchFS: one request of a batch to server `server` (`crate::batch`).
    fn batch_call<'a>(&'a self, _c: &'a Creds, _server: u32, _req: Request) -> BoxFuture<'a, Res<Reply>> {
        Box::pin(async { Err(Errno::ENOSYS) })
    }

    /// Whether this client holds grants its later calls reuse and other
    /// clients' changes wait out (IndexFS's directory leases, Giraffa's
    /// directory proofs). A program serving many callers should then share
    /// one such client: several would each fetch their own, and a change by
    /// one would wait for the others' to run out.
    fn holds_grants(&self) -> bool {
        false
    }

    /// The book this client coalesces directory touches in, for other
    /// clients of the same program to share (`touches.rs`); `None` if it
    /// keeps none.
    fn dir_touches(&self) -> Option<Arc<crate::touches::DirTouches>> {
        None
    }

    fn mode_name(&self) -> &'static str;
    fn servers(&self) -> u32;
}

/// A handle on a namespace acting as one user. Cheap to clone.
#[derive(Clone)]
pub struct Client {
    ns: Arc<dyn Namespace>,
    creds: Creds,
}

/// The largest page `readdir` asks for.
pub const READDIR_PAGE: u32 = 1024;

impl Client {
    pub fn new(ns: Arc<dyn Namespace>, creds: Creds) -> Client {
        Client { ns, creds }
    }

    /// The same namespace as another user.
    pub fn as_user(&self, creds: Creds) -> Client {
        Client { ns: self.ns.clone(), creds }
    }

    pub fn creds(&self) -> &Creds {
        &self.creds
    }

    pub fn namespace(&self) -> &Arc<dyn Namespace> {
        &self.ns
    }

    pub async fn mkdir(&self, path: &str, mode: u32) -> Res<Attr> {
        self.ns.mkdir(&self.creds, path, mode).await
    }

    pub async fn rmdir(&self, path: &str) -> Res<()> {
        self.ns.rmdir(&self.creds, path).await
    }

    /// Creates regular files `names` in directory `dir` at once (see
    /// [`Namespace::bulk_create`]).
    pub async fn bulk_create(&self, dir: &str, names: &[String], mode: u32) -> Res<BulkOutcome> {
        self.ns.bulk_create(&self.creds, dir, names, mode).await
    }

    /// Creates a regular file; `EEXIST` if the name is taken (`O_CREAT|O_EXCL`).
    pub async fn create(&self, path: &str, mode: u32) -> Res<Attr> {
        self.ns.create(&self.creds, path, mode, IfExists::Fail).await
    }

    /// `O_CREAT` without `O_EXCL`: creates the file if missing, else answers the
    /// existing regular file if this user may open it for `access` (R and W bits
    /// of [`canopy_proto::attr::access`]; W for `O_TRUNC`): `EACCES` if not,
    /// `EISDIR` for a directory. Truncating is the caller's next step.
    pub async fn open_create(&self, path: &str, mode: u32, access: u32) -> Res<Attr> {
        self.ns.create(&self.creds, path, mode, IfExists::Open { access }).await
    }

    pub async fn mknod(&self, path: &str, mode: u32, kind: FileKind, rdev: u64) -> Res<Attr> {
        self.ns.mknod(&self.creds, path, mode, kind, rdev).await
    }

    /// Up to `len` bytes at `offset`, at most [`INLINE_LIMIT`] (the most a
    /// file keeps inline): fewer only at the end of the file. A server
    /// answers at most [`READ_REPLY_MAX`] bytes at once; the rest is asked
    /// for in turn.
    pub async fn read_data(&self, path: &str, offset: u64, len: u32) -> Res<DataRead> {
        let len = len.min(INLINE_LIMIT);
        let mut got = Vec::new();
        loop {
            let at = offset.saturating_add(got.len() as u64);
            let ask = (len - got.len() as u32).min(READ_REPLY_MAX);
            match self.ns.read_data(&self.creds, path, at, ask).await? {
                DataRead::Inline(bytes) if got.is_empty() && (bytes.len() as u32) < READ_REPLY_MAX => return Ok(DataRead::Inline(bytes)),
                DataRead::Inline(bytes) => {
                    let short = (bytes.len() as u32) < ask;
                    got.extend_from_slice(&bytes);
                    if short || got.len() as u32 >= len {
                        return Ok(DataRead::Inline(got));
                    }
                }
                // Spilled meanwhile: what was read inline is no longer the file's.
                backend => return Ok(backend),
            }
        }
    }

    /// Writes inline contents; `kill_suid`: the write is made for a process that
    /// may not keep setuid and setgid (only meaningful when acting as root).
    pub async fn write_data(&self, path: &str, offset: u64, data: &[u8], inline_max: u32, kill_suid: bool) -> Res<DataWrite> {
        self.ns.write_data(&self.creds, path, offset, data, inline_max, kill_suid).await
    }

    pub async fn spilled(&self, path: &str, len: u64, digest: u64) -> Res<Attr> {
        self.ns.spilled(&self.creds, path, len, digest).await
    }

    pub async fn extend(&self, path: &str, end: u64, kill_suid: bool) -> Res<Attr> {
        self.ns.extend(&self.creds, path, end, kill_suid).await
    }

    pub async fn unlink(&self, path: &str) -> Res<()> {
        self.ns.unlink(&self.creds, path).await
    }

    pub async fn stat(&self, path: &str) -> Res<Attr> {
        self.ns.stat(&self.creds, path).await
    }

    pub async fn readdir_page(&self, path: &str, after: Option<&str>, limit: u32) -> Res<(Vec<DirEntry>, bool)> {
        self.ns.readdir_page(&self.creds, path, after, limit).await
    }

    /// The whole directory, fetched page by page, in name order.
    pub async fn readdir(&self, path: &str) -> Res<Vec<DirEntry>> {
        Ok(self.readdir_at_most(path, usize::MAX).await?.unwrap_or_default())
    }

    /// The whole directory as [`Client::readdir`] gives it, or `None` once it
    /// holds more than `most` names (no more pages are fetched).
    pub async fn readdir_at_most(&self, path: &str, most: usize) -> Res<Option<Vec<DirEntry>>> {
        let mut all: Vec<DirEntry> = Vec::new();
        loop {
            let after = all.last().map(|e| e.name.clone());
            let (page, more) = self.ns.readdir_page(&self.creds, path, after.as_deref(), READDIR_PAGE).await?;
            let got = page.len();
            all.extend(page);
            if all.len() > most {
                return Ok(None);
            }
            if !more || got == 0 {
                return Ok(Some(all));
            }
        }
    }

    pub async fn rename(&self, src: &str, dst: &str) -> Res<()> {
        self.ns.rename(&self.creds, src, dst).await
    }

    /// [`Client::rename`] of what the caller saw as a directory
    /// ([`Namespace::rename_dir`]).
    pub async fn rename_dir(&self, src: &str, dst: &str) -> Res<()> {
        self.ns.rename_dir(&self.creds, src, dst).await
    }

    pub async fn setattr(&self, path: &str, set: &SetAttr) -> Res<Attr> {
        self.ns.setattr(&self.creds, path, set).await
    }

    pub async fn chmod(&self, path: &str, mode: u32) -> Res<Attr> {
        self.setattr(path, &SetAttr::mode(mode)).await
    }

    pub async fn chown(&self, path: &str, uid: Option<u32>, gid: Option<u32>) -> Res<Attr> {
        self.setattr(path, &SetAttr::owner(uid, gid)).await
    }

    pub async fn truncate(&self, path: &str, size: u64) -> Res<Attr> {
        self.setattr(path, &SetAttr::size(size)).await
    }

    pub async fn utimens(&self, path: &str, atime: Option<TimeSet>, mtime: Option<TimeSet>) -> Res<Attr> {
        self.setattr(path, &SetAttr { atime, mtime, ..SetAttr::default() }).await
    }

    pub async fn symlink(&self, target: &str, path: &str) -> Res<Attr> {
        self.ns.symlink(&self.creds, target, path).await
    }

    pub async fn readlink(&self, path: &str) -> Res<String> {
        self.ns.readlink(&self.creds, path).await
    }

    pub async fn link(&self, src: &str, dst: &str) -> Res<Attr> {
        self.ns.link(&self.creds, src, dst).await
    }

    pub async fn access(&self, path: &str, mask: u32) -> Res<()> {
        self.ns.access(&self.creds, path, mask).await
    }

    pub async fn server_stats(&self) -> Res<Vec<ServerStats>> {
        self.ns.server_stats().await
    }

    pub async fn fsck(&self) -> Res<FsckSummary> {
        self.ns.fsck().await
    }

    pub async fn repair_placement(&self) -> Res<u64> {
        self.ns.repair_placement().await
    }

    pub async fn repair(&self) -> Res<u64> {
        self.ns.repair().await
    }

    /// See [`Namespace::drop_caches`].
    pub fn drop_caches(&self) {
        self.ns.drop_caches()
    }

    pub fn counters(&self) -> &ClientCounters {
        self.ns.counters()
    }
}
