//! Writes at explicit versions (how replication will apply them), through the engine
//! and down to the stored bytes.

use lyre_store::{Flags, Version};

use crate::catalog::TableSpec;
use crate::record::{decode_entry, validate};
use crate::table::{Expect, RecordBody, RecordVersion, Table, WriteMode, WriteOptions};
use crate::value::{Object, Value};
use crate::{Context, Engine};

async fn table(dir: &std::path::Path) -> (std::sync::Arc<Engine>, Table) {
    let options = crate::EngineOptions::for_tests(dir);
    let (engine, _) = Engine::open(options).await.unwrap();
    let ctx = Context::system();
    let db = engine.create_database(&ctx, "dev").await.unwrap();
    let spec = TableSpec::dynamic("t", "id");
    db.create_table(&ctx, spec).await.unwrap();
    let table = db.table("t").unwrap();
    (engine, table)
}

/// The table `name` that `sdl` defines in database `dev`, beside [`table`]'s.
async fn defined(dir: &std::path::Path, sdl: &str, name: &str) -> (std::sync::Arc<Engine>, Table) {
    let (engine, _) = table(dir).await;
    let definitions = crate::catalog::parse_sdl(sdl, "schema.graphql").unwrap();
    engine.define_tables(&Context::system(), definitions).await.unwrap();
    let defined = engine.database("dev").unwrap().table(name).unwrap();
    (engine, defined)
}

fn record(json: &str) -> Object {
    match serde_json::from_str::<Value>(json).unwrap() {
        Value::Object(o) => o,
        _ => panic!("not an object"),
    }
}

/// The stored header flags of record `id`.
fn stored_flags(table: &Table, id: i64) -> Flags {
    let txn = table.db().store().read().unwrap();
    let store = txn.table("t").unwrap().unwrap();
    let key = validate::encode_primary_key(&Value::Int(id)).unwrap();
    decode_entry(txn.get_record(&store, &key).unwrap().unwrap()).unwrap().header.flags
}

fn at(time: f64) -> WriteOptions {
    WriteOptions { expect: Vec::new(), at: Some(Version { time, node: 2 }) }
}

