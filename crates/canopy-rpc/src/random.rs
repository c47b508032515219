//! Randomness from the kernel, for handshake nonces, lock tickets and new keys.
//! There is no fallback: a predictable nonce would let a recorded proof be
//! replayed, and a predictable key or ticket would be guessed.

use std::io::Read;

/// `N` random bytes.
pub fn bytes<const N: usize>() -> std::io::Result<[u8; N]> {
    let mut b = [0u8; N];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut b)?;
    Ok(b)
}

/// A random 64-bit number (a lock ticket).
pub fn u64() -> std::io::Result<u64> {
    bytes::<8>().map(u64::from_le_bytes)
}

pub fn nonce() -> std::io::Result<[u8; canopy_proto::auth::NONCE_LEN]> {
    bytes()
}
