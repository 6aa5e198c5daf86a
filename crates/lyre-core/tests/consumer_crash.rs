//! A log consumer survives a real crash: a child process runs a concurrent write
//! load with a consumer recording every put it is fed (durably, before `apply`
//! returns); the test kills it with SIGKILL mid-load, starts it again without the
//! load, and checks that the consumer resumed from its durable cursor and, over
//! both runs, saw every committed put exactly once, in commit order.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use lyre_core::catalog::TableSpec;
use lyre_core::db::log::{ChangeKind, Cursor, LogBatch, change_key};
use lyre_core::services::{Consumer, RunnerOptions};
use lyre_core::{Context, Engine, ServiceOptions, Services};

mod common;
use common::{options_with, record, whole_log};

/// Set in the child: the directory holding its root and its record files.
const CHILD_DIR: &str = "LYRE_TEST_CONSUMER_DIR";
/// Set in the child: `load` (write until killed) or `drain` (catch up, then exit).
const CHILD_PHASE: &str = "LYRE_TEST_CONSUMER_PHASE";
const CONSUMER: &str = "recorder";

/// Appends `seq key` for each put it is fed to `seen.log`, flushed to disk before
/// `apply` returns, skipping entries at or before the last one recorded (a crash
/// between the record and the cursor's store delivers them again).
struct Recorder {
    file: std::fs::File,
    last: u64,
    /// Where to write the first sequence number this process is fed.
    first: Option<PathBuf>,
    /// A pause per batch, so the consumer lags the load (there is a backlog to resume).
    lag: Duration,
}

impl Recorder {
    fn open(dir: &Path, phase: &str, lag: Duration) -> Recorder {
        let path = dir.join("seen.log");
        let last = std::fs::read_to_string(&path)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.split(' ').next()?.parse::<u64>().ok())
            .max()
            .unwrap_or(0);
        let file = std::fs::OpenOptions::new().create(true).append(true).open(path).unwrap();
        Recorder { file, last, first: Some(dir.join(format!("{phase}.first"))), lag }
    }
}

impl Consumer for Recorder {
    fn name(&self) -> &str {
        CONSUMER
    }

    /// From the start of the log: the load begins after the consumer is registered.
    async fn start(&mut self, _db: &std::sync::Arc<lyre_core::Db>) -> lyre_core::Result<Cursor> {
        Ok(Cursor::default())
    }

    async fn apply(&mut self, batch: &LogBatch) -> lyre_core::Result<()> {
        if let (Some(path), Some(entry)) = (self.first.take(), batch.entries.first()) {
            std::fs::write(path, entry.seq.to_string()).map_err(lyre_store_io)?;
        }
        tokio::time::sleep(self.lag).await;
        let mut lines = String::new();
        for entry in &batch.entries {
            if entry.seq <= self.last {
                continue; // delivered again after the crash: applied already
            }
            for change in entry.changes.iter().filter(|c| c.kind == ChangeKind::Put && c.table == "events") {
                lines.push_str(&format!("{} {}\n", entry.seq, change_key(change)?));
            }
            self.last = entry.seq;
        }
        self.file.write_all(lines.as_bytes()).map_err(lyre_store_io)?;
        self.file.sync_data().map_err(lyre_store_io)?;
        Ok(())
    }
}

fn lyre_store_io(err: std::io::Error) -> lyre_core::Error {
    lyre_core::Error::Corrupt(format!("the test's record file: {err}"))
}

