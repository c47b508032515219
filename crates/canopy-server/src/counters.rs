//! RPCs received, by operation: one atomic counter per request kind.

use canopy_proto::msg::OPCODES;
use canopy_proto::Request;
use std::sync::atomic::{AtomicU64, Ordering};

pub struct Counters {
    by_op: Vec<AtomicU64>,
}

impl Default for Counters {
    fn default() -> Counters {
        Counters { by_op: OPCODES.iter().map(|_| AtomicU64::new(0)).collect() }
    }
}

impl Counters {
    pub fn count(&self, req: &Request) {
        if let Some(c) = self.by_op.get(req.index()) {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Non-zero counters as (operation name, count).
    pub fn snapshot(&self) -> Vec<(String, u64)> {
        OPCODES
            .iter()
            .zip(&self.by_op)
            .map(|((name, _), c)| (name.to_string(), c.load(Ordering::Relaxed)))
            .filter(|(_, n)| *n > 0)
            .collect()
    }
}
