//! The transaction log: one entry per committed logical transaction, in commit order.
//!
//! Entries are written by [`crate::WriteTxn`] in the same LMDB transaction as the
//! changes they describe, keyed by a big-endian sequence number, so readers can resume
//! from any position.

use serde::{Deserialize, Serialize};

use crate::error::Result;

/// What a change did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ChangeKind {
    /// The record was written (created or replaced); the body is the new record.
    Put,
    /// The record was removed.
    Delete,
    /// Every record and index entry of the table was removed at once (not logged
    /// record by record).
    Cleared,
    /// The table's storage was emptied and given back: the table is gone, and this
    /// incarnation of it ends here.
    Released,
    /// The table's definition changed (created, an attribute added or dropped, an
    /// index built); `record` holds the caller's description of the change.
    Catalog,
    /// A message was published to the record `key` names, leaving the record as it
    /// was: `record` holds the message as the caller encoded it (no record header).
    /// Subscribers receive it; it changes no data.
    Message,
}

impl ChangeKind {
    /// Whether the change is to one record (`key` names it), not to the table.
    pub fn is_record(self) -> bool {
        matches!(self, ChangeKind::Put | ChangeKind::Delete)
    }
}

/// One change inside a logged transaction: to a record, or to a table as a whole.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Change {
    /// The table changed, by name.
    pub table: String,
    /// Which incarnation of the table: a number that changes whenever the name is
    /// dropped and created again (storage slots and names are reused, so the name
    /// alone cannot tell a continuing table from a new one). 0 only in entries written
    /// before incarnations existed.
    #[serde(default)]
    pub incarnation: u64,
    /// What happened.
    pub kind: ChangeKind,
    /// The encoded primary key of a record change; empty for a table change.
    #[serde(with = "serde_bytes")]
    pub key: Vec<u8>,
    /// The stored record (header and body) after a put, or the description of a
    /// catalog change; `None` otherwise.
    #[serde(with = "serde_bytes")]
    pub record: Option<Vec<u8>>,
}

/// About how many bytes of log entries one [`crate::WriteTxn::prune_log`] call
/// looks at: bulk inserts log every record, so a count of entries alone could mean
/// gigabytes decoded in one writer job.
pub const PRUNE_BYTES: usize = 8 << 20;

/// What a [`crate::WriteTxn::prune_log`] call may remove.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PruneScope<'a> {
    /// Entries made before this version (ms since the epoch).
    pub before: f64,
    /// Only changes to this table; every change when `None`.
    pub table: Option<&'a str>,
    /// Never entries after this sequence number (what the slowest durable reader of
    /// the log has not yet consumed stays); no bound when `None`.
    pub through_seq: Option<u64>,
}

/// How far a [`crate::WriteTxn::prune_log`] call got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PruneProgress {
    /// Changes removed by this call.
    pub removed: u64,
    /// Where to continue, when older entries remain to look at.
    pub next: Option<u64>,
}

/// Who made a write and how; recorded in the transaction log.
#[derive(Debug, Clone)]
pub struct JobMeta {
    /// The user on whose behalf the write runs.
    pub user: String,
    /// The operation name (`insert`, `update`, `create_table`, ...).
    pub operation: String,
    /// The client connection that made it, when it has a name of its own (an MQTT
    /// client's id): subscribers that do not want their own changes back (MQTT's
    /// no-local) tell them by it, as replication will tell its own writes.
    pub origin: Option<String>,
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
    /// The client connection that made it, when it named itself (see
    /// [`JobMeta::origin`]); absent from entries written before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
    /// Every record it changed, in order.
    pub changes: Vec<Change>,
}

impl LogEntry {
    pub(crate) fn encode(&self) -> Result<Vec<u8>> {
        self.as_written().encode()
    }

    /// This entry's fields, borrowed.
    fn as_written(&self) -> WrittenEntry<'_> {
        WrittenEntry {
            seq: self.seq,
            version: self.version,
            node: self.node,
            user: &self.user,
            operation: &self.operation,
            origin: self.origin.as_deref(),
            changes: &self.changes,
        }
    }

    #[cfg(test)]
    fn encoded_size_bound(&self) -> usize {
        self.as_written().encoded_size_bound()
    }

    pub(crate) fn decode(bytes: &[u8]) -> Result<Self> {
        Ok(rmp_serde::from_slice(bytes)?)
    }
}

