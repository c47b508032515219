//! A client's side of replica groups: which member of each group it
//! believes leads, and the session under which its mutations to that group
//! are applied once (`Request::Once`).
//!
//! Pure: the transport asks [`Group::leader`] where to send, tells it what
//! came back ([`Group::redirected`], [`Group::unreachable`]), and numbers
//! each mutation in the group's current session ([`Group::session`], given
//! the time and random bits), ending it with [`Session::end`] once
//! answered. A session's id carries the second it began; a new one begins
//! every [`SESSION_EVERY`], so the group never meets one old enough that it
//! may have forgotten it.

use canopy_proto::Request;
use parking_lot::Mutex;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// How long a client numbers its mutations in one session (half the time a
/// group keeps a session it has not heard from).
pub const SESSION_EVERY: u64 = 300;

/// One member of a group: its id in the group and where it listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub id: u64,
    pub addr: String,
}

/// How often this client was sent elsewhere, and found a member gone.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GroupCounts {
    /// Answers `NotLeader`: the request went to another member.
    pub redirects: u64,
    /// A member could not be reached, or lost a request's answer: the
    /// request went to another member.
    pub failovers: u64,
    /// Mutations sent again under their session after an unknown outcome.
    pub resent: u64,
}

#[derive(Debug, Default)]
pub struct Counts {
    redirects: AtomicU64,
    failovers: AtomicU64,
    resent: AtomicU64,
}

impl Counts {
    pub fn get(&self) -> GroupCounts {
        GroupCounts {
            redirects: self.redirects.load(Ordering::Relaxed),
            failovers: self.failovers.load(Ordering::Relaxed),
            resent: self.resent.load(Ordering::Relaxed),
        }
    }

    pub fn resent(&self) {
        self.resent.fetch_add(1, Ordering::Relaxed);
    }
}

/// A client session with one group.
#[derive(Debug)]
pub struct Session {
    pub id: u64,
    next: AtomicU64,
    /// Numbers sent and not yet answered.
    open: Mutex<BTreeSet<u64>>,
}

impl Session {
    /// A session begun at `now_secs` (since the epoch), told apart from
    /// others by `random`.
    pub fn new(now_secs: u64, random: u32) -> Session {
        Session { id: (now_secs << 32) | u64::from(random), next: AtomicU64::new(0), open: Mutex::default() }
    }

    /// The second it began.
    pub fn began(&self) -> u64 {
        self.id >> 32
    }

    /// A new number for a mutation, and the number below which every
    /// answer of this session has been heard.
    pub fn begin(&self) -> (u64, u64) {
        let mut open = self.open.lock();
        let seq = self.next.fetch_add(1, Ordering::Relaxed);
        open.insert(seq);
        let done_below = *open.first().expect("just inserted");
        (seq, done_below)
    }

    /// Mutation `seq` was answered (or given up on: it is never sent again).
    pub fn end(&self, seq: u64) {
        self.open.lock().remove(&seq);
    }

    /// `req` as a mutation applied once: (the wrapped request, its number).
    pub fn wrap(&self, req: &Request) -> (Request, u64) {
        let (seq, done_below) = self.begin();
        let inner = postcard::to_allocvec(req).expect("requests encode");
        (Request::Once { session: self.id, seq, done_below, inner }, seq)
    }
}

/// One group as a client sees it.
#[derive(Debug)]
pub struct Group<E> {
    pub members: Vec<(Member, E)>,
    leader: AtomicUsize,
    session: Mutex<Option<Arc<Session>>>,
    pub counts: Counts,
}

impl<E> Group<E> {
    pub fn new(members: Vec<(Member, E)>) -> Group<E> {
        Group { members, leader: AtomicUsize::new(0), session: Mutex::new(None), counts: Counts::default() }
    }

    /// The session to number a mutation in at `now_secs`: the current one,
    /// or a new one (told apart by `random`) if it is [`SESSION_EVERY`] old.
    pub fn session(&self, now_secs: u64, random: impl FnOnce() -> u32) -> Arc<Session> {
        let mut s = self.session.lock();
        match s.as_ref() {
            Some(cur) if cur.began() + SESSION_EVERY > now_secs => cur.clone(),
            _ => s.insert(Arc::new(Session::new(now_secs, random()))).clone(),
        }
    }

    /// The member believed to lead (its position).
    pub fn leader(&self) -> usize {
        self.leader.load(Ordering::Relaxed) % self.members.len().max(1)
    }

    /// Member `at` said it does not lead, naming `hint` if it knows who does.
    pub fn redirected(&self, at: usize, hint: Option<u64>) {
        self.counts.redirects.fetch_add(1, Ordering::Relaxed);
        let next = hint.and_then(|id| self.members.iter().position(|(m, _)| m.id == id)).filter(|n| *n != at);
        self.move_from(at, next);
    }

    /// Member `at` could not be reached or lost an answer.
    pub fn unreachable(&self, at: usize) {
        self.counts.failovers.fetch_add(1, Ordering::Relaxed);
        self.move_from(at, None);
    }

    fn move_from(&self, at: usize, to: Option<usize>) {
        let to = to.unwrap_or((at + 1) % self.members.len().max(1));
        let _ = self.leader.compare_exchange(at, to, Ordering::Relaxed, Ordering::Relaxed);
    }

    pub fn replicated(&self) -> bool {
        self.members.len() > 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(n: u64) -> Group<()> {
        Group::new((1..=n).map(|id| (Member { id, addr: format!("m{id}") }, ())).collect())
    }

    #[test]
    fn a_client_begins_a_new_session_every_session_every() {
        let g = group(1);
        let first = g.session(1000, || 1);
        assert_eq!(first.id, (1000 << 32) | 1);
        assert_eq!(g.session(1000 + SESSION_EVERY - 1, || 2).id, first.id);
        assert_eq!(g.session(1000 + SESSION_EVERY, || 2).id, ((1000 + SESSION_EVERY) << 32) | 2);
    }

    #[test]
    fn a_redirect_follows_its_hint_and_an_unreachable_member_is_passed_over() {
        let g = group(3);
        assert_eq!(g.leader(), 0);
        g.redirected(0, Some(3));
        assert_eq!(g.leader(), 2);
        g.unreachable(2);
        assert_eq!(g.leader(), 0, "round the members");
        g.redirected(0, Some(1));
        assert_eq!(g.leader(), 1, "a hint naming the member itself moves on");
        // A stale report about a member no longer believed leader changes nothing.
        g.unreachable(0);
        assert_eq!(g.leader(), 1);
        assert_eq!(g.counts.get(), GroupCounts { redirects: 2, failovers: 2, resent: 0 });
    }

    #[test]
    fn done_below_is_the_oldest_unanswered_number() {
        let s = Session::new(1, 1);
        assert_eq!(s.begin(), (0, 0));
        assert_eq!(s.begin(), (1, 0));
        s.end(0);
        assert_eq!(s.begin(), (2, 1));
        s.end(1);
        s.end(2);
        assert_eq!(s.begin(), (3, 3));
    }
}
