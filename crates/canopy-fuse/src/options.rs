//! What a mount can be told, with the defaults `canopy mount` documents.

use std::time::Duration;

#[derive(Debug, Clone)]
pub struct MountOptions {
    /// How long the kernel may trust a name it looked up (entry cache).
    pub entry_ttl: Duration,
    /// How long the kernel may trust attributes it fetched (attribute cache).
    pub attr_ttl: Duration,
    /// Files up to this many bytes keep their contents in the metadata.
    pub inline_max: u32,
    /// Threads reading kernel requests, each on its own cloned /dev/fuse fd;
    /// a handler runs on its thread while another is left reading, else on
    /// the runtime's blocking pool.
    pub threads: usize,
    /// Let users other than the one who mounted use the mount (`allow_other`).
    pub allow_other: bool,
    /// Let the kernel check permissions from the attributes it holds
    /// (`default_permissions`) before Canopy's servers check them again. On by
    /// default: without it the kernel checks nothing itself, so what its caches
    /// hold (a lookup, attributes) is served to every user for the timeouts, and
    /// a FIFO or device node is opened with no check at all (no open reaches the
    /// mount). Turning it off is only safe when one user uses the mount.
    pub default_permissions: bool,
    /// Keep directories' mtime and ctime up to date (one more RPC per change).
    pub dir_times: bool,
}

impl Default for MountOptions {
    fn default() -> MountOptions {
        MountOptions {
            entry_ttl: Duration::from_secs(1),
            attr_ttl: Duration::from_secs(1),
            inline_max: 64 * 1024,
            threads: 8,
            allow_other: false,
            default_permissions: true,
            dir_times: true,
        }
    }
}
