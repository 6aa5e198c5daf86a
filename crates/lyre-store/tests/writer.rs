//! The writer: group commit, isolation of failing jobs, the log, reopening.

use std::sync::Arc;

use lyre_store::{
    Database, DatabaseOptions, Error, Flags, JobMeta, RecordHeader, VersionClock, Writer, WriterOptions, decode_record,
    encode_record,
};

fn options() -> DatabaseOptions {
    DatabaseOptions { map_size: 1 << 30, durable: false }
}

fn meta() -> JobMeta {
    JobMeta { user: "tester".into(), operation: "test".into(), origin: None }
}

fn spawn(db: &Database) -> Writer<u64> {
    Writer::spawn(db.clone(), Arc::new(VersionClock::new(1, 0.0)), 0u64, Box::new(|_, _| {}), WriterOptions::default())
        .unwrap()
}

fn record(body: &[u8]) -> Vec<u8> {
    encode_record(&RecordHeader { version: 1.0, flags: Flags::empty(), node: 1 }, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reopening_a_database_keeps_tables_and_log() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = Database::open("t", dir.path(), options()).unwrap();
        let writer = spawn(&db);
        writer.prepare_table("dog").await.unwrap();
        writer
            .submit(meta(), |txn, state| {
                let store = txn.table("dog")?.expect("prepared");
                txn.put_record(&store, b"k1".to_vec(), record(b"v1"))?;
                *state += 1;
                Ok::<_, Error>(())
            })
            .await
            .unwrap();
        let w = Arc::new(writer);
        tokio::task::spawn_blocking(move || w.shutdown()).await.unwrap();
    }
    let db = Database::open("t", dir.path(), options()).unwrap();
    let txn = db.read().unwrap();
    let store = txn.table("dog").unwrap().expect("table survives reopening");
    let (_, body) = decode_record(txn.get_record(&store, b"k1").unwrap().unwrap()).unwrap();
    assert_eq!(body, b"v1");
    let entries: Vec<_> = txn.log_from(0).unwrap().collect::<Result<_, _>>().unwrap();
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].user, "tester");
    assert_eq!(entries[0].changes[0].key, b"k1");
}

/// Writes one record into `table` (already prepared).
async fn put(writer: &Writer<u64>, table: &'static str, key: &'static [u8], body: &'static [u8]) {
    writer
        .submit(meta(), move |txn, _| {
            let store = txn.table(table)?.expect("prepared");
            txn.put_record(&store, key.to_vec(), record(body))
        })
        .await
        .unwrap();
}

/// Drops `table`'s storage as `drop_table` does, giving its slot back.
async fn release(writer: &Writer<u64>, table: &'static str) {
    writer
        .submit(meta(), move |txn, _| {
            let store = txn.table(table)?.expect("prepared");
            txn.release_table(&store)
        })
        .await
        .unwrap();
}

/// Holds the writer thread inside a job, once it runs, until the returned sender is
/// used: jobs queued meanwhile wait behind it. Also returns the held job's outcome.
async fn hold(
    writer: &Writer<u64>,
) -> (std::sync::mpsc::Sender<()>, impl std::future::Future<Output = Result<(), Error>>) {
    let (release, held) = std::sync::mpsc::channel::<()>();
    let (started, running) = tokio::sync::oneshot::channel::<()>();
    let blocker = writer
        .enqueue(meta(), move |_, _| {
            let _ = started.send(());
            let _ = held.recv();
            Ok::<_, Error>(())
        })
        .await
        .unwrap();
    running.await.unwrap();
    (release, blocker)
}

