//! What a ShardFS cluster runs: Canopy's metadata servers and lock service.

use crate::canopy_daemons::CanopyDaemons;
use crate::lifecycle::Lifecycle;

/// How `canopy up`, `down` and `status` handle a ShardFS cluster.
pub const LIFECYCLE: &dyn Lifecycle = &CanopyDaemons;
