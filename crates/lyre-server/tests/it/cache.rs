//! Caching tables against a local origin the test controls (it counts its
//! requests, and can be slowed, failed, hung or stopped): one origin request
//! for many concurrent misses, expiry and revalidation with the origin's ETag,
//! stale-while-revalidate, stale-if-error, 502 and 504, `only-if-cached`,
//! `no-store`, invalidation, a record the origin no longer has, another table as
//! the source, sources that cannot load, and writes through to the origin.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use parking_lot::Mutex;
use reqwest::Method;
use serde_json::{Value, json};

use crate::support::{PASSWORD, TestServer, USER};

/// How the origin answers, changed by the tests as they go.
#[derive(Clone)]
struct Behaviour {
    /// The record's `name` (the rest is the id).
    name: String,
    /// `Cache-Control` sent, if any.
    cache_control: Option<&'static str>,
    /// The ETag sent; a request naming it gets 304.
    etag: Option<String>,
    /// Waits this long before answering.
    delay: Duration,
    /// Answers this status with a short text instead of the record.
    status: Option<u16>,
    /// Never answers.
    hang: bool,
    /// Answers each request only once the test lets it (`notify_one`).
    gate: Option<Arc<tokio::sync::Notify>>,
}

impl Default for Behaviour {
    fn default() -> Self {
        Behaviour {
            name: "first".into(),
            cache_control: None,
            etag: None,
            delay: Duration::ZERO,
            status: None,
            hang: false,
            gate: None,
        }
    }
}

#[derive(Default)]
struct Origin {
    behaviour: Mutex<Behaviour>,
    requests: AtomicUsize,
    /// The `If-None-Match` of each request.
    conditions: Mutex<Vec<Option<String>>>,
    /// The writes it took: method, id and body.
    writes: Mutex<Vec<(String, String, Value)>>,
    /// Stops the origin (it closes its connections and listens no more).
    stop: Mutex<Option<tokio::sync::oneshot::Sender<()>>>,
}

impl Origin {
    fn count(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }

    fn set(&self, change: impl FnOnce(&mut Behaviour)) {
        change(&mut self.behaviour.lock());
    }

    async fn stop(&self) {
        if let Some(stop) = self.stop.lock().take() {
            let _ = stop.send(());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn item(State(origin): State<Arc<Origin>>, Path(id): Path<String>, headers: HeaderMap) -> Response {
    origin.requests.fetch_add(1, Ordering::SeqCst);
    let condition = headers.get("if-none-match").and_then(|v| v.to_str().ok()).map(str::to_string);
    origin.conditions.lock().push(condition.clone());
    let behaviour = origin.behaviour.lock().clone();
    if behaviour.hang {
        std::future::pending::<()>().await;
    }
    if let Some(gate) = &behaviour.gate {
        gate.notified().await;
    }
    tokio::time::sleep(behaviour.delay).await;
    if let Some(status) = behaviour.status {
        return (StatusCode::from_u16(status).unwrap(), "origin trouble").into_response();
    }
    if id == "missing" {
        return StatusCode::NOT_FOUND.into_response();
    }
    if id == "page" {
        return ([("content-type", "text/html; charset=utf-8")], "<h1>a page</h1>").into_response();
    }
    let mut response = if condition.is_some() && condition == behaviour.etag {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        axum::Json(json!({"name": behaviour.name, "from": "origin"})).into_response()
    };
    if let Some(value) = behaviour.cache_control {
        response.headers_mut().insert("cache-control", value.parse().unwrap());
    }
    if let Some(etag) = behaviour.etag {
        response.headers_mut().insert("etag", etag.parse().unwrap());
    }
    response
}

/// A write sent through to the origin: kept unless the behaviour says to fail.
async fn write(
    State(origin): State<Arc<Origin>>,
    method: Method,
    Path(id): Path<String>,
    body: Option<axum::Json<Value>>,
) -> Response {
    let behaviour = origin.behaviour.lock().clone();
    if let Some(status) = behaviour.status {
        return (StatusCode::from_u16(status).unwrap(), "origin trouble").into_response();
    }
    let body = body.map_or(Value::Null, |axum::Json(body)| body);
    origin.writes.lock().push((method.to_string(), id, body));
    StatusCode::NO_CONTENT.into_response()
}

/// Starts the origin on a free port: its state and port.
async fn origin() -> (Arc<Origin>, u16) {
    let origin = Arc::new(Origin::default());
    let app = axum::Router::new()
        .route("/items/{id}", axum::routing::get(item).put(write).patch(write).delete(write))
        .with_state(origin.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    *origin.stop.lock() = Some(stop);
    tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = stopped.await;
            })
            .await
    });
    (origin, port)
}

