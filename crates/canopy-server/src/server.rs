//! The server object: a mode-independent [`Core`] and the [`Mode`] that decides
//! resolution and placement; the dispatcher; and the lookups every generic
//! operation shares, each asking the mode.
//!
//! Concurrency: reads take no mutation lock; a mutation holds the locks
//! `mutlock.rs` describes (its directory's stripe, or the whole structure) for its
//! whole check-then-write, so checks and writes of one name are atomic while
//! mutations in different directories run at once.

use crate::core::{Core, MutationHook, ServerConfig};
use crate::mode::{Admission, Located, Mode, Named, Target};
use crate::mutlock::MutGuard;
use canopy_posix::perm::Owner;
use canopy_proto::auth::Identity;
use canopy_proto::clock::{SharedClock, SystemClock};
use canopy_proto::msg::{At, ServerStats};
use canopy_proto::{Attr, Creds, Errno, Reply, Request};
use canopy_rpc::{BlockingCaller, Transport};
use canopy_store::SharedStore;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

pub use canopy_proto::modes::{ModeOptions, MODES};

/// A key for Giraffa's directory proofs that nobody else knows. Every server
/// of a cluster needs the same one: daemons derive it from the cluster key,
/// an in-process cluster draws one for all its servers. No fallback: a
/// predictable key would let clients forge proofs (and the handshake needs
/// the same kernel source anyway).
pub fn random_proof_key() -> [u8; 32] {
    canopy_rpc::random::bytes().expect("random bytes from the kernel")
}

pub struct MetaServer {
    core: Core,
    mode: Box<dyn Mode>,
    /// The thread doing the mode's background work, and its stop flag.
    background: parking_lot::Mutex<Option<std::thread::JoinHandle<()>>>,
    stop: Arc<AtomicBool>,
}

/// A dropped server's background thread ends at its next wake-up (now, if
/// it sleeps), not joined here: it may be in a split's step.
impl Drop for MetaServer {
    fn drop(&mut self) {
        self.tell_background_to_stop();
    }
}

impl std::ops::Deref for MetaServer {
    type Target = Core;

    fn deref(&self) -> &Core {
        &self.core
    }
}

impl MetaServer {
    /// Opens a ShardFS server over `store` (what tests and tools mostly want;
    /// [`MetaServer::open_mode`] picks the mode).
    pub fn open(cfg: ServerConfig, store: SharedStore) -> Result<MetaServer, String> {
        MetaServer::open_with_clock(cfg, store, SystemClock::shared())
    }

    /// [`MetaServer::open`], reading time from `clock`.
    pub fn open_with_clock(cfg: ServerConfig, store: SharedStore, clock: SharedClock) -> Result<MetaServer, String> {
        MetaServer::open_mode("shardfs", cfg, store, clock)
    }

    /// Opens a server of mode `mode` (one of [`MODES`], with its default
    /// options) over `store`: checks the store belongs to this server and
    /// mode, and loads the mode's state.
    pub fn open_mode(mode: &str, cfg: ServerConfig, store: SharedStore, clock: SharedClock) -> Result<MetaServer, String> {
        MetaServer::open_with(&ModeOptions::named(mode)?, cfg, store, clock, random_proof_key())
    }

    /// [`MetaServer::open_mode`] with the mode's options, and the key the
    /// cluster's servers sign Giraffa's directory proofs with.
    pub fn open_with(opts: &ModeOptions, cfg: ServerConfig, store: SharedStore, clock: SharedClock, proof_key: [u8; 32]) -> Result<MetaServer, String> {
        let core = Core::open(cfg, store, clock, opts.name())?;
        let mode = crate::open_mode(opts, &crate::mode::Opening { core: &core, proof_key })?;
        Ok(MetaServer { core, mode, background: parking_lot::Mutex::new(None), stop: Arc::new(AtomicBool::new(false)) })
    }

