//! The request handlers: each kernel request becomes Canopy client calls on the
//! path behind the request's node (`dispatch.rs` runs them).
//!
//! Namespace operations run as the caller (uid, gid and groups), so Canopy's own
//! permission checks apply. Reads and writes of open files run as root: their
//! permission was checked when the file was opened, as POSIX wants.

use crate::convert::{self, errno, file_attr, io_errno};
use crate::dir_attrs::DirAttrs;
use crate::fresh_dirs::{self, FreshDirs};
use crate::groups::{Process, ProcessCache};
use crate::handles::{Contents, Handles};
use crate::nodes::{child_path, Nodes, ROOT};
use crate::options::MountOptions;
use canopy_client::Client;
use canopy_proto::clock::{SharedClock, SystemClock};
use canopy_proto::path::is_within;
use canopy_proto::{Attr, Creds, DirEntry, Errno, FileKind, SetAttr};
use fuser::{
    AccessFlags, FileHandle, FileType, FopenFlags, Generation, INodeNo,
    OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry,
    ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow,
};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::ffi::OsStr;
use std::future::Future;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(crate) type R<T> = Result<T, fuser::Errno>;

/// Who sent a request, taken from it before the handler runs elsewhere.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Caller {
    pub uid: u32,
    pub gid: u32,
    pub pid: u32,
}

impl Caller {
    pub(crate) fn of(req: &Request) -> Caller {
        Caller { uid: req.uid(), gid: req.gid(), pid: req.pid() }
    }
}

pub(crate) struct Core {
    pub(crate) rt: tokio::runtime::Handle,
    /// Acts as root: data requests, and lookups of what a caller already holds.
    pub(crate) client: Client,
    pub(crate) nodes: Mutex<Nodes>,
    pub(crate) handles: Arc<Handles>,
    dirs: Mutex<DirHandles>,
    dir_attrs: Mutex<DirAttrs>,
    /// Directories this mount made lately, whose new names it knows absent.
    fresh: Mutex<FreshDirs>,
    /// The wall clock a directory's times are set from.
    clock: SharedClock,
    processes: ProcessCache,
    /// Whether the log has said why a uid-0 caller was refused (`creds`).
    told_unprivileged_root: AtomicBool,
    pub(crate) opts: MountOptions,
    /// The session's channel back to the kernel, once it is mounted.
    pub(crate) notifier: Arc<std::sync::OnceLock<fuser::Notifier>>,
}

#[derive(Default)]
struct DirHandles {
    next: u64,
    open: HashMap<u64, Arc<Vec<DirEntry>>>,
}

/// How the kernel treats an open file: no FLUSH on close, since every write
/// already reached the servers (or the back-end file) and `flush` has nothing
/// to do. That saves a kernel round trip every close(2) waits for.
const FILE_OPEN_FLAGS: FopenFlags = FopenFlags::FOPEN_NOFLUSH;

/// The attributes of a negative entry: only its node id, 0, means anything.
fn absent() -> fuser::FileAttr {
    file_attr(&Attr { ino: 0, kind: FileKind::File, mode: 0, uid: 0, gid: 0, size: 0, nlink: 0, rdev: 0, atime: 0, mtime: 0, ctime: 0 })
}

fn enoent() -> fuser::Errno {
    fuser::Errno::from_i32(libc::ENOENT)
}

impl Core {
    /// `client` must act as root; `handles` must be the client's reclaim hook.
    pub(crate) fn new(rt: tokio::runtime::Handle, client: Client, handles: Arc<Handles>, opts: MountOptions) -> Core {
        let dir_attrs = Mutex::new(DirAttrs::new(opts.attr_ttl));
        let fresh = Mutex::new(FreshDirs::new(opts.entry_ttl));
        let notifier = Arc::default();
        Core { rt, client, nodes: Mutex::new(Nodes::new()), handles, dirs: Mutex::new(DirHandles::default()), dir_attrs, fresh, clock: SystemClock::shared(), processes: ProcessCache::default(), told_unprivileged_root: AtomicBool::new(false), opts, notifier }
    }

    /// Tells the kernel to drop what it caches of `ino`'s attributes (not its
    /// pages): the servers changed them beside what the kernel asked for.
    fn kernel_forgets_attrs(&self, ino: INodeNo) {
        if let Some(n) = self.notifier.get() {
            // Nothing to undo if it fails: the attribute timeout still ends it.
            let _ = n.inval_inode(ino, -1, 0);
        }
    }

