//! Lyre's protocols, configuration and command line.
//!
//! Protocol code reaches data only through `lyre_core` ([`lyre_core::Engine`],
//! [`lyre_core::Table`]); this crate has no dependency on lyre-store. Harper's wire
//! shapes (messages, field names, status codes) live here and nowhere else.

pub mod alloc;
mod app;
mod bulk;
mod cache;
pub mod cli;
pub mod client;
mod components;
pub mod config;
pub mod control;
mod files;
mod http;
mod listen;
mod metrics;
mod mqtt;
mod outbound;
mod passed_on;
mod process;
mod script;
mod telemetry;
mod tls;
mod tokens;

pub use listen::{backup, restore, run};
