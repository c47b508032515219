//! The batch's namespace as its client sees it: global paths under the
//! batch's root, served by the private server, with creates that are known
//! to be new kept in memory (seed 002 §IV: "clients complete file creation
//! operations locally if these files are known to be new").
//!
//! A directory made through this namespace starts *fresh*: every name in it
//! is known here, so a create of a new name in it needs no lookup and no
//! store write; the file is appended to the directory's buffer. Any other
//! operation first lands every buffer in the private server (as a batch of
//! its own, checked there as a commit is), after which the directories are
//! ordinary. A commit takes the buffers as they are. Until then a buffered
//! file lives in this process only, and its inode number is provisional.

use crate::paths::Rooted;
use crate::private::{Private, WRITE_BACK_BATCH};
use canopy_client::batch::{self, DirFiles};
use canopy_client::counters::ClientCounters;
use canopy_client::data::{DataRead, DataWrite};
use crate::fids::CarriedFids;
use canopy_client::fsck::FsckSummary;
use canopy_client::Namespace;
use canopy_posix::perm::{self, Owner};
use canopy_proto::attr::S_ISGID;
use canopy_proto::batch::BatchFile;
use canopy_proto::msg::{FileData, IfExists, Inode, ServerStats};
use canopy_proto::path::check_name;
use canopy_proto::{Attr, Creds, DirEntry, Errno, FileKind, SetAttr};
use futures::future::BoxFuture;
use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

type Res<T> = Result<T, Errno>;

/// A directory whose every name this process knows.
#[derive(Default)]
pub(crate) struct Fresh {
    /// Its attributes when made (mode, owner, for the creates' checks).
    pub attr: Option<Attr>,
    pub names: HashSet<String>,
    pub files: Vec<BatchFile>,
}

/// Provisional inode numbers of buffered files start here (the private
/// server's own ids are far below).
const PROVISIONAL: u64 = 1 << 62;

pub struct BatchNs {
    pub(crate) private: Arc<Private>,
    pub(crate) rooted: Rooted,
    /// Fresh directories by private path.
    pub(crate) fresh: Mutex<HashMap<String, Fresh>>,
    fids: CarriedFids,
    provisional: AtomicU64,
}

impl BatchNs {
    pub(crate) fn new(private: Arc<Private>, rooted: Rooted) -> BatchNs {
        BatchNs { private, rooted, fresh: Mutex::new(HashMap::new()), fids: CarriedFids::new(), provisional: AtomicU64::new(PROVISIONAL) }
    }

    fn ns(&self) -> &Arc<dyn Namespace> {
        self.private.client.namespace()
    }

    /// Buffered files, taken (a commit lands them itself).
    pub(crate) fn take_buffers(&self) -> Vec<DirFiles> {
        let mut fresh = self.fresh.lock();
        let dirs = fresh.iter_mut().filter(|(_, f)| !f.files.is_empty()).map(|(d, f)| DirFiles { dir: d.clone(), files: std::mem::take(&mut f.files) }).collect();
        fresh.clear();
        dirs
    }

    /// Lands every buffer in the private server; the directories stop being fresh.
    pub async fn flush(&self) -> Res<()> {
        let dirs = self.take_buffers();
        if dirs.is_empty() {
            return Ok(());
        }
        let owner = self.private.client.clone();
        let landed = batch::land(&owner, WRITE_BACK_BATCH, &dirs).await?;
        match landed.rejected.first() {
            // Only a bug could make the private server refuse what was checked here.
            Some((_, e)) => Err(*e),
            None => Ok(()),
        }
    }

    /// A create in a fresh directory, buffered; `None` if `path`'s directory is not fresh.
    fn buffered_create(&self, c: &Creds, path: &str, mode: u32, if_exists: IfExists) -> Option<Res<Attr>> {
        // The common case, a plain path, is looked up as written.
        if let Some((dir, name)) = self.rooted.private_split(path) {
            if let Some(f) = self.fresh.lock().get_mut(dir) {
                return self.buffer(f, c, name, mode, if_exists);
            }
        }
        let p = match self.rooted.private_path(path) {
            Ok(p) => p,
            Err(e) => return Some(Err(e)),
        };
        let (dir, name) = p.split()?;
        let mut fresh = self.fresh.lock();
        let f = fresh.get_mut(dir.as_str())?;
        self.buffer(f, c, name, mode, if_exists)
    }

