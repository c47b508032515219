//! Canopy's own daemons on this host, as `canopy up` runs them for a mode
//! whose namespace its servers hold: a process of this binary per server
//! index and one for the lock service, each in its own session on a socket
//! it inherits, with a pid file and a log in the cluster's directory.

use crate::connect;
use crate::lifecycle::{DaemonFlags, Lifecycle, Listeners};
use crate::process::{self, alive, Liveness};
use canopy_client::cluster::{ClusterFile, ModeOptions};
use canopy_proto::msg::ServerStats;
use canopy_proto::{Creds, Reply, Request};
use canopy_rpc::conn::Connection;
use canopy_rpc::ClientAuth;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Canopy's own daemons: a metadata server per server index and the lock
/// service, each a process of this binary.
pub struct CanopyDaemons;

impl Lifecycle for CanopyDaemons {
    fn new_cluster(&self, mode: ModeOptions, servers: u32, path: &Path, listen: &mut dyn FnMut(String) -> Result<String, String>) -> Result<ClusterFile, String> {
        if servers == 0 || servers > 1024 {
            return Err(format!("--servers must be 1 to 1024, not {servers}"));
        }
        let addrs = (0..servers).map(|i| listen(format!("server-{i}"))).collect::<Result<Vec<_>, _>>()?;
        let lockd = listen("lockd".into())?;
        Ok(ClusterFile { mode, servers: addrs, lockd, path: path.to_path_buf() })
    }

    /// Starts every daemon of the cluster in `dir` that is not running, on the
    /// sockets in `listeners` or, for a known cluster, on its addresses.
    fn start(&self, dir: &Path, c: &ClusterFile, flags: &DaemonFlags, mut listeners: Listeners) -> Result<usize, String> {
        let file = dir.join("cluster.json").display().to_string();
        let mut daemons: Vec<(String, &String, Vec<String>)> = Vec::new();
        for (i, addr) in c.servers.iter().enumerate() {
            let data = dir.join(format!("server-{i}")).display().to_string();
            let args = ["server", "--cluster", &file, "--index", &i.to_string(), "--data", &data, "--durability", flags.durability];
            daemons.push((format!("server-{i}"), addr, [args.map(String::from).to_vec(), common(flags)].concat()));
        }
        let data = dir.join("lockd").display().to_string();
        let args = ["lockd", "--cluster", &file, "--data", &data].map(String::from).to_vec();
        daemons.push(("lockd".into(), &c.lockd, [args, common(flags)].concat()));
        let mut started = 0;
        for (name, addr, args) in daemons {
            if let Some(pid) = read_pid(&dir.join(format!("{name}.pid"))) {
                match process::liveness(pid) {
                    Liveness::Running => continue,
                    // Killed but still holding its socket and database: let it go first.
                    Liveness::Exiting if !process::wait_gone(pid, Duration::from_secs(10)) => {
                        return Err(format!("{name} (pid {pid}) was killed but has not exited yet; try again"));
                    }
                    Liveness::Exiting | Liveness::Gone => {}
                }
            }
            let listener = match listeners.remove(&name) {
                Some(l) => l,
                None => listen(addr)?,
            };
            spawn_daemon(dir, &name, &args, listener)?;
            started += 1;
        }
        Ok(started)
    }

