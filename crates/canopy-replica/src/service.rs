//! A daemon's service as a member of a replica group: the leader serves
//! through the service it opened over a [`ReplicatedStore`]; any other
//! member answers `Reply::NotLeader` and applies nothing.
//!
//! Reads are never stale. The leader holds a **lease**: a round of
//! heartbeats that a majority acknowledged (openraft's ReadIndex,
//! `ensure_linearizable`), begun at `t`, lets it serve until `t` + half of
//! openraft's leader lease (the election timeout's upper end: 500 ms for a
//! daemon). A member that acknowledged it refuses to vote for anyone else
//! until the whole leader lease has passed since, so no other leader exists
//! before then, and the other half covers clocks running at different
//! rates. A task renews the lease every [`RENEW_EVERY`]; a request that
//! finds it run out is answered apart, after a round of its own (the
//! serving thread never waits for the group: its Raft may run there), and a
//! member that cannot gather a majority answers nothing.
//!
//! Mutations come in `Request::Once` ([`crate::sessions`]): their answer is
//! recorded in the entry that applies them, and a retry at the next leader
//! is answered from it.

use crate::in_use::{InUse, SessionKey};
use crate::network::{Peer, PeerCall};
use crate::sessions::{self, Known};
use crate::{MemberId, Raft, ReplicatedStore};
use canopy_proto::auth::Identity;
use canopy_proto::clock::SharedClock;
use crate::membership;
use canopy_proto::msg::{GroupChange, GroupInfo};
use canopy_proto::{Creds, Errno, Reply, Request};
use canopy_rpc::{Handled, Service};
use parking_lot::RwLock;
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// What a leader serves with, for one term.
pub struct Leading {
    pub term: u64,
    pub store: Arc<ReplicatedStore>,
    pub service: Arc<dyn Service>,
}

pub struct ReplicatedService {
    pub member: MemberId,
    raft: Raft,
    peer: Arc<Peer>,
    /// Itself, for the requests it answers later.
    me: Weak<ReplicatedService>,
    clock: SharedClock,
    leading: RwLock<Option<Arc<Leading>>>,
    /// Until when this member may serve reads without a round.
    lease_until: parking_lot::Mutex<Option<Instant>>,
    terms_led: AtomicU64,
    deposed: AtomicU64,
    /// The sessions with a request being served now.
    in_use: InUse,
}

thread_local! {
    /// Whether this thread's pass has confirmed its member leads.
    static CONFIRMED: Cell<bool> = const { Cell::new(false) };
}

/// How often a leader renews its lease.
pub const RENEW_EVERY: Duration = Duration::from_millis(150);

/// How often a leader forgets the sessions unheard of for
/// [`sessions::SESSION_TTL`].
pub const FORGET_EVERY: Duration = Duration::from_secs(60);

impl ReplicatedService {
    pub fn new(member: MemberId, raft: Raft, peer: Arc<Peer>, clock: SharedClock) -> Arc<ReplicatedService> {
        Arc::new_cyclic(|me| ReplicatedService {
            member,
            raft,
            peer,
            me: me.clone(),
            clock,
            leading: RwLock::new(None),
            lease_until: parking_lot::Mutex::new(None),
            terms_led: AtomicU64::new(0),
            deposed: AtomicU64::new(0),
            in_use: InUse::default(),
        })
    }

    pub fn raft(&self) -> &Raft {
        &self.raft
    }

    /// What this member leads with now, if it leads.
    pub fn leading(&self) -> Option<Arc<Leading>> {
        let l = self.leading.read().clone()?;
        match l.store.deposed() {
            Some(_) => None,
            None => Some(l),
        }
    }

    /// Serves as leader with `l` from now on.
    pub fn lead(&self, l: Leading) {
        self.terms_led.fetch_add(1, Ordering::Relaxed);
        if let Some(old) = self.leading.write().replace(Arc::new(l)) {
            old.store.depose("a newer term began");
        }
    }

    /// Stops serving as leader: what is pending fails.
    pub fn stop_leading(&self, why: &str) {
        *self.lease_until.lock() = None;
        if let Some(old) = self.leading.write().take() {
            if old.store.deposed().is_none() {
                self.deposed.fetch_add(1, Ordering::Relaxed);
            }
            old.store.depose(why);
        }
    }

