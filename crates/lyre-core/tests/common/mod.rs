//! Helpers shared by the engine-level tests: engine options on a temporary root and
//! records from JSON.

#![allow(dead_code)] // each test binary uses its own subset

use lyre_core::db::log::{Cursor, LogEntry};
use lyre_core::{Db, EngineOptions, Object, Value};

/// Engine options for a root at `root`; `durable` flushes every commit.
pub fn options_with(root: &std::path::Path, durable: bool) -> EngineOptions {
    let mut options = EngineOptions::for_tests(root);
    options.storage.durable = durable;
    options
}

/// Engine options for a root at `root`, without flushing (tests that do not crash).
pub fn options(root: &std::path::Path) -> EngineOptions {
    options_with(root, false)
}

/// A record from a JSON object literal.
pub fn record(json: &str) -> Object {
    match serde_json::from_str::<Value>(json) {
        Ok(Value::Object(o)) => o,
        other => panic!("not an object: {other:?}"),
    }
}

/// Every entry of `db`'s log, oldest first.
pub fn whole_log(db: &Db) -> Vec<LogEntry> {
    let mut out = Vec::new();
    let mut cursor = Cursor::default();
    loop {
        let batch = db.read_log(&lyre_core::Context::system(), cursor, 100, 1 << 20).unwrap();
        if batch.entries.is_empty() {
            return out;
        }
        cursor = batch.next;
        out.extend(batch.entries);
    }
}
