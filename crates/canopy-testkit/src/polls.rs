//! Waiting for what another task or thread will do, by polling it: a test
//! says what it waits for, never how long it may take. The number of polls
//! is bounded only so that a test that can never pass ends (a hang guard
//! sized for the slowest shared machine, not a claim about speed).

use std::future::Future;
use std::time::Duration;

/// Polls before [`until_async`] gives up: ten minutes of 10 ms pauses.
pub const POLLS: u32 = 60_000;

/// The pause between two polls.
pub const PAUSE: Duration = Duration::from_millis(10);

/// Polls `holds` until it answers true; panics naming `what` if it never does.
pub async fn until_async<F, Fut>(what: &str, mut holds: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    for _ in 0..POLLS {
        if holds().await {
            return;
        }
        tokio::time::sleep(PAUSE).await;
    }
    panic!("never happened: {what}");
}

/// [`until_async`] for a condition a thread reads without waiting.
pub fn until(what: &str, mut holds: impl FnMut() -> bool) {
    for _ in 0..POLLS {
        if holds() {
            return;
        }
        std::thread::sleep(PAUSE);
    }
    panic!("never happened: {what}");
}