    /// The term this member leads in, if it serves as leader.
    pub fn leading_term(&self) -> Option<u64> {
        self.leading().map(|l| l.term)
    }

    fn not_leader(&self) -> Handled {
        Handled::Now(Ok(self.redirect()))
    }

    /// Where a client should go instead: the leader, if this member knows
    /// another one.
    fn redirect(&self) -> Reply {
        let leader = self.raft.metrics().borrow().current_leader.filter(|l| *l != self.member);
        Reply::NotLeader { leader }
    }

    /// Whether this member may serve now without a round: its pass already
    /// confirmed it leads, or it holds its lease. The only voter of its
    /// group needs neither: no other member can be elected but through a
    /// membership change it logs itself.
    fn confirmed(&self) -> bool {
        let ok = CONFIRMED.with(Cell::get) || self.sole_voter() || self.leased();
        CONFIRMED.with(|c| c.set(ok));
        ok
    }

    /// Answers `req` later: after a round of heartbeats a majority
    /// acknowledged (which renews the lease); `NotLeader` if no round
    /// succeeds.
    fn confirm_then(&self, peer: &Identity, creds: Creds, req: Request) -> Handled {
        self.apart_after(peer, creds, req, |me| async move {
            let began = Instant::now();
            if renew(&me.raft, me.member).await.is_none() {
                return Some(me.redirect());
            }
            me.extend_lease(began);
            None
        })
    }

    /// Answers `req` once nobody serves a request of `session`
    /// ([`crate::in_use`]).
    fn when_free(&self, session: SessionKey, peer: &Identity, creds: Creds, req: Request) -> Handled {
        self.apart_after(peer, creds, req, |me| async move {
            me.in_use.freed(&session).await;
            None
        })
    }

    /// Answers `req` later, once `first` ends, on a thread of its own as a
    /// request answered apart is; or with what `first` answers instead.
    fn apart_after<F>(&self, peer: &Identity, creds: Creds, req: Request, first: impl FnOnce(Arc<ReplicatedService>) -> F) -> Handled
    where
        F: std::future::Future<Output = Option<Reply>> + Send + 'static,
    {
        let Some(me) = self.me.upgrade() else { return self.not_leader() };
        let (peer, first) = (peer.clone(), first(me.clone()));
        Handled::Later(Box::pin(async move {
            match first.await {
                Some(answer) => Ok(answer),
                None => canopy_rpc::call_apart(me, peer, creds, req).await,
            }
        }))
    }

    fn leased(&self) -> bool {
        self.lease_until.lock().is_some_and(|until| Instant::now() < until)
    }

    /// How long an acknowledged round lets this member serve: half of
    /// openraft's leader lease, the election timeout's upper end.
    fn lease(&self) -> Duration {
        Duration::from_millis(self.raft.config().election_timeout_max / 2)
    }

    /// A round begun at `began` was acknowledged by a majority.
    fn extend_lease(&self, began: Instant) {
        let until = began + self.lease();
        let mut l = self.lease_until.lock();
        if l.is_none_or(|u| u < until) {
            *l = Some(until);
        }
    }

    /// Renews the lease every [`RENEW_EVERY`] while this member leads; for
    /// the member's life.
    pub async fn keep_lease(self: Arc<Self>) {
        loop {
            tokio::time::sleep(RENEW_EVERY).await;
            if self.leading().is_none() || self.sole_voter() {
                *self.lease_until.lock() = None;
                continue;
            }
            let began = Instant::now();
            if renew(&self.raft, self.member).await.is_some() {
                self.extend_lease(began);
            }
        }
    }

    /// As leader, forgets every session unheard of for
    /// [`sessions::SESSION_TTL`], through the group: how many. A retry in
    /// one is then refused, never applied again: a session that old began
    /// too long ago to be taken for a new one.
    pub fn forget_sessions(&self) -> Result<usize, Errno> {
        let Some(lead) = self.leading() else { return Ok(0) };
        let forget = sessions::expire(&*lead.store, self.clock.wall_ms(), sessions::SESSION_TTL).map_err(|_| Errno::EIO)?;
        let n = forget.changes.len();
        canopy_store::Store::write(&*lead.store, forget).map_err(|_| Errno::EIO)?;
        Ok(n)
    }

