//! Lyre's vector index in memory: a hierarchical navigable small world graph
//! (`hnsw.rs`), the distances it measures (`distance.rs`) and the options an
//! `@indexed(type: "HNSW", …)` declaration sets (`spec.rs`); and seeded clustered
//! vectors for tests (`testing.rs`).
//!
//! No I/O and no knowledge of records or storage: lyre-core stores a graph's
//! nodes in its database, keeps it up to date from the transaction log and
//! answers queries through it. Kept in its own crate so it is compiled optimised
//! even in debug builds (its loops are the vector tests' running time).

pub mod distance;
pub mod hnsw;
mod spec;
pub mod testing;
mod vectors;

pub use hnsw::{Changes, Filter, Graph, StoredNode, Verdict, accept_all};
pub use spec::{Distance, MAX_DIMENSIONS, VectorIndex};
