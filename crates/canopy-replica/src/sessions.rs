//! Client sessions: what makes a retried mutation apply once.
//!
//! A client of a group numbers its mutations within a session
//! (`Request::Once`). The answer of each one applied is recorded in the same
//! entry as its writes, in the session's record (family [`SESSIONS`], key
//! the session's id and who sent it, so no one reaches another's answers):
//! a retry finds it and is answered the same. The client
//! also says below which number it has heard every answer (`done_below`);
//! those answers leave the record, which remembers the mark, so a retry
//! from below it is refused (`ESTALE`), never applied again. One record per
//! session, rewritten whole: a mutation costs one more write, not a write
//! and a deletion per answer. Its answers are kept as the bytes they were
//! encoded to when recorded: rewriting the record copies them, and only a
//! retry's is decoded again. A session unheard of for [`SESSION_TTL`] is
//! forgotten whole.
//!
//! A session's id carries the second it began (high 32 bits), so a group
//! can tell a session it has not heard of yet (its mutations so far wrote
//! nothing, or it is new) from one it forgot: none is forgotten before it
//! is [`SESSION_TTL`] old, and a client begins a new session every
//! [`SESSION_TTL`] / 2. One older than that and unknown is refused.

use canopy_proto::{Errno, Reply};
use canopy_store::{Batch, Store, StoreError};
use serde::{Deserialize, Serialize};
use serde_bytes::ByteBuf;
use std::time::Duration;

pub const SESSIONS: &str = "sessions";

/// How long a session may go unheard before the group forgets it.
pub const SESSION_TTL: Duration = Duration::from_secs(600);

/// How far a client's clock may be ahead or behind its group's.
pub const CLOCK_SKEW: Duration = Duration::from_secs(60);

/// The most answers a session's record keeps: a client with more
/// unanswered at once loses the oldest (a retry of one is refused).
pub const MAX_ANSWERS: usize = 1024;

/// When session `session` began (ms since the epoch).
pub fn began_ms(session: u64) -> u64 {
    (session >> 32) * 1000
}

/// What the group keeps of a session.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionRecord {
    /// Every answer below this was heard, or dropped.
    pub below: u64,
    /// When the session's last mutation was applied (ms since the epoch).
    pub seen_ms: u64,
    /// The answers kept, by number, in the order recorded, each encoded.
    pub answers: Vec<(u64, ByteBuf)>,
}

/// What the group knows of a session's request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Known {
    /// Applied before: its answer.
    Answered(Result<Reply, Errno>),
    /// Its record is gone: it may have been applied, and must not be again.
    Forgotten,
    /// Not applied yet; the session's record as it stands.
    New(SessionRecord),
}

fn decode(bytes: &[u8]) -> Result<SessionRecord, StoreError> {
    postcard::from_bytes(bytes).map_err(|e| StoreError::Engine(format!("a session record: {e}")))
}

fn decode_answer(bytes: &[u8]) -> Result<Result<Reply, Errno>, StoreError> {
    postcard::from_bytes(bytes).map_err(|e| StoreError::Engine(format!("a session's answer: {e}")))
}

/// Where the record of `session`, sent by `owner` (an identity, encoded),
/// is kept.
fn key(session: u64, owner: &[u8]) -> Vec<u8> {
    [&session.to_be_bytes()[..], owner].concat()
}

/// What `store` knows of request `seq` of `owner`'s `session` at `now_ms`
/// (ms since the epoch).
pub fn lookup(store: &dyn Store, session: u64, owner: &[u8], seq: u64, now_ms: u64) -> Result<Known, StoreError> {
    match store.get(SESSIONS, &key(session, owner))? {
        Some(bytes) => {
            let record = decode(&bytes)?;
            if let Some((_, answer)) = record.answers.iter().find(|(s, _)| *s == seq) {
                return Ok(Known::Answered(decode_answer(answer)?));
            }
            Ok(if seq < record.below { Known::Forgotten } else { Known::New(record) })
        }
        // Unknown: new, unless it is old enough to have been forgotten.
        None if now_ms + (CLOCK_SKEW.as_millis() as u64) < began_ms(session) + SESSION_TTL.as_millis() as u64 => Ok(Known::New(SessionRecord::default())),
        None => Ok(Known::Forgotten),
    }
}

