//! The transaction log: one entry per committed logical transaction, in commit order.
//!
//! Entries are written by [`crate::WriteTxn`] in the same LMDB transaction as the
//! changes they describe, keyed by a big-endian sequence number, so readers can resume
//! from any position.

use serde::{Deserialize, Serialize};

use crate::error::Result;

/// What a change did to a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ChangeKind {
    /// The record was written (created or replaced); the body is the new record.
    Put,
    /// The record was removed.
    Delete,
}

/// One record-level change inside a logged transaction.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Change {
    /// The table the record belongs to.
    pub table: String,
    /// What happened.
    pub kind: ChangeKind,
    /// The encoded primary key.
    #[serde(with = "serde_bytes")]
    pub key: Vec<u8>,
    /// The stored record (header and body) after a put; `None` after a delete.
    #[serde(with = "serde_bytes")]
    pub record: Option<Vec<u8>>,
}

/// About how many bytes of log entries one [`crate::WriteTxn::prune_log`] call
/// looks at: bulk inserts log every record, so a count of entries alone could mean
/// gigabytes decoded in one writer job.
pub const PRUNE_BYTES: usize = 8 << 20;

/// How far a [`crate::WriteTxn::prune_log`] call got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PruneProgress {
    /// Changes removed by this call.
    pub removed: u64,
    /// Where to continue, when older entries remain to look at.
    pub next: Option<u64>,
}

/// A committed logical transaction.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LogEntry {
    /// Position in the log; strictly increasing with commit order.
    pub seq: u64,
    /// The transaction's version (f64 ms).
    pub version: f64,
    /// The node that made it.
    pub node: u16,
    /// Who made it.
    pub user: String,
    /// The operation that made it (`insert`, `update`, `create_table`, ...).
    pub operation: String,
    /// Every record it changed, in order.
    pub changes: Vec<Change>,
}

impl LogEntry {
    pub(crate) fn encode(&self) -> Result<Vec<u8>> {
        Ok(rmp_serde::to_vec_named(self)?)
    }

    pub(crate) fn decode(bytes: &[u8]) -> Result<Self> {
        Ok(rmp_serde::from_slice(bytes)?)
    }
}
