//! The kernel's side of the file system: takes each request off `/dev/fuse` and
//! runs its handler (`fs.rs`) on the FUSE thread that read it while few run
//! so ([`IN_PLACE_MAX`], and another FUSE thread is left to read the next
//! request); a namespace handler run so runs on the thread's own runtime
//! and client (`own.rs`). Past that, a namespace handler (a future) becomes a
//! task on the shared runtime, and a file-data handler (blocking back-end
//! I/O) goes to the runtime's blocking pool.
//!
//! Why both: with every handler run on the FUSE threads, throughput was
//! bounded by threads / RPC round trip (6,600 stats/s with 2 threads, 27,000
//! with 64); with every handler handed off, each request paid a thread
//! wake-up (through the mount, 2 threads: stat p50 371 -> 317 us, create 1.84
//! -> 1.52 ms when few are in flight). A handler handed to the blocking pool
//! still paid two more under load: the pool thread's, and the wake-up of that
//! thread when its RPC answered. A task pays neither when the runtime's
//! workers are busy: the answer's reader wakes it on the same worker.
//!
//! Cheap bookkeeping (`forget`, `flush`, `release`, `readdir` from the
//! listing opendir read, `releasedir`, `fsyncdir`, a GETATTR the mount's held
//! directory attributes answer) runs in place; `init` configures the kernel.

use crate::awake::AwakeWhileBusy;
use crate::fs::{Caller, Core};
use crate::handles::Handles;
use crate::options::MountOptions;
use crate::own::{self, ClientFactory};
use crate::timings::{Kind, RequestTimes};
use canopy_client::Client;
use fuser::{
    AccessFlags, BsdFileFlags, FileHandle, Filesystem, INodeNo, InitFlags, KernelConfig, LockOwner, OpenFlags,
    RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry,
    ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow, WriteFlags,
};
use std::ffi::{OsStr, OsString};
use std::future::Future;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Instant, SystemTime};

/// Handlers run in place at most at once (and never all FUSE threads: one is
/// left to read): enough for a few callers with a request each in flight;
/// past it, handlers run as tasks and the FUSE threads keep reading. With 2,
/// two callers' handlers were handed off about one time in nine (a thread
/// still finishing its handler after its reply when the caller's next
/// request arrived), each paying the shared runtime's wake-ups: 2-thread
/// creates through the mount 7,209/s with 2 (11,301 handed off of 20,000
/// creates), 9,291/s with 4 (173). With 128 callers creating files (a held
/// directory's GETATTR taking no place: `Filesystem::getattr` below), 7 (all
/// 8 default threads but one) against 4, five runs each alternating: the
/// mount's CPU 2.11-2.36 s against 2.51-2.78 s per 40,000 creates,
/// 15,261-16,623/s against 14,129-15,768/s.
const IN_PLACE_MAX: usize = 7;

pub struct CanopyFs {
    core: Arc<Core>,
    in_place: InPlace,
    times: Arc<RequestTimes>,
    /// Makes each FUSE thread's own client, for the namespace handlers it
    /// runs in place (`own.rs`); none: they run on the shared runtime.
    own: Option<ClientFactory>,
    /// Keeps idle CPUs polling while requests come (`--no-idle-polling`: none).
    awake: Option<AwakeWhileBusy>,
}

impl CanopyFs {
    /// `client` must act as root; `handles` must be the client's reclaim hook
    /// (and that of every client `own` makes).
    pub fn new(rt: tokio::runtime::Handle, client: Client, handles: Arc<Handles>, opts: MountOptions, own: Option<ClientFactory>) -> CanopyFs {
        let in_place = InPlace::new(IN_PLACE_MAX.min(opts.threads.saturating_sub(1)));
        let times = Arc::new(RequestTimes::default());
        let awake = if opts.idle_polling { AwakeWhileBusy::start() } else { None };
        CanopyFs { core: Arc::new(Core::new(rt, client, handles, opts)), in_place, times, own, awake }
    }

    /// A request came: the CPUs are kept quick to wake while they come.
    fn came(&self) {
        if let Some(a) = &self.awake {
            a.touch();
        }
    }

    /// A request's handler could not run in place: a crowd of them.
    fn handed_off(&self) {
        self.times.handed_off();
        if let Some(a) = &self.awake {
            a.crowded();
        }
    }

    pub fn options(&self) -> &MountOptions {
        &self.core.opts
    }

    /// Where the session's channel back to the kernel goes once mounted.
    pub(crate) fn notifier_slot(&self) -> Arc<std::sync::OnceLock<fuser::Notifier>> {
        self.core.notifier.clone()
    }

    /// How long this mount's handlers have taken, by kind of request.
    pub fn times(&self) -> Arc<RequestTimes> {
        self.times.clone()
    }