async fn stop(writer: Writer<u64>) {
    let w = Arc::new(writer);
    tokio::task::spawn_blocking(move || w.shutdown()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_snapshot_never_reads_a_reused_slot_under_a_new_name() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open("t", dir.path(), options()).unwrap();
    let writer = spawn(&db);
    writer.prepare_table("a").await.unwrap();
    put(&writer, "a", b"secret", b"of a").await;
    let old = db.read().unwrap();
    // The snapshot remembers that it assigns a's slot to a (not to whatever takes it).
    assert!(old.table("a").unwrap().is_some());
    release(&writer, "a").await;
    writer.prepare_table("b").await.unwrap();
    assert_eq!(db.slot_counts(), (1, 0), "b reuses a's slot");
    put(&writer, "b", b"k", b"of b").await;
    // The snapshot from before the drop has a's records in that slot: it must not
    // present them as b's.
    assert!(old.table("b").unwrap().is_none());
    let now = db.read().unwrap();
    let store = now.table("b").unwrap().expect("b exists now");
    assert!(now.get_record(&store, b"secret").unwrap().is_none());
    assert!(now.get_record(&store, b"k").unwrap().is_some());
    stop(writer).await;
}

/// A read right after an acknowledged write sees it, though the snapshot of the read
/// before it is kept for reuse; a table prepared after a snapshot was kept is seen by
/// the next read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kept_snapshots_never_hide_a_commit() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open("t", dir.path(), options()).unwrap();
    let writer = spawn(&db);
    writer.prepare_table("dog").await.unwrap();
    const KEYS: [&[u8]; 4] = [b"k0", b"k1", b"k2", b"k3"];
    for (n, key) in KEYS.into_iter().enumerate() {
        put(&writer, "dog", key, b"v").await;
        // Two reads in a row: the second takes the first's kept snapshot.
        for _ in 0..2 {
            let txn = db.read().unwrap();
            let store = txn.table("dog").unwrap().expect("prepared");
            for (m, earlier) in KEYS.iter().enumerate() {
                assert_eq!(txn.get_record(&store, earlier).unwrap().is_some(), m <= n, "after writing {n}");
            }
        }
    }
    drop(db.read().unwrap());
    writer.prepare_table("cat").await.unwrap();
    put(&writer, "cat", b"c", b"v").await;
    let txn = db.read().unwrap();
    let store = txn.table("cat").unwrap().expect("a table prepared after the kept snapshot");
    assert!(txn.get_record(&store, b"c").unwrap().is_some());
    stop(writer).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_whose_tables_were_all_dropped_keeps_its_slots_free() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = Database::open("t", dir.path(), options()).unwrap();
        let writer = spawn(&db);
        writer.prepare_table("a").await.unwrap();
        release(&writer, "a").await;
        stop(writer).await;
    }
    // Reopened, the emptied slot is free, not mistaken for an older-format table.
    let db = Database::open("t", dir.path(), options()).unwrap();
    assert_eq!(db.slot_counts(), (0, 1));
    assert!(db.read().unwrap().table("0").unwrap().is_none());
}

/// Prunes everything older than `before` (every table), in calls of at most `max` entries.
async fn prune_all(writer: &Writer<u64>, before: f64, max: usize) -> u64 {
    let (mut from, mut removed) = (0, 0);
    loop {
        let progress = writer
            .submit(meta(), move |txn, _| {
                txn.prune_log(from, lyre_store::PruneScope { before, table: None, through_seq: None }, max)
            })
            .await
            .unwrap();
        removed += progress.removed;
        match progress.next {
            Some(next) => from = next,
            None => return removed,
        }
    }
}

