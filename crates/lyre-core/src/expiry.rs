//! Records that expire (`@table(expiration:)`, `@expiresAt`): what reads may see, and
//! the sweep that removes expired records from storage.
//!
//! A record of a table with an [`Expiration`](crate::catalog::Expiration) is hidden
//! from every read once `expiration` seconds have passed since its last write
//! ([`Live`]); a record whose `@expiresAt` attribute holds a time (ms since the epoch)
//! is hidden from that time on, whatever the table's rule. A write to a hidden record
//! starts a new record. The engine's sweeper removes it from storage (with its index
//! entries, as a logged delete) `eviction` seconds later, checking each table every
//! `scanInterval` seconds (every second, through the attribute's index, when
//! `@expiresAt` is the only rule).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use lyre_store::decode_record;

use crate::catalog::{Attribute, TableSchema};
use crate::context::Context;
use crate::engine::Engine;
use crate::error::Result;
use crate::table::{Table, decode_object};
use crate::value::{Object, Value};

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

/// Whether records of `table` can expire at all.
pub(crate) fn expires(table: &TableSchema) -> bool {
    table.expiration.is_some() || table.expires_at.is_some()
}

/// When a record stops being visible (ms since the epoch), if it ever does: its own
/// `@expiresAt` time when it holds one (a number), else its last write (`version`)
/// plus the table's `expiration`.
pub(crate) fn hidden_from(table: &TableSchema, version: f64, record: &Object) -> Option<f64> {
    let own = table.expires_at.as_ref().and_then(|name| match record.get(name) {
        Some(Value::Int(ms)) => Some(*ms as f64),
        Some(Value::Float(ms)) if ms.is_finite() => Some(*ms),
        _ => None,
    });
    own.or_else(|| table.expiration.map(|e| version + e.expiration as f64 * 1_000.0))
}

/// When a record may be removed from storage (ms since the epoch), if it ever may:
/// the table's `eviction` seconds after it stops being visible.
pub(crate) fn removable_from(table: &TableSchema, version: f64, record: &Object) -> Option<f64> {
    let eviction = table.expiration.map_or(0.0, |e| e.eviction as f64 * 1_000.0);
    hidden_from(table, version, record).map(|at| at + eviction)
}

/// Which stored records a read may see: every one, or (for a table whose records
/// expire) those not expired when the read began.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Live<'a> {
    table: &'a TableSchema,
    now: f64,
}

impl<'a> Live<'a> {
    /// What a read of `table` starting now may see.
    pub(crate) fn of(table: &'a TableSchema) -> Self {
        Live::at(table, if expires(table) { now_ms() } else { 0.0 })
    }

    /// What a read of `table` at `now` (ms) may see.
    pub(crate) fn at(table: &'a TableSchema, now: f64) -> Self {
        Live { table, now }
    }

    /// Whether a record last written at `version` (ms) is visible.
    pub(crate) fn sees(&self, version: f64, record: &Object) -> bool {
        hidden_from(self.table, version, record).is_none_or(|at| at > self.now)
    }

    /// The stored record, decoded, unless it has expired.
    pub(crate) fn decode(&self, stored: &[u8]) -> Result<Option<Object>> {
        match (&self.table.expiration, &self.table.expires_at) {
            (None, None) => decode_object(stored).map(Some),
            // Expiry by age alone: the header says, without decoding the record.
            (Some(expiration), None) => {
                let version = decode_record(stored)?.0.version;
                if expiration.is_expired(version, self.now) { Ok(None) } else { decode_object(stored).map(Some) }
            }
            (_, Some(_)) => {
                let version = decode_record(stored)?.0.version;
                let record = decode_object(stored)?;
                Ok(self.sees(version, &record).then_some(record))
            }
        }
    }
}

/// How often a table whose only rule is `@expiresAt` is swept when it cannot follow
/// the attribute's index (Harper's period).
const FULL_SWEEP_PERIOD: Duration = Duration::from_secs(60);

/// The attribute whose index an expiry sweep can follow instead of walking every
/// record: the `@expiresAt` one, when that is the table's only rule and its index
/// holds one entry per record.
pub(crate) fn sweep_index(table: &TableSchema) -> Option<&Attribute> {
    if table.expiration.is_some() {
        return None;
    }
    let name = table.expires_at.as_ref()?;
    table.attribute(name).filter(|a| a.indexed && !a.multi_valued)
}

/// How often `table` is swept, if its records expire: as its `expiration` rule
/// says; every second when `@expiresAt` is its only rule and the sweep can follow its
/// index (reading only the entries already due costs next to nothing); else every
/// minute.
fn sweep_period(table: &TableSchema) -> Option<Duration> {
    match (table.expiration, &table.expires_at) {
        (Some(expiration), _) => Some(expiration.sweep_period()),
        (None, Some(_)) if sweep_index(table).is_some() => Some(TICK),
        (None, Some(_)) => Some(FULL_SWEEP_PERIOD),
        (None, None) => None,
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
                let Some(period) = sweep_period(table) else { continue };
                let slot = (name.clone(), table_name.clone());
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
