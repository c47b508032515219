//! IndexFS placement (seed 000 §3.1) and GIGA+ partitioning, shared by clients
//! and servers. Pure.
//!
//! A directory's partition 0 lives on its *home* server, `mix64(id) mod N`,
//! chosen when the directory is made; partition `p` lives on `(home + p) mod N`.
//! A name belongs to a partition by the low bits of its hash: with the set of
//! partitions that exist (a [`PartMap`]), it is the deepest existing `hash mod
//! 2^d`. Partition `p` at depth `d` splits into `p` and `p + 2^d` at depth
//! `d + 1`; the names whose hash has bit `d` set move to the new one.
//!
//! Entries are keyed by their hash's bits reversed ([`hash_key`]), so every
//! partition is one contiguous key range ([`part_range`]) and a split moves
//! the upper half of it: one SST written, one ingested, one range deleted.
//! These functions are part of the on-disk contract.

use crate::placement::{fnv1a64, mix64};
use serde::{Deserialize, Serialize};

/// How deep a directory may split: at most 2^16 partitions.
pub const MAX_DEPTH: u32 = 16;

/// The server holding partition 0 of directory `dir`.
pub fn home(dir: u64, servers: u32) -> u32 {
    (mix64(dir ^ 0x1d8e_4e27_c47d_124f) % servers.max(1) as u64) as u32
}

/// The server holding partition `part` of directory `dir`.
pub fn server_of(dir: u64, part: u32, servers: u32) -> u32 {
    ((home(dir, servers) as u64 + part as u64) % servers.max(1) as u64) as u32
}

pub fn name_hash(name: &str) -> u64 {
    mix64(fnv1a64(name.as_bytes()))
}

/// The order entries are kept in within a directory: the name hash, bit-reversed.
pub fn hash_key(name: &str) -> u64 {
    name_hash(name).reverse_bits()
}

/// The hash-key range `[start, end)` of partition `part` at depth `depth`
/// (`end` is `None` at the top of the key space).
pub fn part_range(part: u32, depth: u32) -> (u64, Option<u64>) {
    if depth == 0 {
        return (0, None);
    }
    let prefix = (part as u64).reverse_bits() >> (64 - depth);
    let start = prefix << (64 - depth);
    let end = (prefix + 1).checked_shl(64 - depth).filter(|e| *e != 0);
    (start, end)
}

/// The partitions of one directory that exist (as far as the holder knows), as
/// a bitmap. Knowledge only grows: merging two maps is their union.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct PartMap {
    words: Vec<u64>,
}

impl PartMap {
    /// A directory that has never split.
    pub fn new() -> PartMap {
        let mut m = PartMap { words: Vec::new() };
        m.insert(0);
        m
    }

    pub fn contains(&self, part: u32) -> bool {
        self.words.get(part as usize / 64).is_some_and(|w| w & (1 << (part % 64)) != 0)
    }

    pub fn insert(&mut self, part: u32) {
        let i = part as usize / 64;
        if self.words.len() <= i {
            self.words.resize(i + 1, 0);
        }
        self.words[i] |= 1 << (part % 64);
    }

    pub fn merge(&mut self, other: &PartMap) {
        for (i, w) in other.words.iter().enumerate() {
            if self.words.len() <= i {
                self.words.resize(i + 1, 0);
            }
            self.words[i] |= w;
        }
    }

    pub fn len(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn parts(&self) -> impl Iterator<Item = u32> + '_ {
        (0..self.words.len() as u32 * 64).filter(|p| self.contains(*p))
    }

    /// The partition a name of hash `hash` belongs to: the deepest existing
    /// `hash mod 2^d`.
    pub fn part_of(&self, hash: u64) -> u32 {
        for d in (0..=MAX_DEPTH).rev() {
            let p = (hash & ((1u64 << d) - 1)) as u32;
            if self.contains(p) {
                return p;
            }
        }
        0
    }

    /// How deep partition `part` is: it has split at every depth from its own
    /// creation until the first child it lacks.
    pub fn depth(&self, part: u32) -> u32 {
        let mut d = 32 - part.leading_zeros();
        while d < MAX_DEPTH && self.contains(part + (1 << d)) {
            d += 1;
        }
        d
    }

    /// The partition `part` splits into (`None` at the deepest level).
    pub fn split_child(&self, part: u32) -> Option<u32> {
        let d = self.depth(part);
        (d < MAX_DEPTH).then(|| part + (1 << d))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_directory_is_one_partition_holding_every_name() {
        let m = PartMap::new();
        assert_eq!(m.part_of(name_hash("x")), 0);
        assert_eq!(m.depth(0), 0);
        assert_eq!(m.split_child(0), Some(1));
        assert_eq!(part_range(0, 0), (0, None));
    }

    #[test]
    fn splitting_moves_the_names_with_the_next_bit_set_and_they_are_the_upper_key_half() {
        let mut m = PartMap::new();
        m.insert(1);
        assert_eq!((m.depth(0), m.depth(1)), (1, 1));
        assert_eq!(m.split_child(0), Some(2));
        m.insert(2);
        assert_eq!((m.depth(0), m.depth(1), m.depth(2)), (2, 1, 2));
        for i in 0..2000 {
            let name = format!("f{i}");
            let h = name_hash(&name);
            let p = m.part_of(h);
            let want = if h & 1 == 1 { 1 } else { (h & 3) as u32 };
            assert_eq!(p, want, "{name}");
            // The partition's key range holds the name's key.
            let (start, end) = part_range(p, m.depth(p));
            let k = hash_key(&name);
            assert!(k >= start && end.is_none_or(|e| k < e), "{name}: {k:#x} not in {start:#x}..{end:?}");
        }
        // A child's range is the upper half of its parent's old range.
        let (s0, e0) = part_range(0, 1);
        let (s2, e2) = part_range(2, 2);
        assert_eq!(e2, e0);
        assert_eq!(s2, s0 + (e0.unwrap() - s0) / 2);
    }

    #[test]
    fn maps_merge_by_union_and_placement_is_spread() {
        let mut a = PartMap::new();
        let mut b = PartMap::new();
        b.insert(1);
        b.insert(65);
        a.merge(&b);
        assert!(a.contains(1) && a.contains(65) && a.contains(0));
        assert_eq!(a.len(), 3);
        assert_eq!(a.parts().collect::<Vec<_>>(), vec![0, 1, 65]);
        let mut counts = [0u32; 4];
        for id in 0..40_000u64 {
            counts[home(id + (1 << 48), 4) as usize] += 1;
        }
        assert!(counts.iter().all(|c| (9_000..11_000).contains(c)), "{counts:?}");
        assert_eq!(server_of(7, 0, 4), home(7, 4));
        assert_eq!(server_of(7, 3, 4), (home(7, 4) + 3) % 4);
    }
}