fn log_seqs(db: &Database) -> Vec<u64> {
    let txn = db.read().unwrap();
    txn.log_from(0).unwrap().map(|e| e.unwrap().seq).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pruning_keeps_the_newest_entry_and_later_removes_it_once_emptied() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open("t", dir.path(), options()).unwrap();
    let writer = spawn(&db);
    writer.prepare_table("dog").await.unwrap();
    for key in [b"k1", b"k2", b"k3"] {
        put(&writer, "dog", key, b"v").await;
    }
    assert_eq!(log_seqs(&db), [1, 2, 3]);
    // Everything is old: three changes go, in calls of one entry each; the newest
    // entry stays (emptied) so its sequence number is never reused.
    assert_eq!(prune_all(&writer, f64::MAX, 1).await, 3);
    assert_eq!(log_seqs(&db), [3]);
    put(&writer, "dog", b"k4", b"v").await;
    assert_eq!(log_seqs(&db), [3, 4], "the next write continues the sequence");
    // The emptied entry is no longer the newest: the next prune removes it.
    assert_eq!(prune_all(&writer, f64::MAX, 10).await, 1);
    assert_eq!(log_seqs(&db), [4]);
    stop(writer).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn versions_after_a_restart_exceed_every_version_issued_before() {
    let dir = tempfile::tempdir().unwrap();
    // A version a day ahead of the wall clock, as after a clock that stepped back.
    let ahead = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64() * 1000.0
        + 86_400_000.0;
    {
        let db = Database::open("t", dir.path(), options()).unwrap();
        let writer = spawn(&db);
        // The job writes nothing (so nothing is logged), but its version was issued.
        writer
            .submit(meta(), move |txn, _| {
                txn.set_version(lyre_store::Version { time: ahead, node: 1 });
                Ok::<_, Error>(())
            })
            .await
            .unwrap();
        stop(writer).await;
    }
    let db = Database::open("t", dir.path(), options()).unwrap();
    let clock = Arc::new(VersionClock::new(1, 0.0));
    let writer = Writer::spawn(db.clone(), clock.clone(), 0u64, Box::new(|_, _| {}), WriterOptions::default()).unwrap();
    assert!(clock.next().time > ahead, "the reopened writer raised the clock past the stored mark");
    stop(writer).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_entries_fill_their_pages() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open("t", dir.path(), options()).unwrap();
    let writer = spawn(&db);
    writer.prepare_table("dog").await.unwrap();
    // Entries of about 1.15 KB, one commit each, as single-record writes make them:
    // three fit in a 4 KB page, with room to spare if an entry's framing grows.
    let body: &'static [u8] = Box::leak(vec![b'x'; 1000].into_boxed_slice());
    for n in 0u32..300 {
        writer
            .submit(meta(), move |txn, _| {
                let store = txn.table("dog")?.expect("prepared");
                txn.put_record(&store, n.to_be_bytes().to_vec(), record(body))?;
                Ok::<_, Error>(())
            })
            .await
            .unwrap();
    }
    let per_entry = db.read().unwrap().log_size().unwrap() / 300;
    // Split in half at each new entry, pages held one or two: 2,061 bytes per entry.
    // Full 4 KB pages: 1,378 (with 64 KB pages, about 1,530).
    assert!(per_entry < 1_600, "the log takes {per_entry} bytes per entry");
    stop(writer).await;
}

#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_writer_runs_as_a_batch_thread() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open("batchy", dir.path(), options()).unwrap();
    let writer = spawn(&db);
    // The thread sets its policy before it takes its first job.
    writer.submit(meta(), |_, _| Ok::<_, Error>(())).await.unwrap();
    let tid = std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(Result::ok)
        .find(|task| std::fs::read_to_string(task.path().join("comm")).is_ok_and(|name| name.trim() == "writer-batchy"))
        .and_then(|task| task.file_name().to_str()?.parse::<libc::pid_t>().ok())
        .expect("the writer thread is listed");
    // SAFETY: sched_getscheduler only reads the scheduling policy of thread `tid`.
    let policy = unsafe { libc::sched_getscheduler(tid) };
    assert_eq!(policy, libc::SCHED_BATCH, "the writer's scheduling policy");
    stop(writer).await;
}

/// This process's resident pages of mapped files, in KiB (`RssFile`).
fn resident_file_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("RssFile:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn released_pages_leave_resident_memory_and_keep_their_contents() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open("t", dir.path(), options()).unwrap();
    let writer = spawn(&db);
    writer.prepare_table("big").await.unwrap();
    // 64 MiB written through the map (async environments write through it).
    for batch in 0..64u32 {
        writer
            .submit(meta(), move |txn, _| {
                let store = txn.table("big")?.expect("prepared");
                for n in 0..256u32 {
                    let key = (batch * 256 + n).to_be_bytes().to_vec();
                    txn.put_record(&store, key, record(&vec![b'x'; 4096]))?;
                }
                Ok::<_, Error>(())
            })
            .await
            .unwrap();
    }
    let before = resident_file_kib();
    let released = db.release_resident_pages().unwrap();
    let after = resident_file_kib();
    assert!(released >= 64 << 20, "the map's range is released: {released}");
    assert!(before >= after + 32 * 1024, "resident file pages fell from {before} KiB to {after} KiB");
    // Every record reads back as written.
    let txn = db.read().unwrap();
    let store = txn.table("big").unwrap().unwrap();
    assert_eq!(txn.count_records(&store).unwrap(), 64 * 256);
    let one = txn.get_record(&store, &1000u32.to_be_bytes()).unwrap().unwrap();
    assert_eq!(one, record(&vec![b'x'; 4096]).as_slice());
}

/// A full queue: a job waits for room and is queued once there is some; past the
/// queue's timeout it is refused as overloaded, and the queued jobs still commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_makes_submitters_wait_then_refuses_them_at_its_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open("t", dir.path(), options()).unwrap();
    let options =
        WriterOptions { queue_capacity: 1, queue_timeout: std::time::Duration::from_millis(300), max_batch: 1 };
    let writer = Arc::new(
        Writer::spawn(db.clone(), Arc::new(VersionClock::new(1, 0.0)), 0u64, Box::new(|_, _| {}), options).unwrap(),
    );
    // The writer thread is held inside a job until `release` is sent.
    let (release, blocker) = hold(&writer).await;
    // The one place in the queue is taken; the next job must wait for room.
    let queued = writer.enqueue(meta(), |_, state| Ok::<_, Error>(*state)).await.unwrap();
    let refused = writer.enqueue(meta(), |_, _| Ok::<_, Error>(0)).await;
    assert!(matches!(refused, Err(Error::Overloaded)), "a full queue refuses at its timeout");
    // Room made while a submitter waits lets it in.
    let waiting = {
        let writer = writer.clone();
        tokio::spawn(async move { writer.submit(meta(), |_, _| Ok::<_, Error>(7u64)).await })
    };
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    release.send(()).unwrap();
    blocker.await.unwrap();
    queued.await.unwrap();
    assert_eq!(waiting.await.unwrap().unwrap(), 7);
    let w = writer.clone();
    tokio::task::spawn_blocking(move || w.shutdown()).await.unwrap();
}

