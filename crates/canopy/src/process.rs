//! Whether a local daemon's process still holds what it opened (its socket, its
//! RocksDB lock). A process killed with SIGKILL shows its first thread as a
//! zombie while its other threads are still being torn down, and until the last
//! of them is gone its socket still accepts connections; `canopy up` must wait
//! for that, not start a second daemon beside it.

use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Liveness {
    Running,
    /// Dead but not yet torn down: its first thread has exited, others remain.
    Exiting,
    Gone,
}

/// The liveness of a process from its first thread's state letter (`None` when
/// it no longer exists) and whether any other of its threads is not a zombie
/// (asked only of a zombie first thread: reading every thread's state is
/// needless for a running daemon).
fn classify(leader: Option<char>, other_threads_live: impl FnOnce() -> bool) -> Liveness {
    match leader {
        None => Liveness::Gone,
        Some('Z') if other_threads_live() => Liveness::Exiting,
        Some('Z' | 'X') => Liveness::Gone,
        Some(_) => Liveness::Running,
    }
}

/// The fields of a `/proc/.../stat` line after the parenthesised command
/// name (which may itself hold parentheses): the state first, field 3.
pub fn stat_fields(stat: &str) -> Option<Vec<&str>> {
    Some(stat.rsplit_once(')')?.1.split_whitespace().collect())
}

/// The state letter in a `/proc/.../stat` line.
fn state_letter(stat: &str) -> Option<char> {
    stat_fields(stat)?.first()?.chars().next()
}

fn thread_state(path: &str) -> Option<char> {
    state_letter(&std::fs::read_to_string(path).ok()?)
}

/// Reaps `pid` if it is this process's exited child (the bench's temporary
/// cluster), then reads its threads' states from `/proc`.
pub fn liveness(pid: i32) -> Liveness {
    // SAFETY: waitpid with WNOHANG only reaps `pid` if it is our exited child, and
    // signal 0 only checks that the process exists.
    unsafe {
        libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG);
        if libc::kill(pid, 0) != 0 {
            return Liveness::Gone;
        }
    }
    match thread_state(&format!("/proc/{pid}/stat")) {
        // No /proc to read, yet signal 0 reached it: assume it runs.
        None => Liveness::Running,
        leader => classify(leader, || other_threads_live(pid)),
    }
}

/// Whether a thread of `pid` other than its first is not a zombie.
fn other_threads_live(pid: i32) -> bool {
    let first = pid.to_string();
    std::fs::read_dir(format!("/proc/{pid}/task")).into_iter().flatten().flatten().any(|task| {
        let tid = task.file_name();
        tid.to_str() != Some(first.as_str()) && thread_state(&format!("/proc/{pid}/task/{}/stat", tid.to_string_lossy())).is_some_and(|s| s != 'Z')
    })
}

/// True until `pid` is gone, exiting included.
pub fn alive(pid: i32) -> bool {
    liveness(pid) != Liveness::Gone
}

/// Waits up to `timeout` for `pid` to be gone; true if it is.
pub fn wait_gone(pid: i32, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while alive(pid) {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_zombie_first_thread_with_live_threads_is_exiting() {
        assert_eq!(classify(Some('S'), || false), Liveness::Running);
        assert_eq!(classify(Some('D'), || true), Liveness::Running);
        assert_eq!(classify(Some('Z'), || true), Liveness::Exiting);
        assert_eq!(classify(Some('Z'), || false), Liveness::Gone);
        assert_eq!(classify(None, || false), Liveness::Gone);
    }

    #[test]
    fn the_state_follows_the_last_parenthesis() {
        assert_eq!(state_letter("42 (canopy) S 1 42"), Some('S'));
        assert_eq!(state_letter("42 (a) b) Z 1 42"), Some('Z'));
        assert_eq!(state_letter("garbage"), None);
    }

    #[test]
    #[expect(clippy::zombie_processes, reason = "liveness reaps the child, which is what this checks")]
    fn a_killed_child_is_gone_once_reaped_and_a_running_one_is_not() {
        let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id() as i32;
        assert_eq!(liveness(pid), Liveness::Running);
        child.kill().unwrap();
        assert!(wait_gone(pid, Duration::from_secs(10)), "liveness reaps our own child");
        assert_eq!(liveness(pid), Liveness::Gone);
    }
}