    /// Runs a blocking `handler` with the core and the caller: in place when
    /// it may, else on the blocking pool.
    fn spawn(&self, kind: Kind, req: &Request, handler: impl FnOnce(&Core, &Caller) + Send + 'static) {
        self.came();
        let (core, who, times, start) = (self.core.clone(), Caller::of(req), self.times.clone(), Instant::now());
        let timed = move || {
            handler(&core, &who);
            times.record(kind, start.elapsed());
        };
        match self.in_place.claim() {
            Some(_busy) => survive(timed),
            None => {
                self.handed_off();
                drop(self.core.rt.spawn_blocking(timed));
            }
        }
    }

    /// Runs the future `handler` makes: to completion in place when it may,
    /// else as a task on the runtime.
    fn spawn_async<F>(&self, kind: Kind, req: &Request, handler: impl FnOnce(Arc<Core>, Caller) -> F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.came();
        let (core, who, rt) = (self.core.clone(), Caller::of(req), &self.core.rt);
        let (times, start, handled) = (self.times.clone(), Instant::now(), handler(core, who));
        let timed = async move {
            handled.await;
            times.record(kind, start.elapsed());
        };
        match self.in_place.claim() {
            Some(_busy) => survive(|| match &self.own {
                Some(make) => own::block_on(make, timed).unwrap_or_else(|timed| rt.block_on(timed)),
                None => rt.block_on(timed),
            }),
            // A task that panics drops its reply, which answers EIO.
            None => {
                self.handed_off();
                drop(rt.spawn(timed));
            }
        }
    }

    /// Lets `handler` answer in place if it can without waiting (timed), else
    /// gives its reply back for a handler that must wait.
    fn at_once<Rp>(&self, kind: Kind, handler: impl FnOnce(&Core) -> Result<(), Rp>) -> Result<(), Rp> {
        self.came();
        let start = Instant::now();
        handler(&self.core)?;
        self.times.record(kind, start.elapsed());
        Ok(())
    }

    /// Renews what this mount knows of the fresh directory `dir` if it is
    /// due, as a task on the runtime: the lookups go on being answered here
    /// meanwhile.
    fn renew_if_due(&self, req: &Request, dir: INodeNo) {
        if self.core.renewal_due(dir) {
            self.times.renewed_fresh();
            let (core, who) = (self.core.clone(), Caller::of(req));
            drop(self.core.rt.spawn(async move { core.renew_fresh(&who, dir).await }));
        }
    }

    /// Runs a cheap `handler` in place, timed.
    fn answer(&self, kind: Kind, handler: impl FnOnce(&Core)) {
        self.came();
        let start = Instant::now();
        handler(&self.core);
        self.times.record(kind, start.elapsed());
    }
}

/// Runs a handler on a thread that reads kernel requests: one that panics
/// answers its request EIO (its reply is dropped) and leaves the thread alive,
/// as the pool and the runtime do.
fn survive(handler: impl FnOnce()) {
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(handler)).is_err() {
        eprintln!("canopy-fuse: a request handler panicked; answered EIO");
    }
}

/// How many FUSE threads are running a handler in place, and how many may.
struct InPlace {
    busy: AtomicUsize,
    most: usize,
}

impl InPlace {
    fn new(most: usize) -> InPlace {
        InPlace { busy: AtomicUsize::new(0), most }
    }

