//! What every namespace strategy's client needs, whatever its mode: the transport
//! and the cluster's size, RPC counters, FIDs for new files, the reclaim hook,
//! whether to keep directory times, the lease its transactions ask for, and the
//! step hook tests stop transactions with. A mode's client holds one
//! [`ClientCore`]; transactions (`txn.rs`) are methods on it.

use crate::counters::ClientCounters;
use crate::data::{new_client_id, Reclaim};
use crate::namespace::Res;
use crate::touches::DirTouches;
use crate::txn::{Handed, StepHook};
use canopy_proto::{Creds, Errno, Reply, Request};
use canopy_rpc::{Daemon, Transport};
use futures::future::join_all;
use canopy_proto::clock::{SharedClock, SystemClock};
use std::sync::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Lease asked of the lock service for a transaction's locks, by default.
pub const LOCK_LEASE_MS: u32 = 30_000;

/// How a namespace client is set up (see [`crate::open_namespace`]).
#[derive(Clone, Default)]
pub struct NsOptions {
    /// Told of back-end contents whose last name this client removed.
    pub reclaim: Option<Arc<dyn Reclaim>>,
    /// Keep directories' mtime and ctime as POSIX wants, at one more RPC per
    /// create, unlink, mkdir, rmdir, link and rename (two for a rename between
    /// directories); in a burst, at most one per directory per
    /// [`crate::touches::TOUCH_WINDOW`].
    pub dir_times: bool,
    /// The lease asked for the locks of this client's transactions
    /// ([`LOCK_LEASE_MS`] when `None`).
    pub lease_ms: Option<u32>,
    /// Stop at each step of a transaction for this hook (tests).
    pub hook: Option<Arc<dyn StepHook>>,
    /// Send every operation whole to a server, which runs it as the caller
    /// (`crate::delegate`): what a client holding only a user key must do.
    pub delegate: bool,
    /// Where the client reads time (lease renewal); the system clock when `None`.
    pub clock: Option<SharedClock>,
    /// With directory times on: the touch book to share (a mount's clients
    /// share their first one's, see `touches.rs`); `None` starts one.
    pub touches: Option<Arc<DirTouches>>,
}

pub struct ClientCore {
    pub(crate) t: Arc<dyn Transport>,
    pub(crate) n: u32,
    /// Shared with this client's directory-touch sender (`touches.rs`), whose
    /// posts are this client's RPCs too.
    pub(crate) counters: Arc<ClientCounters>,
    pub(crate) hook: Option<Arc<dyn StepHook>>,
    pub(crate) lease_ms: u32,
    /// Set when a hook kills this coordinator: it sends nothing more, not even
    /// its unlocks, like a crashed process.
    pub(crate) dead: AtomicBool,
    /// This client instance's id, random: IndexFS's servers keep leases by it.
    pub(crate) client_id: u64,
    pub(crate) reclaim: Option<Arc<dyn Reclaim>>,
    pub(crate) dir_times: bool,
    /// With directory times on: coalesces the touches of a burst of changes.
    pub(crate) touches: Option<Arc<DirTouches>>,
    pub(crate) clock: SharedClock,
    /// When each of this client's open transactions last had its lease granted
    /// or renewed (clock milliseconds), so long work renews only when due.
    pub(crate) renewed: Mutex<HashMap<u64, u64>>,
}

impl ClientCore {
    pub fn new(t: Arc<dyn Transport>, opts: &NsOptions) -> ClientCore {
        let n = t.servers();
        let counters = Arc::new(ClientCounters::new(n));
        let touches = if opts.dir_times { opts.touches.clone().or_else(|| DirTouches::start(t.clone(), counters.clone())) } else { None };
        ClientCore {
            t,
            n,
            counters,
            hook: opts.hook.clone(),
            lease_ms: opts.lease_ms.unwrap_or(LOCK_LEASE_MS),
            dead: AtomicBool::new(false),
            client_id: new_client_id(),
            reclaim: opts.reclaim.clone(),
            dir_times: opts.dir_times,
            touches,
            clock: opts.clock.clone().unwrap_or_else(SystemClock::shared),
            renewed: Mutex::new(HashMap::new()),
        }
    }

    pub(crate) fn is_dead(&self) -> bool {
        self.dead.load(Ordering::Acquire)
    }

    pub(crate) async fn rpc(&self, server: u32, c: &Creds, req: Request) -> Res<Reply> {
        if self.is_dead() {
            return Err(Errno::ENOTCONN);
        }
        self.counters.sent_to_server(server);
        self.t.call(Daemon::Server(server), c, req).await
    }