    /// Forgets old sessions every [`FORGET_EVERY`] while this member leads;
    /// for the member's life.
    pub async fn keep_forgetting_sessions(self: Arc<Self>) {
        loop {
            tokio::time::sleep(FORGET_EVERY).await;
            let me = self.clone();
            if let Ok(Err(e)) = tokio::task::spawn_blocking(move || me.forget_sessions()).await {
                eprintln!("canopy: member {} could not forget old sessions: {e}", self.member);
            }
        }
    }

    fn sole_voter(&self) -> bool {
        let m = self.raft.metrics();
        let m = m.borrow();
        m.state.is_leader() && m.membership_config.membership().voter_ids().eq([self.member])
    }

    fn group_info(&self) -> GroupInfo {
        group_info(self.member, &self.raft, self.terms_led.load(Ordering::Relaxed), self.deposed.load(Ordering::Relaxed))
    }

    fn serve_peer(&self, peer: &Identity, call: Vec<u8>) -> Handled {
        if !peer.is_cluster() {
            return Handled::Now(Err(Errno::EPERM));
        }
        let Ok((from, call)) = postcard::from_bytes::<(MemberId, PeerCall)>(&call) else {
            return Handled::Now(Err(Errno::EPROTO));
        };
        let me = self.peer.clone();
        Handled::Later(Box::pin(async move {
            let reply = me.serve(from, call).await;
            Ok(Reply::PeerReply(postcard::to_allocvec(&reply).map_err(|_| Errno::EIO)?))
        }))
    }

    /// Changes the group's voters, as its leader: a member added catches up
    /// as a learner first ([`membership`]).
    fn change_group(&self, peer: &Identity, change: GroupChange) -> Handled {
        if !peer.is_cluster() {
            return Handled::Now(Err(Errno::EPERM));
        }
        if !change.valid() {
            return Handled::Now(Err(Errno::EINVAL));
        }
        if self.leading().is_none() {
            return self.not_leader();
        }
        let (me, raft) = (self.member, self.raft.clone());
        let (terms_led, deposed) = (self.terms_led.load(Ordering::Relaxed), self.deposed.load(Ordering::Relaxed));
        Handled::Later(Box::pin(async move {
            match membership::change(&raft, change).await.map(|()| group_info(me, &raft, terms_led, deposed)) {
                Ok(info) => Ok(Reply::Group(info)),
                Err(membership::Refused::NotLeader(leader)) => Ok(Reply::NotLeader { leader }),
                Err(membership::Refused::Errno(e)) => Err(e),
            }
        }))
    }

    /// A request applied at most once for its session.
    fn once(&self, lead: &Leading, peer: &Identity, creds: Creds, numbered: Numbered, inner: &[u8]) -> Handled {
        let Numbered { session, seq, done_below } = numbered;
        let req = match postcard::from_bytes::<Request>(inner) {
            Ok(Request::Once { .. } | Request::Peer { .. }) | Err(_) => return Handled::Now(Err(Errno::EPROTO)),
            Ok(r) => r,
        };
        let now = self.clock.wall_ms();
        // A session is its sender's: another identity naming its id reaches
        // nothing of it.
        let Ok(owner) = postcard::to_allocvec(peer) else { return Handled::Now(Err(Errno::EIO)) };
        let Some(_held) = self.in_use.hold((session, owner.clone())) else {
            let again = Request::Once { session, seq, done_below, inner: inner.to_vec() };
            return self.when_free((session, owner), peer, creds, again);
        };
        let kept = match sessions::lookup(&*lead.store, session, &owner, seq, now) {
            Ok(Known::Answered(a)) => return Handled::Now(a),
            Ok(Known::Forgotten) => return Handled::Now(Err(Errno::ESTALE)),
            Ok(Known::New(r)) => r,
            Err(_) => return Handled::Now(Err(Errno::EIO)),
        };
        lead.store.begin_request();
        let handled = lead.service.call(peer, creds, req);
        let ended = match &handled {
            Handled::Now(answer) => lead.store.end_request(|| sessions::record(kept, session, &owner, seq, done_below, answer, now)),
            // An answer that comes later (a lock that waits) is not recorded.
            Handled::Later(_) => lead.store.end_request(canopy_store::Batch::new),
        };
        match ended {
            Ok(_) => handled,
            Err(_) => self.not_leader(),
        }
    }
}