const SCHEMA: &str = r#"
type Item @table(database: "shop") @export { id: ID @primaryKey name: String from: String }
type Base @table(database: "shop") @export { id: ID @primaryKey name: String }
type Mirror @table(database: "shop") @export { id: ID @primaryKey name: String }
"#;

/// A server whose `Item` table caches the origin on `port` (with `extra` source
/// options), and whose `Mirror` table caches `Base`.
async fn server(port: u16, extra: &str) -> TestServer {
    server_with(port, extra, &[]).await
}

/// [`server`] with environment variables (failpoints).
async fn server_with(port: u16, extra: &str, env: &[(&str, &str)]) -> TestServer {
    let config = format!(
        "rest: true\ngraphqlSchema:\n  files: '*.graphql'\nsources:\n  Item:\n    url: http://127.0.0.1:{port}/items/{{id}}\n{extra}  Mirror:\n    table: Base\n"
    );
    TestServer::start_app(&[("components/shop/config.yaml", &config), ("components/shop/schema.graphql", SCHEMA)], env)
        .await
}

async fn get(s: &TestServer, path: &str, headers: &[(&str, &str)]) -> (u16, reqwest::header::HeaderMap, Value) {
    s.rest_send(Method::GET, path, None, headers).await
}

fn header<'a>(headers: &'a reqwest::header::HeaderMap, name: &str) -> &'a str {
    headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or("")
}

/// An origin's answer that is not JSON is kept as `{contentType, data}` and read
/// back as the content it was, with its type, from the origin and from the copy.
#[tokio::test]
async fn an_origins_answer_that_is_not_json_is_answered_as_it_came() {
    let (origin, port) = origin().await;
    let s = server(port, "").await;
    for _ in 0..2 {
        let answer = s.client.get(s.rest("/Item/page")).basic_auth(USER, Some(PASSWORD)).send().await.unwrap();
        assert_eq!(answer.status(), 200);
        assert_eq!(answer.headers()["content-type"], "text/html; charset=utf-8");
        assert!(!answer.headers().contains_key("content-security-policy"), "served as the origin sent it");
        assert_eq!(answer.text().await.unwrap(), "<h1>a page</h1>");
    }
    assert_eq!(origin.count(), 1, "the second read is the copy");
    let (status, _, kept) = get(&s, "/Item/page?select(contentType,data)", &[]).await;
    assert_eq!((status, kept), (200, json!({"contentType": "text/html; charset=utf-8", "data": "<h1>a page</h1>"})));
}

/// 100 concurrent misses for one record make exactly one origin request; the
/// next read is a hit, with `Age` and no `miss` in `Server-Timing`.
#[tokio::test]
async fn concurrent_misses_share_one_origin_request() {
    let (origin, port) = origin().await;
    origin.set(|b| b.delay = Duration::from_millis(300));
    let s = Arc::new(server(port, "").await);
    let mut readers = Vec::new();
    for _ in 0..100 {
        let s = s.clone();
        readers.push(tokio::spawn(async move { get(&s, "/Item/1", &[]).await }));
    }
    for reader in readers {
        let (status, headers, body) = reader.await.unwrap();
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["name"], "first");
        assert!(header(&headers, "server-timing").contains("miss"), "{headers:?}");
    }
    assert_eq!(origin.count(), 1, "one origin request for 100 concurrent misses");
    let (status, headers, body) = get(&s, "/Item/1", &[]).await;
    assert_eq!((status, body["id"].clone(), body["from"].clone()), (200, json!("1"), json!("origin")));
    assert!(!header(&headers, "server-timing").contains("miss"), "{headers:?}");
    assert!(header(&headers, "server-timing").starts_with("hdb;dur="), "{headers:?}");
    assert!(header(&headers, "age").parse::<u64>().is_ok(), "a hit has an Age: {headers:?}");
    assert_eq!(origin.count(), 1);
    // The fetched record is stored: readable over the Operations API too.
    let found = s.ok(json!({"operation": "search_by_id", "database": "shop", "table": "Item", "ids": ["1"]})).await;
    assert_eq!(found[0]["name"], "first");
}

