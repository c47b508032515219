//! `canopy key cluster`: a new cluster's key; `canopy key issue`: the
//! administrator makes a user's key.

use crate::connect;
use canopy_client::keyfile;
use canopy_proto::auth::Identity;
use canopy_proto::Creds;
use clap::Subcommand;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Subcommand)]
pub enum KeyCmd {
    /// Make the cluster key beside the cluster file (--cluster), unless it
    /// has one: mode 0600, and whoever can read it administers the cluster.
    /// Copy it beside the cluster file on every host of the cluster.
    Cluster,
    /// Issue a user key: a connection made with it acts as this uid, gid and
    /// groups only (needs the cluster key). Written owned by the user, mode 0600.
    Issue {
        #[arg(long)]
        uid: u32,
        #[arg(long)]
        gid: u32,
        /// Supplementary groups, comma-separated.
        #[arg(long, value_delimiter = ',')]
        groups: Vec<u32>,
        /// Where to write it (default: keys/UID.key beside the cluster file, where
        /// that user's commands look).
        #[arg(long)]
        out: Option<PathBuf>,
    },
}

pub fn run(cmd: KeyCmd, cluster: Option<&Path>) -> Result<ExitCode, String> {
    match cmd {
        KeyCmd::Cluster => make_cluster_key(cluster),
        KeyCmd::Issue { uid, gid, groups, out } => issue(cluster, uid, gid, groups, out),
    }
}

/// `canopy key cluster`.
fn make_cluster_key(cluster: Option<&Path>) -> Result<ExitCode, String> {
    let c = connect::load(cluster)?;
    ensure_cluster_key(&c)?;
    println!("{}", keyfile::cluster_key_path(&c.path).display());
    Ok(ExitCode::SUCCESS)
}

/// `canopy key issue`.
fn issue(cluster: Option<&Path>, uid: u32, gid: u32, groups: Vec<u32>, out: Option<PathBuf>) -> Result<ExitCode, String> {
    if uid == u32::MAX || gid == u32::MAX {
        return Err("uid and gid 4294967295 mean \"no change\" to chown(2); they name no one".into());
    }
    let c = connect::load(cluster)?;
    let admin = connect::cluster_key(&c, "issuing keys")?;
    let creds = Creds { uid, gid, groups };
    let key = keyfile::issue(&admin, &creds)?;
    let path = out.unwrap_or_else(|| keyfile::user_key_path(&c.path, uid));
    keyfile::save(&path, &Identity::User(creds), &key)?;
    give_to(&path, uid, gid)?;
    println!("{}", path.display());
    Ok(ExitCode::SUCCESS)
}

/// Makes the cluster key beside the cluster file if there is none (mode 0600:
/// whoever can read it is the cluster's administrator).
pub(crate) fn ensure_cluster_key(c: &canopy_client::cluster::ClusterFile) -> Result<(), String> {
    let path = keyfile::cluster_key_path(&c.path);
    if !path.exists() {
        let key = keyfile::new_cluster_key()?;
        keyfile::save(&path, &Identity::Cluster, &key)?;
    }
    Ok(())
}

/// Makes `path` the user's, so they can read it and no one else can.
fn give_to(path: &Path, uid: u32, gid: u32) -> Result<(), String> {
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).map_err(|_| format!("bad path {}", path.display()))?;
    // SAFETY: chown on a NUL-terminated path we own.
    if unsafe { libc::chown(c.as_ptr(), uid, gid) } != 0 {
        return Err(format!("cannot give {} to uid {uid}: {}", path.display(), std::io::Error::last_os_error()));
    }
    Ok(())
}
