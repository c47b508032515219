//! Giraffa's table (seed 000 §3.2): one row per object, keyed by a hash of
//! its parent's path, its depth and its name, and range-partitioned over the
//! servers like HBase regions.
//!
//! A row's key is `row_prefix(parent) ‖ name`, where the 8-byte prefix of a
//! directory path is `1 ‖ 55 bits of SHA-256(path) ‖ depth (8 bits)`: the
//! hash spreads directories over the key space (the paper's fix for skew),
//! the depth and the name follow, so every entry of one directory shares one
//! prefix and a listing is one range. The prefix names the parent path: two
//! directories would share rows only if both their 55-bit hashes and depths
//! matched; the hash is cryptographic so that making a directory whose prefix
//! equals another's takes about 2^55 tries, not a moment's arithmetic.
//!
//! Regions: the key space is pre-split into [`REGIONS_PER_SERVER`] × N equal
//! ranges, dealt to the servers in turn (HBase's pre-split table). A region is
//! never divided below one prefix, so a directory always sits whole in one
//! region on one server, as a large directory in Giraffa does (the paper's
//! load-imbalance lesson). Pure: no I/O.

use crate::msg::{DirLookup, DirTimes, Record};
use crate::path::NsPath;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The top bit of every directory prefix (the root's row alone has prefix 0).
pub const PREFIX_BIT: u64 = 1 << 63;
/// The prefix of the root directory's own row.
pub const ROOT_ROW_PREFIX: u64 = 0;
/// Regions each server holds when a table is created.
pub const REGIONS_PER_SERVER: u64 = 8;
/// How long a directory proof stays valid after it was issued (ms).
pub const PROOF_LIFE_MS: u64 = 250;

/// The row prefix of the entries of directory `dir`.
pub fn prefix(dir: &NsPath) -> u64 {
    let depth = dir.components().count().min(255) as u64;
    let digest = Sha256::digest(dir.as_str().as_bytes());
    let h = u64::from_be_bytes(digest[..8].try_into().expect("a SHA-256 digest has 32 bytes"));
    PREFIX_BIT | (h >> 9 << 8) | depth
}

/// The row key of `name` in the directory whose prefix is `prefix`.
pub fn row_key(prefix: u64, name: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(8 + name.len());
    k.extend_from_slice(&prefix.to_be_bytes());
    k.extend_from_slice(name.as_bytes());
    k
}

/// The prefix under which `path`'s own row is kept.
pub fn row_prefix(path: &NsPath) -> u64 {
    match path.split() {
        Some((parent, _)) => prefix(&parent),
        None => ROOT_ROW_PREFIX,
    }
}

/// The server holding the region of the rows with prefix `prefix`.
pub fn region_server(prefix: u64, servers: u32) -> u32 {
    let n = servers.max(1) as u64;
    let regions = REGIONS_PER_SERVER * n;
    let width = (1u64 << 63) / regions + 1;
    (((prefix & !PREFIX_BIT) / width) % n) as u32
}

/// The server holding `path`'s own row (a stat, a chmod, a file's data).
pub fn row_server(path: &NsPath, servers: u32) -> u32 {
    region_server(row_prefix(path), servers)
}

/// The server holding the rows of directory `dir`'s entries (a create in it,
/// a listing of it).
pub fn entries_server(dir: &NsPath, servers: u32) -> u32 {
    region_server(prefix(dir), servers)
}

/// What the server holding a directory's row vouches for, for a request to
/// the server holding its entries: the directory exists with these
/// permissions, until `expires` (ms since the Unix epoch on the issuer's
/// wall clock: another server checks it, so the servers' clocks must agree
/// to well within [`PROOF_LIFE_MS`]). Signed with a key only servers hold,
/// so a client carries it but cannot make or change one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirProof {
    /// The directory's row prefix for its entries.
    pub prefix: u64,
    pub ino: u64,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub expires: u64,
    /// Good for adding an entry (a create, mkdir, link or rename into it),
    /// not only for removing one; an rmdir waits out only these.
    pub adds: bool,
    pub mac: [u8; 32],
}