    /// Starts the mode's background work (IndexFS: splits), which reaches the
    /// other servers through `peers` (as the cluster key). The thread holds the
    /// server only while it works, and sleeps until the mode rings for it or a
    /// retry falls due; [`MetaServer::stop_background`] (or dropping the
    /// server) ends it.
    pub fn start_background(self: &Arc<Self>, peers: Arc<dyn Transport>) {
        let me = Arc::downgrade(self);
        let (stop, doorbell) = (self.stop.clone(), self.core.doorbell.clone());
        let handle = std::thread::Builder::new().name(format!("canopy-bg-{}", self.cfg.index)).spawn(move || {
            let Ok(peers) = BlockingCaller::new(peers) else { return };
            while !stop.load(Ordering::Acquire) {
                let Some(server) = me.upgrade() else { return };
                let busy = server.mode.background(&server.core, &peers);
                let due = server.mode.background_due();
                drop(server);
                if !busy {
                    doorbell.wait(due);
                }
            }
        });
        match handle {
            Ok(h) => *self.background.lock() = Some(h),
            Err(e) => self.core.problem(format!("cannot start the background thread: {e}")),
        }
    }

    /// Whether this server must learn the transactions open at the lock
    /// service ([`MetaServer::open_transactions`]) before it serves: a server
    /// that starts does so first.
    pub fn needs_open_transactions(&self) -> bool {
        self.mode.needs_open_transactions()
    }

    /// The transactions open at the lock service as this server starts.
    pub fn open_transactions(&self, txns: &[canopy_proto::msg::TxnInfo]) -> Result<(), String> {
        self.mode.open_transactions(&self.core, txns)
    }

    /// Ends the background work and waits for it (a split in progress stops
    /// at its next step or finishes).
    pub fn stop_background(&self) {
        self.tell_background_to_stop();
        if let Some(h) = self.background.lock().take() {
            if h.thread().id() != std::thread::current().id() {
                let _ = h.join();
            }
        }
    }

    /// Raises the background thread's stop flag and wakes it to see it.
    fn tell_background_to_stop(&self) {
        self.stop.store(true, Ordering::Release);
        self.core.doorbell.ring();
    }

