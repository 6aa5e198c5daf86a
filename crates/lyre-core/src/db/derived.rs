//! The derived indexes of one open database as readers and writers meet them: each
//! live index (of any kind, see `derived/`), its phase, its owner epoch, how far it
//! has applied the log, and whether it is too far behind to take more writes; and
//! the writer jobs that store one, each refused unless its epoch still owns it.
//!
//! The runner that keeps an index up to date (`services/derived.rs`) installs the
//! index here and is its only writer. A query asks an index for its coverage
//! ([`LiveIndex::coverage`]): current (everything committed when the query began is
//! in it), bounded (behind by less than the query tolerates), or a 503 once the
//! query has waited as long as it may. A write to a table whose index has set its
//! lag flag is refused with a 503 ([`DerivedIndexes::refuse_if_lagging`]); writes
//! replicated from elsewhere never are.

use std::collections::HashMap;
use std::ops::Bound;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use tokio::sync::watch;

use crate::catalog::TableSchema;
use crate::db::Db;
use crate::derived::store::{self, IndexState};
use crate::derived::{Declaration, DerivedIndex, Kind, Writes};
use crate::error::{Error, Result};
use crate::record::entry::decode_object_only;
use crate::vector::declared::{self as vector, Declared};

/// Every kind of derived index there is (what is stored of each is listed by its tag).
pub const KINDS: &[Kind] = &[vector::KIND];

/// The derived indexes `table` declares: one per `@indexed(type: "HNSW")` attribute.
pub fn declarations(table: &TableSchema) -> Vec<Arc<dyn Declaration>> {
    table
        .attributes
        .iter()
        .filter_map(|attribute| {
            let spec = attribute.vector.as_ref()?;
            let declared: Arc<dyn Declaration> =
                Arc::new(Declared { attribute: attribute.name.clone(), spec: spec.clone() });
            Some(declared)
        })
        .collect()
}

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

/// One live derived index.
pub struct LiveIndex {
    /// The table it indexes.
    pub table: String,
    /// The table's incarnation it was built for.
    pub incarnation: u64,
    /// The declaration it follows.
    pub declaration: Arc<dyn Declaration>,
    index: RwLock<Box<dyn DerivedIndex>>,
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
    /// A live index of `table` for `declaration` in `phase`, owned by `epoch`,
    /// holding `index`, applied through `applied`.
    pub fn new(
        table: &str,
        incarnation: u64,
        declaration: Arc<dyn Declaration>,
        index: Box<dyn DerivedIndex>,
        phase: Phase,
        epoch: u64,
        applied: u64,
    ) -> Self {
        Self {
            table: table.to_string(),
            incarnation,
            declaration,
            index: RwLock::new(index),
            phase: Mutex::new(phase),
            epoch: AtomicU64::new(epoch),
            applied: watch::Sender::new(applied),
            lagging: AtomicBool::new(false),
            lag_ms: AtomicU64::new(0),
            retired: AtomicBool::new(false),
        }
    }

    /// The attribute it indexes.
    pub fn attribute(&self) -> &str {
        self.declaration.attribute()
    }

    /// Names it in messages: "the vector index on Doc.embedding".
    pub fn describe(&self) -> String {
        format!("the {} index on {}.{}", self.declaration.kind().name, self.table, self.attribute())
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

    /// The index, for reading (queries). Take it once per scope: the runner's
    /// write waits behind a held guard, and a second guard of the same thread
    /// would wait behind the runner.
    pub fn read(&self) -> RwLockReadGuard<'_, Box<dyn DerivedIndex>> {
        self.index.read()
    }

    /// The index, for the runner's changes.
    pub fn write(&self) -> RwLockWriteGuard<'_, Box<dyn DerivedIndex>> {
        self.index.write()
    }

    /// Replaces the index (a rebuild's result).
    pub fn replace(&self, index: Box<dyn DerivedIndex>) {
        *self.index.write() = index;
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
                    "{} {why}, more than the query tolerates ({} ms); retry later",
                    self.describe(),
                    wait.tolerance_ms
                )));
            }
            // Woken by the runner's progress; the deadline bounds the wait.
            let _ = tokio::time::timeout(deadline - now, changes.changed()).await;
        }
    }
}

/// A derived index as `describe_table` shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct IndexStatus {
    /// The attribute indexed.
    pub attribute: String,
    /// Its kind's name.
    pub kind: &'static str,
    /// Its phase (`building` also while its runner has not started).
    pub phase: Phase,
    /// Its owner epoch (0 before a runner owns it).
    pub epoch: u64,
    /// Records it holds.
    pub nodes: usize,
    /// Bytes it holds in memory.
    pub memory_bytes: usize,
    /// The lag last measured (ms).
    pub lag_ms: u64,
    /// Whether writes to the table are refused because of it.
    pub lagging: bool,
}

