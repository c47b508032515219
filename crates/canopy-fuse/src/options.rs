//! What a mount can be told, with the defaults `canopy mount` documents.

use std::time::Duration;

#[derive(Debug, Clone)]
pub struct MountOptions {
    /// How long the kernel may trust a name it looked up (entry cache).
    pub entry_ttl: Duration,
    /// How long the kernel may trust attributes it fetched (attribute cache).
    pub attr_ttl: Duration,
    /// Files up to this many bytes keep their contents in the metadata.
    pub inline_max: u32,
    /// Threads reading kernel requests, each on its own cloned /dev/fuse fd;
    /// a handler runs on its thread while another is left reading, else on
    /// the runtime's blocking pool.
    pub threads: usize,
    /// Let users other than the one who mounted use the mount (`allow_other`).
    pub allow_other: bool,
    /// Let the kernel check permissions from the attributes it holds
    /// (`default_permissions`) before Canopy's servers check them again.
    /// [`kernel_checks_by_default`] says when it is on. Without it the kernel
    /// checks nothing itself (only that a program has some execute bit):
    /// every request that reaches the mount is checked by the servers as its
    /// caller, but what the kernel's caches hold (a lookup, attributes) is
    /// served for the timeouts without asking, and a FIFO or socket is opened
    /// with no check (no open reaches the mount for one). Safe when one user
    /// uses the mount: without `allow_other`, the kernel admits only the
    /// owner's processes, and the mount refuses (`EACCES`) a request carrying
    /// another uid (a root thread that switched its fsuid; `SessionACL::Owner`)
    /// and a uid-0 caller without root's file capabilities (`Core::creds`).
    pub default_permissions: bool,
    /// Keep directories' mtime and ctime up to date (one more RPC per change).
    pub dir_times: bool,
    /// While requests come, ask the kernel to keep idle CPUs polling rather
    /// than halted, so each wake-up in a request's chain is quick
    /// (`awake.rs`).
    pub idle_polling: bool,
}

impl Default for MountOptions {
    fn default() -> MountOptions {
        MountOptions {
            entry_ttl: Duration::from_secs(1),
            attr_ttl: Duration::from_secs(1),
            inline_max: 64 * 1024,
            threads: default_threads(),
            allow_other: false,
            default_permissions: kernel_checks_by_default(false),
            dir_times: true,
            idle_polling: true,
        }
    }
}

/// FUSE threads for a host of `cpus` CPUs unless told: two per CPU, at
/// least 4 and at most 8. On 2 CPUs, 4 threads against 8 (the two builds
/// alternating): 2-thread creates 11,912-12,385/s against 10,433-10,775/s, stats
/// 74,772-84,812/s against 67,776-72,108/s, mkdirs 4,414-4,508/s against
/// 3,655-4,038/s, and 128-thread creates faster in 5 of 6 pairs. Each thread
/// has its own runtime and connections, and the kernel hands requests to the
/// threads waiting in turn, so threads beyond what the CPUs run keep more
/// state cold and more connections for the daemons to serve
/// (docs/performance.md, "The mount's threads"). Hosts with more CPUs get 8,
/// the most measured to help.
pub fn threads_for(cpus: usize) -> usize {
    (2 * cpus).clamp(4, 8)
}

/// [`threads_for`] this host's CPUs.
pub fn default_threads() -> usize {
    threads_for(std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// Whether the kernel checks permissions itself (`default_permissions`) unless
/// told: when other users may use the mount (`allow_other`), since its caches
/// are shared by everyone who does. A mount only its owner may use leaves the
/// checks to the servers, which see every request but the cached ones: that
/// saves the kernel round trip (a GETATTR of the parent, answered by the mount)
/// the kernel's own check makes after every create, mkdir, unlink or rename in
/// a directory, since each invalidates the directory's attributes it checks
/// against. Through the mount, creates 1.17 to 1.33 times as fast with 2
/// threads and 1.39 times with 128 (docs/performance.md, "Permission checks in the kernel").
pub fn kernel_checks_by_default(allow_other: bool) -> bool {
    allow_other
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_threads_a_cpu_between_four_and_eight() {
        assert_eq!([1, 2, 3, 4, 64].map(threads_for), [4, 4, 6, 8, 8]);
    }
}