    /// The mode's own half, if it is a `T` (for what only that mode's module
    /// asks of it).
    pub(crate) fn mode_as<T: 'static>(&self) -> Option<&T> {
        self.mode.as_any().downcast_ref()
    }

    pub fn mode_name(&self) -> &'static str {
        self.mode.name()
    }

    /// Executes one request. Never panics on input: every path is parsed and every
    /// precondition checked, and failures are errnos.
    pub fn handle(&self, creds: &Creds, req: Request) -> Result<Reply, Errno> {
        // A request the mode's envelope carries is one RPC, counted as itself.
        let (req, _held) = self.mode.unwrap(&self.core, req)?;
        self.counters.count(&req);
        let named = if self.mode.partitioned() { named_entries(&req).unwrap_or_else(|| self.mode.named(&req)) } else { [None, None] };
        match self.dispatch(creds, req) {
            // The name's partition is elsewhere: say where to look (IndexFS).
            Err(Errno::EREMCHG) => self.mode.moved(&self.core, &named).ok_or(Errno::EREMCHG),
            r => r,
        }
    }

    fn dispatch(&self, creds: &Creds, req: Request) -> Result<Reply, Errno> {
        match req {
            Request::Ping => Ok(Reply::Pong { server: self.cfg.index, servers: self.cfg.servers }),
            Request::Stat { at } => self.stat(creds, &*self.admitted(&at)?),
            Request::Create { at, mode, kind, if_exists } => self.create(creds, &*self.admitted(&at)?, mode, kind, if_exists),
            Request::Unlink { at } => self.unlink(creds, &*self.admitted(&at)?),
            Request::SetAttr { at, set } => self.set_attr(creds, &*self.admitted(&at)?, &set),
            Request::Readlink { at } => self.readlink(creds, &*self.admitted(&at)?),
            Request::Access { at, mask } => self.access(creds, &*self.admitted(&at)?, mask),
            // Every server lists the names it holds (ShardFS fans out).
            Request::ReadDir { at, after, limit, with_dirs } => {
                self.read_dir(creds, &*self.admitted_anywhere(&at)?, after.as_deref(), limit, with_dirs)
            }
            Request::TouchDir { at, change, at_ns } => self.touch_dir(creds, &*self.admitted(&at)?, change, at_ns),
            Request::LinkShare { at, txn } => self.link_share(creds, &*self.admitted(&at)?, txn),
            Request::LinkInsert { at, ino, home, txn } => self.link_insert(creds, &*self.admitted(&at)?, ino, home, txn),
            Request::InodeStat { ino } => self.inode_stat(ino),
            Request::InodeSetAttr { ino, set } => self.inode_set_attr(creds, ino, &set),
            Request::InodeLinkDelta { ino, delta, txn } => self.inode_link_delta(creds, ino, delta, txn),
            Request::LinkSettle { ino, txn, undo } => self.link_settle(ino, txn, undo),
            Request::LinkPending { txn } => self.link_pending(txn),
            // Transaction steps and recovery: under the transaction's own locks
            // (and fences), so not admitted.
            Request::RenameLocal { src, dst, txn } => self.rename_local(creds, &Target::parse(&src)?, &Target::parse(&dst)?, txn),
            Request::RenameOut { src, dst } => self.rename_out(creds, &Target::parse(&src)?, &Target::parse(&dst)?),
            Request::RenameIn { src, dst, record, txn } => self.rename_in(creds, &Target::parse(&src)?, &Target::parse(&dst)?, record, txn),
            Request::RenameOutCommit { src, ino, txn } => self.rename_out_commit(&Target::parse(&src)?, ino, txn),
            Request::RecoveryStat { at } => self.stat(&Creds::root(), &Target::parse(&at)?),
            Request::ReadData { at, offset, len } => self.read_data(creds, &at, offset, len),
            Request::WriteData { at, offset, data, inline_max, kill_suid } => {
                self.write_data(creds, &at, offset, &data, inline_max, kill_suid)
            }
            Request::Spilled { at, len, digest } => self.spilled(creds, &at, len, digest),
            Request::Extend { at, end, kill_suid } => self.extend(creds, &at, end, kill_suid),
            Request::Stats => Ok(Reply::Stats(self.stats())),
            Request::Fsck => self.fsck(),
            Request::BatchOpen { .. } | Request::BatchList | Request::BatchStage { .. } | Request::BatchApply { .. } | Request::BatchClose { .. } if !self.mode.takes_batches() => {
                Err(Errno::ENOSYS)
            }
            Request::BatchOpen { batch, root } => self.batch_open(creds, batch, &root),
            Request::BatchList => self.batch_list(),
            Request::BatchStage { batch, chunk, dir, files } => self.batch_stage(creds, batch, chunk, dir, files),
            Request::BatchApply { batch } => self.batch_apply(creds, batch),
            Request::BatchClose { batch } => self.batch_close(creds, batch),
            // The lock service's, and what a delegating wrapper runs (the daemon's).
            Request::Lock { .. } | Request::Renew { .. } | Request::Unlock { .. } | Request::Amend { .. } | Request::ListTxns | Request::Delegate { .. } => {
                Err(Errno::ENOSYS)
            }
            other => self.mode.handle(&self.core, creds, other),
        }
    }

    /// Checks a single-RPC operation's target and asks the mode whether it may
    /// be served now (`EAGAIN`: a ShardFS transaction fenced it off; the client
    /// retries under locks, which waits for that transaction to end).
    /// The entry must belong here (`Mode::check_placement`).
    fn admitted(&self, at: &At) -> Result<Admitted<'_>, Errno> {
        let target = Target::parse(at)?;
        let _running = self.mode.admit(&target)?;
        self.mode.check_placement(&self.core, &target)?;
        Ok(Admitted { target, _running })
    }

    /// [`MetaServer::admitted`] for a request every server answers for
    /// what it holds of the target.
    fn admitted_anywhere(&self, at: &At) -> Result<Admitted<'_>, Errno> {
        let target = Target::parse(at)?;
        let _running = self.mode.admit(&target)?;
        Ok(Admitted { target, _running })
    }

    /// [`Mode::check_placement`], for a data request's file.
    pub(crate) fn check_placement(&self, at: &Target) -> Result<(), Errno> {
        self.mode.check_placement(&self.core, at)
    }

    /// O(1): counters, the mode's directory count and the entry count kept by
    /// every write.
    pub fn stats(&self) -> ServerStats {
        let mut counters = self.mode.counters();
        counters.push(("background_wakes".into(), self.core.doorbell.wakes()));
        if let Some(c) = self.core.store.cache_counts() {
            counters.push(("entry_cache_hits".into(), c.hits));
            counters.push(("entry_cache_misses".into(), c.misses));
        }
        if let Some(l) = self.core.store.log_counts() {
            counters.push(("store_writes".into(), l.writes));
            counters.push(("log_writes".into(), l.log_writes));
        }
        ServerStats { server: self.cfg.index, rpcs: self.counters.snapshot(), dirs: self.mode.dirs(), files: self.entry_count(), counters }
    }

    /// Tests: call `hook` with a mutation's targets each time one holds its locks
    /// (it may block, holding them).
    pub fn set_mutation_hook(&self, hook: Option<MutationHook>) {
        self.core.set_mutation_hook(hook);
    }

    pub(crate) fn mode(&self) -> &dyn Mode {
        &*self.mode
    }

    /// Resolves `at` to what this server knows of it (the mode decides how).
    pub(crate) fn locate(&self, creds: &Creds, at: &Target) -> Result<Located, Errno> {
        self.mode.locate(&self.core, creds, at)
    }

    /// For a mutation of the entries at `targets`: their directories' stripes
    /// (and the shared-inode lock if `inodes`), once the mode lets the
    /// mutation go on with them held (Giraffa: `EAGAIN` for a frozen row).
    pub(crate) fn lock_entries(&self, targets: &[&Target], inodes: bool) -> Result<MutGuard<'_>, Errno> {
        let g = self.core.lock_stripes(|| self.mode.parent_ids(targets), inodes, targets);
        self.mode.admit_locked(targets)?;
        Ok(g)
    }

    /// Where the file entry `name` of directory `dir` is stored (the mode's key).
    pub(crate) fn entry_key(&self, dir: u64, name: &str) -> Vec<u8> {
        self.mode.entry_key(dir, name)
    }

    /// The id a directory's times are kept under: its lookup state's (Giraffa
    /// names a directory by its entries' prefix, but keeps times by inode).
    pub(crate) fn times_id(&self, id: u64) -> u64 {
        self.mode.dir(&self.core, id).ok().flatten().map_or(id, |(l, _)| l.id)
    }

    pub(crate) fn dir_owner(&self, id: u64) -> Result<Owner, Errno> {
        self.mode.dir(&self.core, id)?.map(|(l, _)| Owner::of_dir(&l)).ok_or(Errno::ENOENT)
    }

    /// A directory's attributes: the mode's lookup state, the times kept here.
    /// `EREMOTE` if this server does not hold them (IndexFS: ask its home).
    pub(crate) fn dir_attr(&self, id: u64) -> Result<Attr, Errno> {
        let Some((lookup, Some(nlink))) = self.mode.dir(&self.core, id)? else { return Err(Errno::EREMOTE) };
        self.core.dir_attr(&lookup, nlink)
    }
}