/// Where a live index is found: its table, its kind, its attribute.
type IndexKey = (String, &'static str, String);

fn key_of(index: &LiveIndex) -> IndexKey {
    (index.table.clone(), index.declaration.kind().name, index.attribute().to_string())
}

/// The live derived indexes of one database.
#[derive(Default)]
pub struct DerivedIndexes {
    indexes: RwLock<HashMap<IndexKey, Arc<LiveIndex>>>,
}

impl DerivedIndexes {
    /// Installs `index` (retiring the one it replaces, if any).
    pub fn install(&self, index: Arc<LiveIndex>) {
        let replaced = self.indexes.write().insert(key_of(&index), index);
        if let Some(replaced) = replaced {
            replaced.retire();
        }
    }

    /// Retires `index` and removes it, unless a successor has replaced it already.
    pub fn remove(&self, index: &Arc<LiveIndex>) {
        index.retire();
        let mut indexes = self.indexes.write();
        let key = key_of(index);
        if indexes.get(&key).is_some_and(|held| Arc::ptr_eq(held, index)) {
            indexes.remove(&key);
        }
    }

    /// The live `kind` index on `table.attribute`.
    pub fn get(&self, kind: Kind, table: &str, attribute: &str) -> Option<Arc<LiveIndex>> {
        self.indexes.read().get(&(table.to_string(), kind.name, attribute.to_string())).cloned()
    }

    /// The status of every derived index `table` declares.
    pub fn status_of(&self, table: &TableSchema) -> Vec<IndexStatus> {
        declarations(table)
            .iter()
            .map(|declared| {
                let kind = declared.kind();
                let attribute = declared.attribute().to_string();
                match self.get(kind, &table.name, &attribute) {
                    Some(index) => {
                        // One read guard: a second one taken while the runner waits to
                        // write would wait behind it, and it behind the first (deadlock).
                        let (nodes, memory_bytes) = {
                            let held = index.read();
                            (held.len(), held.memory_bytes())
                        };
                        IndexStatus {
                            attribute,
                            kind: kind.name,
                            phase: index.phase(),
                            epoch: index.epoch(),
                            nodes,
                            memory_bytes,
                            lag_ms: index.last_lag_ms(),
                            lagging: index.is_lagging(),
                        }
                    }
                    None => IndexStatus {
                        attribute,
                        kind: kind.name,
                        phase: Phase::Building,
                        epoch: 0,
                        nodes: 0,
                        memory_bytes: 0,
                        lag_ms: 0,
                        lagging: false,
                    },
                }
            })
            .collect()
    }

    /// Refuses a write to `table` while one of its indexes is too far behind.
    pub fn refuse_if_lagging(&self, table: &str) -> Result<()> {
        let indexes = self.indexes.read();
        match indexes.values().find(|index| index.table == table && index.is_lagging()) {
            None => Ok(()),
            Some(index) => Err(Error::DerivedIndexLagging(format!(
                "{} is {} ms behind, more than its maxLagMilliseconds ({} ms): writes to {table} wait until it catches up; retry later",
                index.describe(),
                index.last_lag_ms(),
                index.declaration.max_lag_ms().unwrap_or(0)
            ))),
        }
    }
}

/// What is stored of one derived index, read from one snapshot.
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

/// Entries written per job when a rebuilt index is stored.
const ENTRIES_PER_JOB: usize = 4_000;

/// What a build from one snapshot made.
pub struct Built {
    /// The index.
    pub index: Box<dyn DerivedIndex>,
    /// The snapshot's log tail: the log after it holds exactly what the index has
    /// not seen.
    pub tail: u64,
    /// Records whose value the index could not hold, left out of it.
    pub skipped: usize,
}

impl Db {
    /// What is stored of the derived index under `prefix`.
    pub fn stored_index(&self, prefix: &[u8]) -> Result<StoredIndex> {
        let txn = self.snapshot()?;
        Ok(StoredIndex {
            state: store::read_state(&txn, prefix)?,
            condemned: store::is_condemned(&txn, prefix)?,
            log_epoch: txn.log_epoch()?,
            log_head: self.log_head()?,
            log_tail: txn.last_log_seq()?,
        })
    }

    /// Reads the index stored under `prefix` (blocking: run it off the runtime).
    pub fn load_index(&self, prefix: &[u8], declaration: &dyn Declaration) -> Result<Box<dyn DerivedIndex>> {
        declaration.load(&self.snapshot()?, &store::data_prefix(prefix))
    }

    /// Builds `declaration`'s index of every record of `table` in one snapshot
    /// (blocking: run it off the runtime); `stopping` is asked now and then, and a
    /// build it stops fails.
    pub fn build_index(
        &self,
        table: &str,
        declaration: &dyn Declaration,
        stopping: &dyn Fn() -> bool,
    ) -> Result<Built> {
        crate::failpoint::hit("derived-build")?;
        let txn = self.snapshot()?;
        let tail = txn.last_log_seq()?;
        let mut index = declaration.empty();
        let mut skipped = 0;
        let Some(records) = txn.table(table)? else { return Ok(Built { index, tail, skipped }) };
        let attribute = declaration.attribute();
        let names = [attribute.to_string()];
        for (i, item) in txn.records(&records, (Bound::Unbounded, Bound::Unbounded), false)?.enumerate() {
            if i % 1024 == 0 && stopping() {
                return Err(crate::error::LifecycleError::Closing { database: self.name().to_string() }.into());
            }
            let (key, stored) = item?;
            let object = decode_object_only(stored, &names)?;
            if index.apply(key, object.get(attribute)).is_err() {
                skipped += 1;
            }
        }
        Ok(Built { index, tail, skipped })
    }

    /// Takes ownership of the derived index under `prefix` for `state`'s epoch:
    /// stores the state with the new epoch, refusing if that epoch or a later one
    /// already owns it.
    pub async fn claim_index(&self, prefix: &[u8], state: IndexState) -> Result<()> {
        let prefix = prefix.to_vec();
        self.write(&crate::access::Context::system(), "claim_derived_index", move |txn, _| {
            if let Some(stored) = store::read_state_in(txn, &prefix)?
                && stored.epoch >= state.epoch
            {
                return Err(superseded(state.epoch, stored.epoch));
            }
            store::write_state(txn, &prefix, &state)
        })
        .await
    }

    /// Condemns the derived index under `prefix` before a rebuild resets it: the
    /// marker is committed on its own, so a crash anywhere after this rebuilds
    /// again and never serves what was condemned, however whole the stored state
    /// and entries look. An index with no state yet gets one (not ready) for
    /// `state`'s epoch, which then owns it.
    pub async fn condemn_index(&self, prefix: &[u8], state: IndexState) -> Result<()> {
        let prefix = prefix.to_vec();
        self.write(&crate::access::Context::system(), "condemn_derived_index", move |txn, _| {
            check_owner(txn, &prefix, state.epoch)?;
            store::condemn(txn, &prefix)?;
            if store::read_state_in(txn, &prefix)?.is_none() {
                store::write_state(txn, &prefix, &IndexState { ready: false, ..state })?;
            }
            Ok(())
        })
        .await
    }

    /// Removes the entries of the (condemned) derived index under `prefix`, in
    /// bounded jobs, for owner `epoch`.
    pub async fn reset_index(&self, prefix: &[u8], epoch: u64) -> Result<()> {
        loop {
            let prefix = prefix.to_vec();
            let more = self
                .write(&crate::access::Context::system(), "reset_derived_index", move |txn, _| {
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
    pub async fn remove_index(&self, prefix: &[u8]) -> Result<()> {
        loop {
            let prefix = prefix.to_vec();
            let more = self
                .write(&crate::access::Context::system(), "remove_derived_index", move |txn, _| {
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

    /// The prefixes of every derived index stored in this database, of every kind.
    pub fn stored_index_prefixes(&self) -> Result<Vec<Vec<u8>>> {
        let txn = self.snapshot()?;
        let mut out = Vec::new();
        for kind in KINDS {
            out.extend(store::stored_prefixes(&txn, *kind)?);
        }
        Ok(out)
    }

    /// Stores a rebuilt index's entries for owner `epoch`, in bounded jobs (the
    /// index stays condemned until [`Db::write_index_progress`] makes it ready).
    pub async fn write_index_entries(&self, prefix: &[u8], epoch: u64, writes: Writes) -> Result<()> {
        let mut writes = writes.into_iter().peekable();
        while writes.peek().is_some() {
            let chunk: Writes = writes.by_ref().take(ENTRIES_PER_JOB).collect();
            let prefix = prefix.to_vec();
            self.write(&crate::access::Context::system(), "build_derived_index", move |txn, _| {
                check_owner(txn, &prefix, epoch)?;
                store::apply_writes(txn, chunk)
            })
            .await?;
        }
        Ok(())
    }

    /// Stores what an apply changed and the state after it (its cursor, readiness)
    /// in one job, for owner `state.epoch`; a ready state clears the condemned
    /// marker. The log is held for the index under its durable cursor (see
    /// `log.rs`), moved in the same job.
    pub async fn write_index_progress(&self, prefix: &[u8], state: IndexState, writes: Writes) -> Result<()> {
        let prefix = prefix.to_vec();
        self.write(&crate::access::Context::system(), "apply_derived_index", move |txn, _| {
            check_owner(txn, &prefix, state.epoch)?;
            store::apply_writes(txn, writes)?;
            if state.ready {
                store::clear_condemned(txn, &prefix)?;
            }
            crate::db::log::hold_log_in(txn, &store::consumer_name(&prefix), state.cursor)?;
            store::write_state(txn, &prefix, &state)
        })
        .await
    }
}

fn superseded(mine: u64, stored: u64) -> Error {
    Error::Conflict(format!("a derived index's owner epoch {mine} was superseded by epoch {stored}"))
}

/// Refuses the job unless `epoch` owns the index under `prefix` (work of an
/// earlier owner is never applied after a successor took over).
fn check_owner(txn: &lyre_store::WriteTxn<'_, '_>, prefix: &[u8], epoch: u64) -> Result<()> {
    match store::read_state_in(txn, prefix)? {
        Some(stored) if stored.epoch != epoch => Err(superseded(epoch, stored.epoch)),
        _ => Ok(()),
    }
}
