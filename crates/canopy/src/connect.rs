//! Building a client from a cluster file, as the caller's user.

use canopy_client::cluster::{self, ClusterFile};
use canopy_client::shardfs::ShardFs;
use canopy_client::Client;
use canopy_proto::Creds;
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

/// The process's own credentials, with overrides.
pub fn creds(who: &Who) -> Creds {
    // SAFETY: these libc calls only read the process's credentials.
    let (uid, gid, groups) = unsafe {
        let n = libc::getgroups(0, std::ptr::null_mut());
        let mut groups = vec![0 as libc::gid_t; n.max(0) as usize];
        let got = libc::getgroups(n, groups.as_mut_ptr());
        groups.truncate(got.max(0) as usize);
        (libc::getuid(), libc::getgid(), groups)
    };
    match (who.uid, who.gid) {
        (None, None) => Creds { uid, gid, groups },
        (u, g) => Creds { uid: u.unwrap_or(uid), gid: g.unwrap_or(gid), groups: Vec::new() },
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

/// A client for `c`; call inside a Tokio runtime.
pub fn client(c: &ClusterFile, creds: Creds) -> Result<Client, String> {
    Ok(Client::new(Arc::new(namespace(c)?), creds))
}

/// The namespace strategy of `c`, for callers that configure it further.
pub fn namespace(c: &ClusterFile) -> Result<ShardFs, String> {
    if c.mode != "shardfs" {
        return Err(format!("namespace mode {:?} is not supported yet (only shardfs)", c.mode));
    }
    let transport = Arc::new(TcpTransport::new(&c.servers, &c.lockd, RPC_TIMEOUT));
    let mut ns = ShardFs::new(transport);
    if let Some(ms) = std::env::var("CANOPY_LEASE_MS").ok().and_then(|v| v.parse().ok()) {
        // How long a crashed client's locks block others before recovery.
        ns = ns.with_lease(ms);
    }
    Ok(ns)
}

pub fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().map_err(|e| e.to_string())
}
