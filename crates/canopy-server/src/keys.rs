//! Column families and key layouts of a metadata server's store.
//!
//! | column family | key | value |
//! |---|---|---|
//! | `dirs` (replicated lookup state) | parent id (u64 BE) ‖ name | `DirLookup` |
//! | `entries` (files and symlinks whose primary is this server) | parent id (u64 BE) ‖ name | `Record` |
//! | `dirtimes` (times of directories whose primary is this server) | dir id (u64 BE) | `DirTimes` |
//! | `inodes` (shared inodes of hard-linked files homed here) | ino (u64 BE) | `Inode` |
//! | `meta` (server-local state) | ASCII name (ShardFS's parked directory times: `parked-times/` ‖ txn ‖ dir id, `shardfs/parked.rs`) | value |
//!
//! That is ShardFS's layout. Keying by (parent id, name) makes a directory
//! listing a prefix scan, and a directory rename leaves its children's keys
//! alone. The root's lookup state is stored under parent 0 and the empty name.
//! IndexFS keeps the same families with keys of its own (`indexfs/mod.rs`:
//! parent id ‖ name hash ‖ name, and `parts` for its directory partitions); the
//! store records which mode made it. Values are postcard.

use serde::{de::DeserializeOwned, Serialize};

pub const DIRS: &str = "dirs";
pub const ENTRIES: &str = "entries";
pub const DIRTIMES: &str = "dirtimes";
pub const INODES: &str = "inodes";
pub const META: &str = "meta";
/// IndexFS: directory partitions held here (`indexfs::Header`).
pub const PARTS: &str = "parts";
pub const ALL_CFS: &[&str] = &[DIRS, ENTRIES, DIRTIMES, INODES, META, PARTS];
/// The families a server reads by key on the hot path (a stat reads one
/// file record), worth a read cache in front of the store.
pub const CACHED_CFS: &[&str] = &[ENTRIES];
/// A server's read cache by default (MiB): it holds the bench's default
/// namespace whole (about 250,000 file records on each of four servers;
/// every stat of its stat phase is a hit).
pub const DEFAULT_ENTRY_CACHE_MIB: usize = 64;

/// `store` behind a read cache of [`CACHED_CFS`] of about `mib` MiB (none
/// for 0), as a server reads it.
pub fn with_entry_cache(store: canopy_store::SharedStore, mib: usize) -> canopy_store::SharedStore {
    if mib == 0 {
        return store;
    }
    std::sync::Arc::new(canopy_store::CachedStore::new(store, CACHED_CFS, mib << 20))
}

/// The version of the layout this file describes, recorded in `meta` and checked
/// at open (`canopy_store::check_layout`). Bump it when a key or value changes
/// meaning.
pub const LAYOUT_VERSION: u32 = 1;
pub const META_IDENTITY: &[u8] = b"identity";
pub const META_NEXT_ID: &[u8] = b"next_id";
/// The high half of the FIDs the server issues (u64).
pub const META_FID_SALT: &[u8] = b"fid_salt";
/// The mode (`shardfs`, ...) of the server that made the store, as UTF-8.
pub const META_MODE: &[u8] = b"mode";

pub fn entry_key(parent: u64, name: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(8 + name.len());
    k.extend_from_slice(&parent.to_be_bytes());
    k.extend_from_slice(name.as_bytes());
    k
}

/// Splits an entry key into (parent, name); `None` for a corrupt key.
pub fn split_entry_key(key: &[u8]) -> Option<(u64, String)> {
    if key.len() < 8 {
        return None;
    }
    let parent = u64::from_be_bytes(key[..8].try_into().ok()?);
    let name = String::from_utf8(key[8..].to_vec()).ok()?;
    Some((parent, name))
}

pub fn id_key(id: u64) -> [u8; 8] {
    id.to_be_bytes()
}

pub fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    postcard::to_stdvec(value).expect("store values always serialise")
}

pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Option<T> {
    postcard::from_bytes(bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_keys_sort_by_parent_then_name_and_round_trip() {
        let a = entry_key(1, "zz");
        let b = entry_key(2, "a");
        assert!(a < b);
        assert_eq!(split_entry_key(&entry_key(7, "name")), Some((7, "name".into())));
        assert_eq!(split_entry_key(b"short"), None);
    }
}
