//! The derived indexes of one open database as readers and writers meet them: each
//! live vector index's graph, its phase, its owner epoch, how far it has applied
//! the log, and whether it is too far behind to take more writes.
//!
//! The runner that keeps an index up to date (`services/derived.rs`) installs the
//! index here and is its only writer. A query asks an index for its coverage
//! ([`LiveIndex::coverage`]): current (everything committed when the query began is
//! in it), bounded (behind by less than the query tolerates), or a 503 once the
//! query has waited as long as it may. A write to a table whose index has set its
//! lag flag is refused with a 503 ([`DerivedIndexes::refuse_if_lagging`]); writes
//! replicated from elsewhere never are.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};
use tokio::sync::watch;

use std::ops::Bound;

use crate::catalog::{VectorIndex, read_vector};
use crate::db::Db;
use crate::error::{Error, Result};
use crate::record::entry::decode_object_only;
use crate::vector::Graph;
use crate::vector::store::{self, IndexState};

/// The most a query may wait for an index (Harper's cap on `waitForIndexMilliseconds`).
pub const MAX_WAIT: Duration = Duration::from_secs(30);

/// A query's default tolerance of lag, when it names none (Harper's 3,000 ms).
pub const DEFAULT_TOLERANCE_MS: u64 = 3_000;

/// Where an index is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Being built for the first time: not served.
    Building,
    /// Serving, and following the log.
    Ready,
    /// Condemned and being built again: not served.
    Rebuilding,
}

impl Phase {
    /// The phase as `describe_table` names it.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Building => "building",
            Phase::Ready => "ready",
            Phase::Rebuilding => "rebuilding",
        }
    }
}

/// How current a query's answer from an index is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Coverage {
    /// Everything committed before the query began is in the index.
    pub current: bool,
    /// How far behind it is (ms; 0 when current).
    pub lag_ms: u64,
    /// The lag the query tolerated (ms).
    pub tolerance_ms: u64,
}

impl Coverage {
    /// Harper's `Harper-Index-Coverage` header value.
    pub fn header(&self) -> String {
        let kind = if self.current { "current" } else { "bounded" };
        format!("{kind}; lag={}; tolerance={}", self.lag_ms, self.tolerance_ms)
    }
}

/// How long a query waits for an index, and how far behind it may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexWait {
    /// The lag tolerated (ms); 0 wants the index current.
    pub tolerance_ms: u64,
    /// How long to wait for it to catch up (or finish building).
    pub wait: Duration,
}

impl Default for IndexWait {
    fn default() -> Self {
        Self { tolerance_ms: DEFAULT_TOLERANCE_MS, wait: Duration::ZERO }
    }
}

/// One live vector index.
pub struct LiveIndex {
    /// The table it indexes.
    pub table: String,
    /// The attribute it indexes.
    pub attribute: String,
    /// The table's incarnation it was built for.
    pub incarnation: u64,
    /// The declaration it follows.
    pub spec: VectorIndex,
    graph: RwLock<Graph>,
    phase: Mutex<Phase>,
    epoch: AtomicU64,
    /// The log position applied and durable.
    applied: watch::Sender<u64>,
    /// Writes to the table are refused while set.
    lagging: AtomicBool,
    /// The lag last measured (ms).
    lag_ms: AtomicU64,
    /// Set once its runner has ended: a successor serves the index, and a query
    /// waiting on this one looks the index up again.
    retired: AtomicBool,
}

impl LiveIndex {
    /// A live index in `phase`, owned by `epoch`, holding `graph`, applied through `applied`.
    pub fn new(
        table: &str,
        attribute: &str,
        incarnation: u64,
        graph: Graph,
        phase: Phase,
        epoch: u64,
        applied: u64,
    ) -> Self {
        Self {
            table: table.to_string(),
            attribute: attribute.to_string(),
            incarnation,
            spec: graph.spec().clone(),
            graph: RwLock::new(graph),
            phase: Mutex::new(phase),
            epoch: AtomicU64::new(epoch),
            applied: watch::Sender::new(applied),
            lagging: AtomicBool::new(false),
            lag_ms: AtomicU64::new(0),
            retired: AtomicBool::new(false),
        }
    }

    /// Marks the index as no longer kept by its runner, waking queries that wait
    /// on it (they look up the successor).
    pub fn retire(&self) {
        self.retired.store(true, Ordering::Release);
        self.applied.send_modify(|_| {});
    }

