//! Which path locks a transaction asks the lock service for.
//!
//! Locking a path means a write lock on it and read locks on its ancestors (seed
//! 000 §3.3). The lock table implies the ancestors' read locks
//! (`canopy-lock/src/locktable.rs`), so a lock set names only the paths
//! themselves: a request grows with the length of its paths, not with the square
//! of their depth. The client builds these sets; the lock service only grants
//! them, which is why they live here and not beside the table.

use canopy_proto::msg::LockMode;
use canopy_proto::path::NsPath;

/// A write lock on each path (read locks on their ancestors are implied).
pub fn path_locks(paths: &[&NsPath]) -> Vec<(String, LockMode)> {
    let mut out: Vec<(String, LockMode)> = Vec::new();
    for path in paths {
        if !out.iter().any(|(p, _)| p == path.as_str()) {
            out.push((path.as_str().to_string(), LockMode::Write));
        }
    }
    out
}

/// A read lock on `path` (and so on every ancestor): what a single-RPC operation's
/// pessimistic retry holds, so that no directory mutation on its path is in flight.
pub fn path_read_locks(path: &NsPath) -> Vec<(String, LockMode)> {
    vec![(path.as_str().to_string(), LockMode::Read)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_lock_per_path_whatever_its_depth() {
        let deep = NsPath::parse(&"/d".repeat(2000)).unwrap();
        let other = NsPath::parse("/a").unwrap();
        let locks = path_locks(&[&deep, &other, &deep]);
        assert_eq!(locks, vec![(deep.as_str().into(), LockMode::Write), ("/a".into(), LockMode::Write)]);
        assert_eq!(path_read_locks(&other), vec![("/a".into(), LockMode::Read)]);
    }

    /// A lock request for the deepest valid path fits in one frame (listing every
    /// ancestor made it 4 MB for a 4094-byte path of 2047 components).
    #[test]
    fn a_deep_paths_lock_request_fits_in_a_frame() {
        use canopy_proto::msg::Intent;
        use canopy_proto::{frame, Creds, Request};
        let deep = NsPath::parse(&"/d".repeat(canopy_proto::path::NS_PATH_MAX / 2)).unwrap();
        let req = Request::Lock { locks: path_locks(&[&deep, &deep]), intent: Intent::Rmdir { path: deep.to_string() }, lease_ms: 1, wait_ms: 1 };
        let mut buf = bytes::BytesMut::new();
        frame::encode_request(&mut buf, 1, &Creds::root(), &req).unwrap();
        assert!(buf.len() < 3 * canopy_proto::path::NS_PATH_MAX, "{} bytes", buf.len());
    }
}
