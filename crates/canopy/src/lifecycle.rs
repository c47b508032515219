//! What a mode needs running on the hosts of a local cluster, and how the CLI
//! handles it: `canopy up` starts it and waits until it answers, `down` stops
//! it, `status` says what is up, and `bench` and `eval` do all three on a
//! temporary cluster. They ask the mode's [`Lifecycle`] (`crate::modes::lifecycle`)
//! and never name a mode; `fsck` goes through the mode's namespace client, which every
//! mode has. Each mode's lifecycle is its registry entry's
//! (`src/modes/<mode>.rs`, listed by `canopy_proto::for_each_mode!`).

use canopy_client::cluster::{ClusterFile, ModeOptions};
use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::time::Duration;

/// How a mode's daemons are run on this host.
pub trait Lifecycle: Sync {
    /// The cluster file of a new cluster of `mode` at `path`: where each of
    /// its daemons will listen, each address bound by `listen` (by the
    /// daemon's name; the socket is kept for `start`). `servers`: how many
    /// metadata servers were asked for; `replicas`: how many copies of each
    /// (members per replica group).
    fn new_cluster(&self, mode: ModeOptions, servers: u32, replicas: u32, path: &Path, listen: &mut dyn FnMut(String) -> Result<String, String>) -> Result<ClusterFile, String>;

    /// Starts, in `dir`, what cluster `c` needs and is not running yet
    /// (`listeners`: sockets already bound for it); how many it started.
    fn start(&self, dir: &Path, c: &ClusterFile, flags: &DaemonFlags, listeners: Listeners) -> Result<usize, String>;

    /// Waits until everything `start` started answers.
    fn wait_ready(&self, c: &ClusterFile, dir: &Path, timeout: Duration) -> Result<(), String>;

    /// Stops what was started in `dir`; how many it stopped.
    fn stop(&self, dir: &Path) -> Result<usize, String>;

    /// Prints a line per daemon of `c`; how many are down.
    fn status(&self, c: &ClusterFile) -> Result<usize, String>;

    /// The Debian packages what `start` runs needs (a store of the mode's
    /// own), which [`install_packages`] installs where missing.
    fn packages(&self) -> &'static [&'static str] {
        &[]
    }
}

/// What the daemons `start` spawns are told beside their cluster.
pub struct DaemonFlags<'a> {
    pub durability: &'a str,
    pub idle_secs: Option<u64>,
}

/// Listening sockets `up` opened for the daemons it is about to start, by name.
/// A daemon inherits its socket, so no port is ever released between being chosen
/// and being served (two `up`s at once cannot pick the same one).
pub type Listeners = HashMap<String, OwnedFd>;

/// Installs the Debian packages `l`, the lifecycle of `mode`, needs and this
/// host lacks: what `canopy up`, `bench` and `eval` do before they start it.
pub fn install_packages(l: &dyn Lifecycle, mode: &str) -> Result<(), String> {
    let missing = missing(l.packages(), installed);
    if missing.is_empty() {
        return Ok(());
    }
    install(mode, &missing)
}

/// Those of `packages` that `installed` says are not.
fn missing(packages: &[&'static str], installed: impl Fn(&str) -> bool) -> Vec<&'static str> {
    packages.iter().copied().filter(|p| !installed(p)).collect()
}

/// Whether Debian package `p` is installed.
fn installed(p: &str) -> bool {
    std::process::Command::new("dpkg").args(["-s", p]).stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null()).status().is_ok_and(|s| s.success())
}

/// Installs `packages` with apt-get (through sudo unless root).
fn install(mode: &str, packages: &[&str]) -> Result<(), String> {
    eprintln!("canopy: {mode} needs {}; installing", packages.join(", "));
    // SAFETY: getuid only reads the process's credentials.
    let root = unsafe { libc::getuid() } == 0;
    let mut apt = if root { std::process::Command::new("apt-get") } else { std::process::Command::new("sudo") };
    if !root {
        apt.arg("apt-get");
    }
    let status = apt.args(["install", "-y", "-qq"]).args(packages).env("DEBIAN_FRONTEND", "noninteractive").status();
    match status {
        Ok(s) if s.success() => Ok(()),
        Ok(s) => Err(format!("installing {} for {mode} failed ({s}); install them and try again", packages.join(", "))),
        Err(e) => Err(format!("cannot run apt-get to install {} for {mode}: {e}", packages.join(", "))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_is_missing_is_installed() {
        let have = |p: &str| p == "zookeeperd";
        assert_eq!(missing(&["zookeeperd", "librocksdb-dev", "zip"], have), ["librocksdb-dev", "zip"]);
        assert!(missing(&["zookeeperd"], have).is_empty());
    }
}
