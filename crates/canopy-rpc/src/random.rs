//! Randomness from the kernel, for handshake nonces, lock tickets and new keys.
//! There is no fallback outside the kernel's pool: a predictable nonce would
//! let a recorded proof be replayed, and a predictable key or ticket would be
//! guessed.
//!
//! `getrandom(2)` rather than reading `/dev/urandom`: one system call instead
//! of open, read and close, which the lock service paid on every grant (a
//! ticket per transaction), and no file descriptor to run out of.

/// `N` random bytes.
pub fn bytes<const N: usize>() -> std::io::Result<[u8; N]> {
    let mut b = [0u8; N];
    fill(&mut b)?;
    Ok(b)
}

/// Fills `buf` from the kernel's pool, retrying a call a signal cut short;
/// from `/dev/urandom` where the system call is not there (`ENOSYS`: a kernel
/// before 3.17, or a seccomp filter that refuses it).
fn fill(buf: &mut [u8]) -> std::io::Result<()> {
    match fill_by_call(buf) {
        Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {
            use std::io::Read;
            std::fs::File::open("/dev/urandom")?.read_exact(buf)
        }
        r => r,
    }
}

fn fill_by_call(buf: &mut [u8]) -> std::io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        let rest = &mut buf[done..];
        // SAFETY: `rest` is valid for writes of `rest.len()` bytes.
        let n = unsafe { libc::getrandom(rest.as_mut_ptr().cast(), rest.len(), 0) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        done += n as usize;
    }
    Ok(())
}

/// A random 64-bit number (a lock ticket).
pub fn u64() -> std::io::Result<u64> {
    bytes::<8>().map(u64::from_le_bytes)
}

pub fn nonce() -> std::io::Result<[u8; canopy_proto::auth::NONCE_LEN]> {
    bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_differ_and_fill_every_byte() {
        let draws: Vec<[u8; 64]> = (0..8).map(|_| bytes::<64>().unwrap()).collect();
        for (i, a) in draws.iter().enumerate() {
            for b in &draws[i + 1..] {
                assert_ne!(a, b);
            }
        }
        // A byte left unfilled stays zero in every draw: 8 zero draws of one
        // position happen by chance with probability 2^-64.
        for pos in 0..64 {
            assert!(draws.iter().any(|d| d[pos] != 0), "byte {pos} never written");
        }
    }
}
