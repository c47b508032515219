//! `canopy bench`: workloads, measurement and reports.
//!
//! - [`workload`]: the tree shape and the operations of each phase.
//! - [`plan`]: the phases as steps of operations, with the setup each needs.
//! - [`runner`]: drives a phase with many workers over several clients and
//!   measures it (throughput, latency percentiles, RPCs sent, RPCs received per
//!   server).
//! - [`report`]: the result table and the JSON document.
//!
//! The bench only uses the public [`canopy_client::Client`] API, so it measures any
//! namespace strategy the same way.

pub mod plan;
pub mod report;
pub mod runner;
pub mod workload;

pub use report::{BenchReport, PhaseReport};
pub use runner::{run, BenchConfig};
