//! Time, behind a narrow interface (as LevelDB's `Env`): the lock service's leases
//! and the servers' timestamps read a [`Clock`], so tests drive lease expiry and
//! recovery with a [`ManualClock`] instead of sleeping.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

pub trait Clock: Send + Sync + 'static {
    /// Milliseconds on a monotonic clock (leases, deadlines): only differences mean
    /// anything.
    fn now_ms(&self) -> u64;
    /// Nanoseconds since the Unix epoch (file and directory times).
    fn wall_ns(&self) -> i64;

    /// Milliseconds since the Unix epoch: for a time that crosses processes
    /// (a Giraffa directory proof's expiry), which only a clock the hosts
    /// keep in step can carry; `now_ms` starts afresh with each process.
    fn wall_ms(&self) -> u64 {
        (self.wall_ns().max(0) / 1_000_000) as u64
    }

    /// Blocks this thread until `now_ms()` reaches `until` (a lease or a
    /// proof running out). The system's clock sleeps; a manual clock waits
    /// for the test to move it, or, made with [`ManualClock::moved_by_waits`],
    /// is moved there at once, as time would pass for everyone while the
    /// thread waited (so a test neither sleeps nor hangs on a clock nobody
    /// moves).
    fn wait_until_ms(&self, until: u64) {
        loop {
            let now = self.now_ms();
            if now >= until {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis((until - now).min(50)));
        }
    }
}

pub type SharedClock = Arc<dyn Clock>;

/// The system's clocks.
pub struct SystemClock {
    start: Instant,
}

impl SystemClock {
    pub fn shared() -> SharedClock {
        Arc::new(SystemClock { start: Instant::now() })
    }
}

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    fn wall_ns(&self) -> i64 {
        SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as i64).unwrap_or(0)
    }
}

/// A clock that moves only when told to.
#[derive(Default)]
pub struct ManualClock {
    ms: AtomicU64,
    wall: AtomicI64,
    /// A wait moves the clock to its end instead of waiting for the test.
    moved_by_waits: bool,
}

impl ManualClock {
    pub fn new() -> Arc<ManualClock> {
        Arc::new(ManualClock::default())
    }

    /// A manual clock that a wait moves to its end ([`Clock::wait_until_ms`]).
    pub fn moved_by_waits() -> Arc<ManualClock> {
        Arc::new(ManualClock { moved_by_waits: true, ..ManualClock::default() })
    }

    /// Moves both clocks forward by `ms` milliseconds.
    pub fn advance(&self, ms: u64) {
        self.ms.fetch_add(ms, Ordering::AcqRel);
        self.wall.fetch_add(ms as i64 * 1_000_000, Ordering::AcqRel);
    }

    /// Moves both clocks forward until the monotonic one reads at least `until`.
    pub fn advance_to(&self, until: u64) {
        let mut now = self.ms.load(Ordering::Acquire);
        while now < until {
            match self.ms.compare_exchange(now, until, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => {
                    self.wall.fetch_add((until - now) as i64 * 1_000_000, Ordering::AcqRel);
                    return;
                }
                Err(moved) => now = moved,
            }
        }
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.ms.load(Ordering::Acquire)
    }

    fn wall_ns(&self) -> i64 {
        self.wall.load(Ordering::Acquire)
    }

    fn wait_until_ms(&self, until: u64) {
        if self.moved_by_waits {
            self.advance_to(until);
        }
        while self.now_ms() < until {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_moves_only_when_advanced() {
        let c = ManualClock::new();
        assert_eq!((c.now_ms(), c.wall_ns()), (0, 0));
        c.advance(150);
        assert_eq!((c.now_ms(), c.wall_ns(), c.wall_ms()), (150, 150_000_000, 150));
        c.wait_until_ms(100);
        assert_eq!(c.now_ms(), 150, "a deadline passed already waits for nothing");
        let moved = ManualClock::moved_by_waits();
        moved.advance(150);
        moved.wait_until_ms(100);
        assert_eq!(moved.now_ms(), 150, "a deadline passed already moves nothing");
        moved.wait_until_ms(400);
        assert_eq!((moved.now_ms(), moved.wall_ms()), (400, 400), "a wait moves both clocks to its end");
        let s = SystemClock::shared();
        assert!(s.wall_ns() > 1_700_000_000_000_000_000);
    }
}
