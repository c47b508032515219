//! How a daemon's threads ask the kernel to schedule them.
//!
//! On a host whose cores the daemons share with their clients (a local
//! cluster, a benchmark, a mount), a daemon woken by each request that
//! arrives preempts whoever is running, answers the one or two requests
//! there are, and sleeps again: most of the machine goes on switching
//! between processes. `SCHED_BATCH` keeps a daemon's share of the CPU but
//! stops its wake-ups from preempting a running thread, so it runs when a
//! core frees up and finds the requests that gathered meanwhile. An idle
//! core still runs it at once, so a lone request waits no longer.

use clap::ValueEnum;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Sched {
    /// Run when a core is free or the running thread's slice ends; never
    /// preempt it on waking (`SCHED_BATCH`).
    Batch,
    /// The kernel's default (`SCHED_OTHER`): preempt on waking when the
    /// scheduler finds the sleeper owed time.
    Normal,
}

impl Sched {
    /// Sets the policy of the calling thread; threads it creates afterwards
    /// inherit it.
    pub fn apply(self) -> Result<(), String> {
        let policy = match self {
            Sched::Batch => libc::SCHED_BATCH,
            Sched::Normal => libc::SCHED_OTHER,
        };
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: pid 0 is the calling thread; `param` outlives the call.
        if unsafe { libc::sched_setscheduler(0, policy, &param) } != 0 {
            return Err(format!("cannot set the scheduling policy to {self:?}: {}", std::io::Error::last_os_error()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy_of_this_thread() -> i32 {
        // SAFETY: reads the calling thread's policy.
        unsafe { libc::sched_getscheduler(0) }
    }

    #[test]
    fn a_thread_takes_the_policy_and_its_children_inherit_it() {
        std::thread::spawn(|| {
            Sched::Batch.apply().unwrap();
            assert_eq!(policy_of_this_thread(), libc::SCHED_BATCH);
            let child = std::thread::spawn(policy_of_this_thread).join().unwrap();
            assert_eq!(child, libc::SCHED_BATCH);
            Sched::Normal.apply().unwrap();
            assert_eq!(policy_of_this_thread(), libc::SCHED_OTHER);
        })
        .join()
        .unwrap();
    }
}