/// The origin's `max-age` makes the copy stale after it; a stale copy is
/// revalidated with the origin's ETag (304 keeps it); `no-cache` always asks.
#[tokio::test]
async fn expiry_refetches_and_revalidates_with_the_origin_etag() {
    let (origin, port) = origin().await;
    origin.set(|b| {
        b.cache_control = Some("max-age=1");
        b.etag = Some("\"v1\"".into());
    });
    let s = server(port, "").await;
    assert_eq!(get(&s, "/Item/2", &[]).await.2["name"], "first");
    assert_eq!(get(&s, "/Item/2", &[]).await.2["name"], "first");
    assert_eq!(origin.count(), 1, "fresh for a second");
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let (status, headers, body) = get(&s, "/Item/2", &[]).await;
    assert_eq!((status, body["name"].clone()), (200, json!("first")));
    assert!(header(&headers, "server-timing").contains("miss"));
    assert_eq!(origin.count(), 2, "stale: the origin was asked again");
    assert_eq!(origin.conditions.lock()[1].as_deref(), Some("\"v1\""), "with If-None-Match");
    assert_eq!(get(&s, "/Item/2", &[]).await.2["name"], "first");
    assert_eq!(origin.count(), 2, "the 304 made it fresh again");
    origin.set(|b| {
        b.name = "second".into();
        b.etag = Some("\"v2\"".into());
    });
    let (_, _, body) = get(&s, "/Item/2", &[("cache-control", "no-cache")]).await;
    assert_eq!(body["name"], "second", "no-cache fetches whatever is held");
    assert_eq!(origin.count(), 3);
}

