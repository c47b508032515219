//! Giraffa's options: how many rows a region of its table holds.

use serde::{Deserialize, Serialize};

/// Giraffa's options.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct GiraffaOptions {
    /// Rows a region holds before it splits.
    #[serde(default = "default_region_rows")]
    pub region_rows: u64,
}

impl Default for GiraffaOptions {
    fn default() -> GiraffaOptions {
        GiraffaOptions { region_rows: DEFAULT_REGION_ROWS }
    }
}

/// Rows a Giraffa region holds before it splits: about HBase's 10 GB default
/// at a kilobyte a row, far above what these experiments write (the paper
/// notes Giraffa rarely splits).
pub const DEFAULT_REGION_ROWS: u64 = 10_000_000;

fn default_region_rows() -> u64 {
    DEFAULT_REGION_ROWS
}
