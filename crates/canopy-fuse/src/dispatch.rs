//! The kernel's side of the file system: takes each request off `/dev/fuse` and
//! runs its handler (`fs.rs`) on the FUSE thread that read it while another
//! FUSE thread is left to read the next request, else on the runtime's
//! blocking pool, so a handful of FUSE threads keep many requests in flight
//! while handlers wait on RPCs. With every handler run on the FUSE threads,
//! throughput was bounded by threads / RPC round trip (6,600 stats/s with 2
//! threads, 27,000 with 64); with every handler handed to the pool, each
//! request paid a thread wake-up (through the mount, 2 threads: stat p50 371
//! -> 317 us, create 1.84 -> 1.52 ms when few are in flight).
//!
//! `forget` is cheap bookkeeping and runs in place; `init` configures the kernel.

use crate::fs::{Caller, Core};
use crate::handles::Handles;
use crate::options::MountOptions;
use canopy_client::Client;
use fuser::{
    AccessFlags, BsdFileFlags, FileHandle, Filesystem, INodeNo, InitFlags, KernelConfig, LockOwner, OpenFlags,
    RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry,
    ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow, WriteFlags,
};
use std::ffi::{OsStr, OsString};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

pub struct CanopyFs {
    core: Arc<Core>,
    /// Threads reading kernel requests that are running a handler in place.
    busy: AtomicUsize,
}

impl CanopyFs {
    /// `client` must act as root; `handles` must be the client's reclaim hook.
    pub fn new(rt: tokio::runtime::Handle, client: Client, handles: Arc<Handles>, opts: MountOptions) -> CanopyFs {
        CanopyFs { core: Arc::new(Core::new(rt, client, handles, opts)), busy: AtomicUsize::new(0) }
    }

    pub fn options(&self) -> &MountOptions {
        &self.core.opts
    }

    /// Runs `handler` with the core and the caller: in place while another
    /// thread is left to read the next request (one thread hop less per
    /// request, which is most of a request's time when few are in flight),
    /// else on the blocking pool.
    fn spawn(&self, req: &Request, handler: impl FnOnce(&Core, &Caller) + Send + 'static) {
        let (core, who) = (self.core.clone(), Caller::of(req));
        let readers = self.core.opts.threads;
        if self.busy.fetch_update(Ordering::AcqRel, Ordering::Acquire, |b| (b + 1 < readers).then_some(b + 1)).is_ok() {
            let _busy = Busy(&self.busy);
            // A handler that panics answers its request EIO (its reply is
            // dropped) and leaves this reading thread alive, as the pool did.
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| handler(&core, &who))).is_err() {
                eprintln!("canopy-fuse: a request handler panicked; answered EIO");
            }
            return;
        }
        self.core.rt.spawn_blocking(move || handler(&core, &who));
    }
}

/// One FUSE thread running a handler in place, until dropped.
struct Busy<'a>(&'a AtomicUsize);

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

fn owned(name: &OsStr) -> OsString {
    name.to_os_string()
}

