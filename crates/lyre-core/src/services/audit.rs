//! The audit log: one table's view of its database's transaction log.
//!
//! Every record change is logged (with the record as written) in the same
//! LMDB transaction as the change itself, so the audit log is exactly as durable as
//! the data and never disagrees with it. Reading walks the log through its reading
//! API (`db/log.rs`) in bounded batches and keeps this table's record changes that
//! match by time, user or primary key; table-level changes (DDL, clears) are not
//! audit entries. Deleting old entries is `Table::delete_audit_log_before`; the
//! retention service removes entries older than `logging.auditRetention`.

use crate::access::{Context, require_super_user};
use crate::db::log::{Change, Cursor, LogEntry, change_key, change_record};
use crate::error::Result;
use crate::table::Table;
use crate::value::{Object, Value};

/// Log entries read per batch: the walk holds one batch in memory at a time.
const READ_BATCH: usize = 1_024;

/// About how many bytes of log one batch reads.
const READ_BYTES: usize = 8 << 20;

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

/// `table`'s audit log entries matching `search`, oldest first, at most `limit`.
/// Super users only. A long walk: call it off the async threads.
pub fn read_audit_log(
    table: &Table,
    ctx: &Context,
    search: &AuditSearch,
    limit: Option<usize>,
) -> Result<Vec<AuditEntry>> {
    require_super_user(ctx)?;
    let name = table.schema().name.as_str();
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
    let mut cursor = Cursor::default();
    // The log as it stands when the read begins: entries committed meanwhile are not
    // read, so a steady write load cannot keep the walk (and its answer) growing.
    let end = table.db().log_tail()?;
    loop {
        let batch = table.db().read_log(ctx, cursor, READ_BATCH, READ_BYTES)?;
        if batch.entries.is_empty() {
            return Ok(out);
        }
        cursor = batch.next;
        for entry in &batch.entries {
            if limit.is_some_and(|limit| out.len() >= limit) || entry.seq > end.seq {
                return Ok(out);
            }
            let wanted = match search {
                AuditSearch::Time { from, to } => {
                    if to.is_some_and(|to| entry.version > to) {
                        return Ok(out); // the log is in version order
                    }
                    from.is_none_or(|from| entry.version >= from)
                }
                AuditSearch::Users(users) => users.contains(&entry.user),
                AuditSearch::Ids(_) => true,
            };
            if !wanted {
                continue;
            }
            let changes = entry
                .changes
                .iter()
                .filter(|c| c.kind.is_record() && c.table == name && (ids.is_empty() || ids.contains(&c.key)));
            if let Some(audit) = audit_entry(entry, changes)? {
                out.push(audit);
            }
        }
    }
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
        audit.hash_values.push(change_key(change)?);
        audit.records.push(change_record(change)?);
    }
    Ok((!audit.hash_values.is_empty()).then_some(audit))
}
