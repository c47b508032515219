//! The lock service (`canopy lockd`): path locks for directory mutations, with
//! leases, and a durable redo record of every transaction in flight.
//!
//! - [`locktable`]: which locks are held; pure, all-or-nothing grants.
//! - [`service`]: the daemon: waits for grants, keeps records in the store, and
//!   re-grants the locks of recorded transactions after a restart.
//! - [`waiters`]: the queue of waiting requests; pure. A request is not granted
//!   while an earlier waiter wants a conflicting lock (no writer starves).
//!
//! Locking a path means a write lock on it and read locks on its ancestors (seed
//! 000 §3.3); the table implies the ancestors' read locks, so a lock set names only
//! the paths themselves. Clients build those sets (`canopy_posix::lockset`); this
//! crate only grants them.
//!
//! Hard rule: the lock service grants locks and keeps records; repairing a
//! recorded transaction is a client's work (`canopy-client/src/recovery.rs`). It
//! never depends on `canopy-server`, `canopy-client` or anything above them.

pub mod locktable;
pub mod service;
pub mod waiters;

pub use service::LockService;
