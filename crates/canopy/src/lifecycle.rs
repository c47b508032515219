//! What a mode needs running on the hosts of a local cluster, and how the CLI
//! handles it: `canopy up` starts it and waits until it answers, `down` stops
//! it, `status` says what is up, and `bench` and `eval` do all three on a
//! temporary cluster. They ask the mode's [`Lifecycle`] ([`of`]) and never
//! name a mode; `fsck` goes through the mode's namespace client, which every
//! mode has.

use crate::local::{self, DaemonFlags, Listeners};
use canopy_client::cluster::{ClusterFile, ModeOptions};
use std::path::Path;
use std::time::Duration;

/// How a mode's daemons are run on this host.
pub trait Lifecycle: Sync {
    /// Starts, in `dir`, what cluster `c` needs and is not running yet
    /// (`listeners`: sockets already bound for it); how many it started.
    fn start(&self, dir: &Path, c: &ClusterFile, flags: &DaemonFlags, listeners: Listeners) -> Result<usize, String>;

    /// Waits until everything `start` started answers.
    fn wait_ready(&self, c: &ClusterFile, dir: &Path, timeout: Duration) -> Result<(), String>;

    /// Stops what was started in `dir`; how many it stopped.
    fn stop(&self, dir: &Path) -> Result<usize, String>;

    /// Prints a line per daemon of `c`; how many are down.
    fn status(&self, c: &ClusterFile) -> Result<usize, String>;
}

/// Canopy's own daemons: a metadata server per server index and the lock
/// service, each a process of this binary.
pub struct CanopyDaemons;

impl Lifecycle for CanopyDaemons {
    fn start(&self, dir: &Path, c: &ClusterFile, flags: &DaemonFlags, listeners: Listeners) -> Result<usize, String> {
        local::start(dir, c, flags, listeners)
    }

    fn wait_ready(&self, c: &ClusterFile, dir: &Path, timeout: Duration) -> Result<(), String> {
        local::wait_ready(c, dir, timeout)
    }

    fn stop(&self, dir: &Path) -> Result<usize, String> {
        local::stop(dir)
    }

    fn status(&self, c: &ClusterFile) -> Result<usize, String> {
        local::daemons_status(c)
    }
}

/// The lifecycle of `mode`: the registry's entry for what each mode runs.
pub fn of(mode: &ModeOptions) -> &'static dyn Lifecycle {
    match mode {
        ModeOptions::Shardfs | ModeOptions::Indexfs(_) | ModeOptions::Giraffa(_) => &CanopyDaemons,
    }
}