/// A single-RPC operation's target, admitted: it holds what the mode asked it
/// to hold while it runs (dropped with it, once the handler has answered).
struct Admitted<'a> {
    target: Target,
    _running: Admission<'a>,
}

impl std::ops::Deref for Admitted<'_> {
    type Target = Target;

    fn deref(&self) -> &Target {
        &self.target
    }
}

/// The entry a generic single-entry request names.
fn generic_at(req: &Request) -> Option<&At> {
    match req {
        Request::Stat { at }
        | Request::Create { at, .. }
        | Request::Unlink { at }
        | Request::SetAttr { at, .. }
        | Request::Readlink { at }
        | Request::Access { at, .. }
        | Request::ReadDir { at, .. }
        | Request::TouchDir { at, .. }
        | Request::LinkShare { at, .. }
        | Request::LinkInsert { at, .. } => Some(at),
        _ => None,
    }
}

/// The file a data request names.
fn data_file(req: &Request) -> Option<&canopy_proto::msg::FileRef> {
    match req {
        Request::ReadData { at, .. } | Request::WriteData { at, .. } | Request::Spilled { at, .. } | Request::Extend { at, .. } => Some(at),
        _ => None,
    }
}

/// The entries a generic request names by directory id, for the redirect a
/// partitioned mode answers (at most two: a rename's); `None` for a request
/// of the mode's own ([`Mode::named`]). Hashes, not names: this runs before
/// every request of such a mode.
fn named_entries(req: &Request) -> Option<[Option<Named>; 2]> {
    use canopy_proto::msg::FileRef;
    if let Some(at) = generic_at(req) {
        return Some([Named::at(at), None]);
    }
    if let Some(file) = data_file(req) {
        return Some([if let FileRef::Entry { dir, name } = file { Named::entry(*dir, name) } else { None }, None]);
    }
    Some(match req {
        Request::RecoveryStat { at }
        | Request::RenameIn { dst: at, .. }
        // The source's side of a rename between servers: only its name is here.
        | Request::RenameOut { src: at, .. }
        | Request::RenameOutCommit { src: at, .. } => [Named::at(at), None],
        Request::RenameLocal { src, dst, .. } => [Named::at(src), Named::at(dst)],
        _ => return None,
    })
}