/// A [`LogEntry`] as the writer encodes it: the same fields, in the same order,
/// borrowed from the job's metadata and changes, so appending a job's entry copies
/// neither its user and operation names nor its changes (which carry whole records).
#[derive(Serialize)]
pub(crate) struct WrittenEntry<'a> {
    /// [`LogEntry::seq`].
    pub seq: u64,
    /// [`LogEntry::version`].
    pub version: f64,
    /// [`LogEntry::node`].
    pub node: u16,
    /// [`LogEntry::user`].
    pub user: &'a str,
    /// [`LogEntry::operation`].
    pub operation: &'a str,
    /// [`LogEntry::origin`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub origin: Option<&'a str>,
    /// [`LogEntry::changes`].
    pub changes: &'a [Change],
}

impl WrittenEntry<'_> {
    /// The entry's bytes: `rmp_serde`'s named encoding, as [`LogEntry::decode`] reads.
    pub(crate) fn encode(&self) -> Result<Vec<u8>> {
        // Sized up front: an entry carries whole records, and a buffer grown by
        // doubling copies each of them several times over.
        let mut out = Vec::with_capacity(self.encoded_size_bound());
        self.serialize(&mut rmp_serde::Serializer::new(&mut out).with_struct_map())?;
        Ok(out)
    }

    /// At least the bytes [`Self::encode`] writes: its strings and byte strings,
    /// and an allowance for the field names, markers and numbers around them.
    fn encoded_size_bound(&self) -> usize {
        const ENTRY_FIELDS: usize = 128;
        const CHANGE_FIELDS: usize = 80;
        let changes: usize = self
            .changes
            .iter()
            .map(|c| CHANGE_FIELDS + c.table.len() + c.key.len() + c.record.as_ref().map_or(0, Vec::len))
            .sum();
        ENTRY_FIELDS + self.user.len() + self.operation.len() + self.origin.map_or(0, str::len) + changes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(origin: Option<&str>) -> LogEntry {
        LogEntry {
            seq: 7,
            version: 1.5,
            node: 0,
            user: "admin".into(),
            operation: "put".into(),
            origin: origin.map(str::to_string),
            changes: Vec::new(),
        }
    }

    /// An entry keeps its origin; one written before origins existed (no such
    /// field) reads as having none.
    #[test]
    fn origin_round_trips_and_older_entries_have_none() {
        let with = entry(Some("mqtt:c1"));
        assert_eq!(LogEntry::decode(&with.encode().unwrap()).unwrap(), with);
        #[derive(Serialize)]
        struct Before {
            seq: u64,
            version: f64,
            node: u16,
            user: String,
            operation: String,
            changes: Vec<Change>,
        }
        let before = Before {
            seq: 7,
            version: 1.5,
            node: 0,
            user: "admin".into(),
            operation: "put".into(),
            changes: Vec::new(),
        };
        let bytes = rmp_serde::to_vec_named(&before).unwrap();
        assert_eq!(LogEntry::decode(&bytes).unwrap(), entry(None));
    }

    /// The log's bytes are `rmp_serde`'s named encoding, whatever the entry holds,
    /// and the buffer is sized for them up front.
    #[test]
    fn entries_encode_as_named_messagepack_into_a_buffer_sized_for_them() {
        let mut with_changes = entry(Some("ws:conn-42"));
        with_changes.seq = u64::MAX;
        with_changes.version = f64::MAX;
        with_changes.node = u16::MAX;
        with_changes.changes = vec![
            Change {
                table: "usertable".into(),
                incarnation: u64::MAX,
                kind: ChangeKind::Put,
                key: vec![7; 40],
                record: Some(vec![1; 1100]),
            },
            Change { table: "t".into(), incarnation: 0, kind: ChangeKind::Released, key: Vec::new(), record: None },
        ];
        for entry in [entry(None), with_changes] {
            let bytes = entry.encode().unwrap();
            assert_eq!(bytes, rmp_serde::to_vec_named(&entry).unwrap());
            assert!(bytes.len() <= entry.encoded_size_bound(), "{} > {}", bytes.len(), entry.encoded_size_bound());
        }
    }
}
