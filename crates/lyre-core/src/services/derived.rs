//! Derived-index runners: one task per vector index keeps it up to date from the
//! log, and one supervisor starts, restarts and stops them as schemas change.
//!
//! A runner owns its index by epoch: at every start it mints the stored epoch plus
//! one and stores it, and every job it submits is refused if another epoch owns the
//! index by then, so no work of a superseded runner lands after its successor took
//! over. It then either loads the stored graph and resumes from the stored cursor,
//! or rebuilds: it commits the condemned marker first (so a crash anywhere later
//! rebuilds again and nothing condemned is served), removes the old nodes, builds
//! a graph from one snapshot, stores it, and becomes ready at that snapshot's log
//! position, with the marker cleared in the same job.
//!
//! Following the log, it wakes on each commit (no polling), reads a bounded batch,
//! applies each record's last change in it to the graph, and stores the touched
//! nodes with the new cursor in one job. While it works, a 100 ms tick measures
//! its lag: at `maxLagMilliseconds` it sets the flag that turns client writes to
//! the table into 503s, and it clears the flag once it has caught up to the end of
//! the log with the lag under half the limit.
//!
//! A runner that fails or panics ends; the supervisor, which looks every 250 ms,
//! starts another (a new epoch, reloading from what is stored).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::access::Context;
use crate::catalog::{VectorIndex, read_vector};
use crate::db::Db;
use crate::db::derived::{LiveIndex, Phase};
use crate::db::log::{ChangeKind, Cursor, LogBatch, change_record};
use crate::engine::Engine;
use crate::error::Result;
use crate::services::pause;
use crate::task::blocking;
use crate::vector::Graph;
use crate::vector::store::{IndexState, encode_changes, prefix};

/// How often the supervisor looks for indexes to start or stop.
const SCAN: Duration = Duration::from_millis(250);
/// How often a runner measures its lag.
const LAG_TICK: Duration = Duration::from_millis(100);
/// Entries and bytes of log per batch.
const BATCH_ENTRIES: usize = 1_000;
const BATCH_BYTES: usize = 4 << 20;
/// A cursor that moved over entries of other tables only is stored at most this often.
const IDLE_CURSOR_EVERY: Duration = Duration::from_secs(5);

/// What identifies one runner: another declaration or incarnation is another runner.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct RunnerKey {
    database: String,
    table: String,
    incarnation: u64,
    attribute: String,
    attribute_id: u32,
    spec: String,
}

/// Starts, restarts and stops the runners of every declared vector index until the
/// services stop.
pub(crate) async fn supervise(engine: Weak<Engine>, mut stop: watch::Receiver<bool>) {
    let mut running: HashMap<RunnerKey, (tokio::task::Id, watch::Sender<bool>)> = HashMap::new();
    let mut tasks: JoinSet<()> = JoinSet::new();
    let mut scans = 0u64;
    loop {
        while let Some(ended) = tasks.try_join_next_with_id() {
            let id = match ended {
                Ok((id, ())) => id,
                Err(err) => {
                    if err.is_panic() {
                        tracing::error!(error = %err, "a vector index runner panicked; starting another");
                    }
                    err.id()
                }
            };
            running.retain(|_, (task, _)| *task != id);
        }
        let Some(engine_now) = engine.upgrade() else { return };
        let wanted = declared(&engine_now);
        running.retain(|key, (_, stopper)| {
            let keep = wanted.iter().any(|(k, _)| k == key);
            if !keep {
                stopper.send_replace(true);
            }
            keep
        });
        for (key, (db, spec)) in &wanted {
            if running.contains_key(key) {
                continue;
            }
            let (stopper, stopped) = watch::channel(false);
            let runner = Runner { db: Arc::downgrade(db), key: key.clone(), spec: spec.clone() };
            let mut services_stop = stop.clone();
            let task = tasks.spawn(async move {
                tokio::select! {
                    outcome = runner.run(stopped) => if let Err(err) = outcome {
                        tracing::warn!(table = %runner_name(&runner.key), error = %err, "a vector index runner stopped; starting another");
                    },
                    _ = services_stop.wait_for(|s| *s) => {}
                }
            });
            running.insert(key.clone(), (task.id(), stopper));
        }
        if scans.is_multiple_of(40) {
            remove_undeclared(&engine_now, &wanted).await;
        }
        scans += 1;
        drop(engine_now);
        if !pause(&mut stop, SCAN).await {
            running.values().for_each(|(_, stopper)| {
                stopper.send_replace(true);
            });
            while tasks.join_next().await.is_some() {}
            return;
        }
    }
}

