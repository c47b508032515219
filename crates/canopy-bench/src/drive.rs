//! Drives the steps of a plan. Within a batch, every worker takes the next index
//! into the batch's paths, applies the operation to that path and records the
//! latency, until the paths run out. That loop is the same for every target; only
//! where the workers run differs ([`Workers`]).

use crate::plan::Step;
use crate::job::{work, Job};
use crate::pool::Pool;
use crate::target::BenchTarget;
use crate::workload::Op;
use indicatif::{ProgressBar, ProgressStyle};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

pub use crate::job::{latencies, latencies_of, Latencies};

pub struct Measured {
    pub latencies: Latencies,
    pub errors: u64,
    pub seconds: f64,
}

/// Where the workers run.
pub enum Workers<T: BenchTarget> {
    /// A tokio task per handle, spawned for each batch (tasks are cheap), for
    /// targets whose operations wait on the network. Driven inside a tokio runtime.
    Tasks(Vec<T>),
    /// A long-lived OS thread per worker, for targets whose operations block the
    /// calling thread (system calls). The threads are started once, before anything
    /// is timed, so a phase's time does not include starting them.
    Threads(Pool),
}

impl<T: BenchTarget> Workers<T> {
    /// A worker per handle in `targets`.
    pub fn tasks(targets: Vec<T>) -> Workers<T> {
        Workers::Tasks(targets)
    }

    /// A thread per handle in `targets`.
    pub fn threads(targets: Vec<T>) -> Result<Workers<T>, String> {
        Ok(Workers::Threads(Pool::new(targets)?))
    }

    /// Runs `op` over `paths` with every worker.
    pub async fn drive(&self, op: Op, paths: Arc<Vec<String>>, bar: &ProgressBar) -> Measured {
        let job = Arc::new(Job { op, paths, next: AtomicUsize::new(0), errors: AtomicU64::new(0), bar: bar.clone() });
        let start = Instant::now();
        let per_worker = match self {
            Workers::Tasks(targets) => {
                let tasks: Vec<_> = targets
                    .iter()
                    .map(|t| {
                        let (t, job) = (t.clone(), job.clone());
                        tokio::spawn(async move { work(&t, &job).await })
                    })
                    .collect();
                let mut per_worker = Vec::with_capacity(tasks.len());
                for t in tasks {
                    per_worker.push(t.await.expect("bench worker panicked"));
                }
                per_worker
            }
            Workers::Threads(pool) => pool.run(&job),
        };
        let seconds = start.elapsed().as_secs_f64();
        let mut latencies = latencies();
        for l in per_worker {
            latencies.add(l).expect("histograms of one precision add up");
        }
        Measured { latencies, errors: job.errors.load(Ordering::Relaxed), seconds }
    }

    /// Runs a setup step, unmeasured; any failure stops the bench.
    pub async fn setup(&self, step: &Step) -> Result<(), String> {
        for (op, paths) in &step.batches {
            let m = self.drive(*op, paths.clone(), &ProgressBar::hidden()).await;
            if m.errors > 0 {
                return Err(format!("{} operations of the bench's setup failed", m.errors));
            }
        }
        Ok(())
    }

    /// Runs a measured step's batches one after another (its time is their sum),
    /// with a progress bar on stderr if `progress`.
    pub async fn measure(&self, step: &Step, progress: bool) -> Measured {
        let bar = if progress { ProgressBar::new(step.ops() as u64) } else { ProgressBar::hidden() };
        bar.set_style(ProgressStyle::with_template("{msg:8} [{bar:40}] {pos}/{len} {per_sec}").expect("valid template").progress_chars("=> "));
        bar.set_message(step.phase.clone().unwrap_or_default());
        let mut all = Measured { latencies: latencies(), errors: 0, seconds: 0.0 };
        for (op, paths) in &step.batches {
            let m = self.drive(*op, paths.clone(), &bar).await;
            all.latencies.add(m.latencies).expect("histograms of one precision add up");
            all.errors += m.errors;
            all.seconds += m.seconds;
        }
        bar.finish_and_clear();
        all
    }
}
