//! `canopy bench`: workloads, measurement and reports.
//!
//! - [`workload`]: the tree shape and the operations of each phase.
//! - [`plan`]: the phases as steps of operations, with the setup each needs.
//! - [`target`]: what the phases run against: the five operations, implemented by
//!   the Canopy [`canopy_client::Client`] and by system calls ([`posix`]).
//! - [`drive`]: many workers over a step, measured (throughput, latency
//!   percentiles), as tokio tasks or as the OS threads of a [`pool`]; each
//!   worker runs `job`'s loop.
//! - [`runner`]: the phases against Canopy, also counting RPCs sent and RPCs
//!   received per server.
//! - [`posix`]: the phases as system calls in a directory made for the run.
//! - [`report`]: the result table and the JSON document.
//! - [`compare`]: several targets' results side by side.
//!
//! Against Canopy, the bench only uses the public [`canopy_client::Client`] API, so
//! it measures any namespace strategy the same way.

pub mod compare;
pub mod drive;
mod job;
pub mod plan;
pub mod pool;
pub mod posix;
pub mod report;
pub mod runner;
pub mod target;
pub mod workload;

pub use compare::{Comparison, TargetReport};
pub use posix::BenchDir;
pub use report::{BenchReport, PhaseReport};
pub use runner::{run, BenchConfig};
