//! Client sessions: what makes a retried mutation apply once.
//!
//! A client of a group numbers its mutations within a session
//! (`Request::Once`). The answer of each one applied is recorded in the same
//! entry as its writes, in family [`SESSIONS`]: `session ‖ seq` → the answer.
//! A retry finds it and is answered the same. The client also says below
//! which number it has heard every answer (`done_below`); those records
//! are dropped, and the session's floor (`session` alone → [`Floor`])
//! remembers the mark, so a retry from below it is refused (`ESTALE`), never
//! applied again. A session unheard of for [`SESSION_TTL`] is forgotten
//! whole.
//!
//! A session's id carries the second it began (high 32 bits), so a group
//! can tell a session it has not heard of yet (its mutations so far wrote
//! nothing, or it is new) from one it forgot: none is forgotten before it
//! is [`SESSION_TTL`] old, and a client begins a new session every
//! [`SESSION_TTL`] / 2. One older than that and unknown is refused.

use canopy_proto::{Errno, Reply};
use canopy_store::{Batch, Store, StoreError};
use serde::{Deserialize, Serialize};
use std::time::Duration;

pub const SESSIONS: &str = "sessions";

/// How long a session may go unheard before the group forgets it.
pub const SESSION_TTL: Duration = Duration::from_secs(600);

/// How far a client's clock may be ahead or behind its group's.
pub const CLOCK_SKEW: Duration = Duration::from_secs(60);

/// When session `session` began (ms since the epoch).
pub fn began_ms(session: u64) -> u64 {
    (session >> 32) * 1000
}

/// What the group keeps of a session beside its answers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Floor {
    /// The client heard every answer below this.
    pub below: u64,
    /// When the session's last mutation was applied (ms since the epoch).
    pub seen_ms: u64,
}

/// What the group knows of a session's request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Known {
    /// Applied before: its answer.
    Answered(Result<Reply, Errno>),
    /// Its record is gone: it may have been applied, and must not be again.
    Forgotten,
    /// Not applied yet; the session's floor as it stands.
    New(Floor),
}

fn answer_key(session: u64, seq: u64) -> [u8; 16] {
    let mut k = [0; 16];
    k[..8].copy_from_slice(&session.to_be_bytes());
    k[8..].copy_from_slice(&seq.to_be_bytes());
    k
}

fn floor_key(session: u64) -> [u8; 8] {
    session.to_be_bytes()
}

fn decode<T: for<'de> Deserialize<'de>>(bytes: &[u8]) -> Result<T, StoreError> {
    postcard::from_bytes(bytes).map_err(|e| StoreError::Engine(format!("a session record: {e}")))
}

/// What `store` knows of request `seq` of `session`, whose client has heard
/// every answer below `done_below`, at `now_ms` (ms since the epoch).
pub fn lookup(store: &dyn Store, session: u64, seq: u64, now_ms: u64) -> Result<Known, StoreError> {
    if let Some(answer) = store.get(SESSIONS, &answer_key(session, seq))? {
        return Ok(Known::Answered(decode(&answer)?));
    }
    match store.get(SESSIONS, &floor_key(session))? {
        Some(f) => {
            let floor: Floor = decode(&f)?;
            Ok(if seq < floor.below { Known::Forgotten } else { Known::New(floor) })
        }
        // Unknown: new, unless it is old enough to have been forgotten.
        None if now_ms + (CLOCK_SKEW.as_millis() as u64) < began_ms(session) + SESSION_TTL.as_millis() as u64 => Ok(Known::New(Floor::default())),
        None => Ok(Known::Forgotten),
    }
}

/// The writes that record `answer` as request `seq`'s, and drop the
/// answers the client has heard.
pub fn record(session: u64, seq: u64, done_below: u64, floor: Floor, answer: &Result<Reply, Errno>, now_ms: u64) -> Batch {
    let mut b = Batch::new();
    let below = floor.below.max(done_below).min(seq);
    if below > floor.below {
        b.delete_range(SESSIONS, answer_key(session, floor.below).to_vec(), answer_key(session, below).to_vec());
    }
    b.put(SESSIONS, answer_key(session, seq).to_vec(), postcard::to_allocvec(answer).expect("answers encode"));
    b.put(SESSIONS, floor_key(session).to_vec(), postcard::to_allocvec(&Floor { below, seen_ms: now_ms }).expect("floors encode"));
    b
}

/// The writes that forget every session unheard of since `now_ms - ttl`.
pub fn expire(store: &dyn Store, now_ms: u64, ttl: Duration) -> Result<Batch, StoreError> {
    let mut b = Batch::new();
    let mut failed = None;
    store.for_each(SESSIONS, &[], &mut |k, v| {
        if k.len() == 8 {
            match decode::<Floor>(v) {
                Ok(f) if f.seen_ms + (ttl.as_millis() as u64) < now_ms => {
                    let session = u64::from_be_bytes(k.try_into().expect("8 bytes"));
                    b.delete(SESSIONS, k.to_vec());
                    b.delete_range(SESSIONS, answer_key(session, 0).to_vec(), answer_key(session, u64::MAX).to_vec());
                    b.delete(SESSIONS, answer_key(session, u64::MAX).to_vec());
                }
                Ok(_) => {}
                Err(e) => {
                    failed = Some(e);
                    return false;
                }
            }
        }
        true
    })?;
    failed.map_or(Ok(b), Err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use canopy_store::MemStore;

    fn apply(store: &MemStore, b: Batch) {
        store.write(b).unwrap();
    }

    #[test]
    fn a_session_answers_a_retry_once_and_refuses_what_it_forgot() {
        let store = MemStore::new(&[SESSIONS]);
        // A session begun at second 1000.
        let (s, ok) = ((1000 << 32) | 7, Ok(Reply::Unit));
        let t = 1_000_000;
        // Requests 0 and 1 applied, in a new session.
        for seq in 0..2 {
            let Known::New(floor) = lookup(&store, s, seq, t).unwrap() else { panic!("request {seq} is new") };
            apply(&store, record(s, seq, 0, floor, &ok, t));
        }
        assert_eq!(lookup(&store, s, 1, t).unwrap(), Known::Answered(ok.clone()), "a retry is answered");
        // Request 2 says the client heard 0 and 1: their records go.
        let Known::New(floor) = lookup(&store, s, 2, t).unwrap() else { panic!() };
        apply(&store, record(s, 2, 2, floor, &Err(Errno::EEXIST), t + 1000));
        assert_eq!(lookup(&store, s, 0, t).unwrap(), Known::Forgotten);
        assert_eq!(lookup(&store, s, 2, t).unwrap(), Known::Answered(Err(Errno::EEXIST)));
        // A session the group never heard of is new while young enough that
        // it cannot have been forgotten, and refused after.
        let young = (1000 << 32) | 8;
        assert!(matches!(lookup(&store, young, 5, t + 500_000).unwrap(), Known::New(_)));
        assert_eq!(lookup(&store, young, 5, t + 560_000).unwrap(), Known::Forgotten);
        // Unheard of for the TTL, it is forgotten whole.
        let later = t + 1000 + 601_000;
        apply(&store, expire(&store, later, SESSION_TTL).unwrap());
        assert_eq!(lookup(&store, s, 2, later).unwrap(), Known::Forgotten);
        let mut left = 0;
        store.for_each(SESSIONS, &[], &mut |_, _| { left += 1; true }).unwrap();
        assert_eq!(left, 0);
    }
}
