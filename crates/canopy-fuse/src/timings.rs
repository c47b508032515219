//! How long the mount takes to answer each kind of kernel request: counts and
//! latency histograms, from the moment a FUSE thread hands a request to its
//! handler to the moment the handler has answered. Set beside what a system
//! call takes (the benchmark's figures) and what an RPC takes (the library's),
//! they say where a call's time goes: in the mount's handlers, or in passing
//! requests between the kernel and the mount.
//!
//! Pure counting: [`RequestTimes::report`] renders a table, which `canopy
//! mount --timings FILE` writes out every second.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The kernel requests the mount tells apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Lookup,
    Getattr,
    Setattr,
    Readlink,
    Mknod,
    Mkdir,
    Unlink,
    Rmdir,
    Symlink,
    Rename,
    Link,
    Open,
    Read,
    Write,
    Flush,
    Release,
    Fsync,
    Opendir,
    Readdir,
    Readdirplus,
    Releasedir,
    Fsyncdir,
    Statfs,
    Access,
    Create,
}

impl Kind {
    const ALL: [Kind; 25] = [
        Kind::Lookup,
        Kind::Getattr,
        Kind::Setattr,
        Kind::Readlink,
        Kind::Mknod,
        Kind::Mkdir,
        Kind::Unlink,
        Kind::Rmdir,
        Kind::Symlink,
        Kind::Rename,
        Kind::Link,
        Kind::Open,
        Kind::Read,
        Kind::Write,
        Kind::Flush,
        Kind::Release,
        Kind::Fsync,
        Kind::Opendir,
        Kind::Readdir,
        Kind::Readdirplus,
        Kind::Releasedir,
        Kind::Fsyncdir,
        Kind::Statfs,
        Kind::Access,
        Kind::Create,
    ];

    /// As the kernel names it: LOOKUP, GETATTR, ...
    fn name(self) -> String {
        format!("{self:?}").to_uppercase()
    }
}

/// Buckets per doubling of the latency, equally wide within it: a bucket's
/// upper bound is at most 25% above its lower one.
const STEPS: u32 = 4;
/// Latencies in microseconds up to 2^30 (about 18 minutes); longer ones land
/// in the last bucket.
const BUCKETS: usize = (30 * STEPS) as usize;

/// A latency histogram with logarithmic buckets, safe to record into from
/// many threads at once.
pub struct Latencies {
    count: AtomicU64,
    total_us: AtomicU64,
    buckets: [AtomicU64; BUCKETS],
}

impl Default for Latencies {
    fn default() -> Latencies {
        Latencies { count: AtomicU64::new(0), total_us: AtomicU64::new(0), buckets: std::array::from_fn(|_| AtomicU64::new(0)) }
    }
}

/// The bucket of a latency of `us` microseconds: bucket 0 holds 0 and 1 µs,
/// then each doubling [2^k, 2^(k+1)) has STEPS buckets, `k * STEPS + part`
/// where `part` is the quarter of the doubling `us` falls in (the two bits
/// below its leading one).
fn bucket_of(us: u64) -> usize {
    if us <= 1 {
        return 0;
    }
    let log2 = 63 - us.leading_zeros();
    let below = log2.min(2);
    let part = ((us >> (log2 - below)) & ((1 << below) - 1)) << (2 - below);
    ((log2 * STEPS) as usize + part as usize).min(BUCKETS - 1)
}

/// The (exclusive) upper bound of bucket `b` in microseconds, which a
/// percentile reports.
fn upper_bound(b: usize) -> f64 {
    if b == 0 {
        return 2.0;
    }
    let (log2, part) = (b as u32 / STEPS, b as u32 % STEPS);
    2f64.powi(log2 as i32) * (1.0 + (part + 1) as f64 / STEPS as f64)
}

impl Latencies {
    pub fn record(&self, took: Duration) {
        let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        self.count.fetch_add(1, Ordering::Relaxed);
        self.total_us.fetch_add(us, Ordering::Relaxed);
        self.buckets[bucket_of(us)].fetch_add(1, Ordering::Relaxed);
    }

    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    pub fn mean_us(&self) -> f64 {
        self.total_us.load(Ordering::Relaxed) as f64 / self.count().max(1) as f64
    }

    /// The latency at or below which a fraction `q` of those recorded took, to
    /// a bucket's width (an upper bound: at most 25% above the true value).
    pub fn quantile_us(&self, q: f64) -> f64 {
        let counts: Vec<u64> = self.buckets.iter().map(|b| b.load(Ordering::Relaxed)).collect();
        let total: u64 = counts.iter().sum();
        if total == 0 {
            return 0.0;
        }
        let rank = ((q * total as f64).ceil() as u64).clamp(1, total);
        let mut seen = 0;
        for (b, n) in counts.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return upper_bound(b);
            }
        }
        upper_bound(BUCKETS - 1)
    }
}

