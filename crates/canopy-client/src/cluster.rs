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
    /// Replica groups of more than one member: each server index's members
    /// and the lock service's (ids and addresses; the first member's address
    /// is also the one in `servers` or `lockd`). Absent: every daemon is a
    /// group of one, member 1, at its address there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub groups: Option<Groups>,
    /// Where this file was read from (its key lies beside it); not stored.
    #[serde(skip)]
    pub path: PathBuf,
}

/// The members of every replica group of a cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Groups {
    pub servers: Vec<Vec<GroupMember>>,
    pub lockd: Vec<GroupMember>,
}

/// One member of a replica group: its id in the group and where it listens.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupMember {
    pub id: u64,
    pub addr: String,
}

impl ClusterFile {
    /// The members of server `index`'s group.
    pub fn server_members(&self, index: usize) -> Vec<GroupMember> {
        match &self.groups {
            Some(g) => g.servers.get(index).cloned().unwrap_or_default(),
            None => self.servers.get(index).map(|a| vec![GroupMember { id: 1, addr: a.clone() }]).unwrap_or_default(),
        }
    }

    /// The members of the lock service's group.
    pub fn lockd_members(&self) -> Vec<GroupMember> {
        match &self.groups {
            Some(g) => g.lockd.clone(),
            None => vec![GroupMember { id: 1, addr: self.lockd.clone() }],
        }
    }

    /// Members per group, as the cluster was made.
    pub fn replicas(&self) -> usize {
        self.lockd_members().len()
    }

    /// A cluster file's groups must name each daemon once, with the
    /// addresses `servers` and `lockd` give their first members.
    fn check_groups(&self) -> Result<(), String> {
        let Some(g) = &self.groups else { return Ok(()) };
        let first = |m: &[GroupMember]| m.first().map(|m| m.addr.clone());
        if g.servers.len() != self.servers.len() || g.servers.iter().map(|m| first(m)).ne(self.servers.iter().map(|a| Some(a.clone()))) || first(&g.lockd) != Some(self.lockd.clone()) {
            return Err("its groups do not agree with its servers and lockd".into());
        }
        for members in g.servers.iter().chain(std::iter::once(&g.lockd)) {
            let mut ids: Vec<u64> = members.iter().map(|m| m.id).collect();
            ids.sort_unstable();
            ids.dedup();
            if ids.len() != members.len() || ids.first() == Some(&0) {
                return Err("a group names a member id twice, or member 0".into());
            }
        }
        Ok(())
    }

    pub fn load(path: &Path) -> Result<ClusterFile, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read cluster file {}: {e}", path.display()))?;
        let bad = |e: serde_json::Error| format!("bad cluster file {}: {e}", path.display());
        let value: serde_json::Value = serde_json::from_str(&text).map_err(bad)?;
        // An unknown mode is named with the known ones, not as serde's variant.
        if let Some(mode) = value.get("mode").and_then(|m| m.as_str()) {
            check_mode(mode).map_err(|e| format!("cluster file {}: {e}", path.display()))?;
        }
        let mut c: ClusterFile = serde_json::from_value(value).map_err(bad)?;
        c.check_groups().map_err(|e| format!("bad cluster file {}: {e}", path.display()))?;
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
        let c = ClusterFile { mode, servers: vec!["a".into(), "b".into()], lockd: "l".into(), groups: None, path: PathBuf::new() };
        assert_eq!(read(&serde_json::to_string(&c).unwrap()).unwrap(), c);
        assert_eq!(c.server_members(1), vec![GroupMember { id: 1, addr: "b".into() }], "a daemon without a group is one of one");
        let m = |id, a: &str| GroupMember { id, addr: a.into() };
        let grouped = ClusterFile { groups: Some(Groups { servers: vec![vec![m(1, "a"), m(2, "a2")], vec![m(1, "b"), m(3, "b3")]], lockd: vec![m(1, "l"), m(2, "l2")] }), ..c };
        assert_eq!(read(&serde_json::to_string(&grouped).unwrap()).unwrap(), grouped);
        assert_eq!((grouped.server_members(1)[1].id, grouped.replicas()), (3, 2));
        assert!(ClusterFile { servers: vec!["x".into(), "b".into()], ..grouped.clone() }.check_groups().is_err(), "a first member elsewhere than `servers` says");
        let twice = Groups { lockd: vec![m(1, "l"), m(1, "l2")], ..grouped.groups.clone().unwrap() };
        assert!(ClusterFile { groups: Some(twice), ..grouped }.check_groups().is_err());
    }

    #[test]
    fn an_unknown_mode_or_a_bad_option_is_refused_by_name() {
        let err = read(r#"{"mode": "nfs", "servers": ["a"], "lockd": "l"}"#).unwrap_err();
        assert!(err.contains("nfs") && err.contains("giraffa"), "{err}");
        let err = read(r#"{"mode": "indexfs", "servers": ["a"], "lockd": "l", "lease": "forever"}"#).unwrap_err();
        assert!(err.contains("forever"), "{err}");
    }
}
