//! Cluster files: where a cluster's daemons listen. Written by `canopy up`, read by
//! every client command, and by `canopy server`/`canopy lockd` to find their port.
//!
//! A command finds its cluster from `--cluster FILE`, else `$CANOPY_CLUSTER`, else
//! the default local cluster's file ([`default_dir`]`/cluster.json`).

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

pub use canopy_proto::modes::{ModeOptions, MODES};

/// `mode` if this build serves it, else an error naming the ones it does.
pub fn check_mode(mode: &str) -> Result<(), String> {
    ModeOptions::named(mode).map(|_| ())
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterFile {
    /// The namespace mode the cluster runs (the `mode` field) and its options
    /// (fields beside it; defaults where absent).
    #[serde(flatten)]
    pub mode: ModeOptions,
    /// Metadata servers, by index: `host:port`.
    pub servers: Vec<String>,
    /// The lock service: `host:port`.
    pub lockd: String,
    /// Where this file was read from (its key lies beside it); not stored.
    #[serde(skip)]
    pub path: PathBuf,
}

impl ClusterFile {
    pub fn load(path: &Path) -> Result<ClusterFile, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read cluster file {}: {e}", path.display()))?;
        let bad = |e: serde_json::Error| format!("bad cluster file {}: {e}", path.display());
        let value: serde_json::Value = serde_json::from_str(&text).map_err(bad)?;
        // An unknown mode is named with the known ones, not as serde's variant.
        if let Some(mode) = value.get("mode").and_then(|m| m.as_str()) {
            check_mode(mode).map_err(|e| format!("cluster file {}: {e}", path.display()))?;
        }
        let mut c: ClusterFile = serde_json::from_value(value).map_err(bad)?;
        c.path = path.to_path_buf();
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

#[cfg(test)]
mod tests {
    use super::*;
    use canopy_proto::modes::{GiraffaOptions, IndexFsOptions, LeasePolicy};

    fn read(text: &str) -> Result<ClusterFile, String> {
        serde_json::from_str(text).map_err(|e| e.to_string())
    }

    #[test]
    fn a_modes_options_sit_beside_its_name_with_defaults_where_absent() {
        let c = read(r#"{"mode": "indexfs", "servers": ["a"], "lockd": "l", "lease": "depth:400"}"#).unwrap();
        assert_eq!(c.mode, ModeOptions::Indexfs(IndexFsOptions { lease: LeasePolicy::Depth { k_ms: 400 }, ..IndexFsOptions::default() }));
        let c = read(r#"{"mode": "giraffa", "servers": ["a"], "lockd": "l", "region_rows": 40}"#).unwrap();
        assert_eq!(c.mode, ModeOptions::Giraffa(GiraffaOptions { region_rows: 40 }));
        assert_eq!(read(r#"{"mode": "shardfs", "servers": ["a"], "lockd": "l"}"#).unwrap().mode, ModeOptions::Shardfs(Default::default()));
    }

    #[test]
    fn a_cluster_file_reads_back_as_written() {
        let mode = ModeOptions::Indexfs(IndexFsOptions { lease: LeasePolicy::Rate { l_ms: 9 }, split_threshold: 4 });
        let c = ClusterFile { mode, servers: vec!["a".into(), "b".into()], lockd: "l".into(), path: PathBuf::new() };
        assert_eq!(read(&serde_json::to_string(&c).unwrap()).unwrap(), c);
    }

    #[test]
    fn an_unknown_mode_or_a_bad_option_is_refused_by_name() {
        let err = read(r#"{"mode": "nfs", "servers": ["a"], "lockd": "l"}"#).unwrap_err();
        assert!(err.contains("nfs") && err.contains("giraffa"), "{err}");
        let err = read(r#"{"mode": "indexfs", "servers": ["a"], "lockd": "l", "lease": "forever"}"#).unwrap_err();
        assert!(err.contains("forever"), "{err}");
    }
}
