//! Log retention: removes every database's log entries older than the retention
//! period (Harper's `logging.auditRetention`) in small writer jobs, never past the
//! slowest durable cursor; first drops the cursors whose consumers have been gone
//! longer than the consumer timeout, so one forgotten consumer cannot hold the log
//! (and the disk) for good.

use std::sync::Weak;
use std::time::Duration;

use tokio::sync::watch;

use crate::access::Context;
use crate::engine::Engine;
use crate::services::{pause, unless_stopped};

/// What retention keeps.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// How long entries are kept.
    pub retention: Duration,
    /// How long a cursor may go without its consumer.
    pub consumer_timeout: Duration,
}

/// Runs until the services stop or the engine is gone: every `retention / 10`
/// (between 100 ms and an hour), prunes each database in turn.
pub(crate) async fn keep_within(engine: Weak<Engine>, limits: Limits, mut stop: watch::Receiver<bool>) {
    let period = (limits.retention / 10).clamp(Duration::from_millis(100), Duration::from_secs(3_600));
    let ctx = Context::system();
    while pause(&mut stop, period).await {
        let Some(names) = engine.upgrade().map(|engine| engine.database_names()) else {
            return;
        };
        let before = crate::time::now_ms() - limits.retention.as_secs_f64() * 1_000.0;
        for name in names {
            // One database at a time, looked up just before its turn: a handle held
            // across the sweep would make a drop or restore of it wait (and fail).
            // A database being dropped or restored is not handed out.
            let Some(db) = engine.upgrade().and_then(|engine| engine.database(&name).ok()) else {
                continue;
            };
            match unless_stopped(&mut stop, db.drop_stale_cursors(&ctx, limits.consumer_timeout)).await {
                None => return,
                Some(Err(err)) => {
                    tracing::warn!(database = db.name(), error = %err, "dropping stale log cursors failed")
                }
                Some(Ok(_)) => {}
            }
            let holder = format!("the audit log retention of '{name}'");
            match unless_stopped(&mut stop, db.prune_log_before(&ctx, None, before, holder)).await {
                None => return,
                Some(Ok(0)) => {}
                Some(Ok(removed)) => tracing::debug!(database = db.name(), removed, "expired audit log entries"),
                Some(Err(_)) if db.is_closing() => {} // being dropped or restored: nothing to keep
                Some(Err(err)) => {
                    tracing::warn!(database = db.name(), error = %err, "expiring audit log entries failed")
                }
            }
        }
    }
}
