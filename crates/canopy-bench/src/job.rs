//! One batch of operations shared by its workers, and the loop each worker
//! runs over it, wherever the workers run (`crate::drive`'s tasks or
//! `crate::pool`'s threads).

use crate::target::{apply, BenchTarget};
use crate::workload::Op;
use indicatif::ProgressBar;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A batch being worked on, shared by all its workers.
pub(crate) struct Job {
    pub(crate) op: Op,
    pub(crate) paths: Arc<Vec<String>>,
    pub(crate) next: AtomicUsize,
    pub(crate) errors: AtomicU64,
    pub(crate) bar: ProgressBar,
}

/// Latencies in nanoseconds, to three significant figures (HdrHistogram).
pub type Latencies = hdrhistogram::Histogram<u64>;

/// An empty [`Latencies`].
pub fn latencies() -> Latencies {
    Latencies::new(3).expect("3 significant figures is a valid precision")
}

/// [`Latencies`] of the samples `ns`.
pub fn latencies_of(ns: &[u64]) -> Latencies {
    let mut h = latencies();
    for v in ns {
        record(&mut h, *v);
    }
    h
}

/// Records `ns`, the histogram growing to hold it. (`saturating_record` would
/// not grow it: every sample would be clamped to its first range, 2 ns.)
fn record(h: &mut Latencies, ns: u64) {
    h.record(ns).expect("an auto-resizing histogram takes any value");
}

/// Records how long an operation took.
fn record_elapsed(h: &mut Latencies, took: Duration) {
    record(h, u64::try_from(took.as_nanos()).unwrap_or(u64::MAX));
}

/// One worker's loop over a job; returns its latencies.
pub(crate) async fn work<T: BenchTarget>(target: &T, job: &Job) -> Latencies {
    let mut lat = latencies();
    loop {
        let i = job.next.fetch_add(1, Ordering::Relaxed);
        let Some(path) = job.paths.get(i) else { break };
        let t = Instant::now();
        if apply(target, job.op, path).await.is_err() {
            job.errors.fetch_add(1, Ordering::Relaxed);
        }
        record_elapsed(&mut lat, t.elapsed());
        if i.is_multiple_of(1024) {
            job.bar.set_position(i as u64);
        }
    }
    lat
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Latency;

    #[test]
    fn an_operations_time_is_recorded_as_it_took() {
        let mut h = latencies();
        for ms in [3, 5, 7] {
            record_elapsed(&mut h, Duration::from_millis(ms));
        }
        let l = Latency::of(&h);
        // Three significant figures: within 0.1% of 5 ms.
        assert!((l.p50 - 5000.0).abs() <= 5.0, "{l:?}");
        assert!((l.p99 - 7000.0).abs() <= 7.0, "{l:?}");
    }
}
