//! The transaction log as its consumers read it: the one log-reading API.
//!
//! Every committed logical transaction is one [`LogEntry`], in commit order, with a
//! strictly increasing sequence number. A consumer reads from a [`Cursor`] (the
//! sequence number of the last entry it has consumed) in bounded batches, and waits
//! for more on [`Db::committed`], which the writer advances after every commit.
//!
//! A *durable* cursor is stored in the database's metadata under its consumer's
//! name, advanced in a writer job ([`Db::save_cursor`]) once the consumer's work for
//! the entries up to it is durable. Pruning (retention, `delete_audit_logs_before`)
//! never removes an entry a durable cursor has not passed, so a consumer that stops,
//! crashes or restarts resumes exactly where it left off. A cursor whose consumer
//! has been gone (not attached, see [`Db::attach`]) for longer than the configured
//! limit is dropped with a logged reason ([`Db::drop_stale_cursors`]), so one
//! forgotten consumer cannot keep the log, and the disk, growing for good.
//!
//! Sequence numbers are unique within an *epoch* ([`LogBatch::epoch`]): restoring a
//! backup replaces the log with an older one whose numbers may repeat, and gives it
//! a new epoch. A consumer whose state lives outside the database starts over when
//! the epoch changes; one whose state is in the database was restored with it.

use std::sync::{Arc, Weak};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::watch;

pub use lyre_store::{Change, ChangeKind, LogEntry};
use lyre_store::{PruneScope, decode_key};

use crate::access::{Context, require_super_user};
use crate::db::Db;
use crate::error::{Error, Result};
use crate::record::decode_object;
use crate::value::{Object, Value};

/// Prefix of the metadata keys holding durable cursors.
const CURSOR_PREFIX: &str = "cursor:";

/// Log entries looked at per pruning job; see `WriteTxn::prune_log` for the byte bound.
const PRUNE_BATCH: usize = 2_000;

/// A position in one database's log: the sequence number of the last entry consumed
/// (0 before the first). Reading resumes after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Hash)]
pub struct Cursor {
    /// The sequence number of the last entry consumed.
    pub seq: u64,
}

impl Cursor {
    /// The cursor after entry `seq`.
    pub fn after(seq: u64) -> Self {
        Self { seq }
    }
}

/// Entries read from a cursor, and the cursor after them.
#[derive(Debug, Clone, Default)]
pub struct LogBatch {
    /// The log's epoch: sequence numbers are unique within one (see the module docs).
    pub epoch: u64,
    /// The entries, in commit order.
    pub entries: Vec<LogEntry>,
    /// Where the next read resumes: after the last entry read (the cursor read from
    /// when there were none).
    pub next: Cursor,
}

/// A durable cursor as stored.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct StoredCursor {
    seq: u64,
    /// When it was last stored (ms since the epoch): moved, or its consumer attached.
    touched: f64,
}

/// A durable cursor and whether its consumer runs.
#[derive(Debug, Clone, PartialEq)]
pub struct CursorInfo {
    /// The consumer's name.
    pub name: String,
    /// Where it stands.
    pub cursor: Cursor,
    /// When it was last stored (ms since the epoch): moved, or its consumer attached.
    pub touched: f64,
    /// Whether its consumer is running now.
    pub attached: bool,
}

/// A running consumer's claim on its durable cursor: while held, the cursor is
/// never dropped as stale, and no second consumer of the same name may attach.
/// Holds the database weakly, so it never keeps a drop waiting.
pub struct Attachment {
    db: Weak<Db>,
    name: String,
}

impl Drop for Attachment {
    fn drop(&mut self) {
        if let Some(db) = self.db.upgrade() {
            db.attached.lock().remove(&self.name);
        }
    }
}

fn cursor_key(name: &str) -> Vec<u8> {
    format!("{CURSOR_PREFIX}{name}").into_bytes()
}

fn decode_cursor(bytes: &[u8]) -> Result<StoredCursor> {
    Ok(rmp_serde::from_slice(bytes)?)
}

fn encode_cursor(cursor: &StoredCursor) -> Result<Vec<u8>> {
    rmp_serde::to_vec_named(cursor).map_err(|e| Error::Corrupt(format!("encoding a log cursor: {e}")))
}

/// Stores the durable cursor `name` at `seq` inside a writer job: a consumer whose
/// own state is in the database (a derived index) moves its hold on the log in
/// the same transaction as its work.
pub(crate) fn hold_log_in(txn: &mut lyre_store::WriteTxn<'_, '_>, name: &str, seq: u64) -> Result<()> {
    let stored = encode_cursor(&StoredCursor { seq, touched: crate::time::now_ms() })?;
    Ok(txn.put_meta(&cursor_key(name), &stored)?)
}

