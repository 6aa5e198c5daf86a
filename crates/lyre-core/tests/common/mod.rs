//! Helpers shared by the engine-level tests: engine options on a temporary root and
//! records from JSON.

#![allow(dead_code)] // each test binary uses its own subset

use std::time::Duration;

use lyre_core::db::log::{Cursor, LogEntry};
use lyre_core::users::AdminBootstrap;
use lyre_core::{Db, EngineOptions, Object, Value};

/// Engine options for a root at `root`: small maps; `durable` flushes every commit.
pub fn options_with(root: &std::path::Path, durable: bool) -> EngineOptions {
    EngineOptions {
        root: root.to_path_buf(),
        node_id: 1,
        storage: lyre_core::StorageOptions { map_size: 1 << 30, durable },
        writer: Default::default(),
        admin: AdminBootstrap { username: "admin".into(), password: Some("password".into()) },
        auth_cache_ttl: Duration::from_secs(30),
        login_limit: Default::default(),
        databases_dir: None,
        release_timeout: Duration::from_secs(5),
    }
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
