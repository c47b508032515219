//! ShardFS's options: it has none yet; a cluster file names the mode alone.

use serde::{Deserialize, Serialize};

/// ShardFS's options.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardFsOptions {}
