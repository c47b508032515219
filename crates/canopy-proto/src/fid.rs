//! File identifiers (seed 003 §IV.E–G): the name of a file's contents on back-end
//! storage, fixed at create time and never changed, so a rename never moves data.
//!
//! A FID is 128 bits, issued by the metadata server that makes the file, never by
//! a client: back-end storage is read and written by mounts holding the cluster
//! key, so a FID a client could choose would let it point its own file at
//! another user's contents. The high 64 bits are random bits its server drew
//! once for its store (so two clusters sharing a back-end directory never
//! collide), the low 64 the inode number it gave the file (unique in the
//! cluster; a hard link or a rename keeps inode and FID together). The two
//! halves are called `client` and `counter` below, for where they sit.
//!
//! The mapping from FID to a back-end directory and a path in it is deterministic
//! and the same for every client:
//! - the directory is `hash(fid) mod N` (the paper uses MD5; any well-mixed hash
//!   spreads FIDs evenly, and ours needs no extra dependency);
//! - the path is `CCCC/cccc/<32 hex digits>`, where `CCCC` and `cccc` are the low and
//!   next 16 bits of the counter, so consecutive creates of one client land in
//!   different directories (the paper splits the hex name into parts for the same
//!   reason) and no directory holds more than 65,536 names per level.

use crate::placement::{fnv1a64, mix64};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Fid(pub u128);

impl Fid {
    pub fn new(client: u64, counter: u64) -> Fid {
        Fid(((client as u128) << 64) | counter as u128)
    }

    pub fn client(self) -> u64 {
        (self.0 >> 64) as u64
    }

    pub fn counter(self) -> u64 {
        self.0 as u64
    }

    /// Which of `backends` directories holds this FID's contents.
    pub fn backend(self, backends: usize) -> usize {
        assert!(backends > 0, "at least one back-end directory");
        (mix64(self.client() ^ mix64(self.counter())) % backends as u64) as usize
    }

    /// The relative path of the contents inside its back-end directory.
    pub fn relative_path(self) -> String {
        let c = self.counter();
        format!("{:04x}/{:04x}/{:032x}", c & 0xffff, (c >> 16) & 0xffff, self.0)
    }
}

/// The digest a spill is confirmed with: of the inline bytes the client copied.
pub fn contents_digest(bytes: &[u8]) -> u64 {
    mix64(fnv1a64(bytes))
}

impl std::fmt::Display for Fid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_splits_the_counter_and_names_the_whole_fid() {
        let fid = Fid::new(0x0123_4567_89ab_cdef, 0x0000_0000_1234_5678);
        assert_eq!(fid.relative_path(), "5678/1234/0123456789abcdef0000000012345678");
        assert_eq!(fid.client(), 0x0123_4567_89ab_cdef);
        assert_eq!(fid.counter(), 0x1234_5678);
    }

    #[test]
    fn backends_are_chosen_evenly_and_deterministically() {
        let n = 4;
        let mut counts = [0u32; 4];
        for counter in 0..40_000u64 {
            let fid = Fid::new(7, counter);
            assert_eq!(fid.backend(n), fid.backend(n));
            counts[fid.backend(n)] += 1;
        }
        for c in counts {
            assert!((9_000..11_000).contains(&c), "uneven spread {counts:?}");
        }
    }
}
