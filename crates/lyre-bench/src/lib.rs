//! `lyre-bench`: load generators and side-by-side comparisons for Lyre and Harper.
//!
//! Every workload runs against any server speaking Harper's protocols, so the same
//! binary measures Lyre and Harper. `--compare-url` alternates two servers round by
//! round and reports medians and ratios, because this machine is shared and noisy.
//! Benchmarks never run inside `cargo test`; a smoke test only checks that the
//! instrument works.

mod ceiling;
mod chart;
pub mod cli;
mod client;
mod diff;
mod report;
mod stats;
mod target;
mod workload;

pub use stats::Measurement;
/// The `schema.graphql` a server needs for the YCSB workloads.
pub use workload::ycsb::SCHEMA as YCSB_SCHEMA;
