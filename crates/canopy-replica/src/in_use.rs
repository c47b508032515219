//! The sessions a leader is serving a request of right now: between looking
//! up a request's session and recording its answer, nobody else may serve
//! a request of that session.
//!
//! Without this, two requests of one session served at once (one answered
//! apart on a blocking thread, one in a read pass; or a retry sent on a new
//! connection while the first try still runs) would both read the session's
//! record before either wrote it: the retry would be applied a second time,
//! or the record written last would drop the other's answer, so a later
//! retry of that one would be applied again. A request that finds its
//! session in use waits for it (as a future: the serving thread never
//! waits), then is served; a retry then finds the first try's answer, and
//! records are written in the order they were made.

use parking_lot::Mutex;
use std::collections::HashSet;
use tokio::sync::Notify;

/// A session as its record's key names it: its id and who sent it.
pub type SessionKey = (u64, Vec<u8>);

#[derive(Default)]
pub struct InUse {
    sessions: Mutex<HashSet<SessionKey>>,
    freed: Notify,
}

/// A session held until this is dropped.
pub struct Held<'a> {
    in_use: &'a InUse,
    key: SessionKey,
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.in_use.sessions.lock().remove(&self.key);
        self.in_use.freed.notify_waiters();
    }
}

impl InUse {
    /// Holds `key`'s session, unless another request holds it.
    pub fn hold(&self, key: SessionKey) -> Option<Held<'_>> {
        let taken = self.sessions.lock().insert(key.clone());
        // Not `then_some`: a `Held` made and dropped for a session in use
        // would let it go.
        taken.then(|| Held { in_use: self, key })
    }

    /// Ends once nobody holds `key`'s session (somebody may take it again
    /// before the caller does: then it waits again).
    pub async fn freed(&self, key: &SessionKey) {
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            if !self.sessions.lock().contains(key) {
                return;
            }
            freed.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_session_is_held_by_one_request_at_a_time() {
        let in_use = InUse::default();
        let key: SessionKey = (7, b"alice".to_vec());
        let first = in_use.hold(key.clone()).expect("a free session is held");
        assert!(in_use.hold(key.clone()).is_none(), "a held session is not held twice");
        assert!(in_use.hold((7, b"mallory".to_vec())).is_some(), "another sender's session is another");
        let waiting = in_use.freed(&key);
        tokio::pin!(waiting);
        assert!(futures::poll!(waiting.as_mut()).is_pending());
        drop(first);
        waiting.await;
        assert!(in_use.hold(key.clone()).is_some(), "a session let go is held again");
    }
}
