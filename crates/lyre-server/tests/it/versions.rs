//! Record versions under concurrency (issue 5): CRDT increments, merges that never
//! revert a field, compare-and-set, no phantom index entries, crashes.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{Value, json};

use crate::support::{TestServer, finished_job};

const SCHEMA: &str = r#"
type Counter @table(database: "v") @export {
  id: ID @primaryKey
  hits: Int
  a: String
  b: String
}
type Item @table(database: "v") @export {
  id: Int @primaryKey
  status: String @indexed
}
"#;
const CONFIG: &str = "rest: true\ngraphqlSchema:\n  files: '*.graphql'\n";

async fn app(env: &[(&str, &str)]) -> TestServer {
    TestServer::start_app(&[("components/v/config.yaml", CONFIG), ("components/v/schema.graphql", SCHEMA)], env).await
}

fn add(n: i64) -> Value {
    json!({"__op__": "add", "value": n})
}

/// A round count from the environment variable `name`, else `default` (longer manual
/// runs: `LYRE_COUNTER_ROUNDS`, `LYRE_CRASH_ROUNDS`).
fn rounds(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Acceptance 1: 8 clients × 10 ids × 500 increments, with concurrent readers that
/// must never see a counter go backwards; every counter exact, every round.
#[tokio::test]
async fn concurrent_increments_are_exact_and_reads_never_go_backwards() {
    const CLIENTS: usize = 8;
    const IDS: usize = 10;
    const PER_CLIENT: usize = 500;
    let s = Arc::new(app(&[]).await);
    let rounds = rounds("LYRE_COUNTER_ROUNDS", 20);
    let mut exact = 0;
    for round in 0..rounds {
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut readers = Vec::new();
        for id in 0..IDS {
            let (s, done) = (s.clone(), done.clone());
            readers.push(tokio::spawn(async move {
                let (mut last, mut reads) = (0, 0);
                while !done.load(Ordering::Relaxed) {
                    let (status, _, body) =
                        s.rest_send(Method::GET, &format!("/Counter/r{round}-{id}"), None, &[]).await;
                    if status == 200 {
                        let hits = body["hits"].as_i64().unwrap_or(0);
                        assert!(hits >= last, "round {round} id {id}: a read went from {last} back to {hits}");
                        last = hits;
                        reads += 1;
                    }
                }
                reads
            }));
        }
        let mut writers = Vec::new();
        for client in 0..CLIENTS {
            let s = s.clone();
            writers.push(tokio::spawn(async move {
                let mut acked = [0u64; IDS];
                for i in 0..PER_CLIENT {
                    let id = (i + client) % IDS;
                    let body = json!({"hits": add(1)});
                    let (status, _, answer) =
                        s.rest_send(Method::PATCH, &format!("/Counter/r{round}-{id}"), Some(&body), &[]).await;
                    assert_eq!(status, 204, "PATCH answered {answer}");
                    acked[id] += 1;
                }
                acked
            }));
        }
        let mut acked = [0u64; IDS];
        for writer in writers {
            for (total, n) in acked.iter_mut().zip(writer.await.unwrap()) {
                *total += n;
            }
        }
        done.store(true, Ordering::Relaxed);
        let reads: usize = futures_reads(readers).await;
        assert!(reads > 0, "the readers read nothing");
        let mut round_exact = true;
        for (id, expected) in acked.iter().enumerate() {
            let (_, _, body) = s.rest_send(Method::GET, &format!("/Counter/r{round}-{id}"), None, &[]).await;
            round_exact &= body["hits"].as_u64() == Some(*expected);
            assert_eq!(body["hits"].as_u64(), Some(*expected), "round {round} id {id}");
        }
        exact += u64::from(round_exact);
    }
    assert_eq!(exact, rounds);
}

async fn futures_reads(readers: Vec<tokio::task::JoinHandle<usize>>) -> usize {
    let mut total = 0;
    for reader in readers {
        total += reader.await.unwrap();
    }
    total
}

/// Acceptance 3: PATCHes of different fields and a PUT mid-burst; no field reverts.
#[tokio::test]
async fn concurrent_patches_and_a_put_never_revert_a_field() {
    let s = Arc::new(app(&[]).await);
    for round in 0..5 {
        let path = format!("/Counter/m{round}");
        let start = json!({"a": "old", "b": "old", "hits": 0});
        assert_eq!(s.rest_send(Method::PUT, &path, Some(&start), &[]).await.0, 204);
        let put_done = Arc::new(tokio::sync::Notify::new());
        let b_writes = Arc::new(AtomicU64::new(0));
        let patch_b = {
            let (s, path, put_done, b_writes) = (s.clone(), path.clone(), put_done.clone(), b_writes.clone());
            tokio::spawn(async move {
                let notified = put_done.notified();
                tokio::pin!(notified);
                for i in 0..50 {
                    if i == 40 {
                        notified.as_mut().await; // the last writes follow the PUT
                    }
                    let body = json!({"b": "new"});
                    assert_eq!(s.rest_send(Method::PATCH, &path, Some(&body), &[]).await.0, 204);
                    b_writes.fetch_add(1, Ordering::SeqCst);
                }
            })
        };
        let patch_n = {
            let (s, path) = (s.clone(), path.clone());
            tokio::spawn(async move {
                for _ in 0..50 {
                    let body = json!({"hits": add(1)});
                    assert_eq!(s.rest_send(Method::PATCH, &path, Some(&body), &[]).await.0, 204);
                }
            })
        };
        let reader = {
            let (s, path) = (s.clone(), path.clone());
            tokio::spawn(async move {
                let (mut last_hits, mut saw_new) = (0, false);
                for _ in 0..200 {
                    let (_, _, body) = s.rest_send(Method::GET, &path, None, &[]).await;
                    let hits = body["hits"].as_i64().unwrap();
                    assert!(hits >= last_hits, "hits went back from {last_hits} to {hits}");
                    last_hits = hits;
                    if body["b"] == "new" {
                        saw_new = true;
                    } else {
                        assert!(!saw_new, "b reverted to {}", body["b"]);
                    }
                }
            })
        };
        // Mid-burst (after some b writes), replace `a`, keeping what was read of b and
        // letting the counter carry on.
        while b_writes.load(Ordering::SeqCst) < 10 {
            tokio::task::yield_now().await;
        }
        let (_, _, current) = s.rest_send(Method::GET, &path, None, &[]).await;
        let replaced = json!({"a": "put", "b": current["b"], "hits": add(0)});
        assert_eq!(s.rest_send(Method::PUT, &path, Some(&replaced), &[]).await.0, 204);
        put_done.notify_one();
        for task in [patch_b, patch_n, reader] {
            task.await.unwrap();
        }
        let (_, _, last) = s.rest_send(Method::GET, &path, None, &[]).await;
        assert_eq!(
            (&last["a"], &last["b"], &last["hits"]),
            (&json!("put"), &json!("new"), &json!(50)),
            "round {round}"
        );
    }
}

/// Acceptance 7: two clients race a read-modify-write with If-Match; exactly one
/// wins each round, the other gets 412 and its write is not applied.
#[tokio::test]
async fn if_match_lets_exactly_one_racer_win() {
    let s = Arc::new(app(&[]).await);
    assert_eq!(s.rest_send(Method::PUT, "/Counter/cas", Some(&json!({"hits": 0})), &[]).await.0, 204);
    for round in 0..30 {
        let barrier = Arc::new(tokio::sync::Barrier::new(2));
        let mut racers = Vec::new();
        for racer in 0..2 {
            let (s, barrier) = (s.clone(), barrier.clone());
            racers.push(tokio::spawn(async move {
                let (_, headers, body) = s.rest_send(Method::GET, "/Counter/cas", None, &[]).await;
                let etag = headers.get("etag").expect("an ETag").to_str().unwrap().to_string();
                barrier.wait().await;
                let next = json!({"hits": body["hits"].as_i64().unwrap() + 1, "a": format!("racer {racer}")});
                s.rest_send(Method::PUT, "/Counter/cas", Some(&next), &[("if-match", &etag)]).await.0
            }));
        }
        let mut statuses = Vec::new();
        for racer in racers {
            statuses.push(racer.await.unwrap());
        }
        statuses.sort();
        assert_eq!(statuses, vec![204, 412], "round {round}");
        let (_, _, body) = s.rest_send(Method::GET, "/Counter/cas", None, &[]).await;
        assert_eq!(body["hits"], round + 1, "exactly one increment per round");
    }
    // A stale tag also guards PATCH and DELETE; `*` needs the record to exist.
    let stale = [("if-match", "\"AAAAAAAAAA\"")];
    assert_eq!(s.rest_send(Method::PATCH, "/Counter/cas", Some(&json!({"a": "x"})), &stale).await.0, 412);
    assert_eq!(s.rest_send(Method::DELETE, "/Counter/cas", None, &stale).await.0, 412);
    assert_eq!(
        s.rest_send(Method::PATCH, "/Counter/none", Some(&json!({"a": "x"})), &[("if-match", "*")]).await.0,
        412
    );
    assert_eq!(s.rest_send(Method::GET, "/Counter/none", None, &[]).await.0, 404, "a failed PATCH creates nothing");
    let (_, headers, _) = s.rest_send(Method::GET, "/Counter/cas", None, &[]).await;
    let tag = headers.get("etag").unwrap().to_str().unwrap().to_string();
    assert_eq!(s.rest_send(Method::DELETE, "/Counter/cas", None, &[("if-match", &tag)]).await.0, 200);
}

/// The Operations API's compare-and-set: `if_match` aligned with the records.
#[tokio::test]
async fn operations_api_if_match_checks_versions_at_commit() {
    let s = TestServer::start().await;
    s.ok(json!({"operation": "create_table", "database": "dev", "table": "t", "primary_key": "id"})).await;
    let first = s.ok(json!({"operation": "insert", "database": "dev", "table": "t", "records": [{"id": 1, "n": 1}, {"id": 2, "n": 1}]})).await;
    let version = first["txn_time"].clone();
    let updated = s
        .ok(json!({"operation": "update", "database": "dev", "table": "t", "records": [{"id": 1, "n": 2}, {"id": 2, "n": 2}], "if_match": [version, null]}))
        .await;
    assert_eq!(updated["update_hashes"], json!([1, 2]));
    // The same version again is stale now: nothing in the request is written.
    s.fails(
        json!({"operation": "update", "database": "dev", "table": "t", "records": [{"id": 2, "n": 3}, {"id": 1, "n": 3}], "if_match": [null, version]}),
        412,
        "record 1 does not match the expected version (If-Match); it was changed or removed",
    )
    .await;
    let now = s.ok(json!({"operation": "search_by_id", "database": "dev", "table": "t", "ids": [1, 2], "get_attributes": ["id", "n"]})).await;
    assert_eq!(now, json!([{"id": 1, "n": 2}, {"id": 2, "n": 2}]));
    // The current version (as `__updatedtime__` shows it) passes; so does "*".
    let current = s.ok(json!({"operation": "search_by_id", "database": "dev", "table": "t", "ids": [1], "get_attributes": ["__updatedtime__"]})).await;
    let current = current[0]["__updatedtime__"].clone();
    s.ok(json!({"operation": "upsert", "database": "dev", "table": "t", "records": [{"id": 1, "n": 4}], "if_match": [current]})).await;
    s.ok(json!({"operation": "delete", "database": "dev", "table": "t", "ids": [2], "if_match": ["*"]})).await;
    s.fails(
        json!({"operation": "delete", "database": "dev", "table": "t", "ids": [2], "if_match": ["*"]}),
        412,
        "record 2 does not match the expected version (If-Match); it was changed or removed",
    )
    .await;
    s.fails(
        json!({"operation": "update", "database": "dev", "table": "t", "records": [{"id": 1}], "if_match": [1, 2]}),
        400,
        "'if_match' must have one entry per entry of 'records' (1), not 2",
    )
    .await;
    s.fails(
        json!({"operation": "update", "database": "dev", "table": "t", "records": [{"id": 1}], "if_match": [true]}),
        400,
        "'if_match[0]' must be null, \"*\", an ETag or a version number",
    )
    .await;
}

/// CRDT adds on the Operations API, and their bad forms.
#[tokio::test]
async fn operations_api_adds_and_rejects_malformed_operations() {
    let s = app(&[]).await;
    s.ok(json!({"operation": "create_table", "database": "dev", "table": "t", "primary_key": "id"})).await;
    s.ok(json!({"operation": "upsert", "database": "dev", "table": "t", "records": [{"id": 1, "n": add(5)}]})).await;
    s.ok(json!({"operation": "update", "database": "dev", "table": "t", "records": [{"id": 1, "n": add(-2)}, {"id": 1, "f": {"__op__": "add", "value": 0.5}}]})).await;
    let record = s.ok(json!({"operation": "search_by_id", "database": "dev", "table": "t", "ids": [1], "get_attributes": ["n", "f"]})).await;
    assert_eq!(record, json!([{"n": 3, "f": 0.5}]));
    s.fails(
        json!({"operation": "update", "database": "dev", "table": "t", "records": [{"id": 1, "n": {"__op__": "mul", "value": 2}}]}),
        400,
        "n: unknown operation \"mul\"; the supported one is {\"__op__\": \"add\", \"value\": n}",
    )
    .await;
    s.fails(
        json!({"operation": "update", "database": "dev", "table": "t", "records": [{"id": 1, "n": {"__op__": "add", "value": "1"}}]}),
        400,
        "n: an \"add\" operation needs a numeric \"value\"",
    )
    .await;
    // Declared types are honoured: adding to a String, or a float to an Int, fails.
    let (status, _, body) = s.rest_send(Method::PATCH, "/Counter/x", Some(&json!({"a": add(1)})), &[]).await;
    assert_eq!(
        (status, body),
        (400, json!("ClientError: a: cannot add to a String attribute; \"add\" needs a number"))
    );
    let (status, _, _) =
        s.rest_send(Method::PATCH, "/Counter/x", Some(&json!({"hits": {"__op__": "add", "value": 1.5}})), &[]).await;
    assert_eq!(status, 400);
    assert_eq!(s.rest_send(Method::GET, "/Counter/x", None, &[]).await.0, 404, "nothing was written");
    // The sum is checked too: it must fit the declared type and be a finite number.
    s.ok(json!({"operation": "upsert", "database": "dev", "table": "t", "records": [{"id": 2, "f": 1e308}]})).await;
    s.fails(
        json!({"operation": "upsert", "database": "dev", "table": "t", "records": [{"id": 3, "n": add(1)}, {"id": 2, "f": {"__op__": "add", "value": 1e308}}]}),
        400,
        "f: the sum of this \"add\" is too large to store",
    )
    .await;
    let (status, _, _) = s.rest_send(Method::PATCH, "/Counter/x", Some(&json!({"hits": 2_147_483_647})), &[]).await;
    assert_eq!(status, 204);
    let (status, _, body) = s.rest_send(Method::PATCH, "/Counter/x", Some(&json!({"hits": add(1)})), &[]).await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body.to_string().contains("in property hits must be an integer (from -2147483648 to 2147483647)"),
        "{body}"
    );
    // A batch naming the record twice adds up in order.
    let (status, _, _) = s.rest_send(Method::PATCH, "/Counter/x", Some(&json!({"hits": 2_147_483_640})), &[]).await;
    assert_eq!(status, 204);
    s.fails(
        json!({"operation": "update", "database": "v", "table": "Counter", "records": [{"id": "x", "hits": add(5)}, {"id": "x", "hits": add(5)}]}),
        400,
        "Value 2147483650 in property hits must be an integer (from -2147483648 to 2147483647)",
    )
    .await;
    let (_, _, counter) = s.rest_send(Method::GET, "/Counter/x", None, &[]).await;
    assert_eq!(counter["hits"], 2_147_483_640, "nothing was written: {counter}");
    // A value set earlier in the same batch is what the increment adds to.
    s.fails(
        json!({"operation": "upsert", "database": "v", "table": "Counter", "records": [{"id": "y", "hits": 2_147_483_640}, {"id": "y", "hits": add(10)}]}),
        400,
        "Value 2147483650 in property hits must be an integer (from -2147483648 to 2147483647)",
    )
    .await;
    s.fails(
        json!({"operation": "upsert", "database": "dev", "table": "t", "records": [{"id": 5, "f": 1e308}, {"id": 5, "f": {"__op__": "add", "value": 1e308}}]}),
        400,
        "f: the sum of this \"add\" is too large to store",
    )
    .await;
    assert_eq!(s.rest_send(Method::GET, "/Counter/y", None, &[]).await.0, 404);
    let three = s.ok(json!({"operation": "search_by_id", "database": "dev", "table": "t", "ids": [2, 3], "get_attributes": ["id", "f"]})).await;
    assert_eq!(three, json!([{"id": 2, "f": 1e308}]), "the batch wrote nothing");
}