/// Latencies of each kind of kernel request, and how many handlers were
/// handed off (a task on the runtime, or the blocking pool) rather than run
/// on the FUSE thread that read their request.
#[derive(Default)]
pub struct RequestTimes {
    kinds: [Latencies; Kind::ALL.len()],
    handed_off_count: AtomicU64,
    answered_absent_count: AtomicU64,
    renewed_fresh_count: AtomicU64,
}

impl RequestTimes {
    pub fn record(&self, kind: Kind, took: Duration) {
        self.kinds[kind as usize].record(took);
    }

    pub fn handed_off(&self) {
        self.handed_off_count.fetch_add(1, Ordering::Relaxed);
    }

    /// A LOOKUP was answered "absent" from what the mount knows of a
    /// directory it made (`fresh_dirs.rs`), without a server.
    pub fn answered_absent(&self) {
        self.answered_absent_count.fetch_add(1, Ordering::Relaxed);
    }

    /// What the mount knows of such a directory was renewed (a listing and a
    /// stat sent).
    pub fn renewed_fresh(&self) {
        self.renewed_fresh_count.fetch_add(1, Ordering::Relaxed);
    }

    pub fn of(&self, kind: Kind) -> &Latencies {
        &self.kinds[kind as usize]
    }

    /// A table of the kinds seen so far: count, mean, p50 and p99 in µs.
    pub fn report(&self) -> String {
        let mut out = String::from("request      count     mean_us    p50_us    p99_us\n");
        for kind in Kind::ALL {
            let l = self.of(kind);
            if l.count() == 0 {
                continue;
            }
            let (mean, p50, p99) = (l.mean_us(), l.quantile_us(0.5), l.quantile_us(0.99));
            let _ = writeln!(out, "{:<11} {:>7} {:>10.1} {:>9.0} {:>9.0}", kind.name(), l.count(), mean, p50, p99);
        }
        let _ = writeln!(out, "handlers handed off (runtime tasks or the blocking pool): {}", self.handed_off_count.load(Ordering::Relaxed));
        let _ = writeln!(out, "lookups answered absent in a directory this mount just made: {}", self.answered_absent_count.load(Ordering::Relaxed));
        let _ = writeln!(out, "renewals of what it knows of such directories (a listing and a stat): {}", self.renewed_fresh_count.load(Ordering::Relaxed));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_grow_with_latency_and_bound_it_within_a_step() {
        let mut last = 0;
        for us in 1..100_000u64 {
            let b = bucket_of(us);
            assert!(b >= last, "bucket of {us} went down");
            last = b;
            let hi = upper_bound(b);
            assert!((us as f64) < hi, "{us} µs not below its bucket's bound {hi}");
            assert!(b == 0 || us as f64 >= hi / 1.25, "{us} µs more than a step below its bucket's bound {hi}");
        }
        assert_eq!(bucket_of(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn quantiles_against_sorted_samples() {
        let l = Latencies::default();
        let samples: Vec<u64> = (0..1000).map(|i| 50 + (i * 7919) % 5000).collect();
        for &us in &samples {
            l.record(Duration::from_micros(us));
        }
        let mut sorted = samples.clone();
        sorted.sort_unstable();
        for q in [0.01, 0.5, 0.9, 0.99, 1.0] {
            let exact = sorted[((q * 1000.0) as usize).clamp(1, 1000) - 1] as f64;
            let got = l.quantile_us(q);
            assert!(got >= exact && got <= exact * 1.25, "q {q}: {got} against {exact}");
        }
        assert_eq!(l.count(), 1000);
        let mean = samples.iter().sum::<u64>() as f64 / 1000.0;
        assert!((l.mean_us() - mean).abs() < 1e-6);
        assert_eq!(Latencies::default().quantile_us(0.5), 0.0);
    }

    #[test]
    fn every_kind_is_listed_at_its_own_index() {
        for (i, kind) in Kind::ALL.into_iter().enumerate() {
            assert_eq!(kind as usize, i, "{kind:?}");
        }
        assert_eq!(Kind::Readdirplus.name(), "READDIRPLUS");
    }

    #[test]
    fn report_lists_only_kinds_seen() {
        let t = RequestTimes::default();
        t.record(Kind::Create, Duration::from_micros(300));
        t.record(Kind::Create, Duration::from_micros(500));
        t.record(Kind::Lookup, Duration::from_micros(100));
        t.handed_off();
        t.answered_absent();
        t.answered_absent();
        t.renewed_fresh();
        let r = t.report();
        assert!(r.contains("CREATE"), "{r}");
        assert!(r.contains("LOOKUP"), "{r}");
        assert!(!r.contains("MKDIR"), "{r}");
        assert!(r.contains("handed off (runtime tasks or the blocking pool): 1"), "{r}");
        assert!(r.contains("answered absent in a directory this mount just made: 2"), "{r}");
        assert!(r.contains("(a listing and a stat): 1"), "{r}");
        let create = r.lines().find(|l| l.starts_with("CREATE")).unwrap();
        assert!(create.split_whitespace().nth(1) == Some("2"), "{create}");
    }
}
