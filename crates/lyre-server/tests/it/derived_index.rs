//! Seed 000's derived-index contracts, adapted to one process: a runner task that
//! dies is replaced by one with a new epoch; an idle index keeps its owner; a
//! lagging index turns writes to its table into retryable 503s until it catches
//! up; a strict query is current or refused, never silently stale; a crash
//! between condemning and resetting rebuilds and serves nothing condemned; a
//! kill -9 under write load resumes from the cursor; and an index-kind swap that
//! fails part-way leaves the old index serving.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};

use crate::rest::SHOP_CONFIG;
use crate::support::{PASSWORD, TestServer, USER};
use crate::vector::{SCHEMA, clustered, eventually, insert_docs, op_with_header, vector_server};

/// The `Doc` index's entry in `describe_table`.
async fn index_status(s: &TestServer) -> Value {
    let described = s.ok(json!({"operation": "describe_table", "database": "vec", "table": "Doc"})).await;
    let attributes = described["attributes"].as_array().cloned().unwrap_or_default();
    attributes.into_iter().find(|a| a["attribute"] == "embedding").map(|a| a["indexed"].clone()).unwrap_or_default()
}

/// The nearest record to `target`, waiting up to `wait_ms` for the index to hold
/// every write made before the query.
async fn nearest_id(s: &TestServer, target: &[f64], wait_ms: u64) -> (u16, Value) {
    let query = json!({"operation": "search", "database": "vec", "table": "Doc",
        "sort": {"attribute": "embedding", "target": target}, "limit": 1, "select": ["id", "$distance"],
        "waitForIndexMilliseconds": wait_ms, "maxIndexLagMilliseconds": 0});
    let (status, body) = s.op(query).await;
    (status, body.get(0).map(|r| r["id"].clone()).unwrap_or(body))
}

/// Writes a first record and waits until the index serves it: the runner has
/// built the index and follows the log (writes before that are in its build).
async fn ready(s: &TestServer) {
    s.ok(insert_one("seed", &[-5.0; 16])).await;
    assert!(findable(s, "seed", &[-5.0; 16]).await, "the index never became ready");
}

/// Waits until the index is built (over the empty table) and follows the log,
/// writing nothing: the next write is the first its runner applies, so a failpoint
/// counted from the first apply falls on it. (After [`ready`] it may not: the seed
/// is applied either by the build or by the runner, as the two race.)
async fn following(s: &TestServer) {
    let built = eventually(Duration::from_secs(20), async || index_status(s).await["state"] == "ready").await;
    assert!(built, "the index never became ready: {}", index_status(s).await);
}

/// A record's own vector finds it first.
async fn findable(s: &TestServer, id: &str, vector: &[f64]) -> bool {
    nearest_id(s, vector, 20_000).await == (200, json!(id))
}

fn insert_one(id: &str, vector: &[f64]) -> Value {
    json!({"operation": "insert", "database": "vec", "table": "Doc", "records": [{"id": id, "embedding": vector}]})
}

/// Scenarios 9, 10 and 12: a runner that dies (a failpoint panics it at its
/// first 12 applies) is replaced by one with the next epoch each time, under
/// write load; the process stays up, every write is acknowledged, and every
/// record is findable afterwards.
#[tokio::test]
async fn a_runner_that_dies_is_replaced_by_the_next_epoch() {
    let s = vector_server(&[("LYRE_FAILPOINT", "panic:derived-apply*12")]).await;
    ready(&s).await;
    let vectors = clustered(40, 16, 4, 21);
    for (i, vector) in vectors.iter().enumerate() {
        s.ok(insert_one(&format!("r{i}"), vector)).await;
    }
    for (i, vector) in vectors.iter().enumerate() {
        let found = nearest_id(&s, vector, 20_000).await;
        assert_eq!(found, (200, json!(format!("r{i}"))), "r{i} is not found");
    }
    let status = index_status(&s).await;
    assert_eq!(status["state"], "ready");
    // One epoch for the first runner, one more for each that replaced a dead one.
    assert_eq!(status["epoch"], 13, "{status}");
}

/// Scenario 11: an idle index keeps its owner; nothing re-acquires it.
#[tokio::test]
async fn an_idle_index_keeps_its_owner() {
    let s = vector_server(&[]).await;
    insert_docs(&s, &clustered(10, 16, 2, 3), 0).await;
    assert!(findable(&s, "d0", &clustered(10, 16, 2, 3)[0]).await);
    let before = index_status(&s).await["epoch"].clone();
    tokio::time::sleep(Duration::from_millis(1_500)).await; // six of the supervisor's scans
    s.ok(insert_one("late", &[0.25; 16])).await;
    assert!(findable(&s, "late", &[0.25; 16]).await);
    assert_eq!(index_status(&s).await["epoch"], before);
}

