//! Lyre's data model on top of lyre-store: the catalog, tables, secondary indexes,
//! queries, users and the engine that owns the open databases.
//!
//! API boundary: protocols (lyre-server) use [`Engine`], [`Db`], [`Table`] and
//! [`Context`]; every data operation takes a `Context` and is permission-checked in
//! `access::check`. Nothing here knows HTTP, JSON or Harper's wire shapes: those live
//! in lyre-server.

pub mod access;
mod audit;
pub mod catalog;
mod consistency;
mod context;
mod db;
mod engine;
mod error;
mod expiry;
mod failpoint;
mod index;
pub mod lifecycle;
pub mod query;
mod table;
mod value;

pub use audit::{AuditEntry, AuditSearch};
pub use consistency::ConsistencyReport;
pub use context::Context;
pub use db::{Db, ForUser, Lease, TableStats};
pub use engine::{Engine, EngineOptions, SYSTEM_DATABASE};
pub use error::{Class, Code, Error, Result};
/// How databases are opened (map size, durability); see `lyre_store`.
pub use lyre_store::DatabaseOptions as StorageOptions;
pub use lyre_store::Layout;
pub use lyre_store::Version;
/// How writers batch; see `lyre_store`.
pub use lyre_store::WriterOptions;
pub use table::{DeleteSummary, Expect, RecordVersion, Table, WriteMode, WriteOptions, WriteSummary};
pub use value::{Object, Value};