fn runner_name(key: &RunnerKey) -> String {
    format!("{}.{}.{}", key.database, key.table, key.attribute)
}

/// Every vector index the open databases' schemas declare.
fn declared(engine: &Engine) -> Vec<(RunnerKey, (Arc<Db>, VectorIndex))> {
    let mut out = Vec::new();
    for db in engine.databases() {
        if db.is_closing() {
            continue;
        }
        for table in db.schema().tables.values() {
            for attribute in &table.attributes {
                let Some(spec) = &attribute.vector else { continue };
                let Ok(incarnation) = db.table_incarnation(&table.name) else { continue };
                let key = RunnerKey {
                    database: db.name().to_string(),
                    table: table.name.clone(),
                    incarnation,
                    attribute: attribute.name.clone(),
                    attribute_id: attribute.id,
                    spec: format!("{spec:?}"),
                };
                out.push((key, (db.clone(), spec.clone())));
            }
        }
    }
    out
}

/// Removes what is stored of vector indexes no schema declares any more (a table
/// dropped, an attribute's index changed to an ordinary one).
async fn remove_undeclared(engine: &Engine, wanted: &[(RunnerKey, (Arc<Db>, VectorIndex))]) {
    let declared: HashSet<(String, Vec<u8>)> =
        wanted.iter().map(|(k, _)| (k.database.clone(), prefix(k.incarnation, k.attribute_id))).collect();
    for db in engine.databases() {
        let Ok(stored) = db.stored_vector_prefixes() else { continue };
        for stale in stored.into_iter().filter(|p| !declared.contains(&(db.name().to_string(), p.clone()))) {
            if let Err(err) = db.remove_vector_index(&stale).await {
                tracing::warn!(database = db.name(), error = %err, "removing an undeclared vector index failed");
            }
        }
    }
}

/// A live index installed in its database for as long as its runner runs.
struct Installed {
    db: Arc<Db>,
    live: Arc<LiveIndex>,
}

impl Installed {
    fn new(db: &Arc<Db>, live: &Arc<LiveIndex>) -> Self {
        db.derived().install(live.clone());
        Self { db: db.clone(), live: live.clone() }
    }
}

impl Drop for Installed {
    fn drop(&mut self) {
        self.db.derived().remove(&self.live);
    }
}

/// One index's runner.
struct Runner {
    db: Weak<Db>,
    key: RunnerKey,
    spec: VectorIndex,
}

impl Runner {
    fn prefix(&self) -> Vec<u8> {
        prefix(self.key.incarnation, self.key.attribute_id)
    }

    /// The durable cursor that holds the log for this index.
    fn consumer(&self) -> String {
        crate::vector::store::consumer_name(&self.prefix())
    }

    async fn run(&self, mut stopped: watch::Receiver<bool>) -> Result<()> {
        let Some(db) = self.db.upgrade() else { return Ok(()) };
        let _lease = db.lease(format!("the vector index runner of {}", runner_name(&self.key)));
        // While it runs, the log it has not consumed is kept for it.
        let _attachment = db.attach(&self.consumer())?;
        let mut closing = db.closing_signal();
        let prefix = self.prefix();
        let stored = db.stored_vector_index(&prefix)?;
        let epoch = stored.state.as_ref().map_or(0, |s| s.epoch) + 1;
        // A previous owner's state, minted anew for this epoch: the claim.
        if let Some(previous) = &stored.state {
            db.claim_vector_index(&prefix, IndexState { epoch, ..previous.clone() }).await?;
        }
        let usable = stored.state.as_ref().filter(|state| {
            state.ready
                && !stored.condemned
                && state.spec == self.spec
                && state.log_epoch == stored.log_epoch
                && (state.cursor >= stored.log_tail || stored.log_head.is_some_and(|head| head <= state.cursor + 1))
        });
        let loaded = match usable {
            Some(state) => {
                let state = IndexState { epoch, ..state.clone() };
                let cursor = state.cursor;
                let (reader, spec, at) = (db.clone(), self.spec.clone(), prefix.clone());
                let read = blocking(move || {
                    crate::failpoint::hit("derived-load")?;
                    reader.read_vector_graph(&at, &spec, &state)
                })
                .await;
                match read {
                    Ok(graph) => Some((graph, cursor)),
                    Err(err) => {
                        tracing::warn!(index = %runner_name(&self.key), error = %err, "a stored vector index cannot be read: rebuilding it");
                        None
                    }
                }
            }
            None => None,
        };
        let (installed, mut cursor) = match loaded {
            Some((graph, cursor)) => {
                (Installed::new(&db, &Arc::new(self.live(graph, Phase::Ready, epoch, cursor))), cursor)
            }
            None => {
                let phase = if stored.state.is_some() { Phase::Rebuilding } else { Phase::Building };
                // Installed while it builds, so queries say why they cannot be served.
                let installed =
                    Installed::new(&db, &Arc::new(self.live(Graph::new(self.spec.clone()), phase, epoch, 0)));
                let state = IndexState {
                    epoch,
                    cursor: 0,
                    log_epoch: stored.log_epoch,
                    entry: None,
                    spec: self.spec.clone(),
                    ready: false,
                };
                let cursor = self.rebuild(&db, &installed.live, state, &stopped).await?;
                (installed, cursor)
            }
        };
        let live = installed.live.clone();
        tracing::info!(index = %runner_name(&self.key), epoch, nodes = live.graph().len(), "vector index ready");
        self.follow(&db, &live, stored.log_epoch, &mut cursor, &mut stopped, &mut closing).await
    }

