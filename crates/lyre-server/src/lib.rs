//! Lyre's protocols, configuration and command line.
//!
//! Protocol code reaches data only through `lyre_core` ([`lyre_core::Engine`],
//! [`lyre_core::Table`]); this crate has no dependency on lyre-store. Harper's wire
//! shapes (messages, field names, status codes) live here and nowhere else.

/// Awaits `$future` from a box of its own, so the enclosing future holds a pointer
/// rather than `$future`'s whole state. Binding the box first matters: in
/// `Box::pin(f()).await` the moved-from temporary lives to the end of the statement,
/// so its storage stays in the caller's state anyway (a request's future grew from
/// 6 KB to 18 KB that way), and every hand-over of that state copies it.
macro_rules! await_boxed {
    ($future:expr) => {{
        let boxed = ::std::boxed::Box::pin($future);
        boxed.await
    }};
}

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