/// Removes the durable cursor `name` inside a writer job (a derived index that
/// is gone no longer holds the log).
pub(crate) fn release_log_in(txn: &mut lyre_store::WriteTxn<'_, '_>, name: &str) -> Result<()> {
    txn.delete_meta(&cursor_key(name))?;
    Ok(())
}

/// The primary key a record change names.
pub fn change_key(change: &Change) -> Result<Value> {
    Ok(decode_key(&change.key).map(|(key, _)| Value::from(key))?)
}

/// The record a put wrote (`None` for any other change).
pub fn change_record(change: &Change) -> Result<Option<Object>> {
    match (change.kind, &change.record) {
        (ChangeKind::Put, Some(stored)) => decode_object(stored).map(Some),
        _ => Ok(None),
    }
}

impl Db {
    /// The sequence number of the last committed log entry, and a receiver woken
    /// after every later commit: what a consumer waits on instead of polling.
    pub fn committed(&self) -> watch::Receiver<u64> {
        self.store().committed_seq()
    }

    /// The cursor at the end of the log now: a consumer starting from it sees only
    /// what commits from now on.
    pub fn log_tail(&self) -> Result<Cursor> {
        Ok(Cursor::after(self.snapshot()?.last_log_seq()?))
    }

    /// The incarnation of `table` now (0 when there is no such table): the number
    /// its changes in the log carry (see [`Change::incarnation`]).
    pub fn table_incarnation(&self, table: &str) -> Result<u64> {
        Ok(self.snapshot()?.incarnation(table)?)
    }

    /// The sequence number of the oldest entry the log still holds (`None` when it
    /// is empty): history before it was pruned.
    pub fn log_head(&self) -> Result<Option<u64>> {
        Ok(self.snapshot()?.log_sized_from(0)?.next().transpose()?.map(|(entry, _)| entry.seq))
    }

    /// Up to `max_entries` entries after `after`, and about `max_bytes` of them at
    /// most (at least one entry is returned when one exists), from one snapshot.
    /// The log holds every table's records: super users only.
    pub fn read_log(&self, ctx: &Context, after: Cursor, max_entries: usize, max_bytes: usize) -> Result<LogBatch> {
        require_super_user(ctx)?;
        let txn = self.snapshot()?;
        let mut batch = LogBatch { epoch: txn.log_epoch()?, entries: Vec::new(), next: after };
        let mut bytes = 0;
        for item in txn.log_sized_from(after.seq.saturating_add(1))? {
            if batch.entries.len() >= max_entries.max(1) || (bytes >= max_bytes && !batch.entries.is_empty()) {
                break;
            }
            let (entry, size) = item?;
            bytes += size;
            batch.next = Cursor::after(entry.seq);
            batch.entries.push(entry);
        }
        Ok(batch)
    }

    /// Up to `max_entries` entries before the one `before` names (`before.seq`
    /// itself excluded), newest first, about `max_bytes` of them at most (at least
    /// one when one exists): for reading history backwards. Super users only.
    pub fn read_log_back(
        &self,
        ctx: &Context,
        before: Cursor,
        max_entries: usize,
        max_bytes: usize,
    ) -> Result<Vec<LogEntry>> {
        require_super_user(ctx)?;
        let txn = self.snapshot()?;
        let (mut entries, mut bytes) = (Vec::new(), 0);
        for item in txn.log_sized_before(before.seq)? {
            if entries.len() >= max_entries.max(1) || (bytes >= max_bytes && !entries.is_empty()) {
                break;
            }
            let (entry, size) = item?;
            bytes += size;
            entries.push(entry);
        }
        Ok(entries)
    }

    /// The time (version, ms) of the first log entry after `seq`, if there is one:
    /// how long a consumer that has applied through `seq` has been behind.
    pub fn entry_time_after(&self, seq: u64) -> Result<Option<f64>> {
        Ok(self.snapshot()?.log_from(seq.saturating_add(1))?.next().transpose()?.map(|entry| entry.version))
    }

    /// The durable cursor named `name`, if it exists.
    pub fn cursor(&self, name: &str) -> Result<Option<Cursor>> {
        let txn = self.snapshot()?;
        txn.meta(&cursor_key(name))?.map(|bytes| decode_cursor(bytes).map(|c| Cursor::after(c.seq))).transpose()
    }

    /// Every durable cursor.
    pub fn cursors(&self) -> Result<Vec<CursorInfo>> {
        let txn = self.snapshot()?;
        let attached = self.attached.lock().clone();
        let mut out = Vec::new();
        for (key, value) in txn.meta_prefix(CURSOR_PREFIX.as_bytes())? {
            let name = String::from_utf8_lossy(&key[CURSOR_PREFIX.len()..]).into_owned();
            let stored = decode_cursor(&value)?;
            out.push(CursorInfo {
                attached: attached.contains(&name),
                name,
                cursor: Cursor::after(stored.seq),
                touched: stored.touched,
            });
        }
        Ok(out)
    }