    /// Whether its runner has ended.
    pub fn is_retired(&self) -> bool {
        self.retired.load(Ordering::Acquire)
    }

    /// The graph, for reading (queries). Take it once per scope: the runner's
    /// write waits behind a held guard, and a second guard of the same thread
    /// would wait behind the runner.
    pub fn graph(&self) -> parking_lot::RwLockReadGuard<'_, Graph> {
        self.graph.read()
    }

    /// The graph, for the runner's changes.
    pub fn graph_mut(&self) -> parking_lot::RwLockWriteGuard<'_, Graph> {
        self.graph.write()
    }

    /// Replaces the graph (a rebuild's result).
    pub fn replace_graph(&self, graph: Graph) {
        *self.graph.write() = graph;
    }

    /// The phase now.
    pub fn phase(&self) -> Phase {
        *self.phase.lock()
    }

    /// Moves to `phase`, waking queries waiting for the index.
    pub fn set_phase(&self, phase: Phase) {
        *self.phase.lock() = phase;
        self.applied.send_modify(|_| {});
    }

    /// The owner epoch.
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// Whether `epoch` still owns the index: work of an earlier owner is dropped.
    pub fn is_owner(&self, epoch: u64) -> bool {
        self.epoch() == epoch
    }

    /// The log position applied and durable.
    pub fn applied(&self) -> u64 {
        *self.applied.borrow()
    }

    /// Records that everything through `seq` is applied and durable.
    pub fn set_applied(&self, seq: u64) {
        self.applied.send_if_modified(|current| {
            let moved = *current != seq;
            *current = seq;
            moved
        });
    }

    /// Whether writes to the table are refused now.
    pub fn is_lagging(&self) -> bool {
        self.lagging.load(Ordering::Acquire)
    }

    /// Sets or clears the lag flag (the runner's decision, with hysteresis).
    pub fn set_lagging(&self, lagging: bool) {
        self.lagging.store(lagging, Ordering::Release);
    }

    /// The lag last measured (ms).
    pub fn last_lag_ms(&self) -> u64 {
        self.lag_ms.load(Ordering::Relaxed)
    }

    /// How far behind the index is now (ms): 0 when it has applied everything
    /// committed, else the age of the oldest entry it has not.
    pub fn measure_lag(&self, db: &Db) -> Result<u64> {
        let committed = *db.committed().borrow();
        let applied = self.applied();
        let lag = if applied >= committed {
            0
        } else {
            let oldest = db.entry_time_after(applied)?;
            oldest.map_or(0, |version| (crate::time::now_ms() - version).max(0.0) as u64)
        };
        self.lag_ms.store(lag, Ordering::Relaxed);
        Ok(lag)
    }

    /// Waits (at most `wait.wait`) until the index covers the log through
    /// `target`, or is behind by no more than `wait.tolerance_ms`; answers the
    /// coverage, a 503 `DERIVED_INDEX_LAGGING` naming the index once the wait is
    /// over, or `None` when its runner ended meanwhile (look up its successor).
    pub async fn coverage(&self, db: &Db, target: u64, wait: IndexWait) -> Result<Option<Coverage>> {
        let deadline = Instant::now() + wait.wait.min(MAX_WAIT);
        let mut changes = self.applied.subscribe();
        loop {
            changes.borrow_and_update();
            if self.is_retired() {
                return Ok(None);
            }
            let phase = self.phase();
            if phase == Phase::Ready {
                if self.applied() >= target {
                    return Ok(Some(Coverage { current: true, lag_ms: 0, tolerance_ms: wait.tolerance_ms }));
                }
                let lag = self.measure_lag(db)?;
                if wait.tolerance_ms > 0 && lag <= wait.tolerance_ms {
                    return Ok(Some(Coverage { current: false, lag_ms: lag, tolerance_ms: wait.tolerance_ms }));
                }
            }
            let now = Instant::now();
            if now >= deadline {
                let why = match phase {
                    Phase::Ready => format!("is {} ms behind", self.last_lag_ms()),
                    other => format!("is {}", other.name()),
                };
                return Err(Error::DerivedIndexLagging(format!(
                    "the vector index on {}.{} {why}, more than the query tolerates ({} ms); retry later",
                    self.table, self.attribute, wait.tolerance_ms
                )));
            }
            // Woken by the runner's progress; the deadline bounds the wait.
            let _ = tokio::time::timeout(deadline - now, changes.changed()).await;
        }
    }
}

