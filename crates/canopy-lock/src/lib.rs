//! The lock service (`canopy lockd`): path locks for directory mutations, with
//! leases, and a durable redo record of every transaction in flight.
//!
//! - [`locktable`]: which locks are held; pure, all-or-nothing grants.
//! - [`service`]: the daemon: waits for grants, keeps records in the store, and
//!   re-grants the locks of recorded transactions after a restart.
//!
//! Locking a path means a write lock on its last component and read locks on its
//! ancestors (seed 000 §3.3); [`path_locks`] builds that set.

pub mod locktable;
pub mod service;

pub use service::LockService;

use canopy_proto::msg::LockMode;
use canopy_proto::path::NsPath;

/// Read locks on every ancestor of each path and a write lock on each path.
pub fn path_locks(paths: &[&NsPath]) -> Vec<(String, LockMode)> {
    let mut out: Vec<(String, LockMode)> = Vec::new();
    let mut add = |p: String, m: LockMode| match out.iter_mut().find(|(q, _)| *q == p) {
        Some((_, held)) if m == LockMode::Write => *held = LockMode::Write,
        Some(_) => {}
        None => out.push((p, m)),
    };
    for path in paths {
        let mut cur = path.split().map(|(parent, _)| parent);
        while let Some(parent) = cur {
            add(parent.as_str().to_string(), LockMode::Read);
            cur = parent.split().map(|(p, _)| p);
        }
        add(path.as_str().to_string(), LockMode::Write);
    }
    out
}

/// Read locks on each path and every ancestor: what a single-RPC operation's
/// pessimistic retry holds, so that no directory mutation on its path is in flight.
pub fn path_read_locks(path: &NsPath) -> Vec<(String, LockMode)> {
    let mut out = vec![(path.as_str().to_string(), LockMode::Read)];
    let mut cur = path.split().map(|(parent, _)| parent);
    while let Some(parent) = cur {
        out.push((parent.as_str().to_string(), LockMode::Read));
        cur = parent.split().map(|(p, _)| p);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ancestors_read_target_write() {
        let a = NsPath::parse("/a/b").unwrap();
        let c = NsPath::parse("/a").unwrap();
        let locks = path_locks(&[&a, &c]);
        assert!(locks.contains(&("/".into(), LockMode::Read)));
        assert!(locks.contains(&("/a".into(), LockMode::Write)), "write dominates read");
        assert!(locks.contains(&("/a/b".into(), LockMode::Write)));
        assert_eq!(locks.len(), 3);
    }

    #[test]
    fn read_locks_cover_the_whole_path() {
        let locks = path_read_locks(&NsPath::parse("/a/b").unwrap());
        assert_eq!(locks, vec![("/a/b".into(), LockMode::Read), ("/a".into(), LockMode::Read), ("/".into(), LockMode::Read)]);
    }
}
