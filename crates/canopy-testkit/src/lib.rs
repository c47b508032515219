//! Test support: a whole Canopy cluster inside one process.
//!
//! - [`InProcCluster`]: N metadata servers and a lock service over memory or
//!   RocksDB stores, reached through the in-process transport, with clients as
//!   the cluster key, as a user key, delegating, or stopping at transaction steps.
//! - [`FaultyTransport`]: servers that are down, die right after applying a
//!   named request, or refuse one without applying it, on a test's word.
//! - [`hooks`]: step hooks that kill a coordinator at a step, or hold it there
//!   while the test acts.
//! - [`assert_fsck_clean`]: the check most tests end with.
//! - [`polls`]: waiting for what another task will do, with no time limit
//!   but a hang guard.
//!
//! It is the one crate that assembles servers, the lock service and clients
//! without the `canopy` binary, so the client library need not link the server
//! or RocksDB to be tested: crates use it as a dev-dependency (the client's
//! own integration tests too; that dev-dependency cycle is fine, as they link the
//! same `canopy-client`), and `canopy-eval` for its simulated clusters.
//!
//! Hard rule: nothing but tests and simulations depends on this crate; no
//! `[dependencies]` entry of another crate but `canopy-eval` may name it, and
//! it holds no logic a running cluster needs (delegation and the sweep stay in
//! `canopy-client`).

mod checks;
mod cluster;
mod faulty;
pub mod hooks;
pub mod polls;
pub mod tree;

pub use checks::assert_fsck_clean;
pub use cluster::InProcCluster;
pub use faulty::FaultyTransport;
