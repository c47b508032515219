//! Cluster files: where a cluster's daemons listen. Written by `canopy up`, read by
//! every client command, and by `canopy server`/`canopy lockd` to find their port.
//!
//! A command finds its cluster from `--cluster FILE`, else `$CANOPY_CLUSTER`, else
//! the default local cluster's file ([`default_dir`]`/cluster.json`).

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The namespace modes this build serves.
pub const MODES: &[&str] = &["shardfs", "indexfs", "giraffa"];

/// `mode` if this build serves it, else an error naming the ones it does.
pub fn check_mode(mode: &str) -> Result<(), String> {
    if MODES.contains(&mode) {
        Ok(())
    } else {
        Err(format!("unknown namespace mode {mode:?}: this build knows {}", MODES.join(", ")))
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterFile {
    /// Namespace strategy the cluster runs.
    pub mode: String,
    /// Metadata servers, by index: `host:port`.
    pub servers: Vec<String>,
    /// The lock service: `host:port`.
    pub lockd: String,
    /// IndexFS: the lookup lease policy (`fixed[:MS]`, `depth[:K_MS]`,
    /// `rate[:L_MS]`); `fixed:1000` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<String>,
    /// IndexFS: entries a directory partition holds before it splits (GIGA+);
    /// 2000 when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub split_threshold: Option<u64>,
    /// Giraffa: rows a region holds before it splits; 10,000,000 when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region_rows: Option<u64>,
    /// Where this file was read from (its key lies beside it); not stored.
    #[serde(skip)]
    pub path: PathBuf,
}

impl ClusterFile {
    pub fn load(path: &Path) -> Result<ClusterFile, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read cluster file {}: {e}", path.display()))?;
        let mut c: ClusterFile = serde_json::from_str(&text).map_err(|e| format!("bad cluster file {}: {e}", path.display()))?;
        c.path = path.to_path_buf();
        check_mode(&c.mode).map_err(|e| format!("cluster file {}: {e}", path.display()))?;
        if c.servers.is_empty() {
            return Err(format!("cluster file {} lists no servers", path.display()));
        }
        Ok(c)
    }

    pub fn save(&self, path: &Path) -> Result<(), String> {
        let text = serde_json::to_string_pretty(self).expect("cluster files serialise");
        let tmp = path.with_extension("json.tmp");
        std::fs::write(&tmp, text + "\n").and_then(|_| std::fs::rename(&tmp, path)).map_err(|e| format!("cannot write {}: {e}", path.display()))
    }
}

/// Where `canopy up` keeps the default local cluster: `$CANOPY_HOME`, else
/// `$HOME/.canopy/local`.
pub fn default_dir() -> PathBuf {
    if let Some(h) = std::env::var_os("CANOPY_HOME") {
        return PathBuf::from(h);
    }
    let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/tmp"));
    home.join(".canopy").join("local")
}

/// The cluster file a client command uses.
pub fn find(explicit: Option<&Path>) -> PathBuf {
    if let Some(p) = explicit {
        return p.to_path_buf();
    }
    if let Some(p) = std::env::var_os("CANOPY_CLUSTER") {
        return PathBuf::from(p);
    }
    default_dir().join("cluster.json")
}