/// Acceptance 5 (black-box half): an absent body is an error and changes nothing; an
/// empty update changes nothing; a following add counts once.
#[tokio::test]
async fn absent_and_empty_updates() {
    let s = app(&[]).await;
    assert_eq!(s.rest_send(Method::PUT, "/Counter/e", Some(&json!({"a": "kept", "hits": 1})), &[]).await.0, 204);
    let (status, _, body) = s.rest_send(Method::PATCH, "/Counter/e", None, &[]).await;
    assert_eq!(status, 400, "{body}");
    let (status, _, _) = s.rest_send(Method::PATCH, "/Counter/e", Some(&json!("not an object")), &[]).await;
    assert_eq!(status, 400);
    assert_eq!(s.rest_send(Method::PATCH, "/Counter/e", Some(&json!({})), &[]).await.0, 204);
    assert_eq!(s.rest_send(Method::PATCH, "/Counter/e", Some(&json!({"hits": add(1)})), &[]).await.0, 204);
    let (_, _, record) = s.rest_send(Method::GET, "/Counter/e", None, &[]).await;
    assert_eq!((&record["a"], &record["hits"]), (&json!("kept"), &json!(2)));
}

/// Acceptance 4: indexed updates interleaved with deletes under load leave no
/// phantom index entry.
#[tokio::test]
async fn indexed_updates_racing_deletes_leave_no_phantom_entries() {
    const IDS: i64 = 40;
    let s = Arc::new(app(&[]).await);
    let statuses = ["new", "open", "held", "done"];
    let mut tasks = Vec::new();
    for worker in 0..6i64 {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..150i64 {
                let id = (i * 7 + worker * 13) % IDS;
                let status = statuses[((i + worker) % 4) as usize];
                if (i + worker) % 5 == 0 {
                    s.rest_send(Method::DELETE, &format!("/Item/{id}"), None, &[]).await;
                } else if i % 2 == 0 {
                    s.rest_send(Method::PUT, &format!("/Item/{id}"), Some(&json!({"status": status})), &[]).await;
                } else {
                    s.rest_send(Method::PATCH, &format!("/Item/{id}"), Some(&json!({"status": status})), &[]).await;
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    // Delete half of them at the end, then nothing may still be found by status.
    for id in 0..IDS / 2 {
        s.rest_send(Method::DELETE, &format!("/Item/{id}"), None, &[]).await;
    }
    let report = s.ok(json!({"operation": "check_consistency", "database": "v", "table": "Item"})).await;
    assert_eq!(report["consistent"], true, "{report}");
    assert!(report["tables"][0]["records"].as_u64().unwrap() <= (IDS / 2) as u64);
    let mut found = HashMap::new();
    for status in statuses {
        let (code, _, rows) = s.rest_send(Method::GET, &format!("/Item/?status={status}"), None, &[]).await;
        assert_eq!(code, 200);
        for row in rows.as_array().unwrap() {
            let id = row["id"].as_i64().unwrap();
            assert!(id >= IDS / 2, "deleted record {id} is still found by status {status}");
            assert_eq!(row["status"], status, "record {id} found under a status it no longer has");
            *found.entry(id).or_insert(0) += 1;
        }
    }
    assert!(found.values().all(|n| *n == 1), "a record was found under two statuses: {found:?}");
}

/// Acceptance 6: kill -9 during concurrent increments and indexed writes, ten times
/// (`LYRE_CRASH_ROUNDS` for more):
/// every acknowledged increment is present and the indexes agree with the records.
#[tokio::test]
async fn kill_9_during_increments_keeps_every_acknowledged_write() {
    let mut s = app(&[("STORAGE_WRITEASYNC", "false")]).await;
    let mut acked_total = 0u64;
    for round in 0..rounds("LYRE_CRASH_ROUNDS", 10) {
        let acked = Arc::new(AtomicU64::new(0));
        let mut tasks = Vec::new();
        for worker in 0..4u64 {
            let (client, rest, acked) = (s.client.clone(), s.rest(""), acked.clone());
            tasks.push(tokio::spawn(async move {
                for i in 0..10_000u64 {
                    let patch = client
                        .patch(format!("{rest}/Counter/crash"))
                        .basic_auth(crate::support::USER, Some(crate::support::PASSWORD))
                        .header("content-type", "application/json")
                        .body(json!({"hits": add(1)}).to_string())
                        .send()
                        .await;
                    match patch {
                        Ok(r) if r.status() == 204 => acked.fetch_add(1, Ordering::SeqCst),
                        _ => return,
                    };
                    let item = json!({"status": format!("s{}", i % 3)}).to_string();
                    let put = client
                        .put(format!("{rest}/Item/{}", worker * 10 + i % 10))
                        .basic_auth(crate::support::USER, Some(crate::support::PASSWORD))
                        .header("content-type", "application/json")
                        .body(item)
                        .send()
                        .await;
                    if put.is_err() {
                        return;
                    }
                }
            }));
        }
        tokio::time::sleep(std::time::Duration::from_millis(150 + 30 * (round % 10))).await;
        s.stop("-KILL");
        for task in tasks {
            task.await.unwrap();
        }
        acked_total += acked.load(Ordering::SeqCst);
        s.start_again().await;
        let (_, _, counter) = s.rest_send(Method::GET, "/Counter/crash", None, &[]).await;
        let hits = counter["hits"].as_u64().unwrap_or(0);
        // Each worker had at most one increment in flight when the process died.
        assert!(
            (acked_total..=acked_total + 4).contains(&hits),
            "round {round}: {hits} hits stored, {acked_total} acknowledged"
        );
        acked_total = hits;
        let report = s.ok(json!({"operation": "check_consistency", "database": "v"})).await;
        assert_eq!(report["consistent"], true, "round {round}: {report}");
    }
}

/// The audit log: Harper's shapes, every search type, and pruning as a job.
#[tokio::test]
async fn audit_log_reads_and_prunes() {
    let s = TestServer::start().await;
    s.ok(json!({"operation": "create_table", "database": "dev", "table": "dog", "primary_key": "id"})).await;
    let inserted = s.ok(json!({"operation": "insert", "database": "dev", "table": "dog", "records": [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}]})).await;
    s.ok(json!({"operation": "update", "database": "dev", "table": "dog", "records": [{"id": 1, "name": "a2"}]})).await;
    let deleted = s.ok(json!({"operation": "delete", "database": "dev", "table": "dog", "ids": [2]})).await;
    let log = s.ok(json!({"operation": "read_audit_log", "schema": "dev", "table": "dog"})).await;
    let log = log.as_array().unwrap();
    assert_eq!(log.len(), 3);
    assert_eq!(log[0]["operation"], "insert");
    assert_eq!(log[0]["user_name"], "admin");
    assert_eq!(log[0]["timestamp"], inserted["txn_time"]);
    assert_eq!(log[0]["hash_values"], json!([1, 2]));
    assert_eq!(log[0]["records"][1]["name"], "b");
    assert_eq!(log[1]["operation"], "update");
    assert_eq!(log[1]["records"][0]["name"], "a2");
    assert_eq!((&log[2]["operation"], &log[2]["records"]), (&json!("delete"), &json!([null])));
    let keys: Vec<&str> = log[0].as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(keys, ["operation", "user_name", "timestamp", "hash_values", "records"]);

    let by_user = s.ok(json!({"operation": "read_audit_log", "database": "dev", "table": "dog", "search_type": "username", "search_values": ["admin", "nobody"]})).await;
    assert_eq!(by_user["admin"].as_array().unwrap().len(), 3);
    assert_eq!(by_user["nobody"], json!([]));
    let by_id = s.ok(json!({"operation": "read_audit_log", "database": "dev", "table": "dog", "search_type": "hash_value", "search_values": [2, 9]})).await;
    assert_eq!(by_id["2"].as_array().unwrap().len(), 2, "{by_id}");
    assert_eq!(by_id["2"][0]["hash_values"], json!([2]), "only the asked record's changes");
    assert_eq!(by_id["9"], json!([]));
    let since = s.ok(json!({"operation": "read_audit_log", "database": "dev", "table": "dog", "search_type": "timestamp", "search_values": [deleted["txn_time"]]})).await;
    assert_eq!(since.as_array().unwrap().len(), 1);
    let limited = s.ok(json!({"operation": "read_audit_log", "database": "dev", "table": "dog", "limit": 1})).await;
    assert_eq!(limited.as_array().unwrap().len(), 1);
    let txn_log = s.ok(json!({"operation": "read_transaction_log", "database": "dev", "table": "dog", "from": inserted["txn_time"], "limit": 2})).await;
    assert_eq!(txn_log.as_array().unwrap().len(), 2);
    s.fails(
        json!({"operation": "read_audit_log", "database": "dev", "table": "dog", "search_type": "bogus"}),
        400,
        "Invalid searchType 'bogus'",
    )
    .await;
    s.fails(
        json!({"operation": "read_audit_log", "database": "dev", "table": "nope"}),
        404,
        "Table 'dev.nope' does not exist",
    )
    .await;
    s.fails(
        json!({"operation": "delete_audit_logs_before", "database": "dev", "table": "dog"}),
        400,
        "'timestamp' is required",
    )
    .await;
    s.fails(
        json!({"operation": "delete_audit_logs_before", "database": "dev", "table": "dog", "timestamp": "abc"}),
        400,
        "'timestamp' is invalid",
    )
    .await;

    // Prune everything before the delete: only the delete remains.
    let job = s.ok(json!({"operation": "delete_audit_logs_before", "database": "dev", "table": "dog", "timestamp": deleted["txn_time"]})).await;
    let id = job["job_id"].as_str().unwrap().to_string();
    assert_eq!(job["message"], format!("Starting job with id {id}"));
    let mut status = Value::Null;
    for _ in 0..100 {
        status = s.ok(json!({"operation": "get_job", "id": id})).await;
        if status[0]["status"] == "COMPLETE" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(status[0]["status"], "COMPLETE", "{status}");
    assert_eq!(status[0]["type"], "delete_audit_logs_before");
    assert_eq!(s.ok(json!({"operation": "get_job", "id": "nope"})).await, json!([]));
    let left = s.ok(json!({"operation": "read_audit_log", "database": "dev", "table": "dog"})).await;
    assert_eq!(left.as_array().unwrap().len(), 1);
    assert_eq!(left[0]["operation"], "delete");
}

#[tokio::test]
async fn audit_entries_older_than_the_retention_expire_and_the_records_stay() {
    let s = TestServer::start_with(&[("LOGGING_AUDITRETENTION", "3s")]).await;
    s.ok(json!({"operation": "create_table", "database": "dev", "table": "dog", "primary_key": "id"})).await;
    s.ok(json!({"operation": "insert", "database": "dev", "table": "dog", "records": [{"id": 1, "name": "old"}]}))
        .await;
    let read_log = || s.ok(json!({"operation": "read_audit_log", "database": "dev", "table": "dog"}));
    assert_eq!(read_log().await.as_array().unwrap().len(), 1, "logged at first");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !read_log().await.as_array().unwrap().is_empty() {
        assert!(Instant::now() < deadline, "the entry outlived its 3 s retention by 17 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A new write is logged again; the expired write's record is still there.
    s.ok(json!({"operation": "insert", "database": "dev", "table": "dog", "records": [{"id": 2, "name": "new"}]}))
        .await;
    let log = read_log().await;
    assert_eq!(log.as_array().unwrap().len(), 1, "{log}");
    assert_eq!(log[0]["hash_values"], json!([2]));
    let found = s.ok(json!({"operation": "search_by_id", "database": "dev", "table": "dog", "ids": [1, 2], "get_attributes": ["name"]})).await;
    assert_eq!(found, json!([{"name": "old"}, {"name": "new"}]));
}

#[tokio::test]
async fn jobs_survive_a_restart_and_a_crash_marks_the_interrupted_one_failed() {
    let mut s = TestServer::start().await;
    assert_eq!(s.ok(json!({"operation": "get_job", "id": "none-yet"})).await, json!([]), "before any job ran");
    s.ok(json!({"operation": "create_table", "database": "dev", "table": "dog", "primary_key": "id"})).await;
    let inserted =
        s.ok(json!({"operation": "insert", "database": "dev", "table": "dog", "records": [{"id": 1}]})).await;
    let prune = json!({"operation": "delete_audit_logs_before", "database": "dev", "table": "dog", "timestamp": inserted["txn_time"]});
    let started = s.ok(prune.clone()).await;
    let id = started["job_id"].as_str().unwrap().to_string();
    let done = finished_job(&s, &id).await;
    assert_eq!(done["status"], "COMPLETE", "{done}");
    let keys: Vec<&str> = done.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(keys, ["id", "status", "message", "end_datetime", "type", "start_datetime", "created_datetime", "user"]);
    assert!(done["end_datetime"].as_i64().unwrap() >= done["start_datetime"].as_i64().unwrap(), "{done}");

    s.restart().await;
    assert_eq!(s.ok(json!({"operation": "get_job", "id": id})).await, json!([done]), "kept across a restart");

    // The process dies (as with kill -9) while the job runs; the job stays recorded.
    s.stop("-TERM");
    s.set_env("LYRE_FAILPOINT", Some("crash:log-prune"));
    s.start_again().await;
    // The crash may come before the answer does; the job is found by its type below.
    let _ = s.op(prune).await;
    s.wait_exit();
    s.set_env("LYRE_FAILPOINT", None);
    s.start_again().await;
    let jobs = s.ok(json!({"operation": "search_by_value", "database": "system", "table": "hdb_job", "search_attribute": "status", "search_value": "ERROR", "get_attributes": ["id"]})).await;
    assert_eq!(jobs.as_array().unwrap().len(), 1, "{jobs}");
    let failed = finished_job(&s, jobs[0]["id"].as_str().unwrap()).await;
    assert_eq!(failed["type"], "delete_audit_logs_before");
    assert!(failed["message"].as_str().unwrap().contains("interrupted"), "{failed}");
    assert_eq!(finished_job(&s, &id).await["status"], "COMPLETE", "the finished job is untouched");
}
