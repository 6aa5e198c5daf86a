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
    // `exact_count` counts what a read sees, in every describe operation.
    let exact =
        s.ok(json!({"operation": "describe_table", "database": "ttl", "table": "Temp", "exact_count": true})).await;
    assert_eq!(exact["record_count"], 0, "{exact}");
    let all = s.ok(json!({"operation": "describe_all", "exact_count": true})).await;
    assert_eq!(all["ttl"]["Temp"]["record_count"], 0, "{all}");
    let database = s.ok(json!({"operation": "describe_database", "database": "ttl", "exact_count": true})).await;
    assert_eq!(database["Temp"]["record_count"], 0, "{database}");
    s.fails(json!({"operation": "describe_all", "exact_count": "yes"}), 400, "'exact_count' must be a boolean").await;

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

const EXPIRES_AT_SCHEMA: &str = r#"
type Session @table(database: "ttl") @export {
  id: ID @primaryKey
  user: String @indexed
  expiresAt: Long @expiresAt
}
type Cached @table(database: "ttl", expiration: 1, eviction: 3600) @export {
  id: ID @primaryKey
  until: Float @expiresAt
}
type Token @table(database: "ttl") @export {
  id: ID @primaryKey
  until: Any @expiresAt
}
"#;

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64
}

#[tokio::test]
async fn a_record_expires_at_its_own_expires_at_time() {
    let s = TestServer::start_app(
        &[("components/ttl/config.yaml", CONFIG), ("components/ttl/schema.graphql", EXPIRES_AT_SCHEMA)],
        &[],
    )
    .await;
    let now = now_ms();
    let written = Instant::now();
    for (id, body) in [
        ("soon", json!({"user": "u", "expiresAt": now + 1_500})),
        ("later", json!({"user": "u", "expiresAt": now + 3_600_000})),
        ("never", json!({"user": "u"})),
        ("past", json!({"user": "u", "expiresAt": now - 1_000})),
    ] {
        assert_eq!(status(&s, Method::PUT, &format!("/Session/{id}"), Some(body)).await.0, 204, "{id}");
    }
    let users = || async {
        let (code, body) = status(&s, Method::GET, "/Session/?user==u&select(id)&sort(+id)", None).await;
        assert_eq!(code, 200, "{body}");
        body
    };
    // A time already past hides the record at once.
    assert_eq!(status(&s, Method::GET, "/Session/past", None).await.0, 404);
    assert_eq!(users().await, json!(["later", "never", "soon"]));
    eventually(Duration::from_secs(10), "Session/soon expires", async || {
        status(&s, Method::GET, "/Session/soon", None).await.0 == 404
    })
    .await;
    assert!(
        written.elapsed() >= Duration::from_millis(1_300),
        "expired after {:?}, before its time",
        written.elapsed()
    );
    assert_eq!(users().await, json!(["later", "never"]));
    // The sweeper removes both from storage (the table has no eviction delay).
    eventually(Duration::from_secs(10), "expired sessions are removed", async || {
        let described = s.ok(json!({"operation": "describe_table", "database": "ttl", "table": "Session"})).await;
        described["record_count"] == 2
    })
    .await;
    let report = s.ok(json!({"operation": "check_consistency", "database": "ttl"})).await;
    assert_eq!(report["consistent"], true, "{report}");

    // A patch keeps the time; a full put without it clears it.
    assert_eq!(status(&s, Method::PATCH, "/Session/later", Some(json!({"user": "v"}))).await.0, 204);
    let (_, body) = status(&s, Method::GET, "/Session/later", None).await;
    assert_eq!(body["expiresAt"], json!(now + 3_600_000), "{body}");
    assert_eq!(status(&s, Method::PUT, "/Session/later", Some(json!({"user": "v"}))).await.0, 204);
    assert_eq!(status(&s, Method::GET, "/Session/later", None).await, (200, json!({"id": "later", "user": "v"})));
    // A write to an expired record starts a new one.
    assert_eq!(status(&s, Method::PATCH, "/Session/soon", Some(json!({"expiresAt": now + 3_600_000}))).await.0, 204);
    assert_eq!(
        status(&s, Method::GET, "/Session/soon", None).await,
        (200, json!({"id": "soon", "expiresAt": now + 3_600_000}))
    );

    // A record's own time overrides the table's `expiration`, either way.
    let now = now_ms();
    for (id, body) in [
        ("kept", json!({"until": now as f64 + 3_600_000.5})),
        ("aged", json!({})),
        ("gone", json!({"until": now as f64 - 1.0})),
    ] {
        assert_eq!(status(&s, Method::PUT, &format!("/Cached/{id}"), Some(body)).await.0, 204, "{id}");
    }
    assert_eq!(status(&s, Method::GET, "/Cached/gone", None).await.0, 404);
    assert_eq!(status(&s, Method::GET, "/Cached/aged", None).await.0, 200);
    eventually(Duration::from_secs(10), "Cached/aged expires by the table's rule", async || {
        status(&s, Method::GET, "/Cached/aged", None).await.0 == 404
    })
    .await;
    assert_eq!(status(&s, Method::GET, "/Cached/kept", None).await.0, 200);
    let all = s.ok(json!({"operation": "search_by_value", "database": "ttl", "table": "Cached", "search_attribute": "id", "search_value": "*", "get_attributes": ["id"]})).await;
    assert_eq!(all, json!([{"id": "kept"}]));

    // The attribute must hold a time.
    s.fails(
        json!({"operation": "insert", "database": "ttl", "table": "Session", "records": [{"id": "x", "expiresAt": "soon"}]}),
        400,
        "Value \"soon\" in property expiresAt must be an integer (from -9007199254740992 to 9007199254740992)",
    )
    .await;
    // Whatever the declared type, the time is a number (or null: no time of its own).
    for (bad, shown) in [(json!("2030-01-01"), "\"2030-01-01\""), (json!([1, 2]), "[array]")] {
        let message = format!(
            "Value {shown} in property until must be a time in milliseconds since the epoch (it is the table's @expiresAt)"
        );
        s.fails(
            json!({"operation": "insert", "database": "ttl", "table": "Token", "records": [{"id": "t", "until": bad}]}),
            400,
            &message,
        )
        .await;
    }
    s.ok(json!({"operation": "insert", "database": "ttl", "table": "Token", "records": [{"id": "t", "until": null}]}))
        .await;
    assert_eq!(status(&s, Method::GET, "/Token/t", None).await.0, 200);
}
