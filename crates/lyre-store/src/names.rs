//! Names of every LMDB sub-database inside a database environment.

/// The database's catalog: table definitions, keyed by table name.
pub const CATALOG: &str = "catalog";
/// Small metadata values (format version, last log sequence).
pub const META: &str = "meta";
/// The transaction log, keyed by big-endian sequence number.
pub const TXLOG: &str = "txlog";
/// Derived indexes' own state (vector graphs and their cursors), each index under
/// a key prefix of its own, written only by the index's runner.
pub const DERIVED: &str = "derived";

/// Prefix of every slot's primary-record sub-database name.
pub const RECORDS_PREFIX: &str = "records/";

/// Prefix of the metadata keys recording which slot holds which table.
pub const SLOT_PREFIX: &str = "slot:";

/// The metadata key present once a database records slot assignments (`slot:`
/// keys). Without it, sub-databases are named after their tables (the older format).
pub const SLOTTED: &[u8] = b"format:slotted";

/// The metadata key holding the highest version the node's clock had issued when a
/// transaction committed (f64 ms, big-endian bits): the floor for versions issued after
/// a restart, even if the wall clock has stepped back meanwhile.
pub const HIGHEST_VERSION: &[u8] = b"version:highest";

/// Prefix of the metadata keys holding each table's incarnation (u64 big-endian): a
/// number that changes whenever a table name is dropped and created again.
pub const INCARNATION_PREFIX: &str = "incarnation:";

/// The metadata key holding the last incarnation number given out (u64 big-endian).
pub const LAST_INCARNATION: &[u8] = b"format:last-incarnation";

/// The metadata key recording `table`'s incarnation.
pub fn incarnation_key(table: &str) -> Vec<u8> {
    // Concatenated, not formatted: every write transaction builds this key.
    [INCARNATION_PREFIX.as_bytes(), table.as_bytes()].concat()
}

/// The metadata key holding the log's epoch (u64 big-endian): a random number given
/// when the database is created and given anew when a backup is restored over it,
/// so a reader of the log can tell that sequence numbers started over from an older
/// point.
pub const LOG_EPOCH: &[u8] = b"log:epoch";

/// Primary records in storage slot `slot`, keyed by the encoded primary key. A slot
/// is a number (older databases named slots after their tables).
pub fn records(slot: &str) -> String {
    format!("{RECORDS_PREFIX}{slot}")
}

/// Secondary-index entries in storage slot `slot`: attribute id, encoded value,
/// encoded primary key.
pub fn index(slot: &str) -> String {
    format!("index/{slot}")
}

/// The metadata key recording `table`'s slot.
pub fn slot_key(table: &str) -> Vec<u8> {
    [SLOT_PREFIX.as_bytes(), table.as_bytes()].concat()
}

/// At most this many tables fit in one database environment (each owns two
/// sub-databases). LMDB zeroes a slot per possible sub-database at the start of every
/// read transaction, so this bound is paid on every read: 250 tables cost ~27 KB of
/// memset per snapshot, 2,000 cost ~210 KB (18% of a REST GET's CPU).
pub const MAX_TABLES: u32 = 250;

#[cfg(test)]
mod tests {
    use super::*;

    /// These keys are stored: their bytes must never change.
    #[test]
    fn metadata_keys_keep_their_stored_bytes() {
        assert_eq!(incarnation_key("Dog"), b"incarnation:Dog");
        assert_eq!(slot_key("Dog"), b"slot:Dog");
        assert_eq!(incarnation_key("é/x"), "incarnation:é/x".as_bytes());
    }
}
