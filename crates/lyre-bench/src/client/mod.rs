//! Clients for the protocols a workload speaks.

mod http;

pub use http::{Call, HttpClient};
