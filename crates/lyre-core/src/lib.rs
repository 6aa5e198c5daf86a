//! Lyre's data model on top of lyre-store: the catalog, tables, secondary indexes,
//! queries, users, the engine that owns the open databases, and the services that
//! run in the background and consume the transaction log.
//!
//! The modules form layers; each imports only its own layer or those below it
//! (`crates/lyre-server/tests/tidy.rs` checks this), bottom to top:
//!
//! 1. foundation: `error`, `value`, `raw` (stored MessagePack served undecoded),
//!    `footprint`, `time`, `failpoint`, `task`, `durable`, `testing` (for tests only);
//! 2. model: `catalog` (schema, names, `schema.graphql`), `access` (user, context,
//!    the permission check);
//! 3. `record`: the stored entry codec, merges, validation, expiry rules; `blobs`:
//!    blob files beside the database;
//! 4. `index`: secondary-index entries kept inside each write;
//! 5. `db`: one open database (writer, leases, published schema, DDL, the log API);
//! 6. `query`: planning and running searches;
//! 7. `table` (reads and write jobs) and `users`;
//! 8. `lifecycle` (crash-safe drop and restore) and `engine`;
//! 9. `services`: everything in the background (retention, expiry, jobs, log
//!    consumers). Nothing imports it.
//!
//! API boundary: protocols (lyre-server) use [`Engine`], [`Db`], [`Table`],
//! [`Context`] and [`Services`]; every data operation takes a `Context` and is
//! permission-checked in `access::check`. Nothing here knows HTTP, JSON or Harper's
//! wire shapes: those live in lyre-server.

pub mod access;
pub mod blobs;
pub mod catalog;
pub mod db;
pub mod derived;
mod durable;
mod engine;
mod error;
pub mod failpoint;
mod footprint;
mod index;
mod json_escape;
pub mod lifecycle;
pub mod query;
mod raw;
mod record;
pub mod services;
mod table;
pub mod task;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
mod time;
pub mod users;
mod value;
pub mod vector;

pub use access::Context;
pub use catalog::SYSTEM_DATABASE;
pub use db::{CatalogChange, Db, ForUser, Lease, TableStats};
pub use engine::{Engine, EngineOptions};
pub use error::{Class, Code, Error, LifecycleError, Result};
pub use footprint::Footprint;
/// How databases are opened (map size, durability); see `lyre_store`.
pub use lyre_store::DatabaseOptions as StorageOptions;
pub use lyre_store::Layout;
pub use lyre_store::Version;
/// How writers batch; see `lyre_store`.
pub use lyre_store::WriterOptions;
/// What a writer has done, and the batch-size buckets it counts in; see `lyre_store`.
pub use lyre_store::{BATCH_BUCKETS, WriterCounts};
pub use record::computed::{AttributeComputer, Computers};
pub use services::{AuditEntry, AuditSearch, ConsistencyReport, ServiceOptions, Services};
pub use table::{
    CONTENT_DATA, CONTENT_TYPE, CurrentPage, CurrentRecord, DeleteSummary, Expect, HeldRecord, KeyScope, RecordBody,
    RecordVersion, Table, TransactionWrite, WriteMode, WriteOptions, WriteSummary, content_record, transact,
};
pub use time::{now_ms, parse_iso8601};
pub use value::{BlobRef, Object, Value, object_with_capacity};
