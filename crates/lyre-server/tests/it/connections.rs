//! Slow and abusive clients through the real binary (issue 12): a client that never
//! finishes its headers, idle connections, a trickled body, and more connections
//! from one address than it may hold; none keeps the server from answering others.

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use crate::support::TestServer;

/// Connects to `port` from the loopback address `from`.
async fn connect_from(from: &str, port: u16) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(format!("{from}:0").parse().unwrap()).unwrap();
    socket.connect(format!("127.0.0.1:{port}").parse().unwrap()).await.unwrap()
}

/// Waits up to `limit` for the server to close `stream`; returns how long it took.
async fn closed_within(stream: &mut TcpStream, limit: Duration) -> Option<Duration> {
    let started = Instant::now();
    let mut buf = [0u8; 1024];
    loop {
        match tokio::time::timeout(limit.saturating_sub(started.elapsed()), stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return Some(started.elapsed()),
            Ok(Ok(_)) => continue, // an answer (408) before the close
            Err(_) => return None,
        }
    }
}

fn ops_port(s: &TestServer) -> u16 {
    s.url("").rsplit(':').next().unwrap().parse().unwrap()
}

async fn healthy_from(s: &TestServer, from: &str) -> bool {
    let client = reqwest::Client::builder().local_address(from.parse::<std::net::IpAddr>().unwrap()).build().unwrap();
    client.get(s.url("/health")).send().await.is_ok_and(|r| r.status().is_success())
}

#[tokio::test]
async fn unfinished_headers_and_idle_connections_are_closed() {
    let s = TestServer::start_with(&[("HTTP_HEADERSTIMEOUT", "400"), ("HTTP_KEEPALIVETIMEOUT", "400")]).await;
    let port = ops_port(&s);
    let mut slow = connect_from("127.0.0.1", port).await;
    slow.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n").await.unwrap(); // and never the rest
    let mut idle = connect_from("127.0.0.1", port).await;
    // Answered once, then idle on a kept-alive connection.
    let mut kept = connect_from("127.0.0.1", port).await;
    kept.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
    let closed = closed_within(&mut slow, Duration::from_secs(5)).await;
    assert!(closed.is_some(), "a client that never finishes its headers is cut off");
    assert!(closed_within(&mut idle, Duration::from_secs(5)).await.is_some(), "an idle connection is closed");
    let kept_for = closed_within(&mut kept, Duration::from_secs(5)).await;
    assert!(kept_for.is_some(), "a connection idle after its request is closed");
    assert!(healthy_from(&s, "127.0.0.1").await);
}

#[tokio::test]
async fn a_trickled_body_gets_408() {
    let s = TestServer::start_with(&[("HTTP_TIMEOUT", "300")]).await;
    let mut stream = connect_from("127.0.0.1", ops_port(&s)).await;
    let auth = "Authorization: Basic YWRtaW46cGFzc3dvcmQ=\r\n"; // admin:password
    let head =
        format!("POST / HTTP/1.1\r\nHost: x\r\n{auth}Content-Type: application/json\r\nContent-Length: 100\r\n\r\n");
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(b"{\"operation\":").await.unwrap(); // the rest never comes
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut answer)).await;
    assert!(read.is_ok(), "the server answered and closed");
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(text.contains("did not arrive within 300 ms"), "{text}");
}

#[tokio::test]
async fn one_address_cannot_hold_every_connection() {
    let s = TestServer::start_with(&[("HTTP_MAXCONNECTIONSPERADDRESS", "5")]).await;
    let port = ops_port(&s);
    let mut held = Vec::new();
    for _ in 0..5 {
        held.push(connect_from("127.0.0.9", port).await);
    }
    // Let the server count them before the next arrives.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut over = connect_from("127.0.0.9", port).await;
    assert!(closed_within(&mut over, Duration::from_secs(2)).await.is_some(), "the sixth is closed at once");
    // Others are served, and so are the address's own open connections.
    assert!(healthy_from(&s, "127.0.0.1").await);
    let first = &mut held[0];
    first.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), first.read_to_end(&mut answer)).await.unwrap().unwrap();
    assert!(String::from_utf8_lossy(&answer).starts_with("HTTP/1.1 200"));
    // A closed connection frees its place.
    drop(held);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(healthy_from(&s, "127.0.0.9").await);
}

