//! Where an object lives: ShardFS's primary server of a path.
//!
//! `primary(path) = mix(fnv1a64(canonical path bytes)) mod N`, where `mix` is the
//! SplitMix64 finalizer (FNV-1a alone has weak low bits). This function is part of
//! the on-disk contract: changing it strands every file on the wrong server.

use crate::path::NsPath;

pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= *b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The index of the server that is primary for `path` among `servers`.
pub fn primary(path: &NsPath, servers: u32) -> u32 {
    (mix64(fnv1a64(path.as_str().as_bytes())) % servers.max(1) as u64) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stable_values() {
        // Pinned: these are part of the on-disk contract.
        assert_eq!(fnv1a64(b""), 0xcbf29ce484222325);
        assert_eq!(fnv1a64(b"a"), 0xaf63dc4c8601ec8c);
        let p = NsPath::parse("/a/b").unwrap();
        assert_eq!(primary(&p, 1), 0);
        assert_eq!(primary(&p, 4), primary(&p, 4));
    }

    #[test]
    fn spreads_evenly() {
        let mut counts = [0u32; 4];
        for i in 0..40_000 {
            let p = NsPath::parse(&format!("/d{}/f{}", i % 100, i)).unwrap();
            counts[primary(&p, 4) as usize] += 1;
        }
        for c in counts {
            assert!((9_000..11_000).contains(&c), "{counts:?}");
        }
    }
}
