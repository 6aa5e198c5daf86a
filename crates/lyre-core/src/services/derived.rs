//! Derived-index runners: one task per declared derived index (of any kind, see
//! `derived/`) keeps it up to date from the log, and one supervisor starts,
//! restarts and stops them as schemas change.
//!
//! A runner owns its index by epoch: at every start it mints the stored epoch plus
//! one and stores it, and every job it submits is refused if another epoch owns the
//! index by then, so no work of a superseded runner lands after its successor took
//! over. It then either loads the stored graph and resumes from the stored cursor,
//! or rebuilds: it commits the condemned marker first (so a crash anywhere later
//! rebuilds again and nothing condemned is served), removes the old entries, builds
//! the index from one snapshot, stores it, and becomes ready at that snapshot's log
//! position, with the marker cleared in the same job.
//!
//! Following the log, it wakes on each commit (no polling), reads a bounded batch,
//! applies each record's last change in it to the index, and stores what that
//! changed with the new cursor in one job. While it works, a 100 ms tick measures
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
use crate::catalog::TableSchema;
use crate::db::Db;
use crate::db::derived::{Built, LiveIndex, Phase, declarations};
use crate::db::log::{ChangeKind, Cursor, LogBatch, change_record};
use crate::derived::Declaration;
use crate::derived::store::{IndexState, prefix};
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::services::pause;
use crate::task::blocking;

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
    attribute_id: u32,
    kind: &'static str,
    attribute: String,
    /// The declaration as a whole (its `Debug` form): any change restarts the runner.
    declared: String,
}

impl RunnerKey {
    /// The runner of `declaration` on `table` of `db` at `incarnation`; `None` when
    /// the table has no such attribute.
    fn new(db: &Db, table: &TableSchema, incarnation: u64, declaration: &dyn Declaration) -> Option<RunnerKey> {
        let attribute = table.attribute(declaration.attribute())?;
        Some(RunnerKey {
            database: db.name().to_string(),
            table: table.name.clone(),
            incarnation,
            attribute_id: attribute.id,
            kind: declaration.kind().name,
            attribute: attribute.name.clone(),
            declared: format!("{declaration:?}"),
        })
    }
}

/// One declared index, with the database it lives in.
struct Wanted {
    key: RunnerKey,
    db: Arc<Db>,
    declaration: Arc<dyn Declaration>,
}

