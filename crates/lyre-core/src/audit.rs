//! The audit log: one table's view of its database's transaction log.
//!
//! Every record change is logged (with the record as written) in the same
//! LMDB transaction as the change itself, so the audit log is exactly as durable as
//! the data and never disagrees with it. Reading filters the log by table and by
//! time, user or primary key; deleting old entries prunes this table's changes from
//! the log in bounded writer jobs.

use lyre_store::{Change, ChangeKind, LogEntry, ReadTxn, decode_key};

use crate::error::Result;
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
