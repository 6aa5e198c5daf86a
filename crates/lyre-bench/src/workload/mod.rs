//! Workloads. Each prepares its data (untimed) and runs a timed load, returning a
//! [`Measurement`](crate::stats::Measurement).

pub mod cache;
pub mod churn;
pub mod counters;
pub mod csv_load;
pub mod fanout;
mod load;
pub mod mqtt;
pub mod ops;
pub mod records;
pub mod sql;
pub mod vector;
pub mod ycsb;

pub use load::{LoadSpec, RequestFn, one_per_success, run_load};