/// A vector index as `describe_table` shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct IndexStatus {
    /// The attribute indexed.
    pub attribute: String,
    /// Its phase (`building` also while its runner has not started).
    pub phase: Phase,
    /// Its owner epoch (0 before a runner owns it).
    pub epoch: u64,
    /// Vectors it holds.
    pub nodes: usize,
    /// Bytes its graph holds in memory (vectors, links, keys).
    pub memory_bytes: usize,
    /// The lag last measured (ms).
    pub lag_ms: u64,
    /// Whether writes to the table are refused because of it.
    pub lagging: bool,
}

/// The live derived indexes of one database.
#[derive(Default)]
pub struct DerivedIndexes {
    indexes: RwLock<HashMap<(String, String), Arc<LiveIndex>>>,
}

impl DerivedIndexes {
    /// Installs `index` (retiring the one it replaces, if any).
    pub fn install(&self, index: Arc<LiveIndex>) {
        let replaced = self.indexes.write().insert((index.table.clone(), index.attribute.clone()), index);
        if let Some(replaced) = replaced {
            replaced.retire();
        }
    }

    /// Retires `index` and removes it, unless a successor has replaced it already.
    pub fn remove(&self, index: &Arc<LiveIndex>) {
        index.retire();
        let mut indexes = self.indexes.write();
        let key = (index.table.clone(), index.attribute.clone());
        if indexes.get(&key).is_some_and(|held| Arc::ptr_eq(held, index)) {
            indexes.remove(&key);
        }
    }

    /// The live index on `table.attribute`.
    pub fn get(&self, table: &str, attribute: &str) -> Option<Arc<LiveIndex>> {
        self.indexes.read().get(&(table.to_string(), attribute.to_string())).cloned()
    }

    /// Every live index of `table`.
    pub fn of_table(&self, table: &str) -> Vec<Arc<LiveIndex>> {
        self.indexes.read().values().filter(|index| index.table == table).cloned().collect()
    }

    /// The status of every vector index `table` declares.
    pub fn status_of(&self, table: &crate::catalog::TableSchema) -> Vec<IndexStatus> {
        table
            .attributes
            .iter()
            .filter(|a| a.vector.is_some())
            .map(|a| match self.get(&table.name, &a.name) {
                Some(index) => {
                    // One read guard: a second one taken while the runner waits to
                    // write would wait behind it, and it behind the first (deadlock).
                    let (nodes, memory_bytes) = {
                        let graph = index.graph();
                        (graph.len(), graph.memory_bytes())
                    };
                    IndexStatus {
                        attribute: a.name.clone(),
                        phase: index.phase(),
                        epoch: index.epoch(),
                        nodes,
                        memory_bytes,
                        lag_ms: index.last_lag_ms(),
                        lagging: index.is_lagging(),
                    }
                }
                None => IndexStatus {
                    attribute: a.name.clone(),
                    phase: Phase::Building,
                    epoch: 0,
                    nodes: 0,
                    memory_bytes: 0,
                    lag_ms: 0,
                    lagging: false,
                },
            })
            .collect()
    }

    /// Refuses a write to `table` while one of its indexes is too far behind.
    pub fn refuse_if_lagging(&self, table: &str) -> Result<()> {
        let indexes = self.indexes.read();
        match indexes.values().find(|index| index.table == table && index.is_lagging()) {
            None => Ok(()),
            Some(index) => Err(Error::DerivedIndexLagging(format!(
                "the vector index on {table}.{} is {} ms behind, more than its maxLagMilliseconds ({} ms): writes to {table} wait until it catches up; retry later",
                index.attribute,
                index.last_lag_ms(),
                index.spec.max_lag_ms.unwrap_or(0)
            ))),
        }
    }
}

/// What is stored of one vector index, read from one snapshot.
#[derive(Debug, Clone)]
pub struct StoredIndex {
    /// Its state, if one was ever written.
    pub state: Option<IndexState>,
    /// Whether a rebuild was begun and has not finished.
    pub condemned: bool,
    /// The log's epoch now.
    pub log_epoch: u64,
    /// The oldest log entry held (`None`: the log is empty).
    pub log_head: Option<u64>,
    /// The newest log entry.
    pub log_tail: u64,
}