    /// Sends an update whose answer nobody acts on (a replica's unfence)
    /// without waiting for it, perhaps a little late
    /// ([`Transport::post_soon`]): this client's later requests to `server`
    /// are served after it. Only a failure to send is reported, as a log
    /// line naming `what`.
    pub(crate) async fn post_soon(&self, server: u32, c: &Creds, req: Request, what: impl FnOnce() -> String) {
        if self.is_dead() {
            return;
        }
        sent_counted(&self.counters, server, what, self.t.post_soon(Daemon::Server(server), c, req)).await;
    }

    /// The same request (made per server by `req`) to each of `servers`, in parallel.
    pub(crate) async fn fan_out(&self, servers: impl Iterator<Item = u32>, c: &Creds, req: impl Fn(u32) -> Request) -> Vec<(u32, Res<Reply>)> {
        join_all(servers.map(|i| {
            let r = req(i);
            async move { (i, self.rpc(i, c, r).await) }
        }))
        .await
    }

    /// Makes every server refuse the steps of the transaction handed over
    /// for recovery (under its original id, or a dead recoverer's own) from
    /// now on, and waits for those under way: a step sent in time but that
    /// arrives only now cannot land behind what recovery then reads and
    /// decides. Every server must answer; one that does not fails this
    /// recovery, which the next conflicting request or sweep runs again.
    pub(crate) async fn revoke(&self, handed: Handed) -> Res<()> {
        for id in handed.ids() {
            for (_, r) in self.fan_out(0..self.n, &Creds::root(), |_| Request::Revoke { txn: id }).await {
                r?;
            }
        }
        Ok(())
    }

    pub(crate) fn all_but(&self, skip: u32) -> impl Iterator<Item = u32> {
        (0..self.n).filter(move |i| *i != skip)
    }
}

/// Posts `req` to `server` (see [`Transport::post`]), counted as one RPC
/// sent to it; a failure to send is logged, naming `what`.
pub(crate) async fn post_counted(t: &dyn Transport, counters: &ClientCounters, server: u32, c: &Creds, req: Request, what: impl FnOnce() -> String) {
    sent_counted(counters, server, what, t.post(Daemon::Server(server), c, req)).await;
}

/// Counts one RPC sent to `server`, then awaits `send` (a post: only
/// whether it went out is known); a failure is logged, naming `what`.
async fn sent_counted(counters: &ClientCounters, server: u32, what: impl FnOnce() -> String, send: impl std::future::Future<Output = Res<()>>) {
    counters.sent_to_server(server);
    if let Err(e) = send.await {
        eprintln!("canopy-client: could not send {}: {e}", what());
    }
}

/// The error to report when several servers answered: `primary`'s, else the first.
pub(crate) fn pick_error(results: &[(u32, Res<Reply>)], primary: u32) -> Option<Errno> {
    let errs: Vec<(u32, Errno)> = results.iter().filter_map(|(i, r)| r.as_ref().err().map(|e| (*i, *e))).collect();
    errs.iter().find(|(i, _)| *i == primary).or(errs.first()).map(|(_, e)| *e)
}

pub(crate) fn unexpected(r: Reply) -> Errno {
    eprintln!("canopy-client: unexpected reply {r:?}");
    Errno::EPROTO
}

/// A directory's attributes from its lookup state alone (times and the real
/// link count are its primary's or home's to tell).
pub(crate) fn dir_attr_from(l: &canopy_proto::msg::DirLookup) -> canopy_proto::Attr {
    canopy_proto::Attr { ino: l.id, kind: canopy_proto::FileKind::Dir, mode: l.mode, uid: l.uid, gid: l.gid, size: 0, nlink: 2, rdev: 0, atime: 0, mtime: 0, ctime: 0 }
}

/// The part of a setattr that changes a directory's lookup state (mode, owner).
pub(crate) fn lookup_part(set: &canopy_proto::SetAttr) -> canopy_proto::SetAttr {
    canopy_proto::SetAttr { mode: set.mode, uid: set.uid, gid: set.gid, ..canopy_proto::SetAttr::default() }
}

/// The part of a setattr that sets times, if any.
pub(crate) fn times_part(set: &canopy_proto::SetAttr) -> Option<canopy_proto::SetAttr> {
    (set.atime.is_some() || set.mtime.is_some()).then(|| canopy_proto::SetAttr { atime: set.atime, mtime: set.mtime, ..canopy_proto::SetAttr::default() })
}
