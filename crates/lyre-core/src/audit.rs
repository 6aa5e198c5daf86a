//! The audit log: one table's view of its database's transaction log.
//!
//! Every record change is logged (with the record as written) in the same
//! LMDB transaction as the change itself, so the audit log is exactly as durable as
//! the data and never disagrees with it. Reading filters the log by table and by
//! time, user or primary key; deleting old entries prunes this table's changes from
//! the log in bounded writer jobs. A background task ([`keep_within`]) removes every
//! entry older than the retention period (Harper's `logging.auditRetention`).

use std::sync::{Arc, Weak};
use std::time::Duration;

use lyre_store::{Change, ChangeKind, LogEntry, ReadTxn, decode_key};

use crate::context::Context;
use crate::db::Db;
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::table::decode_object;
use crate::value::{Object, Value};

/// Log entries examined per writer job when pruning, so a large prune never holds
/// the writer for long.
pub(crate) const PRUNE_BATCH: usize = 2_000;

/// One logical write to a table, as the audit log shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditEntry {
    /// The operation (`insert`, `update`, `upsert`, `put`, `delete`, ...).
    pub operation: String,
    /// Who made the write.
    pub user: String,
    /// The write's version (ms since the epoch).
    pub timestamp: f64,
    /// Primary keys of the records it changed, in order.
    pub hash_values: Vec<Value>,
    /// Per primary key, the record as written (`None` for a delete).
    pub records: Vec<Option<Object>>,
}

/// Which entries to read.
#[derive(Debug, Clone, PartialEq)]
pub enum AuditSearch {
    /// Entries made in `[from, to]` (ms; either end open).
    Time {
        /// Earliest version, inclusive.
        from: Option<f64>,
        /// Latest version, inclusive.
        to: Option<f64>,
    },
    /// Entries made by these users.
    Users(Vec<String>),
    /// Entries that changed records with these primary keys (only those changes).
    Ids(Vec<Value>),
}

/// Reads `table`'s entries matching `search`, oldest first, at most `limit`.
pub(crate) fn read(txn: &ReadTxn, table: &str, search: &AuditSearch, limit: Option<usize>) -> Result<Vec<AuditEntry>> {
    let ids: Vec<Vec<u8>> = match search {
        AuditSearch::Ids(ids) => ids
            .iter()
            .filter_map(|id| id.as_key())
            .filter_map(|k| lyre_store::encode_key(k).ok())
            .map(|(k, _)| k)
            .collect(),
        _ => Vec::new(),
    };
    let mut out = Vec::new();
    for entry in txn.log_from(0)? {
        if limit.is_some_and(|limit| out.len() >= limit) {
            break;
        }
        let entry = entry?;
        let wanted = match search {
            AuditSearch::Time { from, to } => {
                if to.is_some_and(|to| entry.version > to) {
                    break; // the log is in version order
                }
                from.is_none_or(|from| entry.version >= from)
            }
            AuditSearch::Users(users) => users.contains(&entry.user),
            AuditSearch::Ids(_) => true,
        };
        if !wanted {
            continue;
        }
        let changes = entry.changes.iter().filter(|c| c.table == table && (ids.is_empty() || ids.contains(&c.key)));
        if let Some(audit) = audit_entry(&entry, changes)? {
            out.push(audit);
        }
    }
    Ok(out)
}

/// The audit form of `entry`'s `changes`, if there are any.
fn audit_entry<'a>(entry: &LogEntry, changes: impl Iterator<Item = &'a Change>) -> Result<Option<AuditEntry>> {
    let mut audit = AuditEntry {
        operation: entry.operation.clone(),
        user: entry.user.clone(),
        timestamp: entry.version,
        hash_values: Vec::new(),
        records: Vec::new(),
    };
    for change in changes {
        audit.hash_values.push(decode_key(&change.key).map(|(key, _)| Value::from(key))?);
        audit.records.push(match (change.kind, &change.record) {
            (ChangeKind::Put, Some(record)) => Some(decode_object(record)?),
            _ => None,
        });
    }
    Ok((!audit.hash_values.is_empty()).then_some(audit))
}

/// Removes the changes to `table` (to every table when `None`) from `db`'s log entries
/// made before `before` (ms since the epoch), in bounded writer jobs, holding a lease
/// named `holder`; stops when the database starts closing. Returns how many record
/// changes were removed.
pub(crate) async fn prune_before(
    db: &Arc<Db>,
    ctx: &Context,
    table: Option<&str>,
    before: f64,
    holder: String,
) -> Result<u64> {
    let _lease = db.lease(holder);
    let (mut from, mut removed) = (0, 0);
    loop {
        if db.is_closing() {
            return Err(Error::Lifecycle(format!("stopped: database '{}' is being dropped or restored", db.name())));
        }
        crate::failpoint::hit("log-prune").map_err(|e| Error::Lifecycle(e.to_string()))?;
        let table = table.map(str::to_string);
        let progress = db
            .write(ctx, "delete_audit_logs_before", move |txn, _| {
                Ok(txn.prune_log(from, before, table.as_deref(), PRUNE_BATCH)?)
            })
            .await?;
        removed += progress.removed;
        match progress.next {
            Some(next) => from = next,
            None => return Ok(removed),
        }
    }
}

/// Runs until the engine is gone: every `retention / 10` (between 100 ms and an hour)
/// removes, from every database's log, the entries older than `retention`.
pub(crate) async fn keep_within(engine: Weak<Engine>, retention: Duration) {
    let period = (retention / 10).clamp(Duration::from_millis(100), Duration::from_secs(3_600));
    let ctx = Context::system();
    loop {
        tokio::time::sleep(period).await;
        let Some(names) = engine.upgrade().map(|engine| engine.database_names()) else {
            return;
        };
        let before = crate::expiry::now_ms() - retention.as_secs_f64() * 1_000.0;
        for name in names {
            // One database at a time, looked up just before its turn: a handle held
            // across the sweep would make a drop or restore of it wait (and fail).
            // A database being dropped or restored is not handed out.
            let Some(db) = engine.upgrade().and_then(|engine| engine.database(&name).ok()) else {
                continue;
            };
            let holder = format!("the audit log retention of '{name}'");
            match prune_before(&db, &ctx, None, before, holder).await {
                Ok(0) => {}
                Ok(removed) => tracing::debug!(database = db.name(), removed, "expired audit log entries"),
                Err(_) if db.is_closing() => {} // being dropped or restored: nothing to keep
                Err(err) => tracing::warn!(database = db.name(), error = %err, "expiring audit log entries failed"),
            }
        }
    }
}
