//! A daemon's live connections, as the accept loop and the reply budget see
//! them: when a connection must go to make room (too many connections, or the
//! replies held for all of them past the server's budget), the one stalled
//! longest writing to a peer that does not read goes first, then the one idle
//! longest with nothing in flight.
//!
//! Times are milliseconds since the registry's epoch; a connection's stall
//! begins when a write to it starts and ends when that write finishes.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::Notify;

/// A write that has not finished for this long marks its peer as one that
/// does not read: it goes first when room is needed.
pub const STALLED_MS: u64 = 1000;

/// One live connection, as the registry sees it.
pub struct ConnState {
    /// The last request or reply.
    pub last_active: AtomicU64,
    /// When the write under way began, plus one (0: none under way).
    writing_since: AtomicU64,
    /// Requests whose replies are still being worked out (lock waits).
    pub in_flight: AtomicUsize,
    /// Told to close (room was needed).
    pub close: Notify,
}

impl ConnState {
    fn new(now: u64) -> ConnState {
        ConnState { last_active: AtomicU64::new(now), writing_since: AtomicU64::new(0), in_flight: AtomicUsize::new(0), close: Notify::new() }
    }

    /// How long its write under way has taken at `now`, if one is.
    fn stalled_for(&self, now: u64) -> Option<u64> {
        match self.writing_since.load(Ordering::Acquire) {
            0 => None,
            since => Some(now.saturating_sub(since - 1)),
        }
    }
}

pub struct Registry {
    epoch: Instant,
    next: AtomicU64,
    conns: Mutex<HashMap<u64, Arc<ConnState>>>,
}

impl Default for Registry {
    fn default() -> Registry {
        Registry { epoch: Instant::now(), next: AtomicU64::new(1), conns: Mutex::new(HashMap::new()) }
    }
}

impl Registry {
    pub fn now(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// Registers a new connection, first closing another if `max` are open.
    pub fn admit(&self, max: usize) -> (u64, Arc<ConnState>) {
        let mut conns = self.conns.lock();
        if conns.len() >= max {
            if let Some(id) = victim(&conns, self.now(), true) {
                close(&mut conns, id);
            }
        }
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let state = Arc::new(ConnState::new(self.now()));
        conns.insert(id, state.clone());
        (id, state)
    }

    /// Closes the connection stalled longest writing (at least
    /// [`STALLED_MS`]), if there is one: room in the reply budget is needed.
    pub fn close_stalled(&self) -> bool {
        let mut conns = self.conns.lock();
        match victim(&conns, self.now(), false) {
            Some(id) => {
                close(&mut conns, id);
                true
            }
            None => false,
        }
    }

    pub fn leave(&self, id: u64) {
        self.conns.lock().remove(&id);
    }

    pub fn len(&self) -> usize {
        self.conns.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A write to `state`'s peer begins (`true`) or ends.
    pub fn writing(&self, state: &ConnState, begins: bool) {
        let since = if begins { self.now() + 1 } else { 0 };
        state.writing_since.store(since, Ordering::Release);
    }
}

/// Which connection goes: the one stalled longest (past [`STALLED_MS`]), else,
/// if `or_idle`, the one idle longest with nothing in flight.
fn victim(conns: &HashMap<u64, Arc<ConnState>>, now: u64, or_idle: bool) -> Option<u64> {
    let stalled = conns.iter().filter_map(|(id, c)| c.stalled_for(now).filter(|t| *t >= STALLED_MS).map(|t| (*id, t))).max_by_key(|(_, t)| *t);
    if let Some((id, _)) = stalled {
        return Some(id);
    }
    if !or_idle {
        return None;
    }
    let quiet = conns.iter().filter(|(_, c)| c.in_flight.load(Ordering::Acquire) == 0 && c.stalled_for(now).is_none());
    quiet.min_by_key(|(_, c)| c.last_active.load(Ordering::Acquire)).map(|(id, _)| *id)
}

fn close(conns: &mut HashMap<u64, Arc<ConnState>>, id: u64) {
    if let Some(c) = conns.remove(&id) {
        c.close.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn room_is_made_from_stalled_writers_first_then_the_idlest() {
        let r = Registry::default();
        let (a, sa) = r.admit(10);
        let (b, sb) = r.admit(10);
        let (_c, sc) = r.admit(10);
        sa.last_active.store(5, Ordering::Release);
        sb.last_active.store(1, Ordering::Release);
        sc.last_active.store(9, Ordering::Release);
        let conns = r.conns.lock();
        assert_eq!(victim(&conns, 100, true), Some(b), "the idlest");
        assert_eq!(victim(&conns, 100, false), None, "nobody stalls");
        sa.writing_since.store(11, Ordering::Release);
        assert_eq!(victim(&conns, 100, true), Some(b), "a write of 90 ms is no stall");
        assert_eq!(victim(&conns, 10 + STALLED_MS, true), Some(a), "a stalled writer goes before the idlest");
        assert_eq!(victim(&conns, 10 + STALLED_MS, false), Some(a));
        sb.in_flight.store(1, Ordering::Release);
        sa.writing_since.store(0, Ordering::Release);
        assert_eq!(victim(&conns, 100, true), Some(a), "not one with a reply in flight");
        drop(conns);
        let _ = sc;
    }

    #[test]
    fn a_full_registry_closes_one_to_admit_one() {
        let r = Registry::default();
        let (_, first) = r.admit(2);
        let (_, second) = r.admit(2);
        second.last_active.store(first.last_active.load(Ordering::Acquire) + 1, Ordering::Release);
        r.writing(&second, true);
        let _third = r.admit(2);
        assert_eq!(r.len(), 2);
        assert!(!r.close_stalled(), "a write just begun is no stall");
        r.writing(&second, false);
    }
}