/// Starts, restarts and stops the runners of every declared derived index until
/// the services stop.
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
                        tracing::error!(error = %err, "a derived index runner panicked; starting another");
                    }
                    err.id()
                }
            };
            running.retain(|_, (task, _)| *task != id);
        }
        let Some(engine_now) = engine.upgrade() else { return };
        let wanted = declared(&engine_now);
        running.retain(|key, (_, stopper)| {
            let keep = wanted.iter().any(|w| &w.key == key);
            if !keep {
                stopper.send_replace(true);
            }
            keep
        });
        for want in &wanted {
            if running.contains_key(&want.key) {
                continue;
            }
            let (stopper, stopped) = watch::channel(false);
            let runner = Runner::new(&want.db, want.key.clone(), want.declaration.clone());
            let mut services_stop = stop.clone();
            let task = tasks.spawn(async move {
                tokio::select! {
                    outcome = runner.run(stopped) => if let Err(err) = outcome {
                        tracing::warn!(index = %runner.name(), error = %err, "a derived index runner stopped; starting another");
                    },
                    _ = services_stop.wait_for(|s| *s) => {}
                }
            });
            running.insert(want.key.clone(), (task.id(), stopper));
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

/// Every derived index the open databases' schemas declare.
fn declared(engine: &Engine) -> Vec<Wanted> {
    let mut out = Vec::new();
    for db in engine.databases() {
        if db.is_closing() {
            continue;
        }
        for table in db.schema().tables.values() {
            let Ok(incarnation) = db.table_incarnation(&table.name) else { continue };
            for declaration in declarations(table) {
                let Some(key) = RunnerKey::new(&db, table, incarnation, declaration.as_ref()) else { continue };
                out.push(Wanted { key, db: db.clone(), declaration });
            }
        }
    }
    out
}

/// Removes what is stored of derived indexes no schema declares any more (a table
/// dropped, an attribute's index changed to an ordinary one).
async fn remove_undeclared(engine: &Engine, wanted: &[Wanted]) {
    let declared: HashSet<(&str, Vec<u8>)> = wanted
        .iter()
        .map(|w| (w.key.database.as_str(), prefix(w.declaration.kind(), w.key.incarnation, w.key.attribute_id)))
        .collect();
    for db in engine.databases() {
        let Ok(stored) = db.stored_index_prefixes() else { continue };
        for stale in stored.into_iter().filter(|p| !declared.contains(&(db.name(), p.clone()))) {
            if let Err(err) = db.remove_index(&stale).await {
                tracing::warn!(database = db.name(), error = %err, "removing an undeclared derived index failed");
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
    fn new(db: &Arc<Db>, live: LiveIndex) -> Self {
        let live = Arc::new(live);
        db.derived().install(live.clone());
        Self { db: db.clone(), live }
    }
}

impl Drop for Installed {
    fn drop(&mut self) {
        self.db.derived().remove(&self.live);
    }
}

/// One index's runner.
pub(crate) struct Runner {
    db: Weak<Db>,
    key: RunnerKey,
    declaration: Arc<dyn Declaration>,
    /// Where its entries lie (see `derived/store.rs`).
    prefix: Vec<u8>,
    /// What its stored entries depend on ([`Declaration::fingerprint`]).
    fingerprint: Vec<u8>,
}

impl Runner {
    fn new(db: &Arc<Db>, key: RunnerKey, declaration: Arc<dyn Declaration>) -> Self {
        let prefix = prefix(declaration.kind(), key.incarnation, key.attribute_id);
        let fingerprint = declaration.fingerprint();
        Self { db: Arc::downgrade(db), key, declaration, prefix, fingerprint }
    }

    /// A runner of `declaration` on `table` of `db`, outside the supervisor (tests
    /// of the runtime with kinds of their own).
    #[cfg(test)]
    pub(crate) fn for_test(db: &Arc<Db>, table: &str, declaration: Arc<dyn Declaration>) -> Result<Self> {
        let incarnation = db.table_incarnation(table)?;
        let key = db
            .schema()
            .tables
            .get(table)
            .and_then(|schema| RunnerKey::new(db, schema, incarnation, declaration.as_ref()))
            .ok_or_else(|| Error::invalid("no such table or attribute"))?;
        Ok(Self::new(db, key, declaration))
    }

    fn name(&self) -> String {
        format!("{} index on {}.{}.{}", self.key.kind, self.key.database, self.key.table, self.key.attribute)
    }

    /// Runs until `stopped`, the database closes, or a step fails.
    pub(crate) async fn run(&self, mut stopped: watch::Receiver<bool>) -> Result<()> {
        let Some(db) = self.db.upgrade() else { return Ok(()) };
        let _lease = db.lease(format!("the runner of the {}", self.name()));
        // While it runs, the log it has not consumed is kept for it.
        let _attachment = db.attach(&crate::derived::store::consumer_name(&self.prefix))?;
        let mut closing = db.closing_signal();
        let stored = match db.stored_index(&self.prefix) {
            Ok(stored) => stored,
            // Derived state is rebuilt from the records: what cannot be read is removed.
            Err(Error::Corrupt(problem)) => {
                tracing::warn!(index = %self.name(), problem, "a stored derived index cannot be read: removing it to rebuild");
                db.remove_index(&self.prefix).await?;
                db.stored_index(&self.prefix)?
            }
            Err(err) => return Err(err),
        };
        let epoch = stored.state.as_ref().map_or(0, |s| s.epoch) + 1;
        // A previous owner's state, minted anew for this epoch: the claim.
        if let Some(previous) = &stored.state {
            db.claim_index(&self.prefix, IndexState { epoch, ..previous.clone() }).await?;
        }
        let usable = stored.state.as_ref().filter(|state| {
            state.ready
                && !stored.condemned
                && state.declaration == self.fingerprint
                && state.log_epoch == stored.log_epoch
                && (state.cursor >= stored.log_tail || stored.log_head.is_some_and(|head| head <= state.cursor + 1))
        });
        let loaded = match usable {
            Some(state) => {
                let cursor = state.cursor;
                let (reader, declaration, at) = (db.clone(), self.declaration.clone(), self.prefix.clone());
                let read = blocking(move || {
                    crate::failpoint::hit("derived-load")?;
                    reader.load_index(&at, declaration.as_ref())
                })
                .await;
                match read {
                    Ok(index) => Some((index, cursor)),
                    Err(err) => {
                        tracing::warn!(index = %self.name(), error = %err, "a stored derived index cannot be read: rebuilding it");
                        None
                    }
                }
            }
            None => None,
        };
        let (installed, mut cursor) = match loaded {
            Some((index, cursor)) => (Installed::new(&db, self.live(index, Phase::Ready, epoch, cursor)), cursor),
            None => {
                let phase = if stored.state.is_some() { Phase::Rebuilding } else { Phase::Building };
                // Installed while it builds, so queries say why they cannot be served.
                let installed = Installed::new(&db, self.live(self.declaration.empty(), phase, epoch, 0));
                let state = IndexState {
                    epoch,
                    cursor: 0,
                    log_epoch: stored.log_epoch,
                    declaration: self.fingerprint.clone(),
                    ready: false,
                };
                let cursor = self.rebuild(&db, &installed.live, state, &stopped).await?;
                (installed, cursor)
            }
        };
        let live = installed.live.clone();
        tracing::info!(index = %self.name(), epoch, records = live.read().len(), "derived index ready");
        self.follow(&db, &live, stored.log_epoch, &mut cursor, &mut stopped, &mut closing).await
    }

    fn live(&self, index: Box<dyn crate::derived::DerivedIndex>, phase: Phase, epoch: u64, applied: u64) -> LiveIndex {
        LiveIndex::new(&self.key.table, self.key.incarnation, self.declaration.clone(), index, phase, epoch, applied)
    }

    /// Condemns, resets and rebuilds the index from one snapshot; answers the log
    /// position the built index reflects.
    async fn rebuild(
        &self,
        db: &Arc<Db>,
        live: &Arc<LiveIndex>,
        state: IndexState,
        stopped: &watch::Receiver<bool>,
    ) -> Result<u64> {
        db.condemn_index(&self.prefix, state.clone()).await?;
        crate::failpoint::hit("derived-condemned")?;
        db.reset_index(&self.prefix, state.epoch).await?;
        let (reader, table, declaration) = (db.clone(), self.key.table.clone(), self.declaration.clone());
        let stop = stopped.clone();
        let Built { mut index, tail, skipped } = blocking(move || {
            let stopping = || *stop.borrow();
            reader.build_index(&table, declaration.as_ref(), &stopping)
        })
        .await?;
        if skipped > 0 {
            tracing::warn!(index = %self.name(), skipped, "records whose value the index cannot hold were left out of it");
        }
        let writes = index.take_writes(&crate::derived::store::data_prefix(&self.prefix));
        live.replace(index);
        db.write_index_entries(&self.prefix, state.epoch, writes).await?;
        crate::failpoint::hit("derived-built")?;
        let ready = IndexState { cursor: tail, ready: true, ..state };
        db.write_index_progress(&self.prefix, ready, Vec::new()).await?;
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
        let (index, table, incarnation) = (live.clone(), self.key.table.clone(), self.key.incarnation);
        let data = crate::derived::store::data_prefix(&self.prefix);
        let writes = blocking(move || {
            crate::failpoint::hit("derived-apply")?;
            apply_batch(&index, &batch, &table, incarnation)?;
            Ok(index.write().take_writes(&data))
        })
        .await?;
        let due = next.saturating_sub(stored_cursor) >= 10_000 || stored_at.elapsed() >= IDLE_CURSOR_EVERY;
        if writes.is_empty() && !due {
            live.set_applied(next);
            return Ok((next, false));
        }
        let state = IndexState {
            epoch: live.epoch(),
            cursor: next,
            log_epoch,
            declaration: self.fingerprint.clone(),
            ready: true,
        };
        db.write_index_progress(&self.prefix, state, writes).await?;
        live.set_applied(next);
        Ok((next, true))
    }

    /// Measures the lag and sets or clears the write flag (see the module docs).
    fn watch_lag(&self, db: &Db, live: &LiveIndex) {
        let Ok(lag) = live.measure_lag(db) else { return };
        let Some(limit) = self.declaration.max_lag_ms() else { return };
        if lag >= limit {
            if !live.is_lagging() {
                tracing::warn!(index = %self.name(), lag_ms = lag, limit_ms = limit, "a derived index is behind: refusing writes to its table until it catches up");
            }
            live.set_lagging(true);
        } else if live.is_lagging() && lag < limit / 2 && live.applied() >= *db.committed().borrow() {
            tracing::info!(index = %self.name(), "a derived index caught up: writes to its table are admitted again");
            live.set_lagging(false);
        }
    }
}

/// Applies a batch's changes to `table` to the index: each record's last change
/// in the batch, the index locked per record so queries interleave.
fn apply_batch(index: &LiveIndex, batch: &LogBatch, table: &str, incarnation: u64) -> Result<()> {
    let attribute = index.attribute();
    let mut last: HashMap<&[u8], Option<crate::value::Value>> = HashMap::new();
    let mut order: Vec<&[u8]> = Vec::new();
    for entry in &batch.entries {
        for change in &entry.changes {
            if change.table != table || change.incarnation != incarnation {
                continue;
            }
            match change.kind {
                ChangeKind::Put => {
                    let value = change_record(change)?.and_then(|mut record| record.swap_remove(attribute));
                    if last.insert(&change.key, value).is_none() {
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
                    index.write().clear();
                }
                ChangeKind::Catalog | ChangeKind::Message => {}
            }
        }
    }
    for key in order {
        let value = last.get(key).and_then(Option::as_ref);
        if let Err(problem) = index.write().apply(key, value) {
            tracing::warn!(table, attribute, problem, "a record was left out of its derived index");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    //! The runtime is not the vector index's: a kind of index of its own (a word
    //! index, as a full-text index would be) is built, follows the log, is stored,
    //! and is loaded again from storage by the next runner, with nothing of the
    //! runtime written for it.

    use std::any::Any;
    use std::collections::{BTreeMap, BTreeSet};
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::catalog::TableSpec;
    use crate::derived::{DerivedIndex, Kind, Writes};
    use crate::value::{Object, Value};

    const WORDS: Kind = Kind { name: "word", tag: b"word:" };

    /// Which records hold each word of an attribute.
    #[derive(Default)]
    struct WordIndex {
        words: BTreeMap<String, BTreeSet<Vec<u8>>>,
        of_record: BTreeMap<Vec<u8>, Vec<String>>,
        changed: BTreeSet<(String, Vec<u8>)>,
    }

    impl WordIndex {
        fn entry(prefix: &[u8], word: &str, key: &[u8]) -> Vec<u8> {
            [prefix, word.as_bytes(), &[0], key].concat()
        }

        fn records_with(&self, word: &str) -> BTreeSet<Vec<u8>> {
            self.words.get(word).cloned().unwrap_or_default()
        }
    }

    impl DerivedIndex for WordIndex {
        fn apply(&mut self, key: &[u8], value: Option<&Value>) -> std::result::Result<(), String> {
            for word in self.of_record.remove(key).unwrap_or_default() {
                self.words.entry(word.clone()).or_default().remove(key);
                self.changed.insert((word, key.to_vec()));
            }
            let text = match value {
                None | Some(Value::Null) => return Ok(()),
                Some(Value::String(text)) => text,
                Some(_) => return Err("not text".to_string()),
            };
            let words: Vec<String> = text.split_whitespace().map(str::to_lowercase).collect();
            for word in &words {
                self.words.entry(word.clone()).or_default().insert(key.to_vec());
                self.changed.insert((word.clone(), key.to_vec()));
            }
            self.of_record.insert(key.to_vec(), words);
            Ok(())
        }

        fn clear(&mut self) {
            let keys: Vec<Vec<u8>> = self.of_record.keys().cloned().collect();
            for key in keys {
                let _ = self.apply(&key, None);
            }
        }

        fn take_writes(&mut self, prefix: &[u8]) -> Writes {
            std::mem::take(&mut self.changed)
                .into_iter()
                .map(|(word, key)| {
                    let held = self.words.get(&word).is_some_and(|keys| keys.contains(&key));
                    (Self::entry(prefix, &word, &key), held.then(Vec::new))
                })
                .collect()
        }

        fn len(&self) -> usize {
            self.of_record.len()
        }

        fn memory_bytes(&self) -> usize {
            0
        }

        fn as_any(&self) -> &dyn Any {
            self
        }
    }

    /// The word index of `attribute`, counting how often one was started empty
    /// (to build) and loaded.
    #[derive(Debug, Default)]
    struct Words {
        attribute: String,
        built: AtomicUsize,
        loaded: AtomicUsize,
    }

    impl Declaration for Words {
        fn kind(&self) -> Kind {
            WORDS
        }
        fn attribute(&self) -> &str {
            &self.attribute
        }
        fn fingerprint(&self) -> Vec<u8> {
            b"words v1".to_vec()
        }
        fn max_lag_ms(&self) -> Option<u64> {
            None
        }
        fn empty(&self) -> Box<dyn DerivedIndex> {
            self.built.fetch_add(1, Ordering::SeqCst);
            Box::new(WordIndex::default())
        }
        fn load(&self, txn: &lyre_store::ReadTxn, prefix: &[u8]) -> Result<Box<dyn DerivedIndex>> {
            self.loaded.fetch_add(1, Ordering::SeqCst);
            let mut index = WordIndex::default();
            for item in txn.derived_prefix(prefix)? {
                let (stored, _) = item?;
                let rest = &stored[prefix.len()..];
                let split = rest.iter().position(|b| *b == 0).unwrap_or(rest.len());
                let word = String::from_utf8_lossy(&rest[..split]).into_owned();
                let key = rest.get(split + 1..).unwrap_or_default().to_vec();
                index.words.entry(word.clone()).or_default().insert(key.clone());
                index.of_record.entry(key).or_default().push(word);
            }
            Ok(Box::new(index))
        }
    }

    fn doc(id: i64, text: &str) -> Object {
        [("id".to_string(), Value::Int(id)), ("text".to_string(), Value::String(text.to_string()))]
            .into_iter()
            .collect()
    }

    fn key(id: i64) -> Vec<u8> {
        crate::record::validate::encode_primary_key(&Value::Int(id)).unwrap_or_default()
    }

    /// Waits until the word index is installed and covers everything committed,
    /// and answers the records holding `word`.
    async fn records_with(db: &Arc<Db>, word: &str) -> BTreeSet<Vec<u8>> {
        let wait = crate::db::derived::IndexWait { tolerance_ms: 0, wait: Duration::from_secs(10) };
        for _ in 0..400 {
            // Read apart: a borrow of the watch held across the wait would stall the writer.
            let target = *db.committed().borrow();
            if let Some(live) = db.derived().get(WORDS, "t", "text")
                && let Ok(Some(_)) = live.coverage(db, target, wait).await
            {
                let held = live.read();
                return held.as_any().downcast_ref::<WordIndex>().map(|w| w.records_with(word)).unwrap_or_default();
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("the word index never covered the log");
    }

    /// An engine (kept alive by the returned handles) with table `dev.t` holding `docs`.
    async fn table_of(dir: &std::path::Path, docs: Vec<Object>) -> (Arc<Engine>, Arc<Db>, crate::table::Table) {
        let (engine, _) = Engine::open(crate::EngineOptions::for_tests(dir)).await.unwrap();
        let ctx = Context::system();
        let db = engine.create_database(&ctx, "dev").await.unwrap();
        db.create_table(&ctx, TableSpec::dynamic("t", "id")).await.unwrap();
        let table = db.table("t").unwrap();
        table.insert(&ctx, docs).await.unwrap();
        (engine, db, table)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn another_kind_of_index_is_built_followed_stored_and_loaded() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = Context::system();
        let docs = vec![doc(1, "red fox"), doc(2, "blue fox"), doc(3, "red hen")];
        let (_engine, db, table) = table_of(dir.path(), docs).await;

        let words = Arc::new(Words { attribute: "text".into(), ..Default::default() });
        let runner = Runner::for_test(&db, "t", words.clone()).unwrap();
        let (stop, stopped) = watch::channel(false);
        let first = tokio::spawn(async move { runner.run(stopped).await });
        assert_eq!(records_with(&db, "red").await, [key(1), key(3)].into(), "built from the records");
        let built = words.built.load(Ordering::SeqCst);
        assert!(built >= 1, "the first runner built the index");

        table.upsert(&ctx, vec![doc(1, "grey fox"), doc(4, "red deer")]).await.unwrap();
        table.delete(&ctx, vec![Value::Int(2)]).await.unwrap();
        assert_eq!(records_with(&db, "red").await, [key(3), key(4)].into(), "followed the log");
        assert_eq!(records_with(&db, "fox").await, [key(1)].into());
        stop.send_replace(true);
        first.await.unwrap().unwrap();

        table.insert(&ctx, vec![doc(5, "red kite")]).await.unwrap();
        let runner = Runner::for_test(&db, "t", words.clone()).unwrap();
        let (_stop, stopped) = watch::channel(false);
        let _second = tokio::spawn(async move { runner.run(stopped).await });
        assert_eq!(records_with(&db, "red").await, [key(3), key(4), key(5)].into(), "loaded, then caught up");
        assert_eq!(records_with(&db, "fox").await, [key(1)].into());
        assert_eq!(words.loaded.load(Ordering::SeqCst), 1, "the second runner loaded what the first stored");
        assert_eq!(words.built.load(Ordering::SeqCst), built, "and built nothing");
        assert_eq!(db.derived().get(WORDS, "t", "text").unwrap().epoch(), 2);
    }

    /// A stored state that cannot be read (another format, a torn page) is not
    /// fatal: derived state comes from the records, so the runner removes what
    /// is stored and builds the index again.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_unreadable_state_is_removed_and_rebuilt() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = Context::system();
        let (_engine, db, _) = table_of(dir.path(), vec![doc(1, "red fox")]).await;
        let words = Arc::new(Words { attribute: "text".into(), ..Default::default() });
        let runner = Runner::for_test(&db, "t", words.clone()).unwrap();
        let prefix = runner.prefix.clone();
        let (state_key, stray) = ([prefix.as_slice(), b"S"].concat(), [prefix.as_slice(), b"N1"].concat());
        db.write(&ctx, "garble", move |txn, _| {
            txn.put_derived(&state_key, b"not a state")?;
            Ok(txn.put_derived(&stray, b"an entry of an older layout")?)
        })
        .await
        .unwrap();
        let (_stop, stopped) = watch::channel(false);
        let _running = tokio::spawn(async move { runner.run(stopped).await });
        assert_eq!(records_with(&db, "fox").await, [key(1)].into());
        let stored = db.stored_index(&prefix).unwrap();
        assert!(stored.state.is_some_and(|s| s.ready && s.epoch == 1), "a fresh state, owned anew");
        let txn = db.snapshot().unwrap();
        assert!(txn.derived(&[prefix.as_slice(), b"N1"].concat()).unwrap().is_none(), "the stray entry went with it");
    }
}