/// The child: opens the engine on `dir/root`, feeds the recorder, and either writes
/// from four tasks until killed, or waits until the recorder has caught up and exits.
async fn child(dir: PathBuf, phase: String) {
    let (engine, _) = Engine::open(options_with(&dir.join("root"), true)).await.unwrap();
    let ctx = Context::system();
    if engine.database("dev").is_err() {
        engine.create_table(&ctx, "dev", TableSpec::dynamic("events", "id")).await.unwrap();
    }
    let db = engine.database("dev").unwrap();
    let resumed_from = db.cursor(CONSUMER).unwrap();
    let resumed_from = resumed_from.map_or(0, |cursor| cursor.seq);
    std::fs::write(dir.join(format!("{phase}.cursor")), resumed_from.to_string()).unwrap();
    let services = Services::start(&engine, ServiceOptions::default()).await.unwrap();
    let runner = RunnerOptions { max_entries: 25, ..RunnerOptions::default() };
    let lag = if phase == "load" { Duration::from_millis(20) } else { Duration::ZERO };
    services.consume("dev", Recorder::open(&dir, &phase, lag), runner);
    if phase == "load" {
        let mut writers = Vec::new();
        for w in 0..4i64 {
            let table = db.table("events").unwrap();
            let ctx = ctx.clone();
            writers.push(tokio::spawn(async move {
                for i in 0.. {
                    let id = w * 1_000_000 + i;
                    table.insert(&ctx, vec![record(&format!(r#"{{"id":{id}}}"#))]).await.unwrap();
                }
            }));
        }
        for writer in writers {
            let _ = writer.await; // runs until the parent kills the process
        }
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while db.cursor(CONSUMER).unwrap() != Some(db.log_tail().unwrap()) {
        assert!(Instant::now() < deadline, "the consumer did not catch up");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    services.shutdown().await;
    engine.shutdown().await;
}

fn spawn_child(dir: &Path, phase: &str) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["a_consumer_resumes_from_its_durable_cursor_after_kill_9", "--exact", "--nocapture"])
        .env(CHILD_DIR, dir)
        .env(CHILD_PHASE, phase)
        .spawn()
        .unwrap()
}

fn seen(dir: &Path) -> Vec<(u64, String)> {
    std::fs::read_to_string(dir.join("seen.log"))
        .unwrap_or_default()
        .lines()
        .map(|l| {
            let (seq, key) = l.split_once(' ').unwrap();
            (seq.parse().unwrap(), key.to_string())
        })
        .collect()
}

#[test]
fn a_consumer_resumes_from_its_durable_cursor_after_kill_9() {
    if let (Ok(dir), Ok(phase)) = (std::env::var(CHILD_DIR), std::env::var(CHILD_PHASE)) {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        runtime.block_on(child(PathBuf::from(dir), phase));
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut load = spawn_child(dir.path(), "load");
    let deadline = Instant::now() + Duration::from_secs(60);
    while seen(dir.path()).len() < 500 {
        assert!(Instant::now() < deadline, "the load did not get going");
        assert!(load.try_wait().unwrap().is_none(), "the loaded child exited");
        std::thread::sleep(Duration::from_millis(20));
    }
    load.kill().unwrap(); // SIGKILL: no shutdown, no flush beyond what was durable
    load.wait().unwrap();
    let before_restart = seen(dir.path());
    let mut drain = spawn_child(dir.path(), "drain");
    assert!(drain.wait().unwrap().success(), "the draining child failed");

    // It resumed from a stored cursor within what it had recorded, not from the start.
    let resumed = std::fs::read_to_string(dir.path().join("drain.cursor")).unwrap();
    let resumed: u64 = resumed.parse().unwrap();
    let recorded = before_restart.last().unwrap().0;
    assert!(resumed > 0 && resumed <= recorded, "resumed after {resumed}, had recorded up to {recorded}");

    // Every committed put, exactly once, in commit order.
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let logged = runtime.block_on(async {
        let (engine, _) = Engine::open(options_with(&dir.path().join("root"), true)).await.unwrap();
        let db = engine.database("dev").unwrap();
        let mut logged = Vec::new();
        for entry in whole_log(&db) {
            for change in entry.changes.iter().filter(|c| c.kind == ChangeKind::Put) {
                logged.push((entry.seq, change_key(change).unwrap().to_string()));
            }
        }
        let records = db.table("events").unwrap().stats(&Context::system()).unwrap().record_count;
        engine.shutdown().await;
        assert_eq!(records as usize, logged.len(), "one put per record");
        logged
    });
    let all = seen(dir.path());
    assert_eq!(all, logged);
    assert!(logged.iter().any(|(_, key)| key.parse::<i64>().is_ok_and(|id| id >= 3_000_000)), "all four writers ran");
    // The consumer lagged the load, so the crash left a backlog; the restarted runner
    // fed it from the entry right after the durable cursor.
    assert!(all.len() > before_restart.len(), "the drain recorded the backlog the crash left");
    let first: u64 = std::fs::read_to_string(dir.path().join("drain.first")).unwrap().parse().unwrap();
    let next_after_cursor = logged.iter().map(|(seq, _)| *seq).find(|seq| *seq > resumed).unwrap();
    assert_eq!(first, next_after_cursor, "resumed after the durable cursor {resumed}");
}
