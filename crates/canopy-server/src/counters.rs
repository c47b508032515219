//! RPCs received, by operation: one atomic counter per opcode.

use canopy_proto::msg::OP_NAMES;
use std::sync::atomic::{AtomicU64, Ordering};

pub struct Counters {
    by_op: Vec<AtomicU64>,
}

impl Default for Counters {
    fn default() -> Counters {
        Counters { by_op: OP_NAMES.iter().map(|_| AtomicU64::new(0)).collect() }
    }
}

impl Counters {
    pub fn count(&self, opcode: u16) {
        if let Some(c) = self.by_op.get(opcode as usize) {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Non-zero counters as (operation name, count).
    pub fn snapshot(&self) -> Vec<(String, u64)> {
        OP_NAMES
            .iter()
            .zip(&self.by_op)
            .map(|(name, c)| (name.to_string(), c.load(Ordering::Relaxed)))
            .filter(|(_, n)| *n > 0)
            .collect()
    }
}
