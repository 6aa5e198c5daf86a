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

/// Sub-databases a table owns besides the fixed ones; at most this many tables
/// fit in one database environment.
pub const MAX_TABLES: u32 = 2000;
