//! What a client sends: RPCs per server (and to the lock service), retries, lock
//! waits. The bench turns these into RPC amplification.

use std::sync::atomic::{AtomicU64, Ordering};

pub struct ClientCounters {
    per_server: Vec<AtomicU64>,
    lockd: AtomicU64,
    retries: AtomicU64,
    lock_waits: AtomicU64,
    recoveries: AtomicU64,
    cache_hits: AtomicU64,
    cache_misses: AtomicU64,
    redirects: AtomicU64,
}

/// A copy of the counters at one moment; subtract two to measure a phase.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CounterSnapshot {
    pub per_server: Vec<u64>,
    pub lockd: u64,
    pub retries: u64,
    pub lock_waits: u64,
    /// Transactions of dead coordinators this client recovered.
    pub recoveries: u64,
    /// Path components found in (and missing from) a lookup cache (IndexFS).
    pub cache_hits: u64,
    pub cache_misses: u64,
    /// Requests a server redirected to another partition (IndexFS, GIGA+).
    pub redirects: u64,
}

impl CounterSnapshot {
    pub fn total_rpcs(&self) -> u64 {
        self.per_server.iter().sum::<u64>() + self.lockd
    }

    pub fn since(&self, earlier: &CounterSnapshot) -> CounterSnapshot {
        CounterSnapshot {
            per_server: self.per_server.iter().zip(&earlier.per_server).map(|(a, b)| a - b).collect(),
            lockd: self.lockd - earlier.lockd,
            retries: self.retries - earlier.retries,
            lock_waits: self.lock_waits - earlier.lock_waits,
            recoveries: self.recoveries - earlier.recoveries,
            cache_hits: self.cache_hits - earlier.cache_hits,
            cache_misses: self.cache_misses - earlier.cache_misses,
            redirects: self.redirects - earlier.redirects,
        }
    }
}

impl ClientCounters {
    pub fn new(servers: u32) -> ClientCounters {
        ClientCounters {
            per_server: (0..servers).map(|_| AtomicU64::new(0)).collect(),
            lockd: AtomicU64::new(0),
            retries: AtomicU64::new(0),
            lock_waits: AtomicU64::new(0),
            recoveries: AtomicU64::new(0),
            cache_hits: AtomicU64::new(0),
            cache_misses: AtomicU64::new(0),
            redirects: AtomicU64::new(0),
        }
    }

    pub fn sent_to_server(&self, i: u32) {
        if let Some(c) = self.per_server.get(i as usize) {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn sent_to_lockd(&self) {
        self.lockd.fetch_add(1, Ordering::Relaxed);
    }

    pub fn redirected(&self) {
        self.redirects.fetch_add(1, Ordering::Relaxed);
    }

    pub fn retried(&self) {
        self.retries.fetch_add(1, Ordering::Relaxed);
    }

    pub fn waited_for_lock(&self) {
        self.lock_waits.fetch_add(1, Ordering::Relaxed);
    }

    pub fn recovered(&self) {
        self.recoveries.fetch_add(1, Ordering::Relaxed);
    }

    pub fn cache_hit(&self) {
        self.cache_hits.fetch_add(1, Ordering::Relaxed);
    }

    pub fn cache_miss(&self) {
        self.cache_misses.fetch_add(1, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> CounterSnapshot {
        CounterSnapshot {
            per_server: self.per_server.iter().map(|c| c.load(Ordering::Relaxed)).collect(),
            lockd: self.lockd.load(Ordering::Relaxed),
            retries: self.retries.load(Ordering::Relaxed),
            lock_waits: self.lock_waits.load(Ordering::Relaxed),
            recoveries: self.recoveries.load(Ordering::Relaxed),
            cache_hits: self.cache_hits.load(Ordering::Relaxed),
            cache_misses: self.cache_misses.load(Ordering::Relaxed),
            redirects: self.redirects.load(Ordering::Relaxed),
        }
    }
}
