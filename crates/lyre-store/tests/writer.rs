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
    JobMeta { user: "tester".into(), operation: "test".into() }
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
