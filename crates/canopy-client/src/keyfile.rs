//! Key files: what a daemon or a client proves itself with (see
//! `canopy_proto::auth` for the trust model).
//!
//! A key file is JSON, `{"identity": "Cluster", "key": "<64 hex digits>"}` for the
//! cluster key or `{"identity": {"User": {"uid": U, "gid": G, "groups": [...]}},
//! "key": "..."}` for a user key, and must not be readable by group or others.
//!
//! Where a command looks, first found wins ([`find`]): `--key FILE`, then
//! `$CANOPY_KEY`, then `cluster.key` beside the cluster file if this user can read
//! it (the administrator), then `keys/<uid>.key` beside the cluster file (where
//! `canopy key issue` puts a user's key), then `~/.canopy/key`.

use canopy_proto::auth::{Identity, Key, KEY_LEN};
use canopy_proto::Creds;
use serde::{Deserialize, Serialize};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

pub const CLUSTER_KEY_FILE: &str = "cluster.key";

#[derive(Debug, Clone, Serialize, Deserialize)]
struct KeyFile {
    identity: Identity,
    key: String,
}

/// A loaded key: whom it speaks for, and the secret.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub identity: Identity,
    pub key: Key,
    pub path: PathBuf,
}

impl Loaded {
    pub fn is_cluster(&self) -> bool {
        self.identity.is_cluster()
    }

    /// What a connection proves with this key.
    pub fn client_auth(&self) -> canopy_rpc::ClientAuth {
        canopy_rpc::ClientAuth { identity: self.identity.clone(), key: self.key.clone() }
    }
}

/// A fresh cluster key, from the kernel's randomness.
pub fn new_cluster_key() -> Result<Key, String> {
    let b = canopy_rpc::random::bytes::<KEY_LEN>().map_err(|e| format!("no randomness for a key: {e}"))?;
    Ok(Key::from_bytes(b))
}

/// Writes a key file readable by its owner only (created so, never widened).
pub fn save(path: &Path, identity: &Identity, key: &Key) -> Result<(), String> {
    let text = serde_json::to_string(&KeyFile { identity: identity.clone(), key: key.to_hex() }).expect("key files serialise") + "\n";
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    let tmp = path.with_extension("key.tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp).map_err(|e| format!("cannot write {}: {e}", tmp.display()))?;
    std::io::Write::write_all(&mut f, text.as_bytes()).map_err(|e| format!("cannot write {}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, path).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

pub fn load(path: &Path) -> Result<Loaded, String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("cannot read key {}: {e}", path.display()))?;
    if meta.permissions().mode() & 0o077 != 0 {
        return Err(format!("key {} is readable by others (chmod 600 it)", path.display()));
    }
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read key {}: {e}", path.display()))?;
    let f: KeyFile = serde_json::from_str(&text).map_err(|e| format!("bad key file {}: {e}", path.display()))?;
    let key = Key::from_hex(&f.key).ok_or_else(|| format!("bad key file {}: the key is not {} hex bytes", path.display(), KEY_LEN))?;
    Ok(Loaded { identity: f.identity, key, path: path.to_path_buf() })
}

/// The cluster key beside `cluster_file`, for daemons and `canopy up`.
pub fn cluster_key_path(cluster_file: &Path) -> PathBuf {
    cluster_file.parent().unwrap_or(Path::new(".")).join(CLUSTER_KEY_FILE)
}

/// Where `canopy key issue` puts the key of `uid` by default.
pub fn user_key_path(cluster_file: &Path, uid: u32) -> PathBuf {
    cluster_file.parent().unwrap_or(Path::new(".")).join("keys").join(format!("{uid}.key"))
}

/// The key a command uses (see the module doc for the order), as user `uid`.
pub fn find(cluster_file: &Path, explicit: Option<&Path>, uid: u32) -> Result<Loaded, String> {
    if let Some(p) = explicit {
        return load(p);
    }
    if let Some(p) = std::env::var_os("CANOPY_KEY") {
        return load(Path::new(&p));
    }
    let home = std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".canopy").join("key"));
    let candidates = [Some(cluster_key_path(cluster_file)), Some(user_key_path(cluster_file, uid)), home];
    for p in candidates.into_iter().flatten() {
        if std::fs::File::open(&p).is_ok() {
            return load(&p);
        }
    }
    Err(format!(
        "no key for cluster {}: an administrator issues one with `canopy key issue --uid {uid} --gid GID` (or pass --key FILE)",
        cluster_file.display()
    ))
}

/// The user key of `creds` under `cluster`.
pub fn issue(cluster: &Loaded, creds: &Creds) -> Result<Key, String> {
    if !cluster.is_cluster() {
        return Err(format!("{} is a user key: issuing keys needs the cluster key", cluster.path.display()));
    }
    if creds.groups.len() > canopy_proto::auth::MAX_GROUPS {
        return Err(format!("at most {} groups", canopy_proto::auth::MAX_GROUPS));
    }
    Ok(cluster.key.derive_user(creds))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_and_loose_permissions_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("cluster.key");
        let k = new_cluster_key().unwrap();
        save(&p, &Identity::Cluster, &k).unwrap();
        let got = load(&p).unwrap();
        assert!(got.is_cluster());
        assert_eq!(got.key, k);
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(load(&p).unwrap_err().contains("readable by others"));
        let alice = Creds::user(1000, 1000);
        let loaded = Loaded { identity: Identity::Cluster, key: k.clone(), path: p.clone() };
        let uk = issue(&loaded, &alice).unwrap();
        assert_eq!(uk, k.for_identity(&Identity::User(alice.clone())));
        let user = Loaded { identity: Identity::User(alice.clone()), key: uk, path: p };
        assert!(issue(&user, &alice).unwrap_err().contains("needs the cluster key"));
    }
}