    fn live(&self, graph: Graph, phase: Phase, epoch: u64, applied: u64) -> LiveIndex {
        LiveIndex::new(&self.key.table, &self.key.attribute, self.key.incarnation, graph, phase, epoch, applied)
    }

    /// Condemns, resets and rebuilds the index from one snapshot; answers the log
    /// position the built graph reflects.
    async fn rebuild(
        &self,
        db: &Arc<Db>,
        live: &Arc<LiveIndex>,
        state: IndexState,
        stopped: &watch::Receiver<bool>,
    ) -> Result<u64> {
        let prefix = self.prefix();
        db.condemn_vector_index(&prefix, state.clone()).await?;
        crate::failpoint::hit("derived-condemned")?;
        db.reset_vector_index(&prefix, state.epoch).await?;
        let (reader, table, attribute, spec) =
            (db.clone(), self.key.table.clone(), self.key.attribute.clone(), self.spec.clone());
        let stop = stopped.clone();
        let (mut graph, tail, skipped) = blocking(move || {
            let stopping = || *stop.borrow();
            reader.build_vector_graph(&table, &attribute, &spec, &stopping)
        })
        .await?;
        if skipped > 0 {
            tracing::warn!(index = %runner_name(&self.key), skipped, "vectors of other dimensions than the index's were left out of it");
        }
        let changes = graph.take_changes();
        let writes = encode_changes(&prefix, &graph, &changes);
        let entry = graph.entry();
        live.replace_graph(graph);
        db.write_vector_nodes(&prefix, state.epoch, writes).await?;
        crate::failpoint::hit("derived-built")?;
        let ready = IndexState { cursor: tail, entry, ready: true, ..state };
        db.write_vector_progress(&prefix, &self.consumer(), ready, Vec::new()).await?;
        live.set_applied(tail);
        live.set_phase(Phase::Ready);
        Ok(tail)
    }

    /// Follows the log from `cursor` until stopped, the database closes, or a step fails.
    async fn follow(
        &self,
        db: &Arc<Db>,
        live: &Arc<LiveIndex>,
        log_epoch: u64,
        cursor: &mut u64,
        stopped: &mut watch::Receiver<bool>,
        closing: &mut watch::Receiver<bool>,
    ) -> Result<()> {
        let mut committed = db.committed();
        let mut tick = tokio::time::interval(LAG_TICK);
        let mut stored_at = Instant::now();
        let mut stored_cursor = *cursor;
        loop {
            if *stopped.borrow() || *closing.borrow() {
                return Ok(());
            }
            let last = *committed.borrow_and_update();
            if last > *cursor {
                let step = self.step(db, live, log_epoch, *cursor, (stored_cursor, stored_at));
                tokio::pin!(step);
                let outcome = loop {
                    tokio::select! {
                        outcome = &mut step => break outcome,
                        _ = tick.tick() => self.watch_lag(db, live),
                    }
                };
                let (next, stored) = outcome?;
                *cursor = next;
                if stored {
                    stored_cursor = next;
                    stored_at = Instant::now();
                }
                self.watch_lag(db, live);
                continue;
            }
            tokio::select! {
                changed = committed.changed() => if changed.is_err() { return Ok(()) },
                _ = tick.tick() => self.watch_lag(db, live),
                _ = stopped.changed() => {}
                _ = closing.changed() => {}
            }
        }
    }

