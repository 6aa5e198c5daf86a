//! The expiry sweeper: removes expired records from storage (with their index
//! entries, as a logged `expire` transaction) `eviction` seconds after they stop
//! being visible, checking each table every `scanInterval` seconds (every second,
//! through the attribute's index, when `@expiresAt` is the only rule). What is
//! expired is decided by the rules in `record/expiry.rs`.

use std::collections::{HashMap, HashSet};
use std::sync::Weak;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::access::Context;
use crate::catalog::TableSchema;
use crate::engine::Engine;
use crate::error::Result;
use crate::record::expiry::sweep_index;
use crate::services::{pause, unless_stopped};
use crate::table::Table;
use crate::task::blocking;

/// Records looked at per step of a sweep: each step reads one short snapshot and
/// removes what it found in one writer job, so a large table never holds a snapshot,
/// the writer or memory for long.
const SCAN_STEP: usize = 1_000;

/// How often the sweeper looks for tables due a sweep.
const TICK: Duration = Duration::from_secs(1);

/// How often a table whose only rule is `@expiresAt` is swept when it cannot follow
/// the attribute's index (Harper's period).
const FULL_SWEEP_PERIOD: Duration = Duration::from_secs(60);

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

/// Runs until the services stop or the engine is gone: every second, sweeps each
/// table whose sweep is due.
pub(crate) async fn sweep_forever(engine: Weak<Engine>, mut stop: watch::Receiver<bool>) {
    let ctx = Context::system();
    // When each table is next due, and the period that was computed with.
    let mut due: HashMap<(String, String), (Instant, Duration)> = HashMap::new();
    loop {
        if !pause(&mut stop, TICK).await {
            return;
        }
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
                match unless_stopped(&mut stop, sweep(&table, &ctx)).await {
                    None => return,
                    Some(Ok(0)) => {}
                    Some(Ok(removed)) => {
                        tracing::debug!(table = %table_name, database = %name, removed, "evicted expired records")
                    }
                    Some(Err(_)) if db.is_closing() => {}
                    Some(Err(err)) => {
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
    let now = crate::time::now_ms();
    let (mut after, mut removed): (Option<Vec<u8>>, usize) = (None, 0);
    loop {
        if db.is_closing() {
            return Ok(removed);
        }
        let scanned = table.clone();
        let step = blocking(move || scanned.evictable_keys(now, after.as_deref(), SCAN_STEP)).await?;
        if !step.keys.is_empty() {
            removed += table.evict(ctx, step.keys, now).await?;
        }
        match step.next {
            Some(key) => after = Some(key),
            None => return Ok(removed),
        }
    }
}
