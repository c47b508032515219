//! Building a client from a cluster file and a key, as the caller's user.
//!
//! With the cluster key, a command talks to the servers directly and may act as
//! any user (`--uid`/`--gid`). With a user key, it acts as that key's identity
//! only, and its operations are delegated to the servers
//! (`canopy_client::delegate`).

use canopy_client::cluster::{self, ClusterFile};
use canopy_client::keyfile::{self, Loaded};
use canopy_client::{open_namespace, Backend, Client, Namespace, NsOptions};
use canopy_proto::auth::Identity;
use canopy_proto::Creds;
use canopy_rpc::groups::Member;
use canopy_rpc::TcpTransport;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

pub const RPC_TIMEOUT: Duration = Duration::from_secs(30);

/// Identity overrides from the command line.
pub struct Who {
    pub uid: Option<u32>,
    pub gid: Option<u32>,
}

/// The process's own credentials.
fn own_creds() -> Creds {
    // SAFETY: these libc calls only read the process's credentials.
    let (uid, gid, groups) = unsafe {
        let n = libc::getgroups(0, std::ptr::null_mut());
        let mut groups = vec![0 as libc::gid_t; n.max(0) as usize];
        let got = libc::getgroups(n, groups.as_mut_ptr());
        groups.truncate(got.max(0) as usize);
        (libc::getuid(), libc::getgid(), groups)
    };
    Creds { uid, gid, groups }
}

/// Whom a command acts as: with a user key, that key's identity (overrides are
/// refused); with the cluster key, the process's credentials or the overrides.
pub fn creds(who: &Who, key: &Loaded) -> Result<Creds, String> {
    match (&key.identity, who.uid, who.gid) {
        (Identity::User(c), None, None) => Ok(c.clone()),
        (Identity::User(_), _, _) => Err(format!("--uid/--gid need the cluster key ({} is a user key)", key.path.display())),
        (Identity::Cluster, None, None) => Ok(own_creds()),
        (Identity::Cluster, u, g) => {
            let own = own_creds();
            Ok(Creds { uid: u.unwrap_or(own.uid), gid: g.unwrap_or(own.gid), groups: Vec::new() })
        }
    }
}

pub fn load(explicit: Option<&Path>) -> Result<ClusterFile, String> {
    let path = cluster::find(explicit);
    ClusterFile::load(&path).map_err(|e| {
        if explicit.is_none() && !path.exists() {
            format!("no cluster: {} does not exist (start one with `canopy up`, or pass --cluster)", path.display())
        } else {
            e
        }
    })
}

/// The key this process uses for cluster `c` (`--key`, `$CANOPY_KEY`, or the
/// places `keyfile::find` lists).
pub fn key(c: &ClusterFile) -> Result<Loaded, String> {
    keyfile::find(&c.path, None, own_creds().uid)
}

/// The cluster key, for what only it may do (daemons, mounts, fsck, bench).
pub fn cluster_key(c: &ClusterFile, what: &str) -> Result<Loaded, String> {
    let k = key(c)?;
    if !k.is_cluster() {
        return Err(format!("{what} needs the cluster key ({} is a user key)", k.path.display()));
    }
    Ok(k)
}

/// A client for `c` acting as `creds`, proving `key`; call inside a Tokio runtime.
pub fn client(c: &ClusterFile, key: &Loaded, creds: Creds) -> Result<Client, String> {
    Ok(Client::new(namespace(c, key, NsOptions::default())?, creds))
}

/// Runs `work` with a client of the cluster a command names (`--cluster`,
/// else the usual places), acting as `who` says, on a runtime of its own.
pub fn with_client<F, Fut>(cluster: Option<&Path>, who: &Who, work: F) -> Result<std::process::ExitCode, String>
where
    F: FnOnce(Client) -> Fut,
    Fut: std::future::Future<Output = Result<std::process::ExitCode, String>>,
{
    let c = load(cluster)?;
    let key = key(&c)?;
    let creds = creds(who, &key)?;
    let rt = runtime()?;
    rt.block_on(async move { work(client(&c, &key, creds)?).await })
}

/// The namespace client of `c`'s mode over TCP, proving `key`, set up as `opts`
/// says. A user key's operations are delegated (its client cannot send the
/// internal requests a transaction needs).
pub fn namespace(c: &ClusterFile, key: &Loaded, opts: NsOptions) -> Result<Arc<dyn Namespace>, String> {
    namespace_over(c, transport(c, key), key, opts)
}

/// [`namespace`] over `transport`.
pub fn namespace_over(c: &ClusterFile, transport: Arc<dyn canopy_rpc::Transport>, key: &Loaded, opts: NsOptions) -> Result<Arc<dyn Namespace>, String> {
    // How long a crashed client's locks block others before recovery.
    let lease_ms = opts.lease_ms.or_else(|| std::env::var("CANOPY_LEASE_MS").ok().and_then(|v| v.parse().ok()));
    let delegate = matches!(key.identity, Identity::User(_));
    open_namespace(&c.mode, Backend::Cluster(transport), NsOptions { lease_ms, delegate, ..opts })
}

/// The cluster's daemons over TCP, proving `key`.
pub fn transport(c: &ClusterFile, key: &Loaded) -> Arc<dyn canopy_rpc::Transport> {
    Arc::new(tcp_transport(c, key))
}

/// [`transport`], as its own type (to share a box of owed posts).
pub fn tcp_transport(c: &ClusterFile, key: &Loaded) -> TcpTransport {
    let members = |g: Vec<cluster::GroupMember>| g.into_iter().map(|m| Member { id: m.id, addr: m.addr }).collect();
    let servers = (0..c.servers.len()).map(|i| members(c.server_members(i))).collect();
    TcpTransport::of_groups(servers, members(c.lockd_members()), key.client_auth(), RPC_TIMEOUT)
}

pub fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().map_err(|e| e.to_string())
}