    /// Reads one batch after `cursor` and applies it; answers the new cursor and
    /// whether it was stored.
    async fn step(
        &self,
        db: &Arc<Db>,
        live: &Arc<LiveIndex>,
        log_epoch: u64,
        cursor: u64,
        (stored_cursor, stored_at): (u64, Instant),
    ) -> Result<(u64, bool)> {
        let reader = db.clone();
        let batch: LogBatch =
            blocking(move || reader.read_log(&Context::system(), Cursor::after(cursor), BATCH_ENTRIES, BATCH_BYTES))
                .await?;
        let next = if batch.entries.is_empty() { *db.committed().borrow() } else { batch.next.seq };
        let (index, table, incarnation, attribute) =
            (live.clone(), self.key.table.clone(), self.key.incarnation, self.key.attribute.clone());
        let prefix = self.prefix();
        let writes = blocking(move || {
            crate::failpoint::hit("derived-apply")?;
            apply_batch(&index, &batch, &table, incarnation, &attribute)?;
            let mut graph = index.graph_mut();
            let changes = graph.take_changes();
            Ok((encode_changes(&prefix, &graph, &changes), graph.entry(), changes.is_empty()))
        })
        .await;
        let (writes, entry, unchanged) = writes?;
        let due = next.saturating_sub(stored_cursor) >= 10_000 || stored_at.elapsed() >= IDLE_CURSOR_EVERY;
        if unchanged && !due {
            live.set_applied(next);
            return Ok((next, false));
        }
        let state =
            IndexState { epoch: live.epoch(), cursor: next, log_epoch, entry, spec: self.spec.clone(), ready: true };
        db.write_vector_progress(&self.prefix(), &self.consumer(), state, writes).await?;
        live.set_applied(next);
        Ok((next, true))
    }

    /// Measures the lag and sets or clears the write flag (see the module docs).
    fn watch_lag(&self, db: &Db, live: &LiveIndex) {
        let Ok(lag) = live.measure_lag(db) else { return };
        let Some(limit) = self.spec.max_lag_ms else { return };
        if lag >= limit {
            if !live.is_lagging() {
                tracing::warn!(index = %runner_name(&self.key), lag_ms = lag, limit_ms = limit, "a vector index is behind: refusing writes to its table until it catches up");
            }
            live.set_lagging(true);
        } else if live.is_lagging() && lag < limit / 2 && live.applied() >= *db.committed().borrow() {
            tracing::info!(index = %runner_name(&self.key), "a vector index caught up: writes to its table are admitted again");
            live.set_lagging(false);
        }
    }
}

/// Applies a batch's changes to `table.attribute` to the index's graph: each
/// record's last change in the batch, the graph locked per record so queries
/// interleave.
fn apply_batch(index: &LiveIndex, batch: &LogBatch, table: &str, incarnation: u64, attribute: &str) -> Result<()> {
    let mut last: HashMap<&[u8], Option<Vec<f64>>> = HashMap::new();
    let mut order: Vec<&[u8]> = Vec::new();
    for entry in &batch.entries {
        for change in &entry.changes {
            if change.table != table || change.incarnation != incarnation {
                continue;
            }
            match change.kind {
                ChangeKind::Put => {
                    let vector = change_record(change)?
                        .and_then(|record| record.get(attribute).and_then(|v| read_vector(v).ok()));
                    if last.insert(&change.key, vector).is_none() {
                        order.push(&change.key);
                    }
                }
                ChangeKind::Delete => {
                    if last.insert(&change.key, None).is_none() {
                        order.push(&change.key);
                    }
                }
                ChangeKind::Cleared | ChangeKind::Released => {
                    last.clear();
                    order.clear();
                    let mut graph = index.graph_mut();
                    let keys: Vec<Vec<u8>> =
                        graph.node_ids().filter_map(|id| graph.key_of(id).map(<[u8]>::to_vec)).collect();
                    for key in keys {
                        graph.remove(&key);
                    }
                }
                ChangeKind::Catalog | ChangeKind::Message => {}
            }
        }
    }
    for key in order {
        let mut graph = index.graph_mut();
        match last.get(key).and_then(Option::as_ref) {
            Some(vector) => {
                if let Err(problem) = graph.insert(key, vector) {
                    tracing::warn!(table, attribute, problem, "a vector was left out of its index");
                    graph.remove(key);
                }
            }
            None => {
                graph.remove(key);
            }
        }
    }
    Ok(())
}
