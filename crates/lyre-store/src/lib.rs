//! Lyre's storage engine: ACID, memory-mapped storage with one writer per database.
//!
//! Each database is one LMDB environment (through `heed`) holding, per table, a
//! sub-database of primary records and a sub-database of secondary-index entries,
//! plus the database's catalog, metadata and transaction log.
//!
//! * Reads take a [`ReadTxn`]: a consistent snapshot that never blocks and never waits
//!   for the writer. It owns its environment handle, so it can move between threads.
//! * Writes are logical transactions submitted to the database's [`Writer`]. The writer
//!   applies queued transactions in order inside one LMDB write transaction (group
//!   commit), commits once, then acknowledges each; a transaction fails before its
//!   first write, so a failure undoes only itself (see `writer`).
//! * Every committed change is appended to the transaction log ([`LogEntry`]) inside
//!   the same write transaction, so the log and the data never disagree.
//!
//! This crate knows nothing of HTTP, JSON, users or Harper: record bodies are opaque
//! bytes and keys are built from [`KeyValue`]s.

mod database;
mod env;
mod error;
mod key;
mod layout;
mod logstore;
mod names;
mod record;
mod txlog;
mod txn;
mod version;
mod writer;

pub use database::{Closing, Database, DatabaseOptions, TableStore};
pub use error::{Error, Result};
pub use key::{
    KeyValue, MAX_KEY_STRING_BYTES, OwnedKey, decode_key, encode_composite_key, encode_key, encode_key_into,
    encode_string_prefix_into, encoded_key_len, index_entry_primary_key, prefix_successor, skip_key,
};
pub use layout::Layout;
pub use record::{Flags, RecordHeader, decode_record, encode_record};
pub use txlog::{Change, ChangeKind, JobMeta, LogEntry, PruneProgress, PruneScope};
pub use txn::{DerivedEntries, IndexEntries, KeyRange, ReadTxn, Records, WriteTxn};
pub use version::{Version, VersionClock};
pub use writer::{BATCH_BUCKETS, Writer, WriterCounts, WriterOptions, yield_to_request_threads};