/// Whether `req` names a file by inode number: no path leads to it, so no
/// search permission was checked on the way, and a user key could name any
/// file's contents. Served to the cluster key only (a client that followed a
/// `Redirect` from a path it was allowed to reach holds it: the mount, or a
/// server running a user's operation for it).
fn names_by_inode(req: &Request) -> bool {
    matches!(data_file(req), Some(canopy_proto::msg::FileRef::Ino(_)))
}

/// Whether `req` names its entry by a directory id. A mode that then checks
/// only that directory (IndexFS trusts the client's cached ancestors) serves
/// such requests to the cluster key only: a user key could name any directory.
fn names_by_id(req: &Request) -> bool {
    if let Some(at) = generic_at(req) {
        return !matches!(at, At::Path(_));
    }
    matches!(data_file(req), Some(canopy_proto::msg::FileRef::Entry { .. }))
}

impl canopy_rpc::Service for MetaServer {
    fn call(&self, peer: &Identity, creds: Creds, req: Request) -> canopy_rpc::Handled {
        let served = |req: &Request| matches!(req, Request::Ping | Request::Stats | Request::Delegate { .. }) || self.mode.serves_users_directly();
        let unchecked_path = names_by_inode(&req) || (names_by_id(&req) && !self.mode.checks_ancestors());
        if !peer.is_cluster() && (!req.user_may_send() || !served(&req) || unchecked_path) {
            return canopy_rpc::Handled::Now(Err(Errno::EPERM));
        }
        canopy_rpc::Handled::Now(self.handle(&creds, req))
    }

    /// fsck scans the whole store; with fsync durability every write waits for
    /// the disk (milliseconds). Both then run off the reactor. Without fsync a
    /// write takes microseconds, less than the hand-off to another thread: the
    /// create rate fell from about 60K/s to 20K/s when every pass with a
    /// mutation was handed off.
    fn blocks(&self, req: &Request) -> bool {
        if matches!(req, Request::Fsck) || self.mode.blocks(req) {
            return true;
        }
        self.store.syncs_each_write()
            && !matches!(
                req,
                Request::Ping
                    | Request::Stat { .. }
                    | Request::Readlink { .. }
                    | Request::Access { .. }
                    | Request::ReadDir { .. }
                    | Request::InodeStat { .. }
                    | Request::DirProbe { .. }
                    | Request::RecoveryStat { .. }
                    | Request::ReadData { .. }
                    | Request::Stats
            )
    }

    /// A batch's apply checks and ingests a server's whole share: apart from
    /// the requests pipelined behind it.
    fn waits(&self, req: &Request) -> bool {
        matches!(req, Request::BatchApply { .. }) || self.mode.waits(req)
    }

    /// A pass's writes reach the log in one system call, after its last
    /// handler and before any answer: with 32 requests in flight a server
    /// makes one `write(2)` to its log for all those it read together. If
    /// that fails, what they did is unknown: their callers hear `EIO`.
    fn in_pass(&self, handlers: &mut dyn FnMut()) -> Result<(), Errno> {
        canopy_store::in_pass(&*self.store, handlers).map_err(|e| {
            self.problem(format!("writing the log after a pass: {e}"));
            Errno::EIO
        })
    }
}