    /// Appends file `name` to fresh directory `f` if `c` may create it; `None`
    /// if the name exists and the caller opens it (not a create: the caller flushes).
    fn buffer(&self, f: &mut Fresh, c: &Creds, name: &str, mode: u32, if_exists: IfExists) -> Option<Res<Attr>> {
        let dir_attr = f.attr.as_ref()?;
        if f.names.contains(name) {
            return matches!(if_exists, IfExists::Fail).then_some(Err(Errno::EEXIST));
        }
        if let Err(e) = check_name(name).and_then(|_| perm::require_dir_write(c, Owner::of_attr(dir_attr))) {
            return Some(Err(e));
        }
        let now = now_ns();
        let gid = if dir_attr.mode & S_ISGID != 0 { dir_attr.gid } else { c.gid };
        let ino = self.provisional.fetch_add(1, Ordering::Relaxed);
        let attr = Attr { ino, kind: FileKind::File, mode: mode & 0o7777, uid: c.uid, gid, size: 0, nlink: 1, rdev: 0, atime: now, mtime: now, ctime: now };
        let inode = Inode { attr: attr.clone(), target: None, data: Some(FileData { fid: self.fids.next(), inline: Some(Vec::new()) }) };
        f.names.insert(name.to_string());
        f.files.push(BatchFile { name: name.to_string(), inode });
        Some(Ok(attr))
    }
}

fn now_ns() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as i64)
}

/// Forwards one operation to the private namespace after landing the buffers,
/// with its paths made private.
macro_rules! forward {
    ($self:ident, $op:ident ( $c:ident $(, path $p:ident)* $(, arg $a:expr)* )) => {
        Box::pin(async move {
            $self.flush().await?;
            $( let $p = $self.rooted.private($p)?; )*
            $self.ns().$op($c $(, &$p)* $(, $a)*).await
        })
    };
}