/// Scenario 13: with `maxLagMilliseconds`, a stalled index turns client writes to
/// its table into 503 `DERIVED_INDEX_LAGGING` (retryable), over the Operations API
/// and REST, while another table takes writes; once it catches up, writes are
/// admitted again.
#[tokio::test]
async fn a_lagging_index_refuses_writes_until_it_catches_up() {
    let schema = SCHEMA.replace(r#"distance: "euclidean")"#, r#"distance: "euclidean", maxLagMilliseconds: 400)"#);
    let s = TestServer::start_app(
        &[("components/vec/config.yaml", SHOP_CONFIG), ("components/vec/schema.graphql", &schema)],
        &[("LYRE_FAILPOINT", "stall:derived-apply=3000*1")],
    )
    .await;
    following(&s).await;
    s.ok(insert_one("first", &[0.5; 16])).await; // its apply stalls 3 s
    let mut refused = Value::Null;
    let lagging = eventually(Duration::from_secs(3), async || {
        let (status, body) = s.op(insert_one("next", &[0.75; 16])).await;
        refused = body;
        status == 503
    })
    .await;
    assert!(lagging, "writes were never refused: {refused}");
    assert_eq!(refused["code"], "DERIVED_INDEX_LAGGING", "{refused}");
    assert_eq!(refused["retryable"], true);
    assert!(refused["error"].as_str().unwrap().contains("Doc.embedding"), "{refused}");
    let (status, _, body) =
        s.rest_send(Method::PUT, "/Doc/viaRest", Some(&json!({"embedding": vec![0.1; 16]})), &[]).await;
    assert_eq!((status, body["code"].clone()), (503, json!("DERIVED_INDEX_LAGGING")), "{body}");
    s.ok(json!({"operation": "insert", "database": "vec", "table": "Note", "records": [{"id": 1, "text": "fine"}]}))
        .await;
    let admitted =
        eventually(Duration::from_secs(10), async || s.op(insert_one("next", &[0.75; 16])).await.0 == 200).await;
    assert!(admitted, "writes were not admitted again");
    assert!(findable(&s, "next", &[0.75; 16]).await);
    assert_eq!(index_status(&s).await["refusing_writes"], false);
}

/// Scenario 14: right after a write, a strict query (`maxIndexLagMilliseconds: 0`,
/// no wait) is either current and includes the write, or a 503; never a 200
/// that leaves the write out. While the index is stalled it is refused.
#[tokio::test]
async fn a_strict_query_is_current_or_refused() {
    let s = vector_server(&[("LYRE_FAILPOINT", "stall:derived-apply=1500*1")]).await;
    following(&s).await;
    s.ok(insert_one("stalled", &[9.0; 16])).await;
    let strict = |target: Vec<f64>| {
        json!({"operation": "search", "database": "vec", "table": "Doc",
            "sort": {"attribute": "embedding", "target": target}, "limit": 1, "select": ["id"],
            "maxIndexLagMilliseconds": 0})
    };
    let (status, _, body) = op_with_header(&s, &strict(vec![9.0; 16])).await;
    assert_eq!((status, body["code"].clone()), (503, json!("DERIVED_INDEX_LAGGING")), "{body}");
    for n in 0..30 {
        let vector = vec![100.0 + n as f64; 16];
        s.ok(insert_one(&format!("s{n}"), &vector)).await;
        let (status, coverage, body) = op_with_header(&s, &strict(vector)).await;
        match status {
            200 => {
                assert_eq!(coverage, "current; lag=0; tolerance=0");
                assert_eq!(body[0]["id"], format!("s{n}"), "a current answer left the write out");
            }
            503 => {}
            other => panic!("{other}: {body}"),
        }
    }
    // Given time to catch up, a strict query is current and has the last write.
    let mut last = strict(vec![129.0; 16]);
    last["waitForIndexMilliseconds"] = json!(10_000);
    let (status, coverage, body) = op_with_header(&s, &last).await;
    assert_eq!((status, coverage.as_str(), body[0]["id"].clone()), (200, "current; lag=0; tolerance=0", json!("s29")));
}

/// Scenario 15: the stored graph cannot be read at start-up (a failpoint fails
/// the load), so the runner condemns the index to rebuild it, and the process
/// crashes right after condemning, before anything is reset. At the next start
/// the stored state and graph look whole, but the marker says condemned: the
/// index rebuilds, queries meanwhile get 503 naming the rebuild (never answers
/// from the condemned graph), and then it serves every record.
#[tokio::test]
async fn a_crash_between_condemn_and_reset_rebuilds() {
    let mut s = vector_server(&[]).await;
    let vectors = clustered(300, 16, 6, 8);
    insert_docs(&s, &vectors, 0).await;
    assert!(findable(&s, "d0", &vectors[0]).await);
    s.stop("-TERM");
    // The load waits a moment first, so the server is up before it dies.
    s.set_env("LYRE_FAILPOINT", Some("stall:derived-load=1000*1,fail:derived-load*1,crash:derived-condemned"));
    s.start_again().await;
    s.wait_exit(); // the runner condemned the index, and the process died
    s.set_env("LYRE_FAILPOINT", Some("stall:derived-build=2000*1"));
    s.start_again().await;
    let (status, body) = nearest_id(&s, &vectors[0], 0).await;
    assert_eq!(status, 503, "{body}");
    assert!(body["error"].as_str().unwrap().contains("rebuilding"), "{body}");
    assert_eq!(index_status(&s).await["state"], "rebuilding");
    for i in (0..300).step_by(29) {
        assert!(findable(&s, &format!("d{i}"), &vectors[i]).await, "d{i} is missing after the rebuild");
    }
    let status = index_status(&s).await;
    assert_eq!((status["state"].clone(), status["vectors"].clone()), (json!("ready"), json!(300)));
}

/// A kill -9 while writes stream in: at the next start the index resumes from its
/// cursor (a rebuild would panic, by failpoint) and holds every acknowledged
/// write, and as many vectors as the table has records.
#[tokio::test]
async fn a_kill_under_write_load_resumes_from_the_cursor() {
    let mut s = vector_server(&[]).await;
    let vectors = clustered(1_200, 16, 8, 13);
    insert_docs(&s, &vectors[..400], 0).await;
    assert!(findable(&s, "d0", &vectors[0]).await);
    let acknowledged = Arc::new(Mutex::new(Vec::new()));
    let writer = {
        let (client, url, acknowledged, vectors) =
            (s.client.clone(), s.url("/"), acknowledged.clone(), vectors.clone());
        tokio::spawn(async move {
            for (n, chunk) in vectors[400..].chunks(20).enumerate() {
                let records: Vec<Value> = chunk
                    .iter()
                    .enumerate()
                    .map(|(k, v)| json!({"id": format!("d{}", 400 + n * 20 + k), "embedding": v}))
                    .collect();
                let body = json!({"operation": "insert", "database": "vec", "table": "Doc", "records": records});
                let sent = client.post(&url).basic_auth(USER, Some(PASSWORD)).json(&body).send().await;
                match sent {
                    Ok(response) if response.status().is_success() => {
                        acknowledged.lock().unwrap().extend((0..chunk.len()).map(|k| 400 + n * 20 + k));
                    }
                    _ => return,
                }
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(700)).await;
    s.stop("-KILL");
    let _ = writer.await;
    let acknowledged = acknowledged.lock().unwrap().clone();
    assert!(!acknowledged.is_empty(), "no write was acknowledged before the kill");
    s.set_env("LYRE_FAILPOINT", Some("panic:derived-condemned"));
    s.start_again().await;
    let last = *acknowledged.last().unwrap();
    assert!(findable(&s, &format!("d{last}"), &vectors[last]).await, "the last acknowledged write is missing");
    for &i in acknowledged.iter().step_by(37) {
        assert!(findable(&s, &format!("d{i}"), &vectors[i]).await, "d{i} is missing");
    }
    let described = s.ok(json!({"operation": "describe_table", "database": "vec", "table": "Doc"})).await;
    let status = index_status(&s).await;
    assert_eq!(status["vectors"], described["record_count"], "{status}");
    assert_eq!(status["state"], "ready");
}

/// Scenario 26: changing `embedding` from an ordinary index to a vector index
/// with a failure injected while the new kind is built, then while it is
/// published, leaves the ordinary index serving and the table writable; without
/// failures the swap works, and so does the swap back.
#[tokio::test]
async fn a_failed_index_kind_swap_leaves_the_old_index_serving() {
    let ordinary = SCHEMA.replace(r#"@indexed(type: "HNSW", distance: "euclidean")"#, "@indexed");
    let s = TestServer::start_app(
        &[("components/vec/config.yaml", SHOP_CONFIG), ("components/vec/schema.graphql", &ordinary)],
        &[("LYRE_FAILPOINT", "fail:index-swap-construct*1,fail:index-swap-publish*1")],
    )
    .await;
    let vectors = clustered(50, 16, 2, 4);
    insert_docs(&s, &vectors, 0).await;
    let by_value = json!({"operation": "search_by_value", "database": "vec", "table": "Doc",
        "attribute": "embedding", "value": vectors[3][0], "get_attributes": ["id"]});
    let set = |schema: &str| json!({"operation": "set_component_file", "project": "vec", "file": "schema.graphql", "payload": schema});
    for step in ["construct", "publish"] {
        let (status, body) = s.op(set(SCHEMA)).await;
        assert_ne!(status, 200, "{step}: {body}");
        assert_eq!(s.ok(by_value.clone()).await, json!([{"id": "d3"}]), "{step}: the ordinary index still serves");
        s.ok(insert_one(&format!("after-{step}"), &[0.5; 16])).await;
        assert_eq!(index_status(&s).await, json!(true), "{step}: the catalog is unchanged");
    }
    s.ok(set(SCHEMA)).await;
    assert!(findable(&s, "d3", &vectors[3]).await);
    s.ok(set(&ordinary)).await;
    assert_eq!(s.ok(by_value.clone()).await, json!([{"id": "d3"}]));
    let (status, body) = nearest_id(&s, &vectors[3], 0).await;
    assert_eq!(status, 400, "{body}");
    s.ok(set(SCHEMA)).await;
    assert!(findable(&s, "d3", &vectors[3]).await, "the index swapped back in serves");
}