impl DirProof {
    /// The bytes the MAC covers: every field but the MAC.
    pub fn signed_bytes(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(36);
        for v in [self.prefix, self.ino, self.expires] {
            b.extend_from_slice(&v.to_be_bytes());
        }
        for v in [self.mode, self.uid, self.gid] {
            b.extend_from_slice(&v.to_be_bytes());
        }
        b.push(self.adds as u8);
        b
    }
}

/// Whether `req`, carried in a `GfVouched`, adds an entry to a directory (its
/// proofs must then be good for adding; an rmdir waits those out).
pub fn adds_entry(req: &crate::msg::Request) -> bool {
    use crate::msg::Request;
    matches!(req, Request::Create { .. } | Request::LinkInsert { .. } | Request::RenameLocal { .. } | Request::RenameIn { .. })
}

/// The most proofs one `GfVouched` carries (a rename's two directories).
pub const MAX_PROOFS: usize = 2;

/// The most rows one `GfScan` answers or one `GfPutRows` carries.
pub const MAX_ROWS: usize = 4096;

/// About how many bytes of rows one `GfScan` answers or one `GfPutRows`
/// carries (a row with inline contents can be 1 MiB; frames are 4 MiB).
pub const ROW_BYTES: usize = 2 << 20;

/// The encoded size of `row`, as budgets count it.
pub fn row_bytes(row: &GfRow) -> usize {
    postcard::to_stdvec(row).map_or(usize::MAX, |b| b.len())
}

/// A directory's row: its lookup state (`id` is its inode number), its full
/// path (the paper's row key ends with it; here it lets a server find the
/// prefix of the directory's own entries) and how many subdirectories it has
/// (their rows live with its entries, usually on another server).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirRow {
    pub lookup: DirLookup,
    pub path: String,
    pub subdirs: u64,
}

/// One row of a directory's entries, as a directory rename moves it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum GfRow {
    File { name: String, record: Record },
    Dir { name: String, row: DirRow, times: DirTimes },
}

impl GfRow {
    pub fn name(&self) -> &str {
        match self {
            GfRow::File { name, .. } | GfRow::Dir { name, .. } => name,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> NsPath {
        NsPath::parse(s).unwrap()
    }

    #[test]
    fn entries_of_a_directory_share_a_prefix_that_carries_its_depth() {
        let a = prefix(&p("/a"));
        assert_eq!(a & 0xff, 1);
        assert_eq!(prefix(&p("/a/b/c")) & 0xff, 3);
        assert_ne!(PREFIX_BIT & a, 0);
        assert_eq!(row_prefix(&p("/a/x")), a);
        assert_eq!(row_prefix(&p("/")), ROOT_ROW_PREFIX);
        assert!(row_key(a, "x") < row_key(a, "y"), "a listing is in name order");
        assert_eq!(&row_key(a, "x")[..8], &a.to_be_bytes());
    }

    #[test]
    fn regions_deal_the_key_space_evenly_and_the_root_row_to_server_0() {
        assert_eq!(region_server(ROOT_ROW_PREFIX, 4), 0);
        assert_eq!(region_server(u64::MAX, 4), 3, "the last region");
        let mut count = [0u32; 8];
        for i in 0..8000 {
            count[entries_server(&p(&format!("/d{i}")), 8) as usize] += 1;
        }
        assert!(count.iter().all(|c| (800..1200).contains(c)), "{count:?}");
        for s in 1..=130 {
            assert!(region_server(u64::MAX, s) < s);
        }
    }

    #[test]
    fn a_proof_signs_every_field_but_its_mac() {
        let a = DirProof { prefix: 1, ino: 2, mode: 3, uid: 4, gid: 5, expires: 6, adds: false, mac: [0; 32] };
        let mut b = a.clone();
        b.mac = [9; 32];
        assert_eq!(a.signed_bytes(), b.signed_bytes());
        let changes: [fn(&mut DirProof); 5] = [|d| d.mode = 0o777, |d| d.uid = 0, |d| d.expires = 99, |d| d.prefix = 7, |d| d.adds = true];
        for change in changes {
            let mut c = a.clone();
            change(&mut c);
            assert_ne!(a.signed_bytes(), c.signed_bytes());
        }
    }
}