/// Metadata a job writes at the commit: written once for its batch, the last job's
/// value winning; a job that fails leaves none; the batch's jobs read the value
/// stored before; a later direct delete of the key wins. And the tables' incarnations
/// the batch reads once stay true when a job of the batch drops a table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_written_at_the_commit_follows_the_batch_order() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open("t", dir.path(), options()).unwrap();
    let writer = spawn(&db);
    writer.prepare_table("dog").await.unwrap();
    writer.prepare_table("cat").await.unwrap();
    writer
        .submit(meta(), |txn, _| {
            let cat = txn.table("cat")?.expect("prepared");
            txn.start_incarnation(&cat)?;
            txn.put_meta(b"kept", b"before")?;
            txn.put_meta(b"deleted", b"before")
        })
        .await
        .unwrap();
    let before = writer.stats().commits;
    // The writer is held in a job while the rest queue behind it: they run as one batch.
    let (release, blocker) = hold(&writer).await;
    let at_commit = |value: &'static [u8]| {
        move |txn: &mut lyre_store::WriteTxn<'_, '_>, _: &mut u64| {
            let seen = txn.meta(b"kept")?.map(<[u8]>::to_vec);
            txn.put_meta_at_commit(b"kept".to_vec(), value.to_vec());
            txn.put_meta_at_commit(b"deleted".to_vec(), value.to_vec());
            let store = txn.table("dog")?.expect("prepared");
            txn.put_record(&store, value.to_vec(), record(value))?;
            Ok::<_, Error>(seen)
        }
    };
    let first = writer.enqueue(meta(), at_commit(b"first")).await.unwrap();
    let second = writer.enqueue(meta(), at_commit(b"second")).await.unwrap();
    let failing = writer
        .enqueue(meta(), |txn, _| {
            txn.put_meta_at_commit(b"kept".to_vec(), b"failed".to_vec());
            Err::<(), _>(Error::Internal("refused before writing".into()))
        })
        .await
        .unwrap();
    let deleting = writer.enqueue(meta(), |txn, _| txn.delete_meta(b"deleted")).await.unwrap();
    let incarnations = writer
        .enqueue(meta(), |txn, _| {
            let cat = txn.table("cat")?.expect("prepared");
            let read = cat.incarnation();
            txn.release_table(&cat)?;
            let after_release = txn.table("cat")?.and_then(|cat| cat.incarnation());
            let dog = txn.table("dog")?.expect("prepared");
            let started = txn.start_incarnation(&dog)?.incarnation();
            let after_start = txn.table("dog")?.and_then(|dog| dog.incarnation());
            assert_eq!(after_start, started, "a table read after its incarnation started has the new one");
            Ok::<_, Error>((read, after_release))
        })
        .await
        .unwrap();
    release.send(()).unwrap();
    blocker.await.unwrap();
    assert_eq!(first.await.unwrap().as_deref(), Some(&b"before"[..]));
    assert!(failing.await.is_err());
    assert_eq!(second.await.unwrap().as_deref(), Some(&b"before"[..]), "the batch reads the value stored before");
    assert!(deleting.await.unwrap());
    let (read, after_release) = incarnations.await.unwrap();
    assert!(read.is_some_and(|n| n > 0), "a prepared table has an incarnation");
    assert!(after_release.is_none_or(|n| n == 0), "a released table's incarnation is gone: {after_release:?}");
    assert_eq!(writer.stats().commits, before + 2, "the blocker's batch and one batch for the rest");
    let txn = db.read().unwrap();
    assert_eq!(txn.meta(b"kept").unwrap(), Some(&b"second"[..]), "the last job's value");
    assert_eq!(txn.meta(b"deleted").unwrap(), None, "a later delete wins over an earlier job's value");
    drop(txn);
    stop(writer).await;
}
