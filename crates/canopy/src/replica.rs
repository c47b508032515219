//! `canopy replica add|remove|replace`: changes a replica group's members
//! while the group serves. The group's leader makes the change
//! (`Request::GroupChange`); this command finds it, starts or stops the
//! member's daemon when it runs beside the cluster file, and keeps the
//! cluster file's list of the group's members in step.

use crate::canopy_daemons::{self, daemon_args, daemon_name, group_members, listen_new, spawn_daemon, Begin, Kind};
use crate::connect;
use crate::lifecycle::DaemonFlags;
use crate::process;
use canopy_client::cluster::{ClusterFile, GroupMember};
use canopy_proto::msg::{GroupChange, GroupInfo};
use canopy_proto::{Errno, Reply, Request};
use canopy_rpc::ClientAuth;
use clap::{Args, Subcommand};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

#[derive(Subcommand)]
pub enum ReplicaCmd {
    /// Add a member to a group. It starts empty and catches up (from a
    /// snapshot if the group's log was purged) to within 5,000 entries of
    /// the leader before it votes.
    Add {
        #[command(flatten)]
        group: GroupArg,
        #[command(flatten)]
        new: NewMember,
    },
    /// Remove a member from a group: it stops voting and receiving the log,
    /// and its daemon here is stopped (its data directory stays).
    Remove {
        #[command(flatten)]
        group: GroupArg,
        /// The member's id (`canopy status` lists them).
        #[arg(long)]
        member: u64,
    },
    /// Replace a member with a new, empty one: add, then remove. For a
    /// member whose disk was lost or wiped; the group serves throughout.
    Replace {
        #[command(flatten)]
        group: GroupArg,
        /// The id of the member replaced.
        #[arg(long)]
        member: u64,
        #[command(flatten)]
        new: NewMember,
    },
}

#[derive(Args)]
pub struct GroupArg {
    /// The group: `server-N` (server index N) or `lockd`.
    #[arg(long)]
    group: String,
}

#[derive(Args)]
pub struct NewMember {
    /// Where the new member listens when it runs on another host: this
    /// command lists it in the cluster file, then waits while you start it
    /// there with that file. Without it the member is started here.
    #[arg(long)]
    addr: Option<String>,
    /// Durability of a server started here: wal, fsync or group:MS.
    #[arg(long, default_value = "wal")]
    durability: String,
}

/// How long a member added may take to catch up.
const CATCH_UP: Duration = Duration::from_secs(600);
/// How long the group may take to have a leader.
const FIND_LEADER: Duration = Duration::from_secs(30);

