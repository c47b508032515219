//! Nonces for the handshake, from the kernel. There is no fallback: a predictable
//! nonce would let a recorded proof be replayed.

use std::io::Read;

/// A random 64-bit number (a lock ticket).
pub fn u64() -> std::io::Result<u64> {
    let mut b = [0u8; 8];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut b)?;
    Ok(u64::from_le_bytes(b))
}

pub fn nonce() -> std::io::Result<[u8; canopy_proto::auth::NONCE_LEN]> {
    let mut b = [0u8; canopy_proto::auth::NONCE_LEN];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut b)?;
    Ok(b)
}