    /// Claims the durable cursor `name` for a running consumer (see [`Attachment`]).
    /// Refused while another consumer of that name is attached (or while the cursor
    /// is being dropped as stale). The runner then stores the cursor again, so its
    /// time counts from the attachment.
    pub fn attach(self: &Arc<Self>, name: &str) -> Result<Attachment> {
        if !self.attached.lock().insert(name.to_string()) {
            return Err(Error::Conflict(format!(
                "a consumer named '{name}' is already reading the log of '{}'",
                self.name()
            )));
        }
        Ok(Attachment { db: Arc::downgrade(self), name: name.to_string() })
    }

    /// Stores the durable cursor `name` at `cursor` (creating it), in a writer job:
    /// call once the consumer's work up to `cursor` is durable.
    pub async fn save_cursor(&self, ctx: &Context, name: &str, cursor: Cursor) -> Result<()> {
        require_super_user(ctx)?;
        let key = cursor_key(name);
        let stored = encode_cursor(&StoredCursor { seq: cursor.seq, touched: crate::time::now_ms() })?;
        self.write(ctx, "save_log_cursor", move |txn, _| Ok(txn.put_meta(&key, &stored)?)).await
    }

    /// Removes the durable cursor `name`; returns whether it existed.
    pub async fn drop_cursor(&self, ctx: &Context, name: &str) -> Result<bool> {
        require_super_user(ctx)?;
        let key = cursor_key(name);
        self.write(ctx, "drop_log_cursor", move |txn, _| Ok(txn.delete_meta(&key)?)).await
    }

    /// Drops every durable cursor whose consumer has been gone (not attached) for
    /// longer than `gone_for`, counting from its last move, or from when this
    /// database was opened if that is later; logs each with the reason. Returns the
    /// names dropped.
    pub async fn drop_stale_cursors(&self, ctx: &Context, gone_for: Duration) -> Result<Vec<String>> {
        require_super_user(ctx)?;
        let now = crate::time::now_ms();
        let limit_ms = gone_for.as_secs_f64() * 1_000.0;
        let stale: Vec<CursorInfo> = self
            .cursors()?
            .into_iter()
            .filter(|c| !c.attached && now - c.touched.max(self.opened_at) > limit_ms)
            .collect();
        let mut dropped = Vec::new();
        for cursor in stale {
            // Claimed while it is dropped, so no consumer attaches (and reads the
            // cursor) between this check and the drop's commit.
            if !self.attached.lock().insert(cursor.name.clone()) {
                continue; // attached since the list was read
            }
            let dropped_now = self.drop_cursor(ctx, &cursor.name).await;
            self.attached.lock().remove(&cursor.name);
            if dropped_now? {
                tracing::warn!(
                    database = self.name(),
                    consumer = %cursor.name,
                    at_seq = cursor.cursor.seq,
                    gone_for_s = ((now - cursor.touched.max(self.opened_at)) / 1_000.0) as u64,
                    "dropped a log consumer's cursor: its consumer has been gone longer than the configured limit, and the log it holds back would grow without bound"
                );
                dropped.push(cursor.name);
            }
        }
        Ok(dropped)
    }

    /// Removes the changes to `table` (to every table when `None`) from log entries
    /// made before `before` (ms since the epoch), never past the slowest durable
    /// cursor, in bounded writer jobs, holding a lease named `holder`; stops when the
    /// database starts closing. Returns how many changes were removed.
    pub(crate) async fn prune_log_before(
        self: &Arc<Self>,
        ctx: &Context,
        table: Option<&str>,
        before: f64,
        holder: String,
    ) -> Result<u64> {
        let _lease = self.lease(holder);
        let (mut from, mut removed) = (0, 0);
        loop {
            if self.is_closing() {
                return Err(crate::error::LifecycleError::Closing { database: self.name().to_string() }.into());
            }
            crate::failpoint::hit("log-prune")?;
            let table = table.map(str::to_string);
            let progress = self
                .write(ctx, "delete_audit_logs_before", move |txn, _| {
                    // The slowest durable cursor, as this job sees the cursors.
                    let mut through_seq = None::<u64>;
                    for (_, value) in txn.meta_prefix(CURSOR_PREFIX.as_bytes())? {
                        let seq = decode_cursor(&value)?.seq;
                        through_seq = Some(through_seq.map_or(seq, |s| s.min(seq)));
                    }
                    let scope = PruneScope { before, table: table.as_deref(), through_seq };
                    Ok(txn.prune_log(from, scope, PRUNE_BATCH)?)
                })
                .await?;
            removed += progress.removed;
            match progress.next {
                Some(next) => from = next,
                None => return Ok(removed),
            }
        }
    }
}
