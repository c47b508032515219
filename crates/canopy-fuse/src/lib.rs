//! Canopy as a mounted file system (seed 003 §IV.C: a FUSE layer over a metadata
//! service, with file contents on back-end storage).
//!
//! - [`nodes`]: the kernel's node ids and the Canopy paths behind them (pure).
//! - [`handles`]: open files, and back-end contents waiting for their last close.
//! - [`backend`]: back-end directories and where a FID's contents live in them.
//! - [`convert`]: attributes, errnos, times and callers between Canopy and FUSE.
//! - [`groups`]: callers' supplementary groups and file capabilities, kept
//!   briefly per process.
//! - `dispatch`: takes requests off `/dev/fuse` and runs their handlers (in
//!   place, or on a pool when the other reading threads are busy).
//! - `own`: a FUSE thread's own runtime and client, for handlers run in place.
//! - `fs` and `file_io`: the request handlers.
//! - [`options`]: the mount's settings and their defaults.
//! - [`awake`]: idle CPUs kept quick to wake while requests come.
//! - [`timings`]: counts and latencies of each kind of kernel request.
//! - [`mount`]: mounting, serving and unmounting.
//!
//! Hard rule: no namespace logic here. Every decision about names, permissions
//! and attributes is the metadata service's; this crate translates and caches
//! nothing beyond what the kernel is told it may cache (the entry and attribute
//! timeouts: directories' attributes, `dir_attrs`, and names absent from
//! directories this mount just made, `fresh_dirs`) and callers' groups for
//! 100 ms.
//!
//! It reaches the cluster through `canopy-client` alone and never depends on
//! `canopy-server`, `canopy-lock` or `canopy-store`: a mount links no RocksDB.

pub mod awake;
pub mod backend;
pub mod convert;
mod dir_attrs;
mod dispatch;
mod file_io;
mod fresh_dirs;
mod fs;
pub mod groups;
pub mod handles;
pub mod mount;
pub mod nodes;
pub mod options;
mod own;
pub mod timings;

pub use backend::Backends;
pub use dispatch::CanopyFs;
pub use handles::Handles;
pub use options::MountOptions;
pub use own::ClientFactory;
pub use timings::RequestTimes;
