//! Records that expire (`@table(expiration:)`): what reads may see, and the sweep
//! that removes expired records from storage.
//!
//! A record of a table with an [`Expiration`] is hidden from every read once
//! `expiration` seconds have passed since its last write ([`Live`]), and a write to it
//! then starts a new record. The engine's sweeper removes it from storage (with its
//! index entries, as a logged delete) `eviction` seconds later, checking each table
//! every `scanInterval` seconds.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use lyre_store::decode_record;

use crate::catalog::{Expiration, TableSchema};
use crate::context::Context;
use crate::engine::Engine;
use crate::error::Result;
use crate::table::{Table, decode_object};
use crate::value::Object;

/// Records looked at per step of a sweep: each step reads one short snapshot and
/// removes what it found in one writer job, so a large table never holds a snapshot,
/// the writer or memory for long.
const SCAN_STEP: usize = 1_000;

/// How often the sweeper looks for tables due a sweep.
const TICK: Duration = Duration::from_secs(1);

/// The current time in ms since the epoch, as versions count it.
pub(crate) fn now_ms() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64() * 1_000.0)
}

/// Which stored records a read may see: every one, or (for a table whose records
/// expire) those not expired when the read began.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Live {
    expiration: Option<Expiration>,
    now: f64,
}

impl Live {
    /// What a read of `table` starting now may see.
    pub(crate) fn of(table: &TableSchema) -> Live {
        Live { expiration: table.expiration, now: if table.expiration.is_some() { now_ms() } else { 0.0 } }
    }

    /// Whether a record last written at `version` (ms) is visible.
    pub(crate) fn sees(&self, version: f64) -> bool {
        self.expiration.is_none_or(|e| !e.is_expired(version, self.now))
    }

    /// The stored record, decoded, unless it has expired.
    pub(crate) fn decode(&self, stored: &[u8]) -> Result<Option<Object>> {
        if self.expiration.is_some() && !self.sees(decode_record(stored)?.0.version) {
            return Ok(None);
        }
        decode_object(stored).map(Some)
    }
}

/// Runs until the engine is gone: every second, sweeps each table whose sweep is due.
pub(crate) async fn sweep_forever(engine: Weak<Engine>) {
    let ctx = Context::system();
    // When each table is next due, and the period that was computed with.
    let mut due: HashMap<(String, String), (Instant, Duration)> = HashMap::new();
    loop {
        tokio::time::sleep(TICK).await;
        let Some(names) = engine.upgrade().map(|engine| engine.database_names()) else {
            return;
        };
        let mut seen = HashSet::new();
        for name in names {
            // Looked up one at a time and dropped before the next; a database going
            // away is not handed out, and a sweep stops when its database starts to.
            let Some(db) = engine.upgrade().and_then(|engine| engine.database(&name).ok()) else {
                continue;
            };
            let schema = db.schema();
            for (table_name, table) in &schema.tables {
                let Some(expiration) = table.expiration else { continue };
                let (slot, period) = ((name.clone(), table_name.clone()), expiration.sweep_period());
                seen.insert(slot.clone());
                // A changed rule (a reloaded schema) is swept at once.
                if due.get(&slot).is_some_and(|(at, was)| Instant::now() < *at && *was == period) {
                    continue;
                }
                let next = Instant::now().checked_add(period).unwrap_or_else(|| Instant::now() + TICK);
                due.insert(slot, (next, period));
                let Ok(table) = db.table(table_name) else { continue };
                match sweep(&table, &ctx).await {
                    Ok(0) => {}
                    Ok(removed) => {
                        tracing::debug!(table = %table_name, database = %name, removed, "evicted expired records")
                    }
                    Err(_) if db.is_closing() => {}
                    Err(err) => {
                        tracing::warn!(table = %table_name, database = %name, error = %err, "evicting expired records failed")
                    }
                }
            }
        }
        due.retain(|slot, _| seen.contains(slot)); // dropped tables and databases
    }
}

/// Removes `table`'s records due for eviction; returns how many. Works through the
/// table in bounded steps (a short read snapshot, then a writer job), under a lease
/// that names it, and stops as soon as the database starts closing.
async fn sweep(table: &Table, ctx: &Context) -> Result<usize> {
    let db = table.db().clone();
    let _lease = db.lease(format!("the expiry sweep of {}.{}", db.name(), table.schema().name));
    let now = now_ms();
    let (mut after, mut removed): (Option<Vec<u8>>, usize) = (None, 0);
    loop {
        if db.is_closing() {
            return Ok(removed);
        }
        let scanned = table.clone();
        let step = crate::engine::blocking(move || scanned.evictable_keys(now, after.as_deref(), SCAN_STEP)).await?;
        if !step.keys.is_empty() {
            removed += table.evict(ctx, step.keys, now).await?;
        }
        match step.next {
            Some(key) => after = Some(key),
            None => return Ok(removed),
        }
    }
}

/// Keeps `engine`'s background sweeper running while the engine lives.
pub(crate) fn spawn(engine: &Arc<Engine>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(sweep_forever(Arc::downgrade(engine)))
}