    /// This thread may run a handler in place while the answer is held; None
    /// when `most` already do.
    fn claim(&self) -> Option<Busy<'_>> {
        let claimed = self.busy.fetch_update(Ordering::AcqRel, Ordering::Acquire, |b| (b < self.most).then_some(b + 1));
        // Built only on success: a `Busy` dropped gives its place back.
        claimed.is_ok().then(|| Busy(&self.busy))
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
        // A new name in a directory this mount just made: answered here.
        let Err(reply) = self.at_once(Kind::Lookup, |c| c.lookup_known_absent(&Caller::of(req), parent, name, reply)) else {
            self.times.answered_absent();
            return self.renew_if_due(req, parent);
        };
        let name = owned(name);
        self.spawn_async(Kind::Lookup, req, move |c, who| async move { c.lookup(&who, parent, &name, reply).await });
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.core.nodes.lock().forget(ino.0, nlookup);
    }

    fn getattr(&self, req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        // Held directory attributes: answered here, neither a runtime nor a
        // task needed (a directory's GETATTR follows every create in it).
        let Err(reply) = self.at_once(Kind::Getattr, |c| c.getattr_held(&Caller::of(req), ino, reply)) else { return };
        self.spawn_async(Kind::Getattr, req, move |c, who| async move { c.getattr(&who, ino, fh, reply).await });
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
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        self.spawn_async(Kind::Setattr, req, move |c, who| async move {
            c.setattr(&who, ino, mode, uid, gid, size, atime, mtime, fh, reply).await
        });
    }

    fn readlink(&self, req: &Request, ino: INodeNo, reply: ReplyData) {
        self.spawn_async(Kind::Readlink, req, move |c, who| async move { c.readlink(&who, ino, reply).await });
    }

    fn mknod(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, _umask: u32, rdev: u32, reply: ReplyEntry) {
        let name = owned(name);
        self.spawn_async(Kind::Mknod, req, move |c, who| async move { c.mknod(&who, parent, &name, mode, rdev, reply).await });
    }

    fn mkdir(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, _umask: u32, reply: ReplyEntry) {
        let name = owned(name);
        self.spawn_async(Kind::Mkdir, req, move |c, who| async move { c.mkdir(&who, parent, &name, mode, reply).await });
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let name = owned(name);
        self.spawn_async(Kind::Unlink, req, move |c, who| async move { c.unlink(&who, parent, &name, reply).await });
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let name = owned(name);
        self.spawn_async(Kind::Rmdir, req, move |c, who| async move { c.rmdir(&who, parent, &name, reply).await });
    }

    fn symlink(&self, req: &Request, parent: INodeNo, link_name: &OsStr, target: &Path, reply: ReplyEntry) {
        let (name, target) = (owned(link_name), target.to_path_buf());
        self.spawn_async(Kind::Symlink, req, move |c, who| async move { c.symlink(&who, parent, &name, &target, reply).await });
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
        self.spawn_async(Kind::Rename, req, move |c, who| async move {
            c.rename(&who, parent, &name, newparent, &newname, flags, reply).await
        });
    }

    fn link(&self, req: &Request, ino: INodeNo, newparent: INodeNo, newname: &OsStr, reply: ReplyEntry) {
        let newname = owned(newname);
        self.spawn_async(Kind::Link, req, move |c, who| async move { c.link(&who, ino, newparent, &newname, reply).await });
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        self.spawn_async(Kind::Open, req, move |c, who| async move { c.open(&who, ino, flags, reply).await });
    }

    fn read(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        self.spawn(Kind::Read, req, move |c, _who| c.read(ino, fh, offset, size, reply));
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let data = data.to_vec();
        self.spawn(Kind::Write, req, move |c, who| c.write(who, ino, fh, offset, &data, reply));
    }

    fn flush(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _lock_owner: LockOwner, reply: ReplyEmpty) {
        // Every write already reached the metadata service and the back-end file.
        self.answer(Kind::Flush, |_| reply.ok());
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.answer(Kind::Release, |c| c.release(fh, reply));
    }

    fn fsync(&self, req: &Request, _ino: INodeNo, fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        self.spawn(Kind::Fsync, req, move |c, _who| c.fsync(fh, reply));
    }

    fn opendir(&self, req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        self.spawn_async(Kind::Opendir, req, move |c, who| async move { c.opendir(&who, ino, reply).await });
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, fh: FileHandle, offset: u64, reply: ReplyDirectory) {
        // The listing was read at opendir: this only copies from it.
        self.answer(Kind::Readdir, |c| c.readdir(ino, fh, offset, reply));
    }

    fn readdirplus(&self, req: &Request, ino: INodeNo, fh: FileHandle, offset: u64, reply: ReplyDirectoryPlus) {
        self.spawn_async(Kind::Readdirplus, req, move |c, who| async move { c.readdirplus(&who, ino, fh, offset, reply).await });
    }

    fn releasedir(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, _flags: OpenFlags, reply: ReplyEmpty) {
        self.answer(Kind::Releasedir, |c| c.releasedir(fh, reply));
    }

    fn fsyncdir(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        // Metadata is durable when the servers answer (per their durability setting).
        self.answer(Kind::Fsyncdir, |_| reply.ok());
    }

    fn statfs(&self, req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        self.spawn(Kind::Statfs, req, move |c, _who| c.statfs(reply));
    }

    fn access(&self, req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        self.spawn_async(Kind::Access, req, move |c, who| async move { c.access(&who, ino, mask, reply).await });
    }

    fn create(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, _umask: u32, flags: i32, reply: ReplyCreate) {
        let name = owned(name);
        self.spawn_async(Kind::Create, req, move |c, who| async move { c.create(&who, parent, &name, mode, flags, reply).await });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_in_place_are_bounded_and_given_back() {
        let places = InPlace::new(2);
        let (a, b) = (places.claim(), places.claim());
        assert!(a.is_some() && b.is_some());
        // Refusals must not give back a place they never took.
        for _ in 0..3 {
            assert!(places.claim().is_none());
        }
        drop(a);
        let c = places.claim();
        assert!(c.is_some());
        assert!(places.claim().is_none());
        drop((b, c));
        assert_eq!(places.busy.load(Ordering::Acquire), 0);
        assert!(InPlace::new(0).claim().is_none());
    }
}