/// Acceptance 2: an out-of-order write merged under an old version is seen by every
/// later read; the record is flagged (no ETag, conditional writes refuse it) until the
/// next in-order write clears the flag.
#[tokio::test]
async fn out_of_order_writes_merge_and_flag_the_record() {
    let dir = tempfile::tempdir().unwrap();
    let (_engine, t) = table(dir.path()).await;
    let ctx = Context::system();
    t.insert(&ctx, vec![record(r#"{"id": 1, "a": 1, "n": 0}"#)]).await.unwrap();
    let (_, current) = t.get(&ctx, &Value::Int(1)).unwrap().unwrap();
    assert!(current.unique);
    assert!(!stored_flags(&t, 1).contains(Flags::VERSION_NOT_UNIQUE));

    // A replicated write from before the insert: its add counts, its plain value loses.
    let older = current.time - 1000.0;
    t.write_with(
        &ctx,
        WriteMode::Update,
        vec![record(r#"{"id": 1, "a": 9, "n": {"__op__": "add", "value": 5}}"#)],
        at(older),
    )
    .await
    .unwrap();
    let (merged, version) = t.get(&ctx, &Value::Int(1)).unwrap().unwrap();
    assert_eq!((merged["a"].clone(), merged["n"].clone()), (Value::Int(1), Value::Int(5)));
    assert_eq!(version, RecordVersion { time: current.time, unique: false }, "the version did not advance");
    assert!(stored_flags(&t, 1).contains(Flags::VERSION_NOT_UNIQUE));
    // A conditional write naming the (reused) version must not trust it.
    let same_version = Expect::Version(std::sync::Arc::new(move |v: RecordVersion| v.time == current.time));
    let options = WriteOptions { expect: vec![Some(same_version)], at: None };
    let refused = t.write_with(&ctx, WriteMode::Update, vec![record(r#"{"id": 1, "a": 2}"#)], options).await;
    assert_eq!(refused.unwrap_err().code(), crate::Code::PreconditionFailed);

    // The next in-order write clears the flag.
    t.update(&ctx, vec![record(r#"{"id": 1, "a": 3}"#)]).await.unwrap();
    let (after, version) = t.get(&ctx, &Value::Int(1)).unwrap().unwrap();
    assert!(version.unique && version.time > current.time);
    assert_eq!((after["a"].clone(), after["n"].clone()), (Value::Int(3), Value::Int(5)));
    assert!(!stored_flags(&t, 1).contains(Flags::VERSION_NOT_UNIQUE));
}

/// Acceptance 5 (library half): redelivering the same write (same version and node)
/// counts once, in order and after it has become out of order.
#[tokio::test]
async fn a_redelivered_increment_counts_once() {
    let dir = tempfile::tempdir().unwrap();
    let (_engine, t) = table(dir.path()).await;
    let ctx = Context::system();
    t.insert(&ctx, vec![record(r#"{"id": 1, "n": 0}"#)]).await.unwrap();
    let (_, v) = t.get(&ctx, &Value::Int(1)).unwrap().unwrap();
    let replicated = v.time + 10.0;
    let increment = || vec![record(r#"{"id": 1, "n": {"__op__": "add", "value": 1}}"#)];
    let first = t.write_with(&ctx, WriteMode::Update, increment(), at(replicated)).await.unwrap();
    assert_eq!(first.written.len(), 1);
    let again = t.write_with(&ctx, WriteMode::Update, increment(), at(replicated)).await.unwrap();
    assert_eq!((again.written.len(), again.skipped.len()), (0, 1), "a redelivery is skipped");
    // A later local write makes the redelivery out of order; it still counts once.
    t.update(&ctx, vec![record(r#"{"id": 1, "m": 1}"#)]).await.unwrap();
    t.write_with(&ctx, WriteMode::Update, increment(), at(replicated)).await.unwrap();
    let (stored, _) = t.get(&ctx, &Value::Int(1)).unwrap().unwrap();
    assert_eq!(stored["n"], Value::Int(1));
    // A local write after a replicated one from the future gets a later version.
    let local = t.update(&ctx, vec![record(r#"{"id": 1, "m": 2}"#)]).await.unwrap();
    assert!(local.txn_time > replicated);
}

/// A replicated delete older than the record's last write loses; a newer one wins.
#[tokio::test]
async fn replicated_deletes_respect_versions() {
    let dir = tempfile::tempdir().unwrap();
    let (_engine, t) = table(dir.path()).await;
    let ctx = Context::system();
    let written = t.insert(&ctx, vec![record(r#"{"id": 1}"#)]).await.unwrap();
    let old = t.delete_with(&ctx, vec![Value::Int(1)], at(written.txn_time - 1.0)).await.unwrap();
    assert_eq!(old.skipped, vec![Value::Int(1)]);
    let new = t.delete_with(&ctx, vec![Value::Int(1)], at(written.txn_time + 1.0)).await.unwrap();
    assert_eq!(new.deleted, vec![Value::Int(1)]);
}

/// An expiry sweep's steps together look at every record: none is skipped at a step
/// boundary.
#[tokio::test]
async fn eviction_steps_cover_every_record() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, _) = table(dir.path()).await;
    let ctx = Context::system();
    let db = engine.database("dev").unwrap();
    let mut spec = TableSpec::dynamic("ttl", "id");
    spec.expiration = Some(crate::catalog::Expiration { expiration: 1, eviction: 0, scan_interval: Some(3_600) });
    db.create_table(&ctx, spec).await.unwrap();
    let ttl = db.table("ttl").unwrap();
    let records = (0..2_500).map(|i| record(&format!(r#"{{"id": {i}}}"#))).collect();
    ttl.insert(&ctx, records).await.unwrap();
    let later = crate::time::now_ms() + 10_000.0;
    let (mut after, mut found, mut steps) = (None, 0, 0);
    loop {
        let step = ttl.evictable_keys(later, after.as_deref(), 1_000).unwrap();
        found += step.keys.len();
        steps += 1;
        match step.next {
            Some(key) => after = Some(key),
            None => break,
        }
    }
    assert_eq!((found, steps), (2_500, 3));
}

/// A table whose only expiry rule is `@expiresAt` is swept through that attribute's
/// index: the steps find exactly the records whose time has passed (however many
/// steps that takes), and look at no other record.
#[tokio::test]
async fn an_expires_at_sweep_reads_only_due_records_through_the_index() {
    let dir = tempfile::tempdir().unwrap();
    let sdl = "type Session @table(database: \"dev\") { id: Int @primaryKey user: String until: Long @expiresAt }";
    let (_engine, sessions) = defined(dir.path(), sdl, "Session").await;
    let ctx = Context::system();
    assert_eq!(sessions.schema().expires_at.as_deref(), Some("until"));
    assert!(sessions.schema().attribute("until").unwrap().indexed, "@expiresAt indexes its attribute");
    let now = crate::time::now_ms().floor();
    // 1,500 due (ids 0..1500), 500 due later, 500 that never expire.
    let records = (0..2_500)
        .map(|i| match i {
            0..1_500 => record(&format!(r#"{{"id": {i}, "until": {}}}"#, now - 1_000.0 - i as f64)),
            1_500..2_000 => record(&format!(r#"{{"id": {i}, "until": {}}}"#, now + 3_600_000.0)),
            _ => record(&format!(r#"{{"id": {i}, "user": "u"}}"#)),
        })
        .collect();
    sessions.insert(&ctx, records).await.unwrap();
    let (mut after, mut found, mut steps) = (None, Vec::new(), 0);
    loop {
        let step = sessions.evictable_keys(now, after.as_deref(), 1_000).unwrap();
        found.extend(step.keys);
        steps += 1;
        match step.next {
            Some(key) => after = Some(key),
            None => break,
        }
    }
    let mut due: Vec<i64> = found
        .iter()
        .map(|key| match lyre_store::decode_key(key).unwrap().0 {
            lyre_store::OwnedKey::Int(id) => id,
            other => panic!("unexpected key {other:?}"),
        })
        .collect();
    due.sort_unstable();
    assert_eq!(due, (0..1_500).collect::<Vec<_>>());
    assert_eq!(steps, 2, "1,500 due entries in steps of 1,000; nothing else read");
    // Hidden from reads already; the eviction removes them and their index entries.
    assert!(sessions.get(&ctx, &Value::Int(7)).unwrap().is_none());
    assert!(sessions.get(&ctx, &Value::Int(1_700)).unwrap().is_some());
    assert_eq!(sessions.evict(&ctx, found, now).await.unwrap(), 1_500);
    let report = crate::services::check_consistency(&sessions, &ctx).unwrap();
    assert!(report.is_consistent(), "{report:?}");
    assert_eq!(sessions.stats(&ctx).unwrap().record_count, 1_000);
}

/// A transaction's writes, over two tables, are committed together or not at all.
#[tokio::test]
async fn a_transaction_commits_every_write_or_none() {
    use crate::table::{TransactionWrite, transact};
    let dir = tempfile::tempdir().unwrap();
    let (engine, t) = table(dir.path()).await;
    let ctx = Context::system();
    let db = engine.database("dev").unwrap();
    db.create_table(&ctx, TableSpec::dynamic("u", "id")).await.unwrap();
    let u = db.table("u").unwrap();
    t.insert(&ctx, vec![record(r#"{"id": 1, "n": 1}"#), record(r#"{"id": 2}"#)]).await.unwrap();
    let answers = transact(vec![
        (ctx.clone(), t.clone(), TransactionWrite::Patch(Value::Int(1), record(r#"{"n": 2}"#))),
        (ctx.clone(), u.clone(), TransactionWrite::Create(record(r#"{"id": "a", "from": 1}"#))),
        (ctx.clone(), t.clone(), TransactionWrite::Delete(Value::Int(2))),
    ])
    .await
    .unwrap();
    assert_eq!(answers, vec![Value::Null, Value::String("a".into()), Value::Bool(true)]);
    assert_eq!(t.get(&ctx, &Value::Int(1)).unwrap().unwrap().0["n"], Value::Int(2));
    assert!(t.get(&ctx, &Value::Int(2)).unwrap().is_none());
    // A create of a key that exists refuses the whole transaction: the patch before it
    // is not kept.
    let refused = transact(vec![
        (ctx.clone(), t.clone(), TransactionWrite::Patch(Value::Int(1), record(r#"{"n": 3}"#))),
        (ctx.clone(), u.clone(), TransactionWrite::Create(record(r#"{"id": "a"}"#))),
    ])
    .await
    .unwrap_err();
    assert!(refused.to_string().contains("already exists"), "{refused}");
    assert_eq!(t.get(&ctx, &Value::Int(1)).unwrap().unwrap().0["n"], Value::Int(2));
    // So is a second create of a key within one transaction; a create after a
    // delete of the same key is not.
    let twice = vec![
        (ctx.clone(), u.clone(), TransactionWrite::Create(record(r#"{"id": "b"}"#))),
        (ctx.clone(), u.clone(), TransactionWrite::Create(record(r#"{"id": "b"}"#))),
    ];
    assert!(transact(twice).await.unwrap_err().to_string().contains("already exists"));
    assert!(u.get(&ctx, &Value::String("b".into())).unwrap().is_none());
    let again = vec![
        (ctx.clone(), u.clone(), TransactionWrite::Delete(Value::String("a".into()))),
        (ctx.clone(), u.clone(), TransactionWrite::Create(record(r#"{"id": "a", "from": 2}"#))),
    ];
    assert_eq!(transact(again).await.unwrap(), vec![Value::Bool(true), Value::String("a".into())]);
    // A transaction over two databases is refused before anything is queued.
    let other = engine.create_database(&ctx, "other").await.unwrap();
    other.create_table(&ctx, TableSpec::dynamic("v", "id")).await.unwrap();
    let v = other.table("v").unwrap();
    let mixed = vec![
        (ctx.clone(), t.clone(), TransactionWrite::Put(Value::Int(1), record(r#"{"n": 9}"#))),
        (ctx.clone(), v, TransactionWrite::Put(Value::Int(1), record("{}"))),
    ];
    assert!(transact(mixed).await.unwrap_err().to_string().contains("one database"));
    assert_eq!(t.get(&ctx, &Value::Int(1)).unwrap().unwrap().0["n"], Value::Int(2));
}

/// `Expect::Unchanged` holds while what is stored under the key is what was seen:
/// nothing at all, or the record at that version, expired or not (a caching table
/// refreshes an expired copy under it); any write or removal in between fails it.
#[tokio::test]
async fn unchanged_holds_until_the_stored_record_changes_expired_or_not() {
    let dir = tempfile::tempdir().unwrap();
    let sdl = "type Copy @table(database: \"dev\") { id: Int @primaryKey name: String until: Long @expiresAt }";
    let (_engine, copies) = defined(dir.path(), sdl, "Copy").await;
    let ctx = Context::system();
    let put = |id: i64, name: &str, seen: Option<f64>| {
        let body = record(&format!(r#"{{"name": "{name}", "until": 1}}"#));
        let options = WriteOptions { expect: vec![Some(Expect::Unchanged(seen))], at: None };
        copies.put(&ctx, Value::Int(id), body, options)
    };
    fn refused<T: std::fmt::Debug>(result: crate::Result<T>) {
        assert_eq!(result.unwrap_err().code(), crate::Code::PreconditionFailed);
    }

    // Nothing stored: `None` holds, a version does not.
    refused(put(1, "x", Some(1.0)).await);
    put(1, "fetched", None).await.unwrap();
    refused(put(1, "again", None).await);
    // Stored (and expired: `until` is long past), at the version seen: holds.
    let seen = copies.get_held(&ctx, &Value::Int(1)).unwrap().unwrap().version.time;
    assert!(copies.get(&ctx, &Value::Int(1)).unwrap().is_none(), "the copy has expired");
    put(1, "refreshed", Some(seen)).await.unwrap();
    // Written since: the version seen no longer holds, for a put or a delete.
    refused(put(1, "stale answer", Some(seen)).await);
    let delete = WriteOptions { expect: vec![Some(Expect::Unchanged(Some(seen)))], at: None };
    refused(copies.delete_with(&ctx, vec![Value::Int(1)], delete).await);
    let held = copies.get_held(&ctx, &Value::Int(1)).unwrap().unwrap();
    assert_eq!(held.record["name"], Value::String("refreshed".into()));
}

/// A consistency check through a handle resolved before a write added an
/// attribute (a check of a whole database resolves every table first) judges the
/// snapshot by the snapshot's own catalog: the new attribute's index entries are
/// not phantoms.
#[tokio::test]
async fn a_consistency_check_reads_the_schema_of_its_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let (_engine, t) = table(dir.path()).await;
    let ctx = Context::system();
    t.insert(&ctx, vec![record(r#"{"id": 1, "a": 1}"#)]).await.unwrap();
    let resolved_before = t.current().unwrap();
    t.insert(&ctx, vec![record(r#"{"id": 2, "a": 2, "added": "later"}"#)]).await.unwrap();
    assert!(resolved_before.schema().attribute("added").is_none(), "the handle predates the attribute");
    let report = crate::services::check_consistency(&resolved_before, &ctx).unwrap();
    assert_eq!((report.records, report.phantom_count, report.missing_count), (2, 0, 0), "{report:?}");
}

/// A content record is found in its stored bytes as Lyre encodes them, and only
/// there: not in a record that merely holds the key's text as a value, nor in one
/// whose data is not text, bytes or a blob.
#[test]
fn content_records_are_found_in_their_stored_bytes() {
    let stored = |record: &Object| {
        let mut bytes = Vec::new();
        crate::value::write_object(record, &mut bytes);
        RecordBody::Stored(bytes)
    };
    let content = crate::content_record("text/html", b"<p>hi</p>".to_vec());
    let expected = Some(("text/html".to_string(), Value::from("<p>hi</p>")));
    assert_eq!(stored(&content).content().unwrap(), expected);
    assert_eq!(RecordBody::Decoded(content.clone()).content().unwrap(), expected);
    let bytes = crate::content_record("image/png", vec![0x89, 0x50]);
    assert_eq!(stored(&bytes).content().unwrap(), Some(("image/png".to_string(), Value::Bytes(vec![0x89, 0x50]))));
    let mut mentions = Object::default();
    mentions.insert("note".into(), Value::from("contentType"));
    mentions.insert("data".into(), Value::from("x"));
    assert_eq!(stored(&mentions).content().unwrap(), None);
    let mut numeric = content.clone();
    numeric.insert("data".into(), Value::Int(5));
    assert_eq!(stored(&numeric).content().unwrap(), None);
    // The JSON pass answers the same, and writes what `write_json` writes otherwise
    // (a nested `contentType` is no content record's).
    let mut nested = Object::default();
    nested.insert("inner".into(), Value::Object(content.clone()));
    for record in [&content, &bytes, &mentions, &numeric, &nested] {
        for body in [stored(record), RecordBody::Decoded(record.clone())] {
            let mut json = Vec::new();
            let answered = body.write_json_or_content(&mut json).unwrap();
            assert_eq!(answered, body.content().unwrap(), "{record:?}");
            if answered.is_none() {
                assert_eq!(json, serde_json::to_vec(record).unwrap(), "{record:?}");
            }
        }
    }
}