impl Filesystem for CanopyFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // Concurrent lookups and creates in one directory, and `ls -l` in one round.
        // HANDLE_KILLPRIV: the servers clear setuid and setgid on a write,
        // truncate or chown (`canopy_posix::setattr::drop_suid`). Without it the kernel asks
        // for that with a chmod by the writer, which a non-owner may not do: a
        // non-owner's write to a setuid file failed with EPERM.
        let wanted = InitFlags::FUSE_PARALLEL_DIROPS
            | InitFlags::FUSE_DO_READDIRPLUS
            | InitFlags::FUSE_READDIRPLUS_AUTO
            | InitFlags::FUSE_HANDLE_KILLPRIV;
        let _ = config.add_capabilities(wanted & config.capabilities());
        let _ = config.set_max_write(1 << 20);
        // The kernel's queue of requests in flight to us (default 12).
        let _ = config.set_max_background(256);
        Ok(())
    }

    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let name = owned(name);
        self.spawn(req, move |c, who| c.lookup(who, parent, &name, reply));
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.core.nodes.lock().forget(ino.0, nlookup);
    }

    fn getattr(&self, req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        self.spawn(req, move |c, who| c.getattr(who, ino, fh, reply));
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        crtime: Option<SystemTime>,
        chgtime: Option<SystemTime>,
        bkuptime: Option<SystemTime>,
        flags: Option<BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        self.spawn(req, move |c, who| {
            c.setattr(who, ino, mode, uid, gid, size, atime, mtime, ctime, fh, crtime, chgtime, bkuptime, flags, reply)
        });
    }

    fn readlink(&self, req: &Request, ino: INodeNo, reply: ReplyData) {
        self.spawn(req, move |c, who| c.readlink(who, ino, reply));
    }

    fn mknod(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, rdev: u32, reply: ReplyEntry) {
        let name = owned(name);
        self.spawn(req, move |c, who| c.mknod(who, parent, &name, mode, umask, rdev, reply));
    }

    fn mkdir(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, reply: ReplyEntry) {
        let name = owned(name);
        self.spawn(req, move |c, who| c.mkdir(who, parent, &name, mode, umask, reply));
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let name = owned(name);
        self.spawn(req, move |c, who| c.unlink(who, parent, &name, reply));
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let name = owned(name);
        self.spawn(req, move |c, who| c.rmdir(who, parent, &name, reply));
    }

    fn symlink(&self, req: &Request, parent: INodeNo, link_name: &OsStr, target: &Path, reply: ReplyEntry) {
        let (name, target) = (owned(link_name), target.to_path_buf());
        self.spawn(req, move |c, who| c.symlink(who, parent, &name, &target, reply));
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let (name, newname) = (owned(name), owned(newname));
        self.spawn(req, move |c, who| c.rename(who, parent, &name, newparent, &newname, flags, reply));
    }

    fn link(&self, req: &Request, ino: INodeNo, newparent: INodeNo, newname: &OsStr, reply: ReplyEntry) {
        let newname = owned(newname);
        self.spawn(req, move |c, who| c.link(who, ino, newparent, &newname, reply));
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        self.spawn(req, move |c, who| c.open(who, ino, flags, reply));
    }

    fn read(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        flags: OpenFlags,
        lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        self.spawn(req, move |c, who| c.read(who, ino, fh, offset, size, flags, lock_owner, reply));
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        flags: OpenFlags,
        lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let data = data.to_vec();
        self.spawn(req, move |c, who| c.write(who, ino, fh, offset, &data, write_flags, flags, lock_owner, reply));
    }

    fn flush(&self, req: &Request, ino: INodeNo, fh: FileHandle, lock_owner: LockOwner, reply: ReplyEmpty) {
        self.spawn(req, move |c, who| c.flush(who, ino, fh, lock_owner, reply));
    }

    fn release(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        flags: OpenFlags,
        lock_owner: Option<LockOwner>,
        flush: bool,
        reply: ReplyEmpty,
    ) {
        self.spawn(req, move |c, who| c.release(who, ino, fh, flags, lock_owner, flush, reply));
    }

    fn fsync(&self, req: &Request, ino: INodeNo, fh: FileHandle, datasync: bool, reply: ReplyEmpty) {
        self.spawn(req, move |c, who| c.fsync(who, ino, fh, datasync, reply));
    }

    fn opendir(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        self.spawn(req, move |c, who| c.opendir(who, ino, flags, reply));
    }

    fn readdir(&self, req: &Request, ino: INodeNo, fh: FileHandle, offset: u64, reply: ReplyDirectory) {
        self.spawn(req, move |c, who| c.readdir(who, ino, fh, offset, reply));
    }

    fn readdirplus(&self, req: &Request, ino: INodeNo, fh: FileHandle, offset: u64, reply: ReplyDirectoryPlus) {
        self.spawn(req, move |c, who| c.readdirplus(who, ino, fh, offset, reply));
    }

    fn releasedir(&self, req: &Request, ino: INodeNo, fh: FileHandle, flags: OpenFlags, reply: ReplyEmpty) {
        self.spawn(req, move |c, who| c.releasedir(who, ino, fh, flags, reply));
    }

    fn fsyncdir(&self, req: &Request, ino: INodeNo, fh: FileHandle, datasync: bool, reply: ReplyEmpty) {
        self.spawn(req, move |c, who| c.fsyncdir(who, ino, fh, datasync, reply));
    }

    fn statfs(&self, req: &Request, ino: INodeNo, reply: ReplyStatfs) {
        self.spawn(req, move |c, who| c.statfs(who, ino, reply));
    }

    fn access(&self, req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        self.spawn(req, move |c, who| c.access(who, ino, mask, reply));
    }

    fn create(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, flags: i32, reply: ReplyCreate) {
        let name = owned(name);
        self.spawn(req, move |c, who| c.create(who, parent, &name, mode, umask, flags, reply));
    }
}
