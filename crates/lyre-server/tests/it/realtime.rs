//! Subscriptions on the REST port with real clients: WebSocket (tokio-tungstenite)
//! and Server-Sent Events (a streamed HTTP response): Harper's messages, close
//! codes and errors; a REST write arriving as an event; a slow subscriber receiving
//! every event in order; SSE resuming with `Last-Event-ID`.

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use reqwest::Method;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use crate::support::{PASSWORD, TestServer, USER, basic};

const SCHEMA: &str =
    r#"type Dog @table(database: "dev") @export { id: ID @primaryKey name: String age: Int secret: String }"#;
const CONFIG: &str = "rest: true\ngraphqlSchema:\n  files: '*.graphql'\n";

type Socket = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn dogs() -> TestServer {
    TestServer::start_app(&[("components/dev/config.yaml", CONFIG), ("components/dev/schema.graphql", SCHEMA)], &[])
        .await
}

/// A WebSocket to `path` on the REST port with `headers`.
async fn connect(s: &TestServer, path: &str, headers: &[(&'static str, String)]) -> Socket {
    let mut request = format!("ws://127.0.0.1:{}{path}", s.http_port).into_client_request().unwrap();
    for (name, value) in headers {
        request.headers_mut().insert(*name, value.parse().unwrap());
    }
    tokio_tungstenite::connect_async(request).await.expect("the upgrade is accepted").0
}

async fn connect_admin(s: &TestServer, path: &str) -> Socket {
    connect(s, path, &[("authorization", basic(USER, PASSWORD))]).await
}

/// The next data frame as JSON (text frames only), failing after 10 s.
async fn frame(socket: &mut Socket) -> Value {
    loop {
        let message = tokio::time::timeout(Duration::from_secs(10), socket.next())
            .await
            .expect("a frame within 10 s")
            .expect("the socket is open")
            .expect("a readable frame");
        match message {
            Message::Text(text) => return serde_json::from_str(&text).unwrap(),
            Message::Ping(_) | Message::Pong(_) => continue,
            other => panic!("expected a text frame, got {other:?}"),
        }
    }
}

/// Nothing but control frames arrives for a short while.
async fn quiet(socket: &mut Socket) {
    let waited = tokio::time::timeout(Duration::from_millis(300), async {
        loop {
            match socket.next().await {
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
                other => return other,
            }
        }
    })
    .await;
    assert!(waited.is_err(), "a frame arrived: {waited:?}");
}

/// The close frame the server ends with: its code and reason.
async fn closed_with(socket: &mut Socket) -> (u16, String) {
    loop {
        let message = tokio::time::timeout(Duration::from_secs(10), socket.next()).await.expect("a close within 10 s");
        match message {
            Some(Ok(Message::Close(Some(frame)))) => return (u16::from(frame.code), frame.reason.to_string()),
            Some(Ok(Message::Close(None))) | None => panic!("closed without a reason"),
            Some(Ok(_)) => continue,
            Some(Err(err)) => panic!("the socket failed instead of closing: {err}"),
        }
    }
}

async fn put(s: &TestServer, id: &str, body: Value) {
    let (status, _, answer) = s.rest_send(Method::PUT, &format!("/Dog/{id}"), Some(&body), &[]).await;
    assert!(status == 204 || status == 200, "PUT /Dog/{id} answered {status} {answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_socket_gets_the_record_then_each_change_as_harper_sends_them() {
    let s = dogs().await;
    put(&s, "1", json!({"id": "1", "name": "Rex", "age": 3})).await;
    let mut socket = connect_admin(&s, "/Dog/1").await;
    let current = frame(&mut socket).await;
    let keys: Vec<&str> = current.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(keys, ["id", "localTime", "value", "version", "type"], "{current}");
    assert_eq!((&current["id"], &current["type"]), (&json!("1"), &json!("put")));
    assert_eq!(current["value"], json!({"id": "1", "name": "Rex", "age": 3}));
    assert!(current["version"].as_f64().unwrap() > 1.7e12 && current["localTime"].is_number());

    put(&s, "2", json!({"name": "Other"})).await; // another record: not sent
    put(&s, "1", json!({"id": "1", "name": "Rex", "age": 4})).await;
    let changed = frame(&mut socket).await;
    assert_eq!((&changed["type"], &changed["value"]["age"]), (&json!("put"), &json!(4)));
    assert!(changed["version"].as_f64() > current["version"].as_f64());

    let (status, _, _) = s.rest_send(Method::PATCH, "/Dog/1", Some(&json!({"age": 5})), &[]).await;
    assert_eq!(status, 204);
    let patched = frame(&mut socket).await;
    assert_eq!(patched["value"], json!({"id": "1", "name": "Rex", "age": 5}), "a patch is sent as the whole record");

    let (status, _, _) = s.rest_send(Method::DELETE, "/Dog/1", None, &[]).await;
    assert_eq!(status, 200);
    let deleted = frame(&mut socket).await;
    assert_eq!(deleted["type"], "delete");
    assert!(deleted.get("value").is_none(), "a delete carries no value: {deleted}");
    quiet(&mut socket).await;

    // Messages from the client are ignored, as Harper's tables do; the socket stays.
    socket.send(Message::text(r#"{"hello":"world"}"#)).await.unwrap();
    put(&s, "1", json!({"id": "1", "name": "Back"})).await;
    assert_eq!(frame(&mut socket).await["value"]["name"], "Back");

    // The client closes: the server answers the close (RFC 6455 5.5.1), as Harper's
    // `ws` does, rather than dropping the connection (1006 at the client).
    let bye = tokio_tungstenite::tungstenite::protocol::CloseFrame {
        code: tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode::Normal,
        reason: "done".into(),
    };
    socket.close(Some(bye)).await.unwrap();
    assert_eq!(closed_with(&mut socket).await.0, 1000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_socket_gets_every_record_with_its_size_then_changes_and_cbor_is_binary() {
    let s = dogs().await;
    for (id, name) in [("b", "Bo"), ("a", "Al")] {
        put(&s, id, json!({"name": name})).await;
    }
    let mut socket = connect_admin(&s, "/Dog/").await;
    let first = frame(&mut socket).await;
    let second = frame(&mut socket).await;
    assert_eq!((&first["id"], &second["id"]), (&json!("a"), &json!("b")), "in key order");
    assert!(first["size"].as_u64().unwrap() > 0, "current records of a collection carry their size: {first}");
    put(&s, "c", json!({"name": "Cy"})).await;
    let live = frame(&mut socket).await;
    assert_eq!(live["id"], "c");
    assert!(live.get("size").is_none());

    let mut cbor =
        connect(&s, "/Dog/a", &[("authorization", basic(USER, PASSWORD)), ("accept", "application/cbor".into())]).await;
    let message = tokio::time::timeout(Duration::from_secs(10), cbor.next()).await.unwrap().unwrap().unwrap();
    let Message::Binary(bytes) = message else { panic!("CBOR comes in binary frames: {message:?}") };
    let decoded: Value = ciborium::from_reader(bytes.as_ref()).unwrap();
    assert_eq!(decoded["value"]["name"], "Al");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_sockets_close_with_harpers_codes_and_reasons() {
    let s = dogs().await;
    let mut anonymous = connect(&s, "/Dog/1", &[]).await;
    assert_eq!(closed_with(&mut anonymous).await, (3000, "AccessViolation: Must login".into()));

    s.ok(json!({"operation": "add_role", "role": "blind", "permission": {"dev": {"tables": {"Dog": {"read": false, "insert": true, "update": false, "delete": false}}}}})).await;
    s.ok(json!({"operation": "add_user", "username": "blind", "password": PASSWORD, "role": "blind", "active": true}))
        .await;
    let mut blind = connect(&s, "/Dog/1", &[("authorization", basic("blind", PASSWORD))]).await;
    let (code, reason) = closed_with(&mut blind).await;
    assert_eq!(code, 3003, "{reason}");
    assert!(reason.starts_with("AccessViolation"), "{reason}");

    let mut nowhere = connect_admin(&s, "/Nope/1?x=1").await;
    assert_eq!(closed_with(&mut nowhere).await, (1011, "No resource was found to handle /Nope/1".into()));

    // A frame over the limit closes that socket (1009), or resets it while the
    // client is still sending the rest (the server stops reading at the frame's
    // header); either way the server serves on.
    let mut big = connect_admin(&s, "/Dog/1").await;
    if big.send(Message::binary(vec![b'x'; 2 << 20])).await.is_ok() {
        assert_eq!(closed_with(&mut big).await.0, 1009);
    }
    let (status, _, _) = s.rest_send(Method::GET, "/Dog/", None, &[]).await;
    assert_eq!(status, 200);
}

/// Handshakes the server cannot take are refused as Harper's WebSocket server
/// (`ws`) refuses them: 405 for a method other than `GET`; 400 for a key that is
/// not sixteen bytes of base64, or a version other than 13 or 8, the latter naming
/// the versions taken (RFC 6455 §4.4). Version 8 is taken.
#[tokio::test]
async fn websocket_handshakes_it_cannot_take_are_refused_as_harper_refuses_them() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let s = dogs().await;
    let key = "dGhlIHNhbXBsZSBub25jZQ==";
    let handshake = |version: &'static str, key: &'static str| {
        [
            ("upgrade", "websocket"),
            ("connection", "Upgrade"),
            ("sec-websocket-version", version),
            ("sec-websocket-key", key),
        ]
    };
    let (status, headers, body) = s.rest_send(Method::POST, "/Dog/1", None, &handshake("13", key)).await;
    assert_eq!(status, 405, "{body}");
    assert_eq!(headers["allow"], "GET");
    let (status, headers, body) = s.rest_send(Method::GET, "/Dog/1", None, &handshake("12", key)).await;
    assert_eq!((status, body), (400, json!("ClientError: Missing or invalid Sec-WebSocket-Version header")));
    assert_eq!(headers["sec-websocket-version"], "13, 8");
    let (status, _, body) = s.rest_send(Method::GET, "/Dog/1", None, &handshake("13", "c2hvcnQ=")).await;
    assert_eq!((status, body), (400, json!("ClientError: Missing or invalid Sec-WebSocket-Key header")));

    let mut raw = tokio::net::TcpStream::connect(("127.0.0.1", s.http_port)).await.unwrap();
    let request = format!(
        "GET /Dog/1 HTTP/1.1\r\nHost: x\r\nAuthorization: {}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Version: 8\r\nSec-WebSocket-Key: {key}\r\n\r\n",
        basic(USER, PASSWORD)
    );
    raw.write_all(request.as_bytes()).await.unwrap();
    let mut head = [0u8; 12];
    raw.read_exact(&mut head).await.unwrap();
    assert_eq!(&head, b"HTTP/1.1 101", "version 8 is taken");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_that_may_not_read_an_attribute_never_receives_it() {
    let s = dogs().await;
    s.ok(json!({"operation": "add_role", "role": "partial", "permission": {"dev": {"tables": {"Dog": {"read": true, "insert": false, "update": false, "delete": false,
        "attribute_permissions": [{"attribute_name": "secret", "read": false, "insert": false, "update": false},
            {"attribute_name": "name", "read": true, "insert": false, "update": false}]}}}}})).await;
    s.ok(json!({"operation": "add_user", "username": "partial", "password": PASSWORD, "role": "partial", "active": true})).await;
    put(&s, "1", json!({"name": "Rex", "secret": "s1"})).await;
    let mut socket = connect(&s, "/Dog/", &[("authorization", basic("partial", PASSWORD))]).await;
    let current = frame(&mut socket).await;
    assert_eq!(current["value"]["name"], "Rex");
    assert!(current["value"].get("secret").is_none(), "{current}");
    put(&s, "1", json!({"name": "Rex", "secret": "s2"})).await;
    let changed = frame(&mut socket).await;
    assert!(changed["value"].get("secret").is_none(), "{changed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_socket_that_reads_nothing_for_a_while_still_gets_every_event_in_order() {
    let s = dogs().await;
    let mut socket = connect_admin(&s, "/Dog/").await;
    // 4,000 changes of 4 KB while the client reads nothing: 16 MB, more than the
    // sockets' buffers and the feed's queue for one subscriber (1,024 events, 1 MiB)
    // hold, so the rest is read back from the log.
    let (batches, per_batch) = (20, 200);
    let filler = "x".repeat(4_000);
    for batch in 0..batches {
        let records: Vec<Value> = (0..per_batch)
            .map(|i| json!({"id": format!("{:05}", batch * per_batch + i), "age": batch, "name": filler}))
            .collect();
        s.ok(json!({"operation": "upsert", "database": "dev", "table": "Dog", "records": records})).await;
    }
    for expected in 0..batches * per_batch {
        let event = frame(&mut socket).await;
        assert_eq!(event["id"], format!("{expected:05}"), "event {expected} out of order");
    }
    quiet(&mut socket).await;
}

/// An event stream read from a response as it arrives.
struct EventStream {
    response: reqwest::Response,
    buffer: String,
}

impl EventStream {
    async fn open(s: &TestServer, path: &str, last_event_id: Option<&str>) -> EventStream {
        let mut request =
            s.client.get(s.rest(path)).basic_auth(USER, Some(PASSWORD)).header("accept", "text/event-stream");
        if let Some(id) = last_event_id {
            request = request.header("last-event-id", id);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["content-type"], "text/event-stream");
        EventStream { response, buffer: String::new() }
    }

    /// The next event (comments skipped): its `id:` and its data as JSON.
    async fn next(&mut self) -> (Option<String>, Value) {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let (mut id, mut data) = (None, None);
                for line in block.lines() {
                    if let Some(rest) = line.strip_prefix("id: ") {
                        id = Some(rest.to_string());
                    } else if let Some(rest) = line.strip_prefix("data: ") {
                        data = Some(serde_json::from_str(rest).unwrap_or(Value::String(rest.into())));
                    }
                }
                if let Some(data) = data {
                    return (id, data);
                }
                continue;
            }
            let chunk = tokio::time::timeout(Duration::from_secs(10), self.response.chunk())
                .await
                .expect("an event within 10 s")
                .unwrap()
                .expect("the stream is open");
            self.buffer.push_str(std::str::from_utf8(&chunk).unwrap());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_stream_names_its_events_and_resumes_after_the_last_one_seen() {
    let s = dogs().await;
    put(&s, "1", json!({"name": "v0"})).await;
    let mut stream = EventStream::open(&s, "/Dog/1", None).await;
    let (_, current) = stream.next().await;
    assert_eq!((&current["type"], &current["value"]["name"]), (&json!("put"), &json!("v0")));
    put(&s, "1", json!({"name": "v1"})).await;
    let (last_id, event) = stream.next().await;
    assert_eq!(event["value"]["name"], "v1");
    drop(stream);

    // Missed while disconnected: delivered on resuming, and nothing before them.
    put(&s, "1", json!({"name": "v2"})).await;
    put(&s, "2", json!({"name": "other"})).await;
    put(&s, "1", json!({"name": "v3"})).await;
    let mut resumed = EventStream::open(&s, "/Dog/1", last_id.as_deref()).await;
    assert_eq!(resumed.next().await.1["value"]["name"], "v2");
    assert_eq!(resumed.next().await.1["value"]["name"], "v3");
    put(&s, "1", json!({"name": "v4"})).await;
    assert_eq!(resumed.next().await.1["value"]["name"], "v4");

    // A REST write reaches both kinds of subscriber. (The socket's first frame,
    // the current record, shows its subscription is live: the 101 comes before
    // the subscription opens, so a write right after it could precede it.)
    let mut socket = connect_admin(&s, "/Dog/1").await;
    assert_eq!(frame(&mut socket).await["value"]["name"], "v4");
    put(&s, "1", json!({"name": "v5"})).await;
    assert_eq!(frame(&mut socket).await["value"]["name"], "v5");
    assert_eq!(resumed.next().await.1["value"]["name"], "v5");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_can_be_asked_for_in_the_url_and_event_stream_errors_are_events() {
    let s = dogs().await;
    for age in 0..5 {
        put(&s, "1", json!({"name": "Rex", "age": age})).await;
    }
    let mut socket = connect_admin(&s, "/Dog/1?previousCount=2").await;
    assert_eq!(frame(&mut socket).await["value"]["age"], 3);
    assert_eq!(frame(&mut socket).await["value"]["age"], 4);
    quiet(&mut socket).await;

    let response = s.client.get(s.rest("/Dog/1")).header("accept", "text/event-stream").send().await.unwrap();
    assert_eq!(response.status(), 401);
    assert_eq!(response.text().await.unwrap(), "data: AccessViolation: Must login\n\n");
    let response = s
        .client
        .get(s.rest("/Dog/1?previousCount=lots"))
        .basic_auth(USER, Some(PASSWORD))
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    assert!(response.text().await.unwrap().contains("previousCount must be a whole number"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_socket_counts_against_the_connection_limit_until_it_closes() {
    let s = TestServer::start_app(
        &[("components/dev/config.yaml", CONFIG), ("components/dev/schema.graphql", SCHEMA)],
        &[("HTTP_MAXCONNECTIONSPERADDRESS", "5")],
    )
    .await;
    let request = || {
        let mut request = format!("ws://127.0.0.1:{}/Dog/", s.http_port).into_client_request().unwrap();
        request.headers_mut().insert("authorization", basic(USER, PASSWORD).parse().unwrap());
        request
    };
    let mut open = Vec::new();
    loop {
        match tokio_tungstenite::connect_async(request()).await {
            Ok((socket, _)) => open.push(socket),
            Err(_) => break,
        }
        assert!(open.len() <= 5, "more sockets than the limit of 5 per address were accepted");
    }
    assert!(!open.is_empty(), "not one socket was accepted");
    let mut first = open.remove(0);
    first.close(None).await.unwrap();
    while first.next().await.is_some() {}
    // Its place is free once it has closed.
    let mut accepted = None;
    for _ in 0..50 {
        if let Ok((socket, _)) = tokio_tungstenite::connect_async(request()).await {
            accepted = Some(socket);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(accepted.is_some(), "a closed socket's place was not freed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_subscriptions_do_not_hold_up_a_shutdown() {
    let mut s = dogs().await;
    let mut socket = connect_admin(&s, "/Dog/").await;
    let _stream = EventStream::open(&s, "/Dog/", None).await;
    let started = std::time::Instant::now();
    let stopping = tokio::task::spawn_blocking(move || {
        let clean = s.stop("-TERM");
        (clean, s)
    });
    let (code, reason) = closed_with(&mut socket).await;
    assert_eq!((code, reason.as_str()), (1001, "the server is shutting down"));
    let (clean, _s) = stopping.await.unwrap();
    assert!(clean, "the server did not exit cleanly");
    assert!(started.elapsed() < Duration::from_secs(20), "the shutdown took {:?}", started.elapsed());
}