pub fn run(cmd: ReplicaCmd, cluster: Option<&Path>) -> Result<ExitCode, String> {
    let mut c = connect::load(cluster)?;
    if c.groups.is_none() {
        return Err("this cluster's daemons are groups of one, named without member numbers; \
                    make a cluster with `canopy up --replicas 3` to change its groups' members"
            .into());
    }
    let (ReplicaCmd::Add { group, .. } | ReplicaCmd::Remove { group, .. } | ReplicaCmd::Replace { group, .. }) = &cmd;
    let (name, kind) = (group.group.clone(), kind_of(&group.group, &c)?);
    let me = connect::key(&c)?.client_auth();
    let rt = connect::runtime()?;
    match cmd {
        ReplicaCmd::Add { new, .. } => {
            let added = rt.block_on(add(&mut c, kind, &new, &me))?;
            println!("canopy: member {added} of {name} added");
        }
        ReplicaCmd::Remove { member, .. } => {
            rt.block_on(remove(&mut c, kind, member, &me))?;
            println!("canopy: member {member} of {name} removed");
        }
        ReplicaCmd::Replace { member, new, .. } => {
            if !group_members(&c, kind).iter().any(|m| m.id == member) {
                return Err(format!("{name} has no member {member}"));
            }
            let added = rt.block_on(add(&mut c, kind, &new, &me))?;
            rt.block_on(remove(&mut c, kind, member, &me))?;
            println!("canopy: member {member} of {name} replaced by member {added}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The group `name` names in `c`.
fn kind_of(name: &str, c: &ClusterFile) -> Result<Kind, String> {
    let kind = match name.strip_prefix("server-") {
        _ if name == "lockd" => Kind::Lockd,
        Some(i) => Kind::Server(i.parse().map_err(|_| format!("{name:?} is not a group: name server-N or lockd"))?),
        None => return Err(format!("{name:?} is not a group: name server-N or lockd")),
    };
    match kind {
        Kind::Server(i) if i >= c.servers.len() => Err(format!("the cluster has servers 0 to {}, not {i}", c.servers.len() - 1)),
        k => Ok(k),
    }
}

/// Writes `list` as `kind`'s members in `c`, and saves it.
fn set_members(c: &mut ClusterFile, kind: Kind, list: Vec<GroupMember>) -> Result<(), String> {
    let first = list.first().map(|m| m.addr.clone()).ok_or("a group keeps one member at least")?;
    let groups = c.groups.as_mut().ok_or("no groups")?;
    match kind {
        Kind::Server(i) => {
            groups.servers[i] = list;
            c.servers[i] = first;
        }
        Kind::Lockd => {
            groups.lockd = list;
            c.lockd = first;
        }
    }
    c.save(&c.path.clone())
}

fn cluster_dir(c: &ClusterFile) -> PathBuf {
    c.path.parent().map(Path::to_path_buf).unwrap_or_default()
}

/// Adds a new member to `kind`'s group: listed in the cluster file, started
/// here unless `new.addr` says where it runs, then made a voter by the
/// leader. Its id.
async fn add(c: &mut ClusterFile, kind: Kind, new: &NewMember, me: &ClientAuth) -> Result<u64, String> {
    let before = group_members(c, kind);
    let id = before.iter().map(|m| m.id).max().unwrap_or(0) + 1;
    let dir = cluster_dir(c);
    let name = daemon_name(c, kind, id);
    let (addr, listener) = match &new.addr {
        Some(a) => (a.clone(), None),
        None => {
            let (addr, fd) = listen_beside(&before[0].addr, &name)?;
            (addr, Some(fd))
        }
    };
    let member = GroupMember { id, addr: addr.clone() };
    set_members(c, kind, before.iter().cloned().chain([member.clone()]).collect())?;
    match listener {
        Some(fd) => {
            new.durability.parse::<canopy_store::Durability>()?;
            let flags = DaemonFlags { durability: &new.durability, idle_secs: None };
            spawn_daemon(&dir, &name, &daemon_args(&dir, c, kind, &member, &flags, Begin::Join), fd)?;
        }
        None => eprintln!(
            "canopy: start member {id} at {addr} with this cluster file ({}) and `--member {id} --join`; waiting for it to catch up",
            c.path.display()
        ),
    }
    let change = GroupChange::Add { id, addr };
    if let Err(e) = change_at_leader(&before, change, me).await {
        // Not a member: the cluster file does not list it, nor does it run.
        set_members(c, kind, before)?;
        stop_here(&dir, &name);
        return Err(e);
    }
    Ok(id)
}

/// Removes member `id` from `kind`'s group, then from the cluster file, and
/// stops its daemon here if it runs here.
async fn remove(c: &mut ClusterFile, kind: Kind, id: u64, me: &ClientAuth) -> Result<(), String> {
    let before = group_members(c, kind);
    if !before.iter().any(|m| m.id == id) {
        return Err(format!("the group has no member {id}"));
    }
    if before.len() == 1 {
        return Err("a group keeps one member at least".into());
    }
    change_at_leader(&before, GroupChange::Remove { id }, me).await?;
    let name = daemon_name(c, kind, id);
    let after: Vec<GroupMember> = before.iter().filter(|m| m.id != id).cloned().collect();
    set_members(c, kind, after.clone())?;
    let dir = cluster_dir(c);
    stop_here(&dir, &name);
    if let Some(path) = before.iter().find(|m| m.id == id).and_then(|m| canopy_rpc::socket::unix_path(&m.addr)) {
        let _ = std::fs::remove_file(path);
    }
    // A leader that removed itself hands over: done once the rest leads.
    let deadline = Instant::now() + FIND_LEADER;
    while find_leader(&after, me).await.is_none() {
        if Instant::now() > deadline {
            return Err("member removed, but no other member has begun to lead; see `canopy status`".into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if dir.join(&name).exists() {
        eprintln!("canopy: its data stays in {}", dir.join(&name).display());
    }
    Ok(())
}

/// Listens for a new daemon `name` as the group's first member at `first`
/// does: on a Unix socket in the same directory, or on a free port of the
/// same host.
fn listen_beside(first: &str, name: &str) -> Result<(String, std::os::fd::OwnedFd), String> {
    if let Some(path) = canopy_rpc::socket::unix_path(first) {
        return listen_new(Some(path.parent().ok_or("a socket path without a directory")?), "", name);
    }
    let host = first.rsplit_once(':').map(|(h, _)| h).ok_or_else(|| format!("{first} is not host:port"))?;
    listen_new(None, host.trim_matches(['[', ']']), name)
}

/// Stops daemon `name` if its pid file in `dir` names a live process.
fn stop_here(dir: &Path, name: &str) {
    let pid_file = dir.join(format!("{name}.pid"));
    if let Some(pid) = canopy_daemons::read_pid(&pid_file).filter(|p| process::alive(*p)) {
        // SAFETY: plain signal delivery to a daemon this cluster started.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        if !process::wait_gone(pid, Duration::from_secs(10)) {
            // SAFETY: as above.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
    let _ = std::fs::remove_file(pid_file);
}

/// Sends `change` to the leader of the group of `members`, following
/// redirects and waiting out elections and changes under way.
async fn change_at_leader(members: &[GroupMember], change: GroupChange, me: &ClientAuth) -> Result<GroupInfo, String> {
    let deadline = Instant::now() + FIND_LEADER;
    loop {
        let Some(leader) = find_leader(members, me).await else {
            if Instant::now() > deadline {
                return Err("no member of the group leads it; see `canopy status`".into());
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        match canopy_daemons::call_within(&leader.addr, me, Request::GroupChange { change: change.clone() }, CATCH_UP).await {
            Ok(Reply::Group(g)) => return Ok(g),
            // Leadership moved, or another change is under way: again.
            Ok(Reply::NotLeader { .. }) | Err(Errno::EBUSY | Errno::ECONNREFUSED | Errno::ENOTCONN) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Ok(Reply::NotLeader { .. }) => return Err("the group's leadership kept moving; try again".into()),
            Err(Errno::EINVAL) => return Err("the group refused the change (it would leave no voter)".into()),
            Err(Errno::ETIMEDOUT) => {
                return Err(format!("the member was not caught up within {CATCH_UP:?}; see `canopy status`"));
            }
            Err(e) => return Err(format!("the group's leader at {} refused the change: {e}", leader.addr)),
            Ok(other) => return Err(format!("unexpected answer {other:?}")),
        }
    }
}

/// The member of `members` that says it leads.
async fn find_leader(members: &[GroupMember], me: &ClientAuth) -> Option<GroupMember> {
    for m in members {
        if let Ok(Reply::Group(g)) = canopy_daemons::call_within(&m.addr, me, Request::GroupStatus, Duration::from_secs(2)).await {
            if g.leader == Some(m.id) {
                return Some(m.clone());
            }
        }
    }
    None
}
