//! Which mutations of one server exclude each other.
//!
//! - The **structure** lock: taken exclusively by whatever changes the directory
//!   table or moves objects between directories (mkdir, rmdir, directory setattr
//!   and rename, `DirSync`, migration, fsck's consistent scan); shared by every
//!   other mutation. While it is held shared the table does not change, so a
//!   path's parent id, once resolved, stays right.
//! - **Stripes**, one mutex per `STRIPES`-th of the directory ids: a mutation of
//!   the entry at `path` holds the stripe of `path`'s parent (a rename, both
//!   parents'), so mutations in different directories run at once and two in one
//!   directory take turns (check-then-write stays atomic per name).
//! - The **inodes** mutex: held by mutations that may read-modify-write a shared
//!   (hard-linked) inode, which several directories' entries refer to.
//!
//! Lock order, always: structure, then stripes in ascending index, then inodes,
//! then (briefly, inside) the id allocator and the table's own RwLock. Reads take
//! none of these.

use parking_lot::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Stripes of directory ids. Ids are allocated in sequence, so directories made
/// near each other never share a stripe.
pub const STRIPES: usize = 256;

pub struct MutationLocks {
    structure: RwLock<()>,
    stripes: Vec<Mutex<()>>,
    inodes: Mutex<()>,
}

/// Held locks; dropping it releases them.
pub enum MutGuard<'a> {
    Structure(#[allow(dead_code)] RwLockWriteGuard<'a, ()>),
    Entries {
        #[allow(dead_code)]
        shared: RwLockReadGuard<'a, ()>,
        #[allow(dead_code)]
        stripes: Vec<MutexGuard<'a, ()>>,
        #[allow(dead_code)]
        inodes: Option<MutexGuard<'a, ()>>,
    },
}

pub fn stripe_of(dir_id: u64) -> usize {
    (dir_id % STRIPES as u64) as usize
}

impl Default for MutationLocks {
    fn default() -> MutationLocks {
        MutationLocks { structure: RwLock::new(()), stripes: (0..STRIPES).map(|_| Mutex::new(())).collect(), inodes: Mutex::new(()) }
    }
}

impl MutationLocks {
    pub fn structure(&self) -> MutGuard<'_> {
        MutGuard::Structure(self.structure.write())
    }

    /// The shared structure lock, then the stripes of `dirs` (the ids of the
    /// directories whose entries change), then the inodes mutex if `inodes`.
    /// `dirs` is computed by `parents` under the shared lock, so it is stable.
    pub fn entries(&self, parents: impl FnOnce() -> Vec<u64>, inodes: bool) -> MutGuard<'_> {
        let shared = self.structure.read();
        let mut idx: Vec<usize> = parents().into_iter().map(stripe_of).collect();
        idx.sort_unstable();
        idx.dedup();
        let stripes = idx.into_iter().map(|i| self.stripes[i].lock()).collect();
        let inodes = inodes.then(|| self.inodes.lock());
        MutGuard::Entries { shared, stripes, inodes }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn different_directories_proceed_one_directory_takes_turns() {
        let locks = Arc::new(MutationLocks::default());
        let held = locks.entries(|| vec![7], false);
        let other = locks.clone();
        let t = std::thread::spawn(move || {
            let _g = other.entries(|| vec![8, 9], true);
        });
        t.join().unwrap();
        let same = locks.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        let t = std::thread::spawn(move || {
            let _g = same.entries(|| vec![7 + STRIPES as u64], false);
            tx.send(()).unwrap();
        });
        assert!(rx.recv_timeout(Duration::from_millis(100)).is_err(), "one stripe: waits");
        drop(held);
        rx.recv_timeout(Duration::from_secs(5)).unwrap();
        t.join().unwrap();
        // The structure lock excludes everything.
        let s = locks.structure();
        let other = locks.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        let t = std::thread::spawn(move || {
            let _g = other.entries(|| vec![1], false);
            tx.send(()).unwrap();
        });
        assert!(rx.recv_timeout(Duration::from_millis(100)).is_err());
        drop(s);
        rx.recv_timeout(Duration::from_secs(5)).unwrap();
        t.join().unwrap();
    }
}
