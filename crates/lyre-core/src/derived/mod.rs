//! Derived indexes as the runtime that keeps them sees them: any index built from
//! a table's records and kept up to date from the log by a runner
//! (`services/derived.rs`), stored in the database's `derived` sub-database
//! (`store.rs`) and served from memory (`db/derived.rs`).
//!
//! The runtime knows nothing of what an index holds. A kind of index (the vector
//! index, `vector/declared.rs`; a full-text index could be another) implements two
//! traits: [`Declaration`], one declared index (what it reads from a record, how
//! to start one empty or load one from storage), and [`DerivedIndex`], the index in
//! memory (apply a record's change, say what to store of what changed). Ownership
//! by epoch, the durable cursor, the condemned marker, rebuilds, lag and coverage
//! are the runtime's, the same for every kind.

pub mod store;

use std::any::Any;
use std::fmt;

use lyre_store::ReadTxn;

use crate::error::Result;
use crate::value::Value;

/// The derived entries one apply writes: `(key, Some(value))` to put, `(key, None)`
/// to delete.
pub type Writes = Vec<(Vec<u8>, Option<Vec<u8>>)>;

/// A kind of derived index: its name in messages and logs, and the tag its stored
/// entries lie under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Kind {
    /// How messages name it ("vector").
    pub name: &'static str,
    /// The first bytes of every key it stores (five ASCII bytes, ending in `:`).
    pub tag: &'static [u8; 5],
}

/// One declared derived index: what the runtime needs to build, load and keep it.
pub trait Declaration: Send + Sync + fmt::Debug {
    /// Its kind.
    fn kind(&self) -> Kind;

    /// The attribute it indexes: records are decoded with this attribute only.
    fn attribute(&self) -> &str;

    /// What the stored index depends on, encoded: stored with the index, and an
    /// index stored for another encoding is rebuilt. (Any other change of the
    /// declaration, seen by its `Debug` form, restarts the runner, which loads
    /// what is stored.)
    fn fingerprint(&self) -> Vec<u8>;

    /// Writes to the table are refused (503, retryable) while the index is more
    /// than this far behind (ms); `None` never refuses.
    fn max_lag_ms(&self) -> Option<u64>;

    /// A new, empty index.
    fn empty(&self) -> Box<dyn DerivedIndex>;

    /// The index stored under `prefix` in `txn` (blocking: run it off the runtime).
    fn load(&self, txn: &ReadTxn, prefix: &[u8]) -> Result<Box<dyn DerivedIndex>>;
}

/// A derived index in memory, changed only by its runner.
pub trait DerivedIndex: Any + Send + Sync {
    /// Indexes the record under `key` by its declared attribute's `value` now,
    /// replacing what was indexed for it; `None` (the record was deleted, or has
    /// no value there) removes it. A value the index cannot hold answers why, and
    /// the record is left out.
    fn apply(&mut self, key: &[u8], value: Option<&Value>) -> std::result::Result<(), String>;

    /// Removes every entry (the table was cleared).
    fn clear(&mut self);

    /// The entries that store, under `prefix`, what changed since the last call.
    fn take_writes(&mut self, prefix: &[u8]) -> Writes;

    /// Records it holds.
    fn len(&self) -> usize;

    /// Whether it holds no record.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes it holds in memory.
    fn memory_bytes(&self) -> usize;

    /// Itself, for the queries of its kind to read it as what it is.
    fn as_any(&self) -> &dyn Any;
}
