//! Long-lived OS threads for a target whose operations block the calling thread.
//! Each thread owns a handle on the target and waits for a job, works on it with
//! the shared worker loop, reports its latencies and waits for the next.

use crate::job::{work, Job, Latencies};
use crate::target::BenchTarget;
use std::panic::{self, AssertUnwindSafe};
use std::sync::{mpsc, Arc};
use std::thread::{self, JoinHandle};

pub struct Pool {
    jobs: Vec<mpsc::Sender<Arc<Job>>>,
    done: mpsc::Receiver<thread::Result<Latencies>>,
    threads: Vec<JoinHandle<()>>,
}

impl Pool {
    /// A thread per handle in `targets`.
    pub fn new<T: BenchTarget>(targets: Vec<T>) -> Result<Pool, String> {
        let (done_tx, done) = mpsc::channel();
        let mut pool = Pool { jobs: Vec::new(), done, threads: Vec::new() };
        for (i, target) in targets.into_iter().enumerate() {
            let (tx, rx) = mpsc::channel::<Arc<Job>>();
            let done_tx = done_tx.clone();
            // The operations never wait on anything but the kernel, so the worker
            // loop's future finishes in one poll; block_on is only its executor.
            // A panic is sent back, or the pool would wait for this thread forever.
            let body = move || {
                for job in rx {
                    let lat = panic::catch_unwind(AssertUnwindSafe(|| futures::executor::block_on(work(&target, &job))));
                    if done_tx.send(lat).is_err() {
                        break;
                    }
                }
            };
            // On an error the threads already started end when `pool` drops.
            let handle = thread::Builder::new().name(format!("bench-{i}")).spawn(body).map_err(|e| format!("cannot start bench thread {i}: {e}"))?;
            pool.jobs.push(tx);
            pool.threads.push(handle);
        }
        Ok(pool)
    }

    /// Works on `job` with every thread; returns each one's latencies.
    pub(crate) fn run(&self, job: &Arc<Job>) -> Vec<Latencies> {
        for tx in &self.jobs {
            tx.send(job.clone()).expect("bench threads outlive their pool");
        }
        (0..self.jobs.len()).map(|_| self.done.recv().expect("bench threads outlive their pool").unwrap_or_else(|p| panic::resume_unwind(p))).collect()
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        // Closing the job channels ends the threads' loops.
        self.jobs.clear();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}