#[tokio::test]
async fn a_flood_over_the_total_leaves_loopback_its_reserve() {
    let s = TestServer::start_with(&[("HTTP_MAXCONNECTIONS", "8")]).await;
    let port = ops_port(&s);
    // Eight, then the 32 of the loopback reserve, from many addresses.
    let mut held = Vec::new();
    for i in 0..40 {
        held.push(connect_from(&format!("127.0.1.{}", i + 1), port).await);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut over = connect_from("127.0.2.1", port).await;
    assert!(closed_within(&mut over, Duration::from_secs(2)).await.is_some(), "beyond the reserve: closed");
    drop(held);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(healthy_from(&s, "127.0.0.1").await, "served again once they close");
}

#[tokio::test]
async fn an_idle_http2_connection_is_closed_although_its_client_pings() {
    use http_body_util::{BodyExt, Empty};
    let s = TestServer::start_with(&[("HTTP_HEADERSTIMEOUT", "400"), ("HTTP_KEEPALIVETIMEOUT", "400")]).await;
    let stream = connect_from("127.0.0.1", ops_port(&s)).await;
    let (mut sender, connection) = hyper::client::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
        .timer(hyper_util::rt::TokioTimer::new())
        .keep_alive_interval(Duration::from_millis(100))
        .keep_alive_while_idle(true)
        .handshake::<_, Empty<bytes::Bytes>>(hyper_util::rt::TokioIo::new(stream))
        .await
        .unwrap();
    let connection = tokio::spawn(connection);
    let request = hyper::Request::get(s.url("/health")).body(Empty::new()).unwrap();
    let response = sender.send_request(request).await.unwrap();
    assert_eq!(response.status(), 200);
    let _ = response.into_body().collect().await;
    // Pinged every 100 ms, the connection carries no request: closed after 400 ms.
    let started = Instant::now();
    let ended = tokio::time::timeout(Duration::from_secs(5), connection).await;
    assert!(ended.is_ok(), "the idle HTTP/2 connection is still open after 5 s");
    assert!(started.elapsed() >= Duration::from_millis(300), "closed only once idle");
}

/// The request threads of the server with process id `pid` (tokio names its workers
/// so; the blocking pool shares the name, but nothing here has used it yet).
fn request_threads(pid: u32) -> usize {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("the server's threads");
    tasks
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .filter(|name| name.trim() == "lyre-worker")
        .count()
}

#[tokio::test]
async fn the_default_thread_count_is_one_per_cpu_the_process_may_use() {
    // Pinned to one CPU of a machine with more: one request thread, not one per CPU
    // the machine has (which would make them take turns on that one core).
    let pinned = TestServer::start_pinned("0", &[("THREADS_COUNT", "0")]).await;
    assert_eq!(request_threads(pinned.pid()), 1);
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let free = TestServer::start_with(&[("THREADS_COUNT", "0")]).await;
    assert_eq!(request_threads(free.pid()), cpus);
    let set = TestServer::start_pinned("0", &[("THREADS_COUNT", "3")]).await;
    assert_eq!(request_threads(set.pid()), 3, "a configured count is taken as it is");
}

#[tokio::test]
async fn a_client_that_never_finishes_its_headers_does_not_hold_up_shutdown() {
    let mut s = TestServer::start_with(&[("HTTP_HEADERSTIMEOUT", "400"), ("HTTP_KEEPALIVETIMEOUT", "400")]).await;
    let mut slow = connect_from("127.0.0.1", ops_port(&s)).await;
    slow.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n").await.unwrap(); // and never the rest
    tokio::time::sleep(Duration::from_millis(100)).await;
    let pid = s.pid();
    let started = Instant::now();
    let stopping = tokio::task::spawn_blocking(move || s.stop("-TERM"));
    let stopped = tokio::time::timeout(Duration::from_secs(10), stopping).await;
    if stopped.is_err() {
        let _ = std::process::Command::new("kill").arg("-KILL").arg(pid.to_string()).status();
    }
    assert!(stopped.is_ok(), "the server did not exit within 10 s of SIGTERM");
    assert!(started.elapsed() < Duration::from_secs(5), "exited after {:?}", started.elapsed());
    drop(slow);
}