/// Entries written per job when a rebuilt graph is stored.
const NODES_PER_JOB: usize = 2_000;

/// The derived entries one apply writes: `(key, Some(value))` to put, `(key, None)`
/// to delete.
pub type Writes = Vec<(Vec<u8>, Option<Vec<u8>>)>;

impl Db {
    /// What is stored of the vector index under `prefix`.
    pub fn stored_vector_index(&self, prefix: &[u8]) -> Result<StoredIndex> {
        let txn = self.snapshot()?;
        Ok(StoredIndex {
            state: store::read_state(&txn, prefix)?,
            condemned: store::is_condemned(&txn, prefix)?,
            log_epoch: txn.log_epoch()?,
            log_head: self.log_head()?,
            log_tail: txn.last_log_seq()?,
        })
    }

    /// Reads the stored graph under `prefix` (blocking: run it off the runtime).
    pub fn read_vector_graph(&self, prefix: &[u8], spec: &VectorIndex, state: &IndexState) -> Result<Graph> {
        store::read_graph(&self.snapshot()?, prefix, spec, state)
    }

    /// Builds a graph of every vector of `table.attribute` in one snapshot, and
    /// answers it with that snapshot's log tail: the log after it holds exactly
    /// what the graph has not seen. Vectors of other dimensions than the first
    /// are left out, and counted (blocking: run it off the runtime).
    pub fn build_vector_graph(
        &self,
        table: &str,
        attribute: &str,
        spec: &VectorIndex,
        stopping: &dyn Fn() -> bool,
    ) -> Result<(Graph, u64, usize)> {
        crate::failpoint::hit("derived-build")?;
        let txn = self.snapshot()?;
        let tail = txn.last_log_seq()?;
        let mut graph = Graph::new(spec.clone());
        let mut skipped = 0;
        let Some(records) = txn.table(table)? else { return Ok((graph, tail, 0)) };
        let names = [attribute.to_string()];
        for (i, item) in txn.records(&records, (Bound::Unbounded, Bound::Unbounded), false)?.enumerate() {
            if i % 1024 == 0 && stopping() {
                return Err(crate::error::LifecycleError::Closing { database: self.name().to_string() }.into());
            }
            let (key, stored) = item?;
            let object = decode_object_only(stored, &names)?;
            let Some(value) = object.get(attribute) else { continue };
            let Ok(vector) = read_vector(value) else { continue };
            if graph.insert(key, &vector).is_err() {
                skipped += 1;
            }
        }
        Ok((graph, tail, skipped))
    }

    /// Takes ownership of the vector index under `prefix` for `epoch`: stores the
    /// state with the new epoch, refusing if a later epoch already owns it.
    pub async fn claim_vector_index(&self, prefix: &[u8], state: IndexState) -> Result<()> {
        let prefix = prefix.to_vec();
        self.write(&crate::access::Context::system(), "claim_vector_index", move |txn, _| {
            if let Some(stored) = store::read_state_in(txn, &prefix)?
                && stored.epoch >= state.epoch
            {
                return Err(superseded(state.epoch, stored.epoch));
            }
            store::write_state(txn, &prefix, &state)
        })
        .await
    }

    /// Condemns the vector index under `prefix` before a rebuild resets it: the
    /// marker is committed on its own, so a crash anywhere after this rebuilds
    /// again and never serves what was condemned, however whole the stored state
    /// and graph look. An index with no state yet gets one (not ready) for `state`'s
    /// epoch, which then owns it.
    pub async fn condemn_vector_index(&self, prefix: &[u8], state: IndexState) -> Result<()> {
        let prefix = prefix.to_vec();
        self.write(&crate::access::Context::system(), "condemn_vector_index", move |txn, _| {
            check_owner(txn, &prefix, state.epoch)?;
            store::condemn(txn, &prefix)?;
            if store::read_state_in(txn, &prefix)?.is_none() {
                store::write_state(txn, &prefix, &IndexState { ready: false, ..state })?;
            }
            Ok(())
        })
        .await
    }

