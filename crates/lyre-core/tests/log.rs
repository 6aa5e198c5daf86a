//! The transaction log as consumers see it: catalog changes logged with the data,
//! table incarnations, durable cursors that hold retention back, and a consumer fed
//! every change of a concurrent load exactly once, in commit order.

use std::time::Duration;

use lyre_core::catalog::{AttributeSpec, TableSpec, parse_sdl};
use lyre_core::db::log::{Change, ChangeKind, Cursor, LogBatch, change_key};
use lyre_core::services::{Consumer, RunnerOptions};
use lyre_core::{CatalogChange, Context, Db, Engine, ServiceOptions, Services, Value};
use tokio::sync::mpsc;

mod common;
use common::{options, record, whole_log};

/// The changes of the whole log to `table`, flattened, in order.
fn changes_to(db: &Db, table: &str) -> Vec<Change> {
    whole_log(db).into_iter().flat_map(|e| e.changes).filter(|c| c.table == table).collect()
}

fn catalog_change(change: &Change) -> Option<CatalogChange> {
    (change.kind == ChangeKind::Catalog).then(|| CatalogChange::decode(change.record.as_deref().unwrap()).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ddl_is_logged_with_the_data_it_changes() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, _) = Engine::open(options(dir.path())).await.unwrap();
    let ctx = Context::system();
    engine.create_table(&ctx, "dev", TableSpec::dynamic("dog", "id")).await.unwrap();
    let db = engine.database("dev").unwrap();
    db.table("dog").unwrap().insert(&ctx, vec![record(r#"{"id":1,"name":"Penny"}"#)]).await.unwrap();
    let spec = AttributeSpec { name: "age".into(), type_name: None, indexed: true };
    db.create_attribute(&ctx, "dog", spec).await.unwrap();
    db.drop_attribute(&ctx, "dog", "name").await.unwrap();
    let sdl = r#"type Cat @table(database: "dev") { id: ID @primaryKey  color: String @indexed }"#;
    engine.define_tables(&ctx, parse_sdl(sdl, "schema.graphql").unwrap()).await.unwrap();
    db.drop_table(&ctx, "dog").await.unwrap();

    let dog = changes_to(&db, "dog");
    let described: Vec<Option<CatalogChange>> = dog.iter().map(catalog_change).collect();
    use CatalogChange::*;
    let expected = [
        Some(CreateTable { primary_key: "id".into() }),
        // The insert added `name` to the dynamic table before writing the record.
        Some(AddAttribute { attribute: "name".into(), indexed: true }),
        None, // the put
        Some(AddAttribute { attribute: "age".into(), indexed: true }),
        Some(IndexBuilt { attribute: "age".into() }),
        Some(DropAttribute { attribute: "name".into() }),
        None, // the record rewritten without `name`
        Some(DropTable),
        None, // the storage released
    ];
    assert_eq!(described, expected, "{dog:#?}");
    let kinds: Vec<ChangeKind> = dog.iter().map(|c| c.kind).collect();
    assert_eq!(kinds[2], ChangeKind::Put);
    assert_eq!(kinds[6], ChangeKind::Put);
    assert_eq!(kinds[8], ChangeKind::Released);
    // Each operation is one entry, recorded under its own name.
    let operations: Vec<String> = whole_log(&db).iter().map(|e| e.operation.clone()).collect();
    for operation in ["create_table", "insert", "create_attribute", "drop_attribute", "define_table", "drop_table"] {
        assert!(operations.iter().any(|o| o == operation), "{operation} is not in {operations:?}");
    }
    let cat: Vec<Option<CatalogChange>> = changes_to(&db, "Cat").iter().map(catalog_change).collect();
    assert_eq!(
        cat,
        [Some(CreateTable { primary_key: "id".into() }), Some(IndexBuilt { attribute: "color".into() }), Some(Defined)]
    );
    engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_and_recreated_table_is_a_new_incarnation() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = Context::system();
    let first;
    {
        let (engine, _) = Engine::open(options(dir.path())).await.unwrap();
        engine.create_table(&ctx, "dev", TableSpec::dynamic("dog", "id")).await.unwrap();
        let db = engine.database("dev").unwrap();
        db.table("dog").unwrap().insert(&ctx, vec![record(r#"{"id":1}"#)]).await.unwrap();
        db.drop_table(&ctx, "dog").await.unwrap();
        engine.create_table(&ctx, "dev", TableSpec::dynamic("dog", "id")).await.unwrap();
        db.table("dog").unwrap().insert(&ctx, vec![record(r#"{"id":1}"#)]).await.unwrap();
        let dog = changes_to(&db, "dog");
        first = dog[0].incarnation;
        let second = dog.last().unwrap().incarnation;
        assert!(first > 0 && second > 0 && first != second, "{dog:#?}");
        // Everything up to the release names the first; everything after, the second.
        let released = dog.iter().position(|c| c.kind == ChangeKind::Released).unwrap();
        assert!(dog[..=released].iter().all(|c| c.incarnation == first), "{dog:#?}");
        assert!(dog[released + 1..].iter().all(|c| c.incarnation == second), "{dog:#?}");
        assert_eq!(catalog_change(&dog[released + 1]), Some(CatalogChange::CreateTable { primary_key: "id".into() }));
        engine.shutdown().await;
    }
    // A restart keeps the incarnation of the live table.
    let (engine, _) = Engine::open(options(dir.path())).await.unwrap();
    let db = engine.database("dev").unwrap();
    db.table("dog").unwrap().insert(&ctx, vec![record(r#"{"id":2}"#)]).await.unwrap();
    let dog = changes_to(&db, "dog");
    let (before, after) = (dog[dog.len() - 2].incarnation, dog[dog.len() - 1].incarnation);
    assert_eq!(before, after);
    assert_ne!(after, first);
    engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_stops_at_the_slowest_cursor_and_drops_a_consumer_gone_too_long() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, _) = Engine::open(options(dir.path())).await.unwrap();
    let ctx = Context::system();
    engine.create_table(&ctx, "dev", TableSpec::dynamic("t", "id")).await.unwrap();
    let db = engine.database("dev").unwrap();
    let table = db.table("t").unwrap();
    for i in 0..10 {
        table.insert(&ctx, vec![record(&format!(r#"{{"id":{i}}}"#))]).await.unwrap();
    }
    // A slow consumer has read up to the fifth insert; a fast one everything.
    let log = whole_log(&db);
    let slow = Cursor::after(log[5].seq);
    db.save_cursor(&ctx, "slow", slow).await.unwrap();
    db.save_cursor(&ctx, "fast", db.log_tail().unwrap()).await.unwrap();
    let far_future = 1e15;
    table.delete_audit_log_before(&ctx, far_future).await.unwrap();
    let kept: Vec<u64> = whole_log(&db).iter().map(|e| e.seq).collect();
    let expected: Vec<u64> = log.iter().map(|e| e.seq).filter(|seq| *seq > slow.seq).collect();
    assert_eq!(kept, expected, "everything the slow cursor has not passed is kept");

    // An attached consumer is never dropped, however long since it moved.
    let attached = db.attach("slow").unwrap();
    assert!(db.attach("slow").is_err(), "one consumer per cursor");
    assert_eq!(db.drop_stale_cursors(&ctx, Duration::ZERO).await.unwrap(), vec!["fast".to_string()]);
    assert!(db.cursor("slow").unwrap().is_some());
    drop(attached);
    tokio::time::sleep(Duration::from_millis(5)).await;
    // Gone (detached) for longer than the limit: dropped, and the log it held is freed.
    assert!(db.drop_stale_cursors(&ctx, Duration::from_secs(3_600)).await.unwrap().is_empty());
    assert_eq!(db.drop_stale_cursors(&ctx, Duration::ZERO).await.unwrap(), vec!["slow".to_string()]);
    assert!(db.cursor("slow").unwrap().is_none());
    table.delete_audit_log_before(&ctx, far_future).await.unwrap();
    let left = whole_log(&db);
    assert_eq!(left.len(), 1, "only the newest entry keeps its place: {left:?}");
    assert!(left[0].changes.is_empty());
    engine.shutdown().await;
}

/// Sends the key of every put it sees to a channel, with the entry's sequence number.
struct Recorder {
    name: String,
    seen: mpsc::UnboundedSender<(u64, Value)>,
}

impl Consumer for Recorder {
    fn name(&self) -> &str {
        &self.name
    }

    /// From the start of the log: the load may begin before the runner attaches.
    async fn start(&mut self, _db: &std::sync::Arc<lyre_core::Db>) -> lyre_core::Result<Cursor> {
        Ok(Cursor::default())
    }

    async fn apply(&mut self, batch: &LogBatch) -> lyre_core::Result<()> {
        for entry in &batch.entries {
            for change in entry.changes.iter().filter(|c| c.kind == ChangeKind::Put && c.table == "events") {
                let _ = self.seen.send((entry.seq, change_key(change)?));
            }
        }
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_sees_every_change_of_a_concurrent_load_once_in_commit_order() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, _) = Engine::open(options(dir.path())).await.unwrap();
    let ctx = Context::system();
    engine.create_table(&ctx, "dev", TableSpec::dynamic("events", "id")).await.unwrap();
    let services = Services::start(&engine, ServiceOptions::default()).await.unwrap();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let runner = RunnerOptions { max_entries: 7, ..RunnerOptions::default() };
    services.consume("dev", Recorder { name: "recorder".into(), seen: tx }, runner);
    let db = engine.database("dev").unwrap();
    const WRITERS: i64 = 4;
    const EACH: i64 = 150;
    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let table = db.table("events").unwrap();
        let ctx = ctx.clone();
        writers.push(tokio::spawn(async move {
            for i in 0..EACH {
                let id = w * 1_000 + i;
                table.insert(&ctx, vec![record(&format!(r#"{{"id":{id},"w":{w}}}"#))]).await.unwrap();
            }
        }));
    }
    for writer in writers {
        writer.await.unwrap();
    }
    let mut seen = Vec::new();
    while seen.len() < (WRITERS * EACH) as usize {
        let next = tokio::time::timeout(Duration::from_secs(10), rx.recv()).await.expect("the consumer keeps up");
        seen.push(next.unwrap());
    }
    // In the log's order, each put exactly once.
    let logged: Vec<(u64, Value)> = whole_log(&db)
        .iter()
        .flat_map(|e| {
            e.changes.iter().filter(|c| c.kind == ChangeKind::Put).map(move |c| (e.seq, change_key(c).unwrap()))
        })
        .collect();
    assert_eq!(seen, logged);
    // Nothing more arrives, and the durable cursor reached the end of the log.
    assert!(tokio::time::timeout(Duration::from_millis(300), rx.recv()).await.is_err());
    assert_eq!(db.cursor("recorder").unwrap(), Some(db.log_tail().unwrap()));
    // Writes after a pause wake the consumer (no polling): it sees them too.
    db.table("events").unwrap().insert(&ctx, vec![record(r#"{"id":-1}"#)]).await.unwrap();
    let late = tokio::time::timeout(Duration::from_secs(5), rx.recv()).await.unwrap().unwrap();
    assert_eq!(late.1, Value::Int(-1));
    services.shutdown().await;
    engine.shutdown().await;
}

/// The next (epoch, sequence number) an `EpochRecorder` saw.
async fn next_seen(rx: &mut mpsc::UnboundedReceiver<(u64, u64)>) -> (u64, u64) {
    tokio::time::timeout(Duration::from_secs(10), rx.recv()).await.expect("the consumer is fed").unwrap()
}

/// Sends the epoch and sequence number of every entry with a put it sees.
struct EpochRecorder {
    seen: mpsc::UnboundedSender<(u64, u64)>,
}

impl Consumer for EpochRecorder {
    fn name(&self) -> &str {
        "epochs"
    }

    /// From the start of the log: the first insert may commit before the runner
    /// attaches (the default, the log's tail, would then skip it).
    async fn start(&mut self, _db: &std::sync::Arc<lyre_core::Db>) -> lyre_core::Result<Cursor> {
        Ok(Cursor::default())
    }

    async fn apply(&mut self, batch: &LogBatch) -> lyre_core::Result<()> {
        for entry in batch.entries.iter().filter(|e| e.changes.iter().any(|c| c.kind == ChangeKind::Put)) {
            let _ = self.seen.send((batch.epoch, entry.seq));
        }
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_follows_a_restore_into_the_restored_log_under_a_new_epoch() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, _) = Engine::open(options(dir.path())).await.unwrap();
    let ctx = Context::system();
    engine.create_table(&ctx, "dev", TableSpec::dynamic("t", "id")).await.unwrap();
    let services = Services::start(&engine, ServiceOptions::default()).await.unwrap();
    let (tx, mut rx) = mpsc::unbounded_channel();
    services.consume("dev", EpochRecorder { seen: tx }, RunnerOptions::default());
    let insert = |id: i64| {
        let table = engine.database("dev").unwrap().table("t").unwrap();
        let ctx = ctx.clone();
        async move { table.insert(&ctx, vec![record(&format!(r#"{{"id":{id}}}"#))]).await.unwrap() }
    };
    insert(1).await;
    let (first_epoch, first_seq) = next_seen(&mut rx).await;
    let backup = dir.path().join("dev.backup");
    let format = lyre_core::db::backup::BackupFormat::Mdb;
    engine.database("dev").unwrap().backup_to(&ctx, format, &mut std::fs::File::create(&backup).unwrap()).unwrap();
    insert(2).await;
    let (epoch, seq) = next_seen(&mut rx).await;
    assert_eq!(epoch, first_epoch);
    assert!(seq > first_seq);
    engine.restore_database(&ctx, "dev", &backup).await.unwrap();
    // The restored log gives out sequence numbers again from the backup's point; the
    // consumer, still running, is fed them under a new epoch.
    insert(3).await;
    let (restored_epoch, restored_seq) = next_seen(&mut rx).await;
    assert_ne!(restored_epoch, first_epoch);
    assert!(restored_seq <= seq, "{restored_seq} repeats a number given out before the restore ({seq})");
    services.shutdown().await;
    engine.shutdown().await;
}