/// The write that records `answer` as request `seq`'s in `record`, dropping
/// the answers the client has heard (below `done_below`).
pub fn record(mut record: SessionRecord, session: u64, owner: &[u8], seq: u64, done_below: u64, answer: &Result<Reply, Errno>, now_ms: u64) -> Batch {
    record.below = record.below.max(done_below.min(seq));
    let below = record.below;
    record.answers.retain(|(s, _)| *s >= below);
    record.answers.push((seq, ByteBuf::from(postcard::to_allocvec(answer).expect("answers encode"))));
    if record.answers.len() > MAX_ANSWERS {
        let dropped = record.answers.len() - MAX_ANSWERS;
        record.answers.drain(..dropped);
        record.below = record.below.max(record.answers.iter().map(|(s, _)| *s).min().unwrap_or(seq));
    }
    record.seen_ms = now_ms;
    let mut b = Batch::new();
    b.put(SESSIONS, key(session, owner), postcard::to_allocvec(&record).expect("session records encode"));
    b
}

/// The writes that forget every session unheard of since `now_ms - ttl`.
pub fn expire(store: &dyn Store, now_ms: u64, ttl: Duration) -> Result<Batch, StoreError> {
    let mut b = Batch::new();
    let mut failed = None;
    store.for_each(SESSIONS, &[], &mut |k, v| {
        match decode(v) {
            Ok(r) if r.seen_ms + (ttl.as_millis() as u64) < now_ms => b.delete(SESSIONS, k.to_vec()),
            Ok(_) => {}
            Err(e) => {
                failed = Some(e);
                return false;
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

    const OWNER: &[u8] = b"alice";

    fn apply(store: &MemStore, b: Batch) {
        store.write(b).unwrap();
    }

    fn new(store: &MemStore, s: u64, seq: u64, t: u64) -> SessionRecord {
        match lookup(store, s, OWNER, seq, t).unwrap() {
            Known::New(r) => r,
            other => panic!("request {seq} is not new: {other:?}"),
        }
    }

    #[test]
    fn a_session_answers_a_retry_once_and_refuses_what_it_forgot() {
        let store = MemStore::new(&[SESSIONS]);
        // A session begun at second 1000.
        let (s, ok) = ((1000 << 32) | 7, Ok(Reply::Unit));
        let t = 1_000_000;
        // Requests 0 and 1 applied, in a new session.
        for seq in 0..2 {
            let r = new(&store, s, seq, t);
            apply(&store, record(r, s, OWNER, seq, 0, &ok, t));
        }
        assert_eq!(lookup(&store, s, OWNER, 1, t).unwrap(), Known::Answered(ok.clone()), "a retry is answered");
        assert!(matches!(lookup(&store, s, b"mallory", 1, t).unwrap(), Known::New(_)), "another's session id reaches nothing of it");
        // Request 2 says the client heard 0 and 1: their answers go.
        let r = new(&store, s, 2, t);
        apply(&store, record(r, s, OWNER, 2, 2, &Err(Errno::EEXIST), t + 1000));
        assert_eq!(lookup(&store, s, OWNER, 0, t).unwrap(), Known::Forgotten);
        assert_eq!(lookup(&store, s, OWNER, 2, t).unwrap(), Known::Answered(Err(Errno::EEXIST)));
        // A client with more unanswered than a record keeps loses the oldest.
        for seq in 3..3 + MAX_ANSWERS as u64 + 1 {
            let r = new(&store, s, seq, t);
            apply(&store, record(r, s, OWNER, seq, 2, &ok, t));
        }
        assert_eq!(lookup(&store, s, OWNER, 3, t).unwrap(), Known::Forgotten);
        assert_eq!(lookup(&store, s, OWNER, 4, t).unwrap(), Known::Answered(ok.clone()));
        // A session the group never heard of is new while young enough that
        // it cannot have been forgotten, and refused after.
        let young = (1000 << 32) | 8;
        assert!(matches!(lookup(&store, young, OWNER, 5, t + 500_000).unwrap(), Known::New(_)));
        assert_eq!(lookup(&store, young, OWNER, 5, t + 560_000).unwrap(), Known::Forgotten);
        // Unheard of for the TTL, it is forgotten whole.
        let later = t + 1000 + 601_000;
        apply(&store, expire(&store, later, SESSION_TTL).unwrap());
        assert_eq!(lookup(&store, s, OWNER, 4, later).unwrap(), Known::Forgotten);
        let mut left = 0;
        store.for_each(SESSIONS, &[], &mut |_, _| { left += 1; true }).unwrap();
        assert_eq!(left, 0);
    }
}