    /// Removes the nodes of the (condemned) vector index under `prefix`, in
    /// bounded jobs, for owner `epoch`.
    pub async fn reset_vector_index(&self, prefix: &[u8], epoch: u64) -> Result<()> {
        loop {
            let prefix = prefix.to_vec();
            let more = self
                .write(&crate::access::Context::system(), "reset_vector_index", move |txn, _| {
                    check_owner(txn, &prefix, epoch)?;
                    store::reset_some(txn, &prefix)
                })
                .await?;
            if !more {
                return Ok(());
            }
        }
    }

    /// Removes everything stored under `prefix` (an index no schema declares any
    /// more), in bounded jobs, and then its hold on the log.
    pub async fn remove_vector_index(&self, prefix: &[u8]) -> Result<()> {
        loop {
            let prefix = prefix.to_vec();
            let more = self
                .write(&crate::access::Context::system(), "remove_vector_index", move |txn, _| {
                    let more = store::remove_some(txn, &prefix)?;
                    if !more {
                        crate::db::log::release_log_in(txn, &store::consumer_name(&prefix))?;
                    }
                    Ok(more)
                })
                .await?;
            if !more {
                return Ok(());
            }
        }
    }

    /// The prefixes of every vector index stored in this database.
    pub fn stored_vector_prefixes(&self) -> Result<Vec<Vec<u8>>> {
        let txn = self.snapshot()?;
        let mut out: Vec<Vec<u8>> = Vec::new();
        for item in txn.derived_prefix(store::ALL_PREFIX)? {
            let (key, _) = item?;
            let Some(prefix) = key.get(..store::PREFIX_LEN) else { continue };
            if out.last().is_none_or(|last| last.as_slice() != prefix) {
                out.push(prefix.to_vec());
            }
        }
        Ok(out)
    }

    /// Stores a rebuilt graph's nodes for owner `epoch`, in bounded jobs (the
    /// index stays condemned until [`Db::write_vector_progress`] makes it ready).
    pub async fn write_vector_nodes(&self, prefix: &[u8], epoch: u64, writes: Writes) -> Result<()> {
        let mut writes = writes.into_iter().peekable();
        while writes.peek().is_some() {
            let chunk: Writes = writes.by_ref().take(NODES_PER_JOB * 2).collect();
            let prefix = prefix.to_vec();
            self.write(&crate::access::Context::system(), "build_vector_index", move |txn, _| {
                check_owner(txn, &prefix, epoch)?;
                apply_writes(txn, chunk)
            })
            .await?;
        }
        Ok(())
    }

    /// Stores what an apply changed and the state after it (its cursor, entry
    /// point, readiness) in one job, for owner `epoch`; a ready state clears the
    /// condemned marker. The log is held for the index under the durable cursor
    /// `consumer` (see `log.rs`), moved in the same job.
    pub async fn write_vector_progress(
        &self,
        prefix: &[u8],
        consumer: &str,
        state: IndexState,
        writes: Writes,
    ) -> Result<()> {
        let prefix = prefix.to_vec();
        let consumer = consumer.to_string();
        self.write(&crate::access::Context::system(), "apply_vector_index", move |txn, _| {
            check_owner(txn, &prefix, state.epoch)?;
            apply_writes(txn, writes)?;
            if state.ready {
                store::clear_condemned(txn, &prefix)?;
            }
            crate::db::log::hold_log_in(txn, &consumer, state.cursor)?;
            store::write_state(txn, &prefix, &state)
        })
        .await
    }
}

fn apply_writes(txn: &mut lyre_store::WriteTxn<'_, '_>, writes: Writes) -> Result<()> {
    for (key, value) in writes {
        match value {
            Some(value) => txn.put_derived(&key, &value)?,
            None => {
                txn.delete_derived(&key)?;
            }
        }
    }
    Ok(())
}

fn superseded(mine: u64, stored: u64) -> Error {
    Error::Conflict(format!("a vector index's owner epoch {mine} was superseded by epoch {stored}"))
}

/// Refuses the job unless `epoch` owns the index under `prefix` (work of an
/// earlier owner is never applied after a successor took over).
fn check_owner(txn: &lyre_store::WriteTxn<'_, '_>, prefix: &[u8], epoch: u64) -> Result<()> {
    match store::read_state_in(txn, prefix)? {
        Some(stored) if stored.epoch != epoch => Err(superseded(epoch, stored.epoch)),
        _ => Ok(()),
    }
}
