//! Names of every LMDB sub-database inside a database environment.

/// The database's catalog: table definitions, keyed by table name.
pub const CATALOG: &str = "catalog";
/// Small metadata values (format version, last log sequence).
pub const META: &str = "meta";
/// The transaction log, keyed by big-endian sequence number.
pub const TXLOG: &str = "txlog";

/// Prefix of every table's primary-record sub-database name.
pub const RECORDS_PREFIX: &str = "records/";

/// Primary records of `table`, keyed by the encoded primary key.
pub fn records(table: &str) -> String {
    format!("{RECORDS_PREFIX}{table}")
}

/// Secondary-index entries of `table`: attribute id, encoded value, encoded primary key.
pub fn index(table: &str) -> String {
    format!("index/{table}")
}

/// At most this many tables fit in one database environment (each owns two
/// sub-databases). LMDB zeroes a slot per possible sub-database at the start of every
/// read transaction, so this bound is paid on every read: 250 tables cost ~27 KB of
/// memset per snapshot, 2,000 cost ~210 KB (18% of a REST GET's CPU).
pub const MAX_TABLES: u32 = 250;