impl Namespace for BatchNs {
    fn mkdir<'a>(&'a self, c: &'a Creds, path: &'a str, mode: u32) -> BoxFuture<'a, Res<Attr>> {
        Box::pin(async move {
            if self.rooted.above(path) {
                return Err(Errno::EEXIST);
            }
            let p = self.rooted.private_path(path)?;
            // A name buffered in a fresh parent is known here only.
            let parent_fresh = p.split().is_some_and(|(d, n)| self.fresh.lock().get(d.as_str()).map(|f| f.names.contains(n)) == Some(true));
            if parent_fresh {
                return Err(Errno::EEXIST);
            }
            let attr = self.ns().mkdir(c, p.as_str(), mode).await?;
            let mut fresh = self.fresh.lock();
            if let Some((d, n)) = p.split() {
                if let Some(f) = fresh.get_mut(d.as_str()) {
                    f.names.insert(n.to_string());
                }
            }
            fresh.insert(p.as_str().to_string(), Fresh { attr: Some(attr.clone()), ..Fresh::default() });
            Ok(attr)
        })
    }

    fn create<'a>(&'a self, c: &'a Creds, path: &'a str, mode: u32, if_exists: IfExists) -> BoxFuture<'a, Res<Attr>> {
        if let Some(r) = self.buffered_create(c, path, mode, if_exists) {
            return Box::pin(async move { r });
        }
        forward!(self, create(c, path path, arg mode, arg if_exists))
    }

    fn rmdir<'a>(&'a self, c: &'a Creds, path: &'a str) -> BoxFuture<'a, Res<()>> {
        forward!(self, rmdir(c, path path))
    }
    fn mknod<'a>(&'a self, c: &'a Creds, path: &'a str, mode: u32, kind: FileKind, rdev: u64) -> BoxFuture<'a, Res<Attr>> {
        forward!(self, mknod(c, path path, arg mode, arg kind, arg rdev))
    }
    fn unlink<'a>(&'a self, c: &'a Creds, path: &'a str) -> BoxFuture<'a, Res<()>> {
        forward!(self, unlink(c, path path))
    }
    /// A directory above the root reads as the root (the batch sees no more).
    fn stat<'a>(&'a self, c: &'a Creds, path: &'a str) -> BoxFuture<'a, Res<Attr>> {
        let path = if self.rooted.above(path) { self.rooted.root() } else { path };
        forward!(self, stat(c, path path))
    }
    fn readdir_page<'a>(&'a self, c: &'a Creds, path: &'a str, after: Option<&'a str>, limit: u32) -> BoxFuture<'a, Res<(Vec<DirEntry>, bool)>> {
        forward!(self, readdir_page(c, path path, arg after, arg limit))
    }
    fn rename<'a>(&'a self, c: &'a Creds, src: &'a str, dst: &'a str) -> BoxFuture<'a, Res<()>> {
        forward!(self, rename(c, path src, path dst))
    }
    fn setattr<'a>(&'a self, c: &'a Creds, path: &'a str, set: &'a SetAttr) -> BoxFuture<'a, Res<Attr>> {
        forward!(self, setattr(c, path path, arg set))
    }
    fn symlink<'a>(&'a self, c: &'a Creds, target: &'a str, path: &'a str) -> BoxFuture<'a, Res<Attr>> {
        Box::pin(async move {
            self.flush().await?;
            self.ns().symlink(c, target, &self.rooted.private(path)?).await
        })
    }
    fn readlink<'a>(&'a self, c: &'a Creds, path: &'a str) -> BoxFuture<'a, Res<String>> {
        forward!(self, readlink(c, path path))
    }
    fn link<'a>(&'a self, c: &'a Creds, src: &'a str, dst: &'a str) -> BoxFuture<'a, Res<Attr>> {
        forward!(self, link(c, path src, path dst))
    }
    fn access<'a>(&'a self, c: &'a Creds, path: &'a str, mask: u32) -> BoxFuture<'a, Res<()>> {
        forward!(self, access(c, path path, arg mask))
    }
    fn read_data<'a>(&'a self, c: &'a Creds, path: &'a str, offset: u64, len: u32) -> BoxFuture<'a, Res<DataRead>> {
        forward!(self, read_data(c, path path, arg offset, arg len))
    }
    fn write_data<'a>(&'a self, c: &'a Creds, path: &'a str, offset: u64, data: &'a [u8], inline_max: u32, kill_suid: bool) -> BoxFuture<'a, Res<DataWrite>> {
        forward!(self, write_data(c, path path, arg offset, arg data, arg inline_max, arg kill_suid))
    }
    fn spilled<'a>(&'a self, c: &'a Creds, path: &'a str, len: u64, digest: u64) -> BoxFuture<'a, Res<Attr>> {
        forward!(self, spilled(c, path path, arg len, arg digest))
    }
    fn extend<'a>(&'a self, c: &'a Creds, path: &'a str, end: u64, kill_suid: bool) -> BoxFuture<'a, Res<Attr>> {
        forward!(self, extend(c, path path, arg end, arg kill_suid))
    }
    fn server_stats(&self) -> BoxFuture<'_, Res<Vec<ServerStats>>> {
        self.ns().server_stats()
    }
    fn fsck(&self) -> BoxFuture<'_, Res<FsckSummary>> {
        Box::pin(async move {
            self.flush().await?;
            self.ns().fsck().await
        })
    }
    fn repair(&self) -> BoxFuture<'_, Res<u64>> {
        self.ns().repair()
    }
    fn counters(&self) -> &ClientCounters {
        self.ns().counters()
    }
    fn mode_name(&self) -> &'static str {
        "batch"
    }
    fn servers(&self) -> u32 {
        1
    }
}