    /// Waits here for a client call: for handlers that run off the runtime
    /// (file data, `file_io.rs`).
    pub(crate) fn run<T>(&self, f: impl Future<Output = Result<T, Errno>>) -> R<T> {
        self.rt.block_on(f).map_err(errno)
    }

    /// The client a namespace handler calls through, acting as root: this
    /// FUSE thread's own while it runs the handler in place on its own
    /// runtime (`own.rs`), else the mount's.
    fn client(&self) -> Client {
        crate::own::client().unwrap_or_else(|| self.client.clone())
    }

    /// The client acting as `req`'s caller.
    fn caller(&self, req: &Caller) -> R<Client> {
        Ok(self.client().as_user(self.creds(req)?))
    }

    /// Who the servers are to see `req`'s caller as. The servers take uid 0
    /// for root; when the kernel checks nothing itself (no
    /// `default_permissions`), a uid-0 process without root's file
    /// capabilities (a confined service) is refused EACCES, since the kernel
    /// would have checked those and the servers cannot.
    fn creds(&self, req: &Caller) -> R<Creds> {
        let p = self.process(req);
        if self.must_show_caps(req) && !p.file_caps {
            if !self.told_unprivileged_root.swap(true, Ordering::Relaxed) {
                eprintln!(
                    "canopy-fuse: refused a request as uid 0 from pid {} (EACCES): it lacks root's file capabilities \
                     in this mount's user namespace, and the kernel checks no permissions on this mount; mount \
                     with --default-permissions to let the kernel check them (for a confined service, or \
                     overlayfs or nfsd acting for another process)",
                    req.pid
                );
            }
            return Err(fuser::Errno::from_i32(libc::EACCES));
        }
        Ok(Creds { uid: req.uid, gid: req.gid, groups: p.groups })
    }

    /// Whether `req`'s caller is refused unless it holds root's file
    /// capabilities (`creds`): as uid 0 where the kernel checks nothing.
    fn must_show_caps(&self, req: &Caller) -> bool {
        req.uid == 0 && !self.opts.default_permissions
    }

    /// Whether the caller keeps setuid and setgid across its writes: root
    /// with root's file capabilities (`CAP_FSETID` among them) does.
    fn privileged(&self, req: &Caller) -> bool {
        req.uid == 0 && self.process(req).file_caps
    }

    fn process(&self, req: &Caller) -> Process {
        convert::process(&self.processes, req.uid, req.gid, req.pid)
    }

    pub(crate) fn path(&self, ino: INodeNo) -> R<String> {
        self.nodes.lock().path(ino.0).map(str::to_string).ok_or_else(enoent)
    }

    fn child(&self, parent: INodeNo, name: &OsStr) -> R<String> {
        Ok(child_path(&self.path(parent)?, convert::utf8(name)?))
    }

    fn entry(&self, reply: ReplyEntry, path: &str, attr: &Attr) {
        self.nodes.lock().remember(attr.ino, path);
        self.dir_attrs.lock().remember(attr, Instant::now());
        reply.entry_with_ttls(&self.opts.attr_ttl, &self.opts.entry_ttl, &file_attr(attr), Generation(0));
    }

    /// Answers attributes a server just gave.
    fn attr(&self, reply: ReplyAttr, attr: &Attr) {
        self.dir_attrs.lock().remember(attr, Instant::now());
        reply.attr(&self.opts.attr_ttl, &file_attr(attr));
    }

    /// A file was made in or removed from directory `parent` by this mount.
    fn file_changed_in(&self, parent: INodeNo) {
        if self.opts.dir_times {
            self.dir_attrs.lock().touched(parent.0, self.clock.wall_ns());
        }
    }

    /// A subdirectory was made in (`added`) or removed from directory
    /// `parent` by this mount.
    fn subdir_changed_in(&self, parent: INodeNo, added: bool) {
        let now = self.opts.dir_times.then(|| self.clock.wall_ns());
        self.dir_attrs.lock().subdir_changed(parent.0, added, now);
    }

    /// This mount is about to make `name` in directory `parent`.
    fn making(&self, parent: INodeNo, name: &OsStr) {
        if let Some(name) = name.to_str() {
            self.fresh.lock().making(parent.0, name);
        }
    }

