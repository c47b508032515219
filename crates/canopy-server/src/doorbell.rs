//! A background thread's doorbell: the thread sleeps until work is queued for
//! it (or a timed retry falls due) instead of looking every few milliseconds.
//! Polling woke each idle server 50 times a second (a 20 ms sleep), on every
//! mode, whether or not the mode had background work at all.

use parking_lot::{Condvar, Mutex};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

#[derive(Default)]
pub(crate) struct Doorbell {
    /// Rung since the thread last woke: a ring while it works is not lost.
    rung: Mutex<bool>,
    cv: Condvar,
    /// Waits ended (rung, timed out, or spurious): the server's
    /// `background_wakes` counter.
    wakes: AtomicU64,
}

impl Doorbell {
    pub(crate) fn ring(&self) {
        *self.rung.lock() = true;
        self.cv.notify_one();
    }

    /// Waits until the bell is rung (now or since the last wait), or for
    /// `timeout` (`None`: no limit). May return early; the caller looks for
    /// work either way.
    pub(crate) fn wait(&self, timeout: Option<Duration>) {
        let mut rung = self.rung.lock();
        if !*rung {
            match timeout {
                Some(t) => {
                    self.cv.wait_for(&mut rung, t);
                }
                None => self.cv.wait(&mut rung),
            }
        }
        *rung = false;
        self.wakes.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn wakes(&self) -> u64 {
        self.wakes.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Instant;

    #[test]
    fn a_ring_before_the_wait_is_kept_once() {
        let d = Doorbell::default();
        d.ring();
        d.ring();
        assert!(*d.rung.lock());
        // Returns at once (no limit: it would hang if the ring were lost),
        // and takes both rings.
        d.wait(None);
        assert!(!*d.rung.lock(), "the wait consumed the rings");
        assert_eq!(d.wakes(), 1);
    }

    #[test]
    fn a_ring_wakes_a_sleeping_waiter() {
        let d = Arc::new(Doorbell::default());
        let ringer = d.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            ringer.ring();
        });
        let start = Instant::now();
        d.wait(Some(Duration::from_secs(30)));
        assert!(start.elapsed() < Duration::from_secs(30), "woken by the ring, not the timeout");
        t.join().unwrap();
    }
}
