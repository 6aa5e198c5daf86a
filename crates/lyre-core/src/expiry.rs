//! Records that expire (`@table(expiration:)`): what reads may see, and the sweep
//! that removes expired records from storage.
//!
//! A record of a table with an [`Expiration`] is hidden from every read once
//! `expiration` seconds have passed since its last write ([`Live`]), and a write to it
//! then starts a new record. The engine's sweeper removes it from storage (with its
//! index entries, as a logged delete) `eviction` seconds later, checking each table
//! every `scanInterval` seconds.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use lyre_store::decode_record;

use crate::catalog::{Expiration, TableSchema};
use crate::context::Context;
use crate::engine::Engine;
use crate::error::Result;
use crate::table::{Table, decode_object};
use crate::value::Object;

/// Records removed per writer job, so a large sweep never holds the writer for long.
const EVICT_BATCH: usize = 1_000;

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
    let mut due: HashMap<(String, String), Instant> = HashMap::new();
    loop {
        tokio::time::sleep(TICK).await;
        let Some(names) = engine.upgrade().map(|engine| engine.database_names()) else {
            return;
        };
        for name in names {
            // Looked up one at a time: a handle held across the sweep would make a
            // drop or restore wait. Databases going away are not handed out.
            let Some(db) = engine.upgrade().and_then(|engine| engine.database(&name).ok()) else {
                continue;
            };
            let schema = db.schema();
            for (table_name, table) in &schema.tables {
                let Some(expiration) = table.expiration else { continue };
                let slot = (name.clone(), table_name.clone());
                if due.get(&slot).is_some_and(|at| Instant::now() < *at) {
                    continue;
                }
                due.insert(slot, Instant::now() + expiration.sweep_period());
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
    }
}

/// Removes `table`'s records due for eviction; returns how many.
async fn sweep(table: &Table, ctx: &Context) -> Result<usize> {
    let now = now_ms();
    let scanned = table.clone();
    let keys = tokio::task::spawn_blocking(move || scanned.evictable_keys(now))
        .await
        .map_err(|e| crate::error::Error::Stopped(format!("the expiry scan: {e}")))??;
    let mut removed = 0;
    for batch in keys.chunks(EVICT_BATCH) {
        if table.db().is_closing() {
            break;
        }
        removed += table.evict(ctx, batch.to_vec(), now).await?;
    }
    Ok(removed)
}

/// Keeps `engine`'s background sweeper running while the engine lives.
pub(crate) fn spawn(engine: &Arc<Engine>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(sweep_forever(Arc::downgrade(engine)))
}