    /// The directories at or below `paths` moved or had their rights
    /// changed, or may have: the fresh ones among them are forgotten, and
    /// so is any whose path is no longer known, except where `searchable`
    /// says its maker may still search the changed directory.
    fn forget_fresh_within(&self, paths: &[&str], searchable: impl Fn(u32) -> bool) {
        let nodes = self.nodes.lock();
        self.fresh.lock().forget_if(|dir, maker| {
            let below = nodes.path(dir).is_none_or(|p| paths.iter().any(|changed| is_within(p, changed)));
            below && !searchable(maker)
        });
    }

    async fn getattr_of(&self, req: &Caller, ino: INodeNo, fh: Option<FileHandle>) -> R<Attr> {
        let path = self.nodes.lock().path(ino.0).map(str::to_string);
        match path {
            // fstat needs no search permission: the descriptor was already opened.
            Some(p) if fh.is_some() => call(self.client().stat(&p)).await,
            Some(p) => call(self.caller(req)?.stat(&p)).await,
            None => self.handles.orphan_attr(ino.0).ok_or_else(enoent),
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn setattr_of(&self, req: &Caller, ino: INodeNo, set: SetAttr, fh: Option<FileHandle>) -> R<Attr> {
        let Some(path) = self.nodes.lock().path(ino.0).map(str::to_string) else {
            return blocking(|| self.truncate_orphan(ino.0, fh, set.size));
        };
        // ftruncate on a descriptor open for writing needs no write permission
        // beyond the open's, so it runs as root, telling the server whether the caller may keep
        // setuid and setgid.
        let only_size = set.size.is_some() && SetAttr { size: None, ..set.clone() } == SetAttr::default();
        let (who, set) = if fh.is_some() && only_size {
            (self.client(), SetAttr { kill_suid: !self.privileged(req), ..set })
        } else {
            (self.caller(req)?, set)
        };
        let rights = set.mode.is_some() || set.uid.is_some() || set.gid.is_some();
        let attr = call(who.setattr(&path, &set)).await;
        // A directory's rights (or ones whose outcome is not known) decide
        // lookups below it: nothing new there is known absent any more,
        // unless its owner is still who made the fresh one and may search
        // it (`rsync` makes a directory 0700, then sets its mode).
        if rights && attr.as_ref().map_or(true, |a| a.kind == FileKind::Dir) {
            let kept = |maker| attr.as_ref().is_ok_and(|a| fresh_dirs::maker_may_search(maker, a.uid, a.mode));
            self.forget_fresh_within(&[&path], kept);
        }
        let attr = attr?;
        if let Some(size) = set.size {
            blocking(|| self.truncate_backend(&path, size))?;
        }
        Ok(attr)
    }

    /// Before a name goes away: if this mount has the file open, its contents move
    /// to back-end storage, so the open handles outlive the entry that held them.
    async fn keep_open_contents(&self, path: &str) -> R<Option<(u64, Attr)>> {
        let Some(node) = self.nodes.lock().find(path) else { return Ok(None) };
        if !self.handles.is_open(node) {
            return Ok(None);
        }
        let attr = call(self.client().stat(path)).await?;
        if attr.kind == FileKind::File {
            blocking(|| self.spill_now(node, path))?;
        }
        Ok(Some((node, attr)))
    }

    /// After a name went away (`update` applies that to the node table): an open
    /// node with no name left keeps its attributes, for fstat.
    fn name_removed(&self, open: Option<(u64, Attr)>, update: impl FnOnce(&mut Nodes)) {
        let mut nodes = self.nodes.lock();
        update(&mut nodes);
        if let Some((node, mut attr)) = open {
            if nodes.is_orphan(node) {
                attr.nlink = attr.nlink.saturating_sub(1);
                self.handles.orphaned(node, attr);
            }
        }
    }

    async fn rename_of(&self, req: &Caller, from: &str, to: &str, flags: RenameFlags) -> R<()> {
        if flags.contains(RenameFlags::RENAME_EXCHANGE) || flags.intersects(!(RenameFlags::RENAME_NOREPLACE | RenameFlags::RENAME_EXCHANGE)) {
            return Err(fuser::Errno::from_i32(libc::EINVAL));
        }
        let who = self.caller(req)?;
        if flags.contains(RenameFlags::RENAME_NOREPLACE) {
            // Checked, then renamed: not atomic against another client creating
            // the destination in between.
            match call(who.stat(to)).await {
                Ok(_) => return Err(fuser::Errno::from_i32(libc::EEXIST)),
                Err(e) if e.code() == libc::ENOENT => {}
                Err(e) => return Err(e),
            }
        }
        let open = self.keep_open_contents(to).await?;
        // A directory this mount saw lately is renamed as one (ShardFS then
        // skips finding out what it is).
        let node = self.nodes.lock().find(from);
        if node.is_some_and(|n| self.dir_attrs.lock().was_dir(n)) {
            call(who.rename_dir(from, to)).await?;
        } else {
            call(who.rename(from, to)).await?;
        }
        self.name_removed(open, |nodes| {
            nodes.renamed(from, to);
        });
        Ok(())
    }

    async fn open_file(&self, req: &Caller, ino: INodeNo, flags: OpenFlags) -> R<u64> {
        let path = self.path(ino)?;
        call(self.caller(req)?.access(&path, convert::open_access(flags.0))).await?;
        // Where the contents are is learnt at the first read or write (an inline
        // request answers `Backend` for a spilled file), saving an RPC per open.
        Ok(self.handles.open(ino.0, Contents::Inline))
    }

    /// CREATE: the kernel sends it when it believes the name is absent, and
    /// treats the file it gets as one it made (checking no permission), so a file
    /// that appeared meanwhile is checked by the server as open(2) would, and
    /// truncated here if the open asks for that.
    async fn create_file(&self, req: &Caller, parent: INodeNo, name: &OsStr, mode: u32, flags: i32) -> R<(String, Attr, u64)> {
        let path = self.child(parent, name)?;
        let who = self.caller(req)?;
        self.making(parent, name);
        let mut attr = if flags & libc::O_EXCL != 0 {
            call(who.create(&path, mode & 0o7777)).await?
        } else {
            call(who.open_create(&path, mode & 0o7777, convert::open_access(flags))).await?
        };
        // A new file is empty: only an existing one can need truncating.
        if flags & libc::O_TRUNC != 0 && attr.size > 0 {
            attr = call(who.truncate(&path, 0)).await?;
            blocking(|| self.truncate_backend(&path, 0))?;
        }
        let fh = self.handles.open(attr.ino, Contents::Inline);
        Ok((path, attr, fh))
    }

    async fn opendir_of(&self, req: &Caller, ino: INodeNo) -> R<u64> {
        let path = self.path(ino)?;
        let entries = call(self.caller(req)?.readdir(&path)).await?;
        // Names another client made, once listed, are not answered absent.
        self.fresh.lock().listed(ino.0, entries.iter().map(|e| e.name.as_str()));
        let mut dirs = self.dirs.lock();
        dirs.next += 1;
        let fh = dirs.next;
        dirs.open.insert(fh, Arc::new(entries));
        Ok(fh)
    }

    fn listing(&self, fh: FileHandle) -> R<Arc<Vec<DirEntry>>> {
        self.dirs.lock().open.get(&fh.0).cloned().ok_or(fuser::Errno::from_i32(libc::EBADF))
    }

    fn statfs_of(&self) -> R<libc::statvfs> {
        self.handles.backends().statvfs().map_err(|e| io_errno(&e))
    }
}

/// Runs `f` and answers the kernel with its result.
macro_rules! answer {
    ($reply:ident, $f:expr, |$v:ident| $ok:expr) => {
        match $f {
            Ok($v) => $ok,
            Err(e) => $reply.error(e),
        }
    };
}

/// Awaits a client call, its error as the kernel's errno.
async fn call<T>(f: impl Future<Output = Result<T, Errno>>) -> R<T> {
    f.await.map_err(errno)
}

/// Runs `f`, which reads or writes back-end files (and may wait on the
/// shared runtime), without holding up the runtime's other tasks (rare in the
/// handlers below: an open file's spill before its name goes, a truncate).
/// On a FUSE thread's own runtime, which nothing else waits on but which
/// cannot be left in place, on a thread of its own.
fn blocking<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    if crate::own::running() {
        return std::thread::scope(|s| s.spawn(f).join()).unwrap_or_else(|p| std::panic::resume_unwind(p));
    }
    tokio::task::block_in_place(f)
}

/// The namespace handlers: futures that `dispatch.rs` runs to completion on
/// the FUSE thread that read their request, or as tasks on the runtime when
/// that thread is needed for reading. Their parameters mirror
/// `fuser::Filesystem`'s, hence the long lists.
#[allow(clippy::too_many_arguments)]
impl Core {
    pub(crate) async fn lookup(&self, req: &Caller, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let found: R<_> = async {
            let p = self.child(parent, name)?;
            Ok((call(self.caller(req)?.stat(&p)).await?, p))
        }
        .await;
        match found {
            Ok((attr, path)) => self.entry(reply, &path, &attr),
            // An absent name is remembered as absent for the entry timeout, as
            // a present one is (a negative entry: node id 0): a program probing
            // for files that are not there (a shell's PATH, a compiler's
            // include paths) asks once per timeout, not once per probe.
            Err(e) if e == enoent() => reply.entry_with_ttls(&Duration::ZERO, &self.opts.entry_ttl, &absent(), Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    /// Whether directory `dir`, which just answered a lookup here, is due for
    /// [`Core::renew_fresh`].
    pub(crate) fn renewal_due(&self, dir: INodeNo) -> bool {
        self.fresh.lock().renewal_due(dir.0, Instant::now())
    }

    /// Renews what this mount knows of directory `dir`, which it made
    /// (`fresh_dirs.rs`): a listing and a stat of it as `req`'s caller, its
    /// maker; the knowledge is dated from their sending or forgotten. A
    /// listing longer than the names a directory may hold there is not read
    /// to its end: it holds another client's.
    pub(crate) async fn renew_fresh(&self, req: &Caller, dir: INodeNo) {
        let sent = Instant::now();
        let seen: R<_> = async {
            let (path, who) = (self.path(dir)?, self.caller(req)?);
            let (attr, entries) = tokio::join!(call(who.stat(&path)), call(who.readdir_at_most(&path, fresh_dirs::MAX_NAMES)));
            Ok((attr?, entries?))
        }
        .await;
        let mut fresh = self.fresh.lock();
        match seen {
            // The same directory still at the path.
            Ok((attr, Some(entries))) if attr.ino == dir.0 => fresh.renewed(dir.0, attr.uid, attr.mode, entries.iter().map(|e| e.name.as_str()), sent),
            _ => fresh.forget(dir.0),
        }
    }

    /// Answers a LOOKUP of a name this mount knows is absent, in a directory
    /// it made lately (`fresh_dirs.rs`): no RPC, so the FUSE thread that read
    /// it answers at once, a negative entry for the time the knowledge has
    /// left. Gives `reply` back when a server is to be asked: the name is not
    /// known absent, or a server would refuse it or the caller (`creds`).
    pub(crate) fn lookup_known_absent(&self, req: &Caller, parent: INodeNo, name: &OsStr, reply: ReplyEntry) -> Result<(), ReplyEntry> {
        let Some(text) = name.to_str() else { return Err(reply) };
        let Some(left) = self.fresh.lock().absent(parent.0, text, req.uid, Instant::now()) else { return Err(reply) };
        // A name or path a server would refuse, or "." and "..", which name
        // what exists.
        let plain = text != "." && text != ".." && canopy_proto::path::check_name(text).is_ok();
        let valid = plain && self.child(parent, name).is_ok_and(|p| canopy_proto::path::NsPath::parse(&p).is_ok());
        if !valid || (self.must_show_caps(req) && self.creds(req).is_err()) {
            return Err(reply);
        }
        reply.entry_with_ttls(&Duration::ZERO, &left, &absent(), Generation(0));
        Ok(())
    }

    /// Answers a GETATTR from the directory attributes this mount holds (see
    /// `dir_attrs.rs`), trusted for the time they have left: no RPC, so the
    /// FUSE thread that read it answers at once. `Err(reply)` when none are
    /// held or the caller is to be refused (`creds`): [`Core::getattr`] asks
    /// a server.
    pub(crate) fn getattr_held(&self, req: &Caller, ino: INodeNo, reply: ReplyAttr) -> Result<(), ReplyAttr> {
        if self.must_show_caps(req) && self.creds(req).is_err() {
            return Err(reply);
        }
        let held = self.dir_attrs.lock().get(ino.0, Instant::now());
        match held {
            Some((attr, left)) => {
                reply.attr(&left, &file_attr(&attr));
                Ok(())
            }
            None => Err(reply),
        }
    }

    pub(crate) async fn getattr(&self, req: &Caller, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        answer!(reply, self.getattr_of(req, ino, fh).await, |a| self.attr(reply, &a))
    }

    pub(crate) async fn setattr(
        &self,
        req: &Caller,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        fh: Option<FileHandle>,
        reply: ReplyAttr,
    ) {
        let set = SetAttr {
            mode: mode.map(|m| m & 0o7777),
            uid,
            gid,
            size,
            atime: atime.map(convert::time_set),
            mtime: mtime.map(convert::time_set),
            kill_suid: false,
        };
        answer!(reply, self.setattr_of(req, ino, set, fh).await, |a| self.attr(reply, &a))
    }

    pub(crate) async fn readlink(&self, req: &Caller, ino: INodeNo, reply: ReplyData) {
        let target: R<_> = async { call(self.caller(req)?.readlink(&self.path(ino)?)).await }.await;
        answer!(reply, target, |t| reply.data(t.as_bytes()))
    }

    pub(crate) async fn mknod(&self, req: &Caller, parent: INodeNo, name: &OsStr, mode: u32, rdev: u32, reply: ReplyEntry) {
        let made: R<_> = async {
            let path = self.child(parent, name)?;
            let kind = convert::mknod_kind(mode).ok_or(fuser::Errno::from_i32(libc::EINVAL))?;
            let who = self.caller(req)?;
            self.making(parent, name);
            let attr = match kind {
                FileKind::File => call(who.create(&path, mode & 0o7777)).await?,
                special => call(who.mknod(&path, mode & 0o7777, special, rdev as u64)).await?,
            };
            self.file_changed_in(parent);
            Ok((path, attr))
        }
        .await;
        answer!(reply, made, |v| self.entry(reply, &v.0, &v.1))
    }

    pub(crate) async fn mkdir(&self, req: &Caller, parent: INodeNo, name: &OsStr, mode: u32, reply: ReplyEntry) {
        let made: R<_> = async {
            let path = self.child(parent, name)?;
            self.making(parent, name);
            let epoch = self.fresh.lock().epoch();
            // mkdir answers the whole new directory, times included.
            let attr = call(self.caller(req)?.mkdir(&path, mode & 0o7777)).await?;
            self.fresh.lock().made(attr.ino, req.uid, attr.uid, attr.mode, epoch, Instant::now());
            self.subdir_changed_in(parent, true);
            Ok((attr, path))
        }
        .await;
        answer!(reply, made, |v| self.entry(reply, &v.1, &v.0))
    }

    pub(crate) async fn unlink(&self, req: &Caller, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let done: R<_> = async {
            let path = self.child(parent, name)?;
            let open = self.keep_open_contents(&path).await?;
            call(self.caller(req)?.unlink(&path)).await?;
            self.file_changed_in(parent);
            self.name_removed(open, |nodes| {
                nodes.unlinked(&path);
            });
            Ok(())
        }
        .await;
        answer!(reply, done, |_v| reply.ok())
    }

    pub(crate) async fn rmdir(&self, req: &Caller, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let done: R<_> = async {
            let path = self.child(parent, name)?;
            call(self.caller(req)?.rmdir(&path)).await?;
            self.subdir_changed_in(parent, false);
            self.nodes.lock().unlinked(&path);
            Ok(())
        }
        .await;
        answer!(reply, done, |_v| reply.ok())
    }

    pub(crate) async fn symlink(&self, req: &Caller, parent: INodeNo, link_name: &OsStr, target: &Path, reply: ReplyEntry) {
        let made: R<_> = async {
            let path = self.child(parent, link_name)?;
            let target = convert::utf8(target.as_os_str())?;
            self.making(parent, link_name);
            let attr = call(self.caller(req)?.symlink(target, &path)).await?;
            self.file_changed_in(parent);
            Ok((attr, path))
        }
        .await;
        answer!(reply, made, |v| self.entry(reply, &v.1, &v.0))
    }

    pub(crate) async fn rename(
        &self,
        req: &Caller,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let done: R<_> = async {
            let (from, to) = (self.child(parent, name)?, self.child(newparent, newname)?);
            self.making(newparent, newname);
            let r = self.rename_of(req, &from, &to, flags).await;
            // A directory moved may have taken fresh ones below it where
            // their maker may not search (a file moved takes none).
            self.forget_fresh_within(&[&from, &to], |_| false);
            // Whether a directory moved (link counts change, and its own
            // ctime) is not known here without a stat: all are asked again.
            let moved = self.nodes.lock().find(&to);
            let mut dir_attrs = self.dir_attrs.lock();
            dir_attrs.forget(parent.0);
            dir_attrs.forget(newparent.0);
            if let Some(node) = moved {
                dir_attrs.forget(node);
            }
            r
        }
        .await;
        answer!(reply, done, |_v| reply.ok())
    }

    pub(crate) async fn link(&self, req: &Caller, ino: INodeNo, newparent: INodeNo, newname: &OsStr, reply: ReplyEntry) {
        let made: R<_> = async {
            let (src, dst) = (self.path(ino)?, self.child(newparent, newname)?);
            self.making(newparent, newname);
            let attr = call(self.caller(req)?.link(&src, &dst)).await?;
            self.file_changed_in(newparent);
            Ok((attr, dst))
        }
        .await;
        answer!(reply, made, |v| self.entry(reply, &v.1, &v.0))
    }

    pub(crate) async fn open(&self, req: &Caller, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        answer!(reply, self.open_file(req, ino, flags).await, |fh| reply.opened(FileHandle(fh), FILE_OPEN_FLAGS))
    }

    pub(crate) async fn opendir(&self, req: &Caller, ino: INodeNo, reply: ReplyOpen) {
        answer!(reply, self.opendir_of(req, ino).await, |fh| reply.opened(FileHandle(fh), FopenFlags::empty()))
    }

    /// Every child is stat'ed as the caller: the kernel keeps what it is told
    /// here for the timeouts and may serve it to any user.
    pub(crate) async fn readdirplus(&self, req: &Caller, ino: INodeNo, fh: FileHandle, offset: u64, mut reply: ReplyDirectoryPlus) {
        let (entries, dir, who) = match self.listing(fh).and_then(|e| Ok((e, self.path(ino)?, self.caller(req)?))) {
            Ok(v) => v,
            Err(e) => return reply.error(e),
        };
        let ttl = self.opts.attr_ttl;
        // "." and ".." come first; the kernel does not count them as lookups.
        if offset < 2 {
            let here = match call(who.stat(&dir)).await {
                Ok(a) => a,
                Err(e) => return reply.error(e),
            };
            for (i, name) in [".", ".."].into_iter().enumerate().skip(offset as usize) {
                if reply.add(INodeNo(here.ino), i as u64 + 1, name, &ttl, &file_attr(&here), Generation(0)) {
                    return reply.ok();
                }
            }
        }
        for (i, e) in entries.iter().enumerate().skip((offset as usize).saturating_sub(2)) {
            let path = child_path(&dir, &e.name);
            let (attr, ttl) = match call(who.stat(&path)).await {
                Ok(attr) => (attr, ttl),
                // A name removed since opendir is skipped, as a fresh listing would.
                Err(err) if err.code() == libc::ENOENT => continue,
                // Listed but not searchable by the caller (a directory readable
                // without x): only what readdir tells, with zero timeouts, so the
                // kernel looks the name up again, as whoever asks, before use.
                Err(_) => (convert::listed_only(e), Duration::ZERO),
            };
            if reply.add(INodeNo(attr.ino), i as u64 + 3, &e.name, &ttl, &file_attr(&attr), Generation(0)) {
                break;
            }
            self.nodes.lock().remember(attr.ino, &path);
        }
        reply.ok();
    }

    pub(crate) async fn access(&self, req: &Caller, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        let ok: R<_> = async { call(self.caller(req)?.access(&self.path(ino)?, mask.bits() as u32 & 7)).await }.await;
        answer!(reply, ok, |_v| reply.ok())
    }

    pub(crate) async fn create(&self, req: &Caller, parent: INodeNo, name: &OsStr, mode: u32, flags: i32, reply: ReplyCreate) {
        match self.create_file(req, parent, name, mode, flags).await {
            Ok((path, attr, fh)) => {
                if flags & libc::O_EXCL != 0 {
                    self.file_changed_in(parent);
                } else {
                    // The file may have been there already, leaving the
                    // directory as it was.
                    self.dir_attrs.lock().forget(parent.0);
                }
                self.nodes.lock().remember(attr.ino, &path);
                reply.created(&self.opts.entry_ttl, &file_attr(&attr), Generation(0), FileHandle(fh), FILE_OPEN_FLAGS);
            }
            Err(e) => reply.error(e),
        }
    }
}

/// The handlers of open files and listings.
mod open_files;
