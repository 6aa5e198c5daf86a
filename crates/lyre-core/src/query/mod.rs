//! Queries: a protocol-neutral condition tree, a planner that picks an index, and an
//! executor that streams matching records to a sink.
//!
//! * [`ast`]: what a query says (conditions, sort, paging, projection).
//! * `plan`: which index or key range drives it (most selective indexed condition
//!   of an AND; a union for an OR of indexed conditions; an index walk for a sort),
//!   as a `driver` (the planner's output, the executor's input).
//! * `exec`: walks a driver over a snapshot.
//! * `nearest`: a vector query's run: the HNSW walk (filtered, or an exact
//!   ranking of what an index narrowed the conditions to), re-ranked exactly.
//! * [`search`]: a planned [`Search`]; its run re-checks every condition on each
//!   record, sorts when the driver's order is not the requested one, pages,
//!   projects, streams.

mod ast;
mod driver;
mod exec;
mod filter;
mod nearest;
mod plan;
mod related;
mod search;
mod select;

pub use ast::{Comparator, Condition, Operator, Query, SortKey, VectorSort};
pub(crate) use related::Related;
pub use search::{Search, SharedSnapshot, Sink};
pub use select::{Field, Select, Shaped};