/// `ask` of the request `req` carries: itself, or the one a `Once` wraps
/// (a mutation that waits for a lease must not be answered in a read pass
/// because its client numbered it). One that does not decode is refused
/// when it is served; it is asked of as it is.
fn unwrapped(req: &Request, ask: impl Fn(&Request) -> bool) -> bool {
    match req {
        Request::Once { inner, .. } => postcard::from_bytes::<Request>(inner).map_or_else(|_| ask(req), |r| ask(&r)),
        _ => ask(req),
    }
}

/// What member `member` knows of its group; `terms_led` and `deposed` are
/// its own counters.
fn group_info(member: MemberId, raft: &Raft, terms_led: u64, deposed: u64) -> GroupInfo {
    let m = raft.metrics().borrow().clone();
    let membership = m.membership_config.membership();
    let voter_ids: Vec<MemberId> = membership.voter_ids().collect();
    let (mut voters, mut learners) = (Vec::new(), Vec::new());
    for (id, node) in membership.nodes() {
        let entry = (*id, node.addr.clone());
        if voter_ids.contains(id) { voters.push(entry) } else { learners.push(entry) }
    }
    GroupInfo {
        member,
        leader: m.current_leader,
        term: m.current_term,
        last_log: m.last_log_index.unwrap_or(0),
        applied: m.last_applied.map_or(0, |l| l.index),
        voters,
        learners,
        matched: m.replication.map(|r| r.into_iter().map(|(id, l)| (id, l.map(|l| l.index))).collect()).unwrap_or_default(),
        terms_led,
        deposed,
    }
}

/// A `Once` request's place in its client's session.
struct Numbered {
    session: u64,
    seq: u64,
    done_below: u64,
}

/// A round of heartbeats acknowledged by a majority, with everything
/// committed before it applied: `Some` if this member still leads.
async fn renew(raft: &Raft, me: MemberId) -> Option<()> {
    raft.ensure_linearizable().await.ok()?;
    (raft.metrics().borrow().current_leader == Some(me)).then_some(())
}

impl Service for ReplicatedService {
    fn call(&self, peer: &Identity, creds: Creds, req: Request) -> Handled {
        match req {
            Request::Peer { call } => return self.serve_peer(peer, call),
            Request::GroupStatus => return Handled::Now(Ok(Reply::Group(self.group_info()))),
            Request::GroupChange { change } => return self.change_group(peer, change),
            _ => {}
        }
        let Some(lead) = self.leading() else { return self.not_leader() };
        if !self.confirmed() {
            return self.confirm_then(peer, creds, req);
        }
        match req {
            Request::Once { session, seq, done_below, inner } => self.once(&lead, peer, creds, Numbered { session, seq, done_below }, &inner),
            req => {
                lead.store.begin_request();
                let handled = lead.service.call(peer, creds, req);
                match lead.store.end_request(canopy_store::Batch::new) {
                    Ok(_) => handled,
                    Err(_) => self.not_leader(),
                }
            }
        }
    }

    fn blocks(&self, req: &Request) -> bool {
        self.leading().is_some_and(|l| unwrapped(req, |r| l.service.blocks(r)))
    }

    fn waits(&self, req: &Request) -> bool {
        self.leading().is_some_and(|l| unwrapped(req, |r| l.service.waits(r)))
    }

    /// Answers only once the group applied what the pass wrote; if it did
    /// not, the outcome is unknown to the client (`ENOTCONN`), which asks
    /// again under its session.
    fn in_pass(&self, handlers: &mut dyn FnMut()) -> Result<(), Errno> {
        CONFIRMED.with(|c| c.set(false));
        let Some(lead) = self.leading() else {
            handlers();
            return Ok(());
        };
        canopy_store::in_pass(&*lead.store, handlers).map_err(|_| Errno::ENOTCONN)
    }

    /// As `in_pass`, without waiting: the pass's answers wait for the group
    /// to apply what it wrote (and what was proposed before, which its reads
    /// may have seen), while the daemon reads its next pass.
    fn in_pass_later(&self, handlers: &mut dyn FnMut()) -> Result<Option<canopy_rpc::Durable>, Errno> {
        CONFIRMED.with(|c| c.set(false));
        let Some(lead) = self.leading() else {
            handlers();
            return Ok(None);
        };
        canopy_store::log_deferred(handlers);
        Ok(lead.store.applied_later().map(|f| -> canopy_rpc::Durable { Box::pin(async move { f.await.map_err(|_| Errno::ENOTCONN) }) }))
    }
}
