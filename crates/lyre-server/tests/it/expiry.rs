//! `@table(expiration:)` and `create_table`'s `expiration`: expired records vanish
//! from every read, a write after expiry starts a new record, and the sweeper removes
//! them from storage with their index entries.

use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{Value, json};

use crate::support::TestServer;

const SCHEMA: &str = r#"
type Temp @table(database: "ttl", expiration: 2, eviction: 3600) @export {
  id: ID @primaryKey
  name: String @indexed
  note: String
}
type Swept @table(database: "ttl", expiration: 1, eviction: 1, scanInterval: 1) @export {
  id: ID @primaryKey
  name: String @indexed
}
"#;
const CONFIG: &str = "rest: true\ngraphqlSchema:\n  files: '*.graphql'\n";

async fn status(s: &TestServer, method: Method, path: &str, body: Option<Value>) -> (u16, Value) {
    let (status, _, body) = s.rest_send(method, path, body.as_ref(), &[]).await;
    (status, body)
}

/// Polls `check` every 100 ms until it holds; fails after `limit`.
async fn eventually<F: AsyncFn() -> bool>(limit: Duration, what: &str, check: F) {
    let deadline = Instant::now() + limit;
    while !check().await {
        assert!(Instant::now() < deadline, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn expired_records_vanish_from_every_read_and_are_swept_away() {
    let s = TestServer::start_app(
        &[("components/ttl/config.yaml", CONFIG), ("components/ttl/schema.graphql", SCHEMA)],
        &[],
    )
    .await;
    let described = s.ok(json!({"operation": "describe_table", "database": "ttl", "table": "Temp"})).await;
    assert_eq!(described["expiration"], "2s", "{described}");
    let written = Instant::now();
    assert_eq!(status(&s, Method::PUT, "/Temp/a", Some(json!({"name": "A", "note": "old"}))).await.0, 204);
    assert_eq!(status(&s, Method::PUT, "/Temp/d", Some(json!({"name": "D"}))).await.0, 204);
    assert_eq!(status(&s, Method::PUT, "/Swept/x", Some(json!({"name": "X"}))).await.0, 204);
    // Fresh: visible through every path.
    let (code, headers, body) = s.rest_send(Method::GET, "/Temp/a", None, &[]).await;
    assert_eq!((code, body), (200, json!({"id": "a", "name": "A", "note": "old"})));
    let etag = headers["etag"].to_str().unwrap().to_string();
    let by_index = || {
        s.ok(json!({"operation": "search_by_value", "database": "ttl", "table": "Temp", "search_attribute": "name", "search_value": "A", "get_attributes": ["id"]}))
    };
    assert_eq!(by_index().await, json!([{"id": "a"}]));

    eventually(Duration::from_secs(10), "Temp/a expires", async || {
        status(&s, Method::GET, "/Temp/a", None).await.0 == 404
    })
    .await;
    assert!(written.elapsed() >= Duration::from_millis(1_900), "expired after {:?}, before its 2 s", written.elapsed());
    assert_eq!(by_index().await, json!([]));
    let by_id = s.ok(json!({"operation": "search_by_id", "database": "ttl", "table": "Temp", "ids": ["a"]})).await;
    assert_eq!(by_id, json!([]));
    assert_eq!(status(&s, Method::GET, "/Temp/?name==A", None).await, (200, json!([])));
    assert_eq!(status(&s, Method::GET, "/Temp/", None).await, (200, json!([])));
    // Hidden, not yet removed: its eviction is an hour away.
    let described = s.ok(json!({"operation": "describe_table", "database": "ttl", "table": "Temp"})).await;
    assert_eq!(described["record_count"], 2, "{described}");

    // Its old ETag no longer matches anything, and a delete finds nothing to delete
    // (it does remove the stored copy).
    let (code, _, _) =
        s.rest_send(Method::PUT, "/Temp/a", Some(&json!({"name": "C"})), &[("if-match", etag.as_str())]).await;
    assert_eq!(code, 412);
    let deleted = s.ok(json!({"operation": "delete", "database": "ttl", "table": "Temp", "ids": ["d"]})).await;
    assert_eq!((&deleted["deleted_hashes"], &deleted["skipped_hashes"]), (&json!([]), &json!(["d"])), "{deleted}");

    // A write to an expired record starts a new one: nothing of the old one shows.
    assert_eq!(status(&s, Method::PATCH, "/Temp/a", Some(json!({"name": "B"}))).await.0, 204);
    assert_eq!(status(&s, Method::GET, "/Temp/a", None).await, (200, json!({"id": "a", "name": "B"})));
    assert_eq!(by_index().await, json!([]), "the old index entry does not find it");

    // The sweeper removes expired records from storage, index entries included.
    eventually(Duration::from_secs(15), "Swept/x is removed from storage", async || {
        let described = s.ok(json!({"operation": "describe_table", "database": "ttl", "table": "Swept"})).await;
        described["record_count"] == 0
    })
    .await;
    let report = s.ok(json!({"operation": "check_consistency", "database": "ttl"})).await;
    assert_eq!(report["consistent"], true, "{report}");
    let log = s.ok(json!({"operation": "read_audit_log", "database": "ttl", "table": "Swept"})).await;
    assert_eq!(log.as_array().and_then(|l| l.last()).map(|e| e["operation"].clone()), Some(json!("expire")), "{log}");
}

#[tokio::test]
async fn create_table_takes_an_expiration_in_seconds() {
    let s = TestServer::start().await;
    s.ok(json!({"operation": "create_table", "database": "dev", "table": "tmp", "primary_key": "id", "expiration": 1}))
        .await;
    let described = s.ok(json!({"operation": "describe_table", "database": "dev", "table": "tmp"})).await;
    assert_eq!(described["expiration"], "1s");
    // A whole number written as a float (JavaScript makes no difference) is accepted.
    s.ok(json!({"operation": "create_table", "database": "dev", "table": "tmp2", "primary_key": "id", "expiration": 60.0}))
        .await;
    let described = s.ok(json!({"operation": "describe_table", "database": "dev", "table": "tmp2"})).await;
    assert_eq!(described["expiration"], "60s");
    s.ok(json!({"operation": "insert", "database": "dev", "table": "tmp", "records": [{"id": 1, "tag": "t"}]})).await;
    let tagged = || {
        s.ok(json!({"operation": "search_by_value", "database": "dev", "table": "tmp", "search_attribute": "tag", "search_value": "t"}))
    };
    assert_eq!(tagged().await.as_array().unwrap().len(), 1);
    eventually(Duration::from_secs(10), "the record expires", async || tagged().await == json!([])).await;
    // insert treats the expired record as absent.
    let again = s.ok(json!({"operation": "insert", "database": "dev", "table": "tmp", "records": [{"id": 1}]})).await;
    assert_eq!(again["inserted_hashes"], json!([1]), "{again}");
    // A sweep works through a table larger than one step (1,000 records).
    let many: Vec<Value> = (10..2_510).map(|id| json!({"id": id, "tag": "bulk"})).collect();
    s.ok(json!({"operation": "insert", "database": "dev", "table": "tmp", "records": many})).await;
    eventually(Duration::from_secs(15), "2,500 records are swept away", async || {
        let described = s.ok(json!({"operation": "describe_table", "database": "dev", "table": "tmp"})).await;
        described["record_count"] == 0
    })
    .await;
    for (bad, message) in [
        (json!(0), "'expiration' must be from 1 to 3153600000 (seconds)"),
        (json!(10_000_000_000u64), "'expiration' must be from 1 to 3153600000 (seconds)"),
        (json!(-5), "'expiration' must be a non-negative integer"),
        (json!("soon"), "'expiration' must be a non-negative integer"),
    ] {
        s.fails(json!({"operation": "create_table", "database": "dev", "table": "bad", "primary_key": "id", "expiration": bad}), 400, message).await;
    }
}
