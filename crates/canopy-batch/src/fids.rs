//! The identities a batch gives the regular files it makes before any server
//! has seen them (files buffered in a fresh directory, a snapshot's inline
//! files): FID-shaped, carried to the servers at commit, where they tell a
//! file an interrupted commit already landed from a new one
//! (`canopy-server/src/ops_batch.rs`). They never name back-end contents: a
//! server lands each file with a FID it issues.

use canopy_proto::Fid;
use std::sync::atomic::{AtomicU64, Ordering};

/// A random id for this generator, then a counter: unique without
/// coordination, as a batch's identities only need to be within it.
pub struct CarriedFids {
    prefix: u64,
    next: AtomicU64,
}

impl CarriedFids {
    pub fn new() -> CarriedFids {
        CarriedFids { prefix: canopy_client::data::new_client_id(), next: AtomicU64::new(0) }
    }

    pub fn next(&self) -> Fid {
        Fid::new(self.prefix, self.next.fetch_add(1, Ordering::Relaxed))
    }
}

impl Default for CarriedFids {
    fn default() -> CarriedFids {
        CarriedFids::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_generator_counts_up_and_two_differ() {
        let a = CarriedFids::new();
        let (x, y) = (a.next(), a.next());
        assert_eq!((x.client(), y.counter()), (y.client(), x.counter() + 1));
        assert_ne!(CarriedFids::new().next(), CarriedFids::new().next());
    }
}