/// Within the origin's `stale-while-revalidate` window a stale copy is answered
/// at once while the origin is asked in the background; the next read has the
/// new value.
#[tokio::test]
async fn stale_while_revalidate_answers_at_once_and_refreshes_behind() {
    let (origin, port) = origin().await;
    origin.set(|b| b.cache_control = Some("max-age=1, stale-while-revalidate=60"));
    let s = server(port, "").await;
    assert_eq!(get(&s, "/Item/3", &[]).await.2["name"], "first");
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    origin.set(|b| {
        b.name = "second".into();
        b.delay = Duration::from_millis(1_500);
    });
    let started = Instant::now();
    let (status, headers, body) = get(&s, "/Item/3", &[]).await;
    assert_eq!((status, body["name"].clone()), (200, json!("first")), "the stale copy");
    assert!(started.elapsed() < Duration::from_millis(1_200), "answered before the origin ({:?})", started.elapsed());
    assert!(!header(&headers, "server-timing").contains("miss"));
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if get(&s, "/Item/3", &[]).await.2["name"] == "second" {
            break;
        }
        assert!(Instant::now() < deadline, "the background refresh never landed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(origin.count(), 2, "one refresh");
}

/// A failing origin: 502 naming it when nothing is held; a stale copy when the
/// request allows `stale-if-error`, or when the origin cannot be reached at all;
/// 502 again with `must-revalidate`.
#[tokio::test]
async fn origin_failures_are_502_or_a_stale_copy_where_allowed() {
    let (origin, port) = origin().await;
    origin.set(|b| b.status = Some(500));
    let s = server(port, "").await;
    let (status, _, body) = get(&s, "/Item/4", &[]).await;
    assert_eq!(status, 502, "{body}");
    assert!(body.to_string().contains("the origin answered 500: origin trouble"), "{body}");
    origin.set(|b| {
        b.status = None;
        b.cache_control = Some("max-age=1");
    });
    assert_eq!(get(&s, "/Item/4", &[]).await.0, 200);
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    origin.set(|b| b.status = Some(503));
    assert_eq!(get(&s, "/Item/4", &[]).await.0, 502, "stale, and the request does not allow it");
    let (status, _, body) = get(&s, "/Item/4", &[("cache-control", "stale-if-error")]).await;
    assert_eq!((status, body["name"].clone()), (200, json!("first")), "stale-if-error");
    let (status, _, _) = get(&s, "/Item/4", &[("cache-control", "stale-if-error, must-revalidate")]).await;
    assert_eq!(status, 200, "stale-if-error is the client's explicit allowance");

    // An origin that cannot be reached: the stale copy, unless revalidation is
    // required; 502 naming the cause when nothing is held.
    origin.set(|b| b.status = None);
    assert_eq!(get(&s, "/Item/5", &[]).await.0, 200);
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    origin.stop().await;
    let (status, _, body) = get(&s, "/Item/5", &[]).await;
    assert_eq!((status, body["name"].clone()), (200, json!("first")), "unreachable: the stale copy");
    let (status, _, body) = get(&s, "/Item/5", &[("cache-control", "must-revalidate")]).await;
    assert_eq!(status, 502, "{body}");
    let (status, _, body) = get(&s, "/Item/nothing-held", &[]).await;
    assert_eq!(status, 502);
    assert!(body.to_string().contains("could not be reached"), "{body}");
}

/// A hung origin is 504 at the source's timeout; `only-if-cached` is 504 on a
/// miss and never asks the origin.
#[tokio::test]
async fn a_hung_origin_is_504_at_the_timeout_and_only_if_cached_never_asks() {
    let (origin, port) = origin().await;
    origin.set(|b| b.hang = true);
    let s = server(port, "    timeout: 1\n").await;
    let started = Instant::now();
    let (status, _, body) = get(&s, "/Item/6", &[]).await;
    assert_eq!(status, 504, "{body}");
    assert!(body.to_string().contains("did not answer within 1 s"), "{body}");
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    let before = origin.count();
    let (status, _, body) = get(&s, "/Item/7", &[("cache-control", "only-if-cached")]).await;
    assert_eq!(status, 504, "{body}");
    assert!(body.to_string().contains("not cached"), "{body}");
    assert_eq!(origin.count(), before, "only-if-cached asks no origin");
}

/// `no-store` (the request's, or the origin's) answers without keeping; a
/// record the origin does not have is 404, and a copy held of it is removed;
/// `PURGE` drops a copy so the next read asks again.
#[tokio::test]
async fn no_store_gone_records_and_purge() {
    let (origin, port) = origin().await;
    let s = server(port, "").await;
    assert_eq!(get(&s, "/Item/8", &[("cache-control", "no-store")]).await.2["name"], "first");
    assert_eq!(get(&s, "/Item/8", &[("cache-control", "only-if-cached")]).await.0, 504, "not kept");
    origin.set(|b| b.cache_control = Some("no-store"));
    assert_eq!(get(&s, "/Item/8", &[]).await.0, 200);
    assert_eq!(get(&s, "/Item/8", &[("cache-control", "only-if-cached")]).await.0, 504, "the origin said no-store");
    origin.set(|b| b.cache_control = None);

    assert_eq!(get(&s, "/Item/missing", &[]).await.0, 404);
    assert_eq!(get(&s, "/Item/9", &[]).await.0, 200);
    let count = origin.count();
    let (status, _, body) = s.rest_send(Method::from_bytes(b"PURGE").unwrap(), "/Item/9", None, &[]).await;
    assert_eq!((status, body), (200, json!(true)));
    origin.set(|b| b.name = "after purge".into());
    assert_eq!(get(&s, "/Item/9", &[]).await.2["name"], "after purge");
    assert_eq!(origin.count(), count + 1);

    // The operation does the same; a table without a source is refused.
    let answer =
        s.ok(json!({"operation": "invalidate", "database": "shop", "table": "Item", "ids": ["9", "none"]})).await;
    assert_eq!(answer["message"], "1 of 2 cached records invalidated");
    origin.set(|b| b.name = "after invalidate".into());
    assert_eq!(get(&s, "/Item/9", &[]).await.2["name"], "after invalidate");
    let (status, body) =
        s.op(json!({"operation": "invalidate", "database": "shop", "table": "Base", "ids": ["1"]})).await;
    assert_eq!(status, 400);
    assert!(body.to_string().contains("not a caching table"), "{body}");
}

/// A client's write that lands while the origin is being asked for the record is
/// newer than the origin's answer: the answer is not stored over it (nor does a
/// "gone" delete it), and the reader that was waiting gets the write. For a record
/// not held, one held but stale, and one the origin no longer has. A copy removed
/// meanwhile (invalidated) is not brought back: the waiting reader gets the answer,
/// which is not kept.
#[tokio::test]
async fn a_write_during_a_fetch_stands_over_the_older_answer() {
    let (origin, port) = origin().await;
    let s = Arc::new(server(port, "").await);
    for id in ["held", "invalidated"] {
        let path = format!("/Item/{id}");
        let (status, _, _) =
            s.rest_send(Method::PUT, &path, Some(&json!({"name": "local"})), &[("cache-control", "max-age=1")]).await;
        assert_eq!(status, 204);
    }
    tokio::time::sleep(Duration::from_millis(1_100)).await; // stale: the next read asks the origin
    let gate = Arc::new(tokio::sync::Notify::new());
    origin.set(|b| b.gate = Some(gate.clone()));
    // While the origin holds its answer, each record is written (or invalidated).
    let during = async |n: usize, id: &str, meanwhile: &dyn Fn() -> Value| {
        let path = format!("/Item/{id}");
        let reader = {
            let (s, path) = (s.clone(), path.clone());
            tokio::spawn(async move { get(&s, &path, &[]).await })
        };
        let asked = Instant::now();
        while origin.count() < n {
            assert!(asked.elapsed() < Duration::from_secs(10), "the origin was never asked for {id}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let change = meanwhile();
        if change["operation"].is_null() {
            let (status, _, _) = s.rest_send(Method::PUT, &path, Some(&change), &[]).await;
            assert_eq!(status, 204);
        } else {
            s.ok(change).await;
        }
        gate.notify_one();
        let (status, _, body) = reader.await.unwrap();
        let (kept, _, kept_body) = get(&s, &path, &[("cache-control", "only-if-cached")]).await;
        (status, body["name"].clone(), kept, kept_body["name"].clone())
    };
    let write = || json!({"name": "written"});
    for (n, id) in ["absent", "held", "missing"].into_iter().enumerate() {
        let written = (200, json!("written"), 200, json!("written"));
        assert_eq!(during(n + 1, id, &write).await, written, "{id}: what the reader got and what is kept");
    }
    let invalidate = || json!({"operation": "invalidate", "database": "shop", "table": "Item", "ids": ["invalidated"]});
    let answered_not_kept = (200, json!("first"), 504, Value::Null);
    assert_eq!(during(4, "invalidated", &invalidate).await, answered_not_kept);
    assert_eq!(origin.count(), 4);
}

/// Two writes of one record through to its origin, the first slow to reach the
/// table (a failpoint stalls it after the origin took it): the second waits for
/// the first to be written here too, so the origin and the table end on the same
/// write.
#[tokio::test]
async fn concurrent_writes_through_reach_the_origin_and_the_table_in_one_order() {
    let (origin, port) = origin().await;
    let s = Arc::new(
        server_with(port, "    writeThrough: true\n", &[("LYRE_FAILPOINT", "stall:write-through-local=2000*1")]).await,
    );
    let first = {
        let s = s.clone();
        tokio::spawn(async move { s.rest_send(Method::PUT, "/Item/o1", Some(&json!({"name": "first"})), &[]).await })
    };
    let asked = Instant::now();
    while origin.writes.lock().is_empty() {
        assert!(asked.elapsed() < Duration::from_secs(10), "the first write never reached the origin");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (status, _, _) = s.rest_send(Method::PUT, "/Item/o1", Some(&json!({"name": "second"})), &[]).await;
    assert_eq!(status, 204);
    assert_eq!(first.await.unwrap().0, 204);
    let names: Vec<Value> = origin.writes.lock().iter().map(|(_, _, body)| body["name"].clone()).collect();
    assert_eq!(names, [json!("first"), json!("second")], "the origin's order");
    let (status, _, held) = get(&s, "/Item/o1", &[("cache-control", "only-if-cached")]).await;
    assert_eq!((status, &held["name"]), (200, &json!("second")), "the table ends where the origin does");
}

/// A request that goes away after the origin took its write, before the table
/// did, leaves no copy behind that the origin no longer matches: the copy is
/// dropped, and the next read fetches.
#[tokio::test]
async fn a_write_through_abandoned_halfway_drops_the_copy() {
    let (origin, port) = origin().await;
    let s =
        server_with(port, "    writeThrough: true\n", &[("LYRE_FAILPOINT", "stall:write-through-local=3000*1")]).await;
    assert_eq!(get(&s, "/Item/a1", &[]).await.2["name"], "first", "a copy is held");
    let impatient = reqwest::Client::builder().timeout(Duration::from_millis(500)).build().unwrap();
    let abandoned = impatient
        .put(s.rest("/Item/a1"))
        .basic_auth(crate::support::USER, Some(crate::support::PASSWORD))
        .json(&json!({"name": "abandoned"}))
        .send()
        .await;
    assert!(abandoned.is_err_and(|e| e.is_timeout()), "the client gave up");
    assert_eq!(origin.writes.lock().len(), 1, "the origin took the write");
    let dropped = Instant::now();
    while get(&s, "/Item/a1", &[("cache-control", "only-if-cached")]).await.0 != 504 {
        assert!(dropped.elapsed() < Duration::from_secs(10), "the copy the origin no longer matches is still held");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Another table as the source: a miss reads it, and the copy stays while the
/// source changes (the table has no expiry), until purged.
#[tokio::test]
async fn another_table_as_the_source() {
    let (_origin, port) = origin().await;
    let s = server(port, "").await;
    s.rest_send(Method::PUT, "/Base/b1", Some(&json!({"name": "base"})), &[]).await;
    let (status, headers, body) = get(&s, "/Mirror/b1", &[]).await;
    assert_eq!((status, body["name"].clone()), (200, json!("base")));
    assert!(header(&headers, "server-timing").contains("cache-resolve;dur="), "{headers:?}");
    s.rest_send(Method::PUT, "/Base/b1", Some(&json!({"name": "changed"})), &[]).await;
    assert_eq!(get(&s, "/Mirror/b1", &[]).await.2["name"], "base", "the copy held");
    assert_eq!(get(&s, "/Mirror/nothing", &[]).await.0, 404);
}

/// A source that cannot be used fails its component's load, naming the problem.
#[tokio::test]
async fn a_bad_source_fails_the_load_naming_it() {
    let config = "sources:\n  Item:\n    url: http://127.0.0.1:9/items/{id}\n    headers:\n      Authorization: Bearer ${LYRE_TEST_NO_SUCH_SECRET}\n";
    let s = TestServer::start_app(
        &[("components/shop/config.yaml", config), ("components/shop/schema.graphql", SCHEMA)],
        &[],
    )
    .await;
    let status = s.ok(json!({"operation": "get_components"})).await;
    assert!(status.to_string().contains("LYRE_TEST_NO_SUCH_SECRET"), "{status}");
    assert_eq!(get(&s, "/Item/1", &[]).await.0, 404, "the component is not served");
}

/// A client's `PUT` with `Cache-Control: max-age=N` keeps its record fresh for N
/// seconds, then the origin is asked; a read with `max-age` takes no older copy.
#[tokio::test]
async fn max_age_sets_a_written_records_expiry_and_bounds_a_reads_age() {
    let (origin, port) = origin().await;
    let s = server(port, "").await;
    let (status, _, _) =
        s.rest_send(Method::PUT, "/Item/p1", Some(&json!({"name": "local"})), &[("cache-control", "max-age=1")]).await;
    assert_eq!(status, 204);
    assert_eq!(get(&s, "/Item/p1", &[]).await.2["name"], "local");
    assert_eq!(origin.count(), 0, "fresh for a second");
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    assert_eq!(get(&s, "/Item/p1", &[]).await.2["name"], "first", "then the origin's");
    assert_eq!(origin.count(), 1);
    assert_eq!(get(&s, "/Item/p1", &[]).await.2["name"], "first");
    assert_eq!(origin.count(), 1, "fresh: no expiry from the origin or the table");
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    assert_eq!(get(&s, "/Item/p1", &[("cache-control", "max-age=1")]).await.0, 200);
    assert_eq!(origin.count(), 2, "older than the read's max-age: fetched again");
}

/// With `writeThrough`, a REST write of a record goes to the origin first and is
/// kept here only when the origin took it (a patch drops the copy: the origin
/// merged it; a write refused here after the origin took it drops the copy too);
/// a write the role may not make never reaches the origin.
#[tokio::test]
async fn writes_go_through_to_the_origin_first() {
    let (origin, port) = origin().await;
    let s = server(port, "    writeThrough: true\n").await;
    let writes = || origin.writes.lock().clone();

    let (status, _, _) = s.rest_send(Method::PUT, "/Item/w1", Some(&json!({"name": "written"})), &[]).await;
    assert_eq!(status, 204);
    assert_eq!(writes(), [("PUT".to_string(), "w1".to_string(), json!({"name": "written"}))]);
    let (status, _, body) = get(&s, "/Item/w1", &[]).await;
    assert_eq!((status, &body["name"]), (200, &json!("written")));
    assert_eq!(origin.count(), 0, "the written copy is answered without a fetch");
    let held = |id: &'static str| get(&s, id, &[("cache-control", "only-if-cached")]);
    let (status, _, _) = s.rest_send(Method::PATCH, "/Item/w1", Some(&json!({"name": "patched"})), &[]).await;
    assert_eq!(status, 204);
    assert_eq!(writes()[1], ("PATCH".to_string(), "w1".to_string(), json!({"name": "patched"})));
    assert_eq!(held("/Item/w1").await.0, 504, "the origin merged the patch: the next read fetches it");
    assert_eq!(get(&s, "/Item/w1", &[]).await.2["name"], "first");
    assert_eq!(origin.count(), 1);

    // The origin took it but the table refuses it (a stale If-Match): the copy is
    // dropped, so reads fetch what the origin now has.
    let stale = [("if-match", "\"stale\"")];
    let (status, _, _) = s.rest_send(Method::PUT, "/Item/w1", Some(&json!({"name": "taken"})), &stale).await;
    assert_eq!(status, 412);
    assert_eq!(writes().len(), 3);
    assert_eq!(held("/Item/w1").await.0, 504);
    assert_eq!(get(&s, "/Item/w1", &[]).await.0, 200);

    // The origin refuses: 502 naming it, and nothing changes here.
    origin.set(|b| b.status = Some(500));
    let (status, _, body) = s.rest_send(Method::PUT, "/Item/w1", Some(&json!({"name": "lost"})), &[]).await;
    assert_eq!(status, 502, "{body}");
    assert!(body.to_string().contains("the origin answered 500"), "{body}");
    let (status, _, _) = s.rest_send(Method::PUT, "/Item/w2", Some(&json!({"name": "lost"})), &[]).await;
    assert_eq!(status, 502);
    assert_eq!(s.rest_send(Method::DELETE, "/Item/w1", None, &[]).await.0, 502);
    assert_eq!(held("/Item/w1").await.2["name"], "first");
    assert_eq!(held("/Item/w2").await.0, 504, "a refused write left no copy");

    origin.set(|b| b.status = None);
    assert_eq!(s.rest_send(Method::DELETE, "/Item/w1", None, &[]).await.0, 200);
    assert_eq!(writes()[3], ("DELETE".to_string(), "w1".to_string(), Value::Null));
    assert_eq!(held("/Item/w1").await.0, 504);

    // A role that may only read: refused here, never sent.
    let read_only =
        json!({"shop": {"tables": {"Item": {"read": true, "insert": false, "update": false, "delete": false}}}});
    s.ok(json!({"operation": "add_role", "role": "reader", "permission": read_only})).await;
    s.ok(json!({"operation": "add_user", "role": "reader", "username": "ro", "password": "pw", "active": true})).await;
    let (status, _) = s.rest_as("ro", "pw", Method::PUT, "/Item/w3", Some(&json!({"name": "no"}))).await;
    assert_eq!(status, 403);
    assert_eq!(s.rest_as("ro", "pw", Method::DELETE, "/Item/w1", None).await.0, 403);
    assert_eq!(writes().len(), 4, "refused writes never reach the origin");
}
