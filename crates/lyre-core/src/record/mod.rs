//! The stored record as core sees it, and the rules every write and read applies to
//! one: the entry codec (record plus property versions), how a write merges with
//! the stored record, validation against the declared types, and when a record
//! expires.
//!
//! Pure functions of a record and its table's schema: nothing here reads storage, so
//! indexes, queries, tables and services can all build on it.

pub(crate) mod computed;
pub(crate) mod entry;
pub(crate) mod expiry;
pub(crate) mod merge;
pub(crate) mod validate;

pub(crate) use entry::{Entry, decode_entry, decode_object, encode_entry, stored_record};
pub use merge::WriteMode;
