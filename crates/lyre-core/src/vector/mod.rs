//! Vector indexes in storage: how a graph (lyre-vector's) lies in the database's
//! `derived` sub-database (`store.rs`). The runner that keeps one up to date from
//! the log is a service (`services/derived.rs`); the live index a query reads is
//! held by its database (`db/derived.rs`).

pub mod store;

pub use lyre_vector::{Changes, Graph, StoredNode, distance};
