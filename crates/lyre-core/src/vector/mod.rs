//! Vector indexes: the graph (lyre-vector's) as a kind of derived index
//! (`declared.rs`) and how it lies in the database's `derived` sub-database
//! (`store.rs`). The runtime that keeps it up to date from the log is the
//! derived-index runtime (`derived/`, `db/derived.rs`, `services/derived.rs`).

pub mod declared;
pub mod store;

pub use lyre_vector::{Changes, Graph, StoredNode, Verdict, distance};
