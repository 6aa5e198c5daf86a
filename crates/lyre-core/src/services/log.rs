//! Log consumers: the [`Consumer`] trait, and the runner that feeds one the
//! transaction log of a database from its durable cursor.
//!
//! The runner claims the cursor ([`Db::attach`]), reads the entries after it in
//! bounded batches, hands each batch to the consumer, and stores the cursor after
//! the batch only once `apply` has returned (the consumer's work is durable). When
//! it has caught up it waits on [`Db::committed`], woken by the writer after each
//! commit: no polling. Once a drop or restore starts it lets go of the database at
//! its next step (a lease names it meanwhile), and picks the database up again when
//! it is back.
//!
//! Delivery is at least once: after a crash, the entries after the durable cursor
//! are delivered again, including any the consumer had applied but whose cursor was
//! not yet stored. Every entry carries its sequence number (unique within the
//! batch's epoch), so a consumer that remembers the last one it applied (in the same
//! durable step as its work) applies each exactly once.

use std::future::Future;
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::watch;

use crate::access::Context;
use crate::db::Db;
use crate::db::log::{Attachment, Cursor, LogBatch};
use crate::engine::Engine;
use crate::error::Result;
use crate::services::pause;
use crate::task::blocking;

/// A reader of one database's log, fed by the runner (see the module docs).
pub trait Consumer: Send + 'static {
    /// The name its durable cursor is stored under; unique among the database's
    /// consumers.
    fn name(&self) -> &str;

    /// Where to start when there is no durable cursor (the first run, or after the
    /// cursor was dropped as stale): by default the end of the log, so only what
    /// commits from now on is seen. A derived index would rebuild from a snapshot
    /// here and return that snapshot's log position.
    fn start(&mut self, db: &Arc<Db>) -> impl Future<Output = Result<Cursor>> + Send {
        let tail = db.log_tail();
        async move { tail }
    }

    /// Handles `batch` (entries in commit order, each after the previous batch's
    /// last); returns once its effects are durable. An error is logged and the same
    /// batch is offered again after a pause.
    fn apply(&mut self, batch: &LogBatch) -> impl Future<Output = Result<()>> + Send;
}

/// How a runner reads.
#[derive(Debug, Clone, Copy)]
pub struct RunnerOptions {
    /// Most entries per batch.
    pub max_entries: usize,
    /// About the most bytes of log per batch (at least one entry is always read).
    pub max_bytes: usize,
    /// How long to wait before trying again after a failure, or while the database
    /// is being dropped or restored.
    pub retry: Duration,
}

impl Default for RunnerOptions {
    fn default() -> Self {
        Self { max_entries: 1_000, max_bytes: 4 << 20, retry: Duration::from_secs(1) }
    }
}

/// Why one pass over an open database ended.
enum Ended {
    /// The services are shutting down.
    Stopped,
    /// The database is going away (dropped or restored): let go of it.
    Closing,
}

/// Feeds `consumer` the log of `database` until the services stop or the engine is
/// gone. While the database is absent (being restored, or dropped), it looks again
/// every `retry`; a database created again under the name is a new log (no cursor,
/// a new epoch), which the consumer starts anew. Its cursor stays claimed across
/// failed attempts on the same database, so a failing consumer is never taken for
/// a gone one.
pub(crate) async fn run<C: Consumer>(
    engine: Weak<Engine>,
    database: String,
    mut consumer: C,
    options: RunnerOptions,
    mut stop: watch::Receiver<bool>,
) {
    let ctx = Context::system();
    let mut claim: Option<(Weak<Db>, Attachment)> = None;
    loop {
        let Some(found) = engine.upgrade().map(|engine| engine.database(&database)) else { return };
        if let Ok(db) = found {
            // A claim on another (closed) database of the name is replaced.
            if claim.as_ref().is_none_or(|(held, _)| !std::ptr::eq(held.as_ptr(), Arc::as_ptr(&db))) {
                claim = match db.attach(consumer.name()) {
                    Ok(attachment) => Some((Arc::downgrade(&db), attachment)),
                    Err(err) => {
                        tracing::error!(database, consumer = consumer.name(), error = %err, "a log consumer cannot start");
                        return;
                    }
                };
            }
            let outcome = consume(&db, &ctx, &mut consumer, options, &mut stop).await;
            drop(db);
            match outcome {
                Ok(Ended::Stopped) => return,
                Ok(Ended::Closing) => claim = None,
                Err(err) => {
                    tracing::warn!(database, consumer = consumer.name(), error = %err, "a log consumer failed; retrying")
                }
            }
        }
        if !pause(&mut stop, options.retry).await {
            return;
        }
    }
}

/// One pass over the open database `db` (whose cursor the caller has claimed): from
/// the durable cursor to the end of the log, then on after every commit, until
/// stopped or the database starts closing. A lease names the consumer, so a drop
/// held up by a long `apply` says who holds it; the pass lets go of the database at
/// its next step once a drop or restore starts.
async fn consume<C: Consumer>(
    db: &Arc<Db>,
    ctx: &Context,
    consumer: &mut C,
    options: RunnerOptions,
    stop: &mut watch::Receiver<bool>,
) -> Result<Ended> {
    let mut closing = db.closing_signal();
    let mut committed = db.committed();
    let name = consumer.name().to_string();
    let _lease = db.lease(format!("the log consumer '{name}'"));
    let mut cursor = match db.cursor(&name)? {
        Some(cursor) => cursor,
        None => consumer.start(db).await?,
    };
    // Stored now, so the time it has been gone counts from this attachment.
    db.save_cursor(ctx, &name, cursor).await?;
    loop {
        if *stop.borrow() {
            return Ok(Ended::Stopped);
        }
        if *closing.borrow() {
            return Ok(Ended::Closing);
        }
        let last = *committed.borrow_and_update();
        if last > cursor.seq {
            let (reader, reading) = (db.clone(), ctx.clone());
            let batch =
                blocking(move || reader.read_log(&reading, cursor, options.max_entries, options.max_bytes)).await?;
            // Nothing between the cursor and the last commit (entries made of changes
            // that were all pruned) leaves the cursor at the last commit.
            let next = if batch.entries.is_empty() { Cursor::after(last) } else { batch.next };
            if !batch.entries.is_empty() {
                consumer.apply(&batch).await?;
            }
            db.save_cursor(ctx, &name, next).await?;
            cursor = next;
            continue;
        }
        tokio::select! {
            changed = committed.changed() => {
                if changed.is_err() {
                    return Ok(Ended::Closing); // the storage is closing
                }
            }
            _ = closing.changed() => {}
            _ = stop.changed() => {}
        }
    }
}