    /// Waits until every daemon answers a ping.
    fn wait_ready(&self, c: &ClusterFile, dir: &Path, timeout: Duration) -> Result<(), String> {
        let rt = connect::runtime()?;
        let me = own_key(c)?.client_auth();
        let deadline = Instant::now() + timeout;
        let addrs: Vec<&String> = c.servers.iter().chain(std::iter::once(&c.lockd)).collect();
        for addr in addrs {
            while rt.block_on(ping(addr, &me)).is_err() {
                if Instant::now() > deadline {
                    return Err(format!("{addr} did not come up; see the logs in {}", dir.display()));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Ok(())
    }

    /// Stops the daemons whose pid files are in `dir`: SIGTERM, then SIGKILL after 10 s.
    fn stop(&self, dir: &Path) -> Result<usize, String> {
        let mut pids = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))? {
            let path = entry.map_err(|e| e.to_string())?.path();
            if path.extension().is_some_and(|e| e == "pid") {
                if let Some(pid) = read_pid(&path).filter(|p| alive(*p)) {
                    // SAFETY: plain signal delivery to a daemon we started.
                    unsafe { libc::kill(pid, libc::SIGTERM) };
                    pids.push(pid);
                }
                let _ = std::fs::remove_file(&path);
            }
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        for pid in &pids {
            while alive(*pid) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            if alive(*pid) {
                // SAFETY: as above.
                unsafe { libc::kill(*pid, libc::SIGKILL) };
            }
        }
        Ok(pids.len())
    }

    /// Prints a line per server and the lock service of `c`, up or down; how
    /// many are down.
    fn status(&self, c: &ClusterFile) -> Result<usize, String> {
        let me = auth(c)?;
        let rt = connect::runtime()?;
        let mut down = 0;
        rt.block_on(async {
            for (i, addr) in c.servers.iter().enumerate() {
                let stats = match Connection::connect(addr, &me, Duration::from_secs(2)).await {
                    Ok(conn) => conn.call(&Creds::root(), &Request::Stats, Duration::from_secs(5)).await,
                    Err(e) => Err(e),
                };
                match stats {
                    Ok(Reply::Stats(s)) => println!("server {i:<3} {addr:<21} up    {}", server_figures(&s)),
                    Ok(_) | Err(_) => {
                        down += 1;
                        println!("server {i:<3} {addr:<21} DOWN");
                    }
                }
            }
            match ping(&c.lockd, &me).await {
                Ok(_) => println!("lockd      {:<21} up", c.lockd),
                Err(_) => {
                    down += 1;
                    println!("lockd      {:<21} DOWN", c.lockd);
                }
            }
        });
        Ok(down)
    }
}

/// The flags both kinds of daemon take.
fn common(flags: &DaemonFlags) -> Vec<String> {
    flags.idle_secs.map(|s| vec!["--idle-secs".to_string(), s.to_string()]).unwrap_or_default()
}

pub(crate) fn read_pid(file: &Path) -> Option<i32> {
    std::fs::read_to_string(file).ok()?.trim().parse().ok()
}

pub(crate) fn listen(addr: &str) -> Result<OwnedFd, String> {
    canopy_rpc::socket::bind_std(addr).map_err(|e| format!("cannot listen on {addr}: {e}"))
}

/// Starts one daemon in its own session, serving `listener`, logging to
/// `name.log`, unless its pid file names a live process.
fn spawn_daemon(dir: &Path, name: &str, args: &[String], listener: OwnedFd) -> Result<(), String> {
    let pid_file = dir.join(format!("{name}.pid"));
    let log = canopy_rpc::private_dir::create_file(&dir.join(format!("{name}.log"))).map_err(|e| e.to_string())?;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let fd = listener.as_raw_fd();
    let mut cmd = Command::new(exe);
    cmd.args(args).arg("--listen-fd").arg(fd.to_string());
    cmd.stdin(Stdio::null()).stdout(log.try_clone().map_err(|e| e.to_string())?).stderr(log);
    // SAFETY: setsid and fcntl are async-signal-safe. setsid detaches the daemon
    // from our terminal; clearing close-on-exec lets it inherit its socket.
    unsafe {
        cmd.pre_exec(move || {
            libc::setsid();
            if libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd.spawn().map_err(|e| format!("cannot start {name}: {e}"))?;
    std::fs::write(&pid_file, child.id().to_string()).map_err(|e| e.to_string())?;
    Ok(())
}


async fn ping(addr: &str, me: &ClientAuth) -> Result<Reply, canopy_proto::Errno> {
    let conn = Connection::connect(addr, me, Duration::from_secs(2)).await?;
    conn.call(&Creds::root(), &Request::Ping, Duration::from_secs(5)).await
}

/// How this process proves itself to the cluster `c`.
fn auth(c: &ClusterFile) -> Result<ClientAuth, String> {
    Ok(connect::key(c)?.client_auth())
}

/// The cluster key beside the cluster file of a cluster this process started
/// (never one named by `$CANOPY_KEY` for some other cluster).
pub(crate) fn own_key(c: &ClusterFile) -> Result<canopy_client::keyfile::Loaded, String> {
    canopy_client::keyfile::load(&canopy_client::keyfile::cluster_key_path(&c.path))
}




/// What `status` says of a server that answered: its entries, the RPCs it
/// served, and its mode's own counters (the entry cache's hits and misses,
/// IndexFS's lease waits) as `name value` pairs.
fn server_figures(s: &ServerStats) -> String {
    let rpcs: u64 = s.rpcs.iter().map(|(_, n)| n).sum();
    let mut line = format!("dirs {:<8} files {:<10} rpcs {rpcs}", s.dirs, s.files);
    for (name, n) in &s.counters {
        line.push_str(&format!("  {name} {n}"));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_shows_a_servers_entries_rpcs_and_mode_counters() {
        let s = ServerStats { server: 1, rpcs: vec![("stat".into(), 5), ("create".into(), 2)], dirs: 3, files: 40, counters: vec![("entry_cache_hits".into(), 9), ("entry_cache_misses".into(), 1)] };
        let line = server_figures(&s);
        assert!(line.starts_with("dirs 3 "), "{line}");
        assert!(line.contains("files 40 ") && line.contains("rpcs 7"), "{line}");
        assert!(line.ends_with("  entry_cache_hits 9  entry_cache_misses 1"), "{line}");
        assert!(server_figures(&ServerStats { counters: vec![], ..s }).ends_with("rpcs 7"));
    }
}
