//! Canopy's own daemons on this host, as `canopy up` runs them for a mode
//! whose namespace its servers hold: a process of this binary per server
//! index and one for the lock service, each in its own session on a socket
//! it inherits, with a pid file and a log in the cluster's directory.

use crate::connect;
use crate::lifecycle::{DaemonFlags, Lifecycle, Listeners};
use crate::process::{self, alive, Liveness};
use canopy_client::cluster::{ClusterFile, GroupMember, Groups, ModeOptions};
use canopy_proto::msg::{GroupInfo, ServerStats};
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
    fn new_cluster(&self, mode: ModeOptions, servers: u32, replicas: u32, path: &Path, listen: &mut dyn FnMut(String) -> Result<String, String>) -> Result<ClusterFile, String> {
        if servers == 0 || servers > 1024 {
            return Err(format!("--servers must be 1 to 1024, not {servers}"));
        }
        if replicas == 0 || replicas > 7 {
            return Err(format!("--replicas must be 1 to 7, not {replicas}"));
        }
        let mut group = |kind: Kind| -> Result<Vec<GroupMember>, String> {
            (1..=u64::from(replicas)).map(|id| Ok(GroupMember { id, addr: listen(name_of(kind, id, replicas > 1))? })).collect()
        };
        let server_groups = (0..servers).map(|i| group(Kind::Server(i as usize))).collect::<Result<Vec<_>, _>>()?;
        let lockd_group = group(Kind::Lockd)?;
        let first = |g: &[GroupMember]| g[0].addr.clone();
        Ok(ClusterFile {
            mode,
            servers: server_groups.iter().map(|g| first(g)).collect(),
            lockd: first(&lockd_group),
            groups: (replicas > 1).then_some(Groups { servers: server_groups, lockd: lockd_group }),
            path: path.to_path_buf(),
        })
    }

    /// Starts every daemon of the cluster in `dir` that is not running, on the
    /// sockets in `listeners` or, for a known cluster, on its addresses.
    fn start(&self, dir: &Path, c: &ClusterFile, flags: &DaemonFlags, mut listeners: Listeners) -> Result<usize, String> {
        let mut daemons: Vec<(String, String, Vec<String>)> = Vec::new();
        for (kind, m) in members(c) {
            let name = daemon_name(c, kind, m.id);
            // A daemon of a new cluster: its group is founded now.
            let begin = if listeners.contains_key(&name) { Begin::Found } else { Begin::Resume };
            daemons.push((name, m.addr.clone(), daemon_args(dir, c, kind, &m, flags, begin)));
        }
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
                None => listen(&addr)?,
            };
            spawn_daemon(dir, &name, &args, listener)?;
            started += 1;
        }
        Ok(started)
    }

    /// Waits until every group has a member that leads and answers a ping.
    fn wait_ready(&self, c: &ClusterFile, dir: &Path, timeout: Duration) -> Result<(), String> {
        let rt = connect::runtime()?;
        let me = own_key(c)?.client_auth();
        let deadline = Instant::now() + timeout;
        for (_, group) in groups(c) {
            loop {
                let led = rt.block_on(async {
                    for m in &group {
                        if matches!(ping(&m.addr, &me).await, Ok(Reply::Pong { .. })) {
                            return true;
                        }
                    }
                    false
                });
                if led {
                    break;
                }
                if Instant::now() > deadline {
                    let addrs: Vec<&str> = group.iter().map(|m| m.addr.as_str()).collect();
                    return Err(format!("no member of the group at {} came up to lead it; see the logs in {}", addrs.join(", "), dir.display()));
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

    /// Prints a line per server and the lock service of `c`, up or down,
    /// with a line per member of a group of more: its role, term, and how
    /// far it is behind its leader. How many groups have no leader.
    fn status(&self, c: &ClusterFile) -> Result<usize, String> {
        let me = auth(c)?;
        let rt = connect::runtime()?;
        let mut down = 0;
        rt.block_on(async {
            for (kind, members) in groups(c) {
                let label = match kind {
                    Kind::Server(i) => format!("server {i:<3}"),
                    Kind::Lockd => "lockd     ".to_string(),
                };
                let mut views = Vec::new();
                for m in &members {
                    let view = match call(&m.addr, &me, Request::GroupStatus).await {
                        Ok(Reply::Group(g)) => Some(g),
                        _ => None,
                    };
                    views.push((m, view));
                }
                let leader = views.iter().find(|(m, v)| v.as_ref().is_some_and(|v| v.leader == Some(m.id)));
                let Some((lm, lv)) = leader else {
                    down += 1;
                    println!("{label} {:<21} DOWN", members[0].addr);
                    print_members(&views, None);
                    continue;
                };
                let figures = match kind {
                    Kind::Server(_) => match call(&lm.addr, &me, Request::Stats).await {
                        Ok(Reply::Stats(s)) => format!("    {}", server_figures(&s)),
                        _ => String::new(),
                    },
                    Kind::Lockd => String::new(),
                };
                println!("{label} {:<21} up{figures}", lm.addr);
                if c.groups.is_some() {
                    print_members(&views, lv.as_ref());
                }
            }
        });
        Ok(down)
    }
}

/// A line per member: leader or follower (and its term), or down; how many
/// entries a follower is behind, as its leader knows it.
fn print_members(views: &[(&GroupMember, Option<GroupInfo>)], leader: Option<&GroupInfo>) {
    for (m, v) in views {
        let Some(v) = v else {
            println!("  member {:<2} {:<21} DOWN", m.id, m.addr);
            continue;
        };
        let role = if v.leader == Some(m.id) { "leader  " } else { "follower" };
        let behind = leader.and_then(|l| l.matched.iter().find(|(id, _)| *id == m.id).map(|(_, at)| l.last_log.saturating_sub(at.unwrap_or(0))));
        let behind = behind.map_or(String::new(), |b| format!("  behind {b}"));
        println!("  member {:<2} {:<21} {role} term {:<4} applied {}{behind}", m.id, m.addr, v.term, v.applied);
    }
}

async fn call(addr: &str, me: &ClientAuth, req: Request) -> Result<Reply, canopy_proto::Errno> {
    call_within(addr, me, req, Duration::from_secs(5)).await
}

/// `req` to the daemon at `addr`, answered within `timeout`.
pub(crate) async fn call_within(addr: &str, me: &ClientAuth, req: Request, timeout: Duration) -> Result<Reply, canopy_proto::Errno> {
    let conn = Connection::connect(addr, me, Duration::from_secs(2)).await?;
    conn.call(&Creds::root(), &req, timeout).await
}

/// The two kinds of daemon; a server by index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Server(usize),
    Lockd,
}

/// A daemon's name in the cluster directory (its pid file, log, data and
/// socket): `server-G` and `lockd` in a cluster of groups of one,
/// `server-G-M` and `lockd-M` for member M where groups are listed.
pub(crate) fn daemon_name(c: &ClusterFile, kind: Kind, member: u64) -> String {
    name_of(kind, member, c.groups.is_some())
}

fn name_of(kind: Kind, member: u64, grouped: bool) -> String {
    let base = match kind {
        Kind::Server(i) => format!("server-{i}"),
        Kind::Lockd => "lockd".to_string(),
    };
    if grouped {
        format!("{base}-{member}")
    } else {
        base
    }
}

/// The members of `kind`'s group in `c`.
pub(crate) fn group_members(c: &ClusterFile, kind: Kind) -> Vec<GroupMember> {
    match kind {
        Kind::Server(i) => c.server_members(i),
        Kind::Lockd => c.lockd_members(),
    }
}

/// Every group of `c`, the servers' in order, then the lock service's.
fn groups(c: &ClusterFile) -> impl Iterator<Item = (Kind, Vec<GroupMember>)> + '_ {
    (0..c.servers.len()).map(Kind::Server).chain([Kind::Lockd]).map(|kind| (kind, group_members(c, kind)))
}

/// Every member of every group of `c`.
pub(crate) fn members(c: &ClusterFile) -> Vec<(Kind, GroupMember)> {
    groups(c).flat_map(|(kind, group)| group.into_iter().map(move |m| (kind, m))).collect()
}

/// Listens for a new daemon `name`: on a Unix socket `name.sock` in
/// `sockets`, or, without it, on a free port of `host`. Its address and
/// socket.
pub(crate) fn listen_new(sockets: Option<&Path>, host: &str, name: &str) -> Result<(String, OwnedFd), String> {
    if let Some(d) = sockets {
        let addr = format!("{}{}", canopy_rpc::socket::UNIX_PREFIX, d.join(format!("{name}.sock")).display());
        return Ok((addr.clone(), listen(&addr)?));
    }
    let l = std::net::TcpListener::bind((host, 0)).map_err(|e| format!("cannot listen on {host}: {e}"))?;
    let addr = l.local_addr().map_err(|e| e.to_string())?.to_string();
    Ok((addr, l.into()))
}

/// How a member's daemon begins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Begin {
    /// As one of a new group's members.
    Found,
    /// As a new, empty member of a group that runs.
    Join,
    /// From its data directory, as it ran before.
    Resume,
}

/// How this binary runs member `m` of `kind`'s group of cluster `c` in
/// `dir`, beginning as `begin` says.
pub(crate) fn daemon_args(dir: &Path, c: &ClusterFile, kind: Kind, m: &GroupMember, flags: &DaemonFlags, begin: Begin) -> Vec<String> {
    let file = dir.join("cluster.json").display().to_string();
    let data = dir.join(daemon_name(c, kind, m.id)).display().to_string();
    let mut args: Vec<String> = match kind {
        Kind::Server(i) => ["server", "--cluster", &file, "--index", &i.to_string(), "--data", &data, "--durability", flags.durability].map(String::from).to_vec(),
        Kind::Lockd => ["lockd", "--cluster", &file, "--data", &data].map(String::from).to_vec(),
    };
    args.extend(["--member".to_string(), m.id.to_string()]);
    match begin {
        Begin::Found => args.push("--found".into()),
        Begin::Join => args.push("--join".into()),
        Begin::Resume => {}
    }
    [args, common(flags)].concat()
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
pub(crate) fn spawn_daemon(dir: &Path, name: &str, args: &[String], listener: OwnedFd) -> Result<(), String> {
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
