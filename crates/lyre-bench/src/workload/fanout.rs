//! WebSocket fan-out: one writer, many subscribers of one record.
//!
//! `subscribers` WebSockets subscribe to `/usertable/<record>` (the YCSB
//! application both servers load); once each has its current-record frame, the
//! writer sends `writes` REST `PUT`s of that record, each carrying its send time.
//! Every subscriber counts the frames it receives and the time each took from the
//! `PUT`'s start (end-to-end latency). A round ends when every subscriber has every
//! write, or when one has waited [`IDLE_LIMIT`] for its next frame (what is missing
//! is counted as errors). Deliveries per second are frames received over the round's
//! wall time; the server's CPU is per delivery.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use bytes::Bytes;
use futures_util::StreamExt;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use crate::client::{Call, HttpClient};
use crate::stats::{Measurement, ServerUse, gather_receivers, histogram};
use crate::target::{ProcessSample, Target};

/// How long a subscriber waits for its next frame before the round gives up on it.
const IDLE_LIMIT: Duration = Duration::from_secs(20);

/// Parameters of a fan-out run.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct FanoutParams {
    /// WebSocket subscribers of the record.
    pub subscribers: usize,
    /// `PUT`s per round.
    pub writes: u64,
    /// `PUT`s in flight.
    pub concurrency: usize,
}

/// The `Authorization` (or other) header the target logs in with.
fn auth_header(target: &Target) -> (String, String) {
    use base64::Engine as _;
    match target.auth_header.as_deref().and_then(|h| h.split_once(':')) {
        Some((name, value)) => (name.trim().to_string(), value.trim().to_string()),
        None => {
            let token =
                base64::engine::general_purpose::STANDARD.encode(format!("{}:{}", target.user, target.password));
            ("authorization".into(), format!("Basic {token}"))
        }
    }
}

type Socket = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// A WebSocket subscribed to `path` on the target's REST port.
async fn subscribe(target: &Target, path: &str) -> anyhow::Result<Socket> {
    let base = target.rest.replacen("http://", "ws://", 1).replacen("https://", "wss://", 1);
    let mut request = format!("{base}{path}").into_client_request()?;
    let (name, value) = auth_header(target);
    request.headers_mut().insert(header_name(&name)?, value.parse()?);
    let (socket, _) =
        tokio_tungstenite::connect_async(request).await.with_context(|| format!("subscribing to {path}"))?;
    Ok(socket)
}

fn header_name(name: &str) -> anyhow::Result<tokio_tungstenite::tungstenite::http::HeaderName> {
    Ok(tokio_tungstenite::tungstenite::http::HeaderName::from_bytes(name.as_bytes())?)
}

/// What a reader takes from an event: the time its write was sent (`field1`).
/// Typed, so the load generator reads no more of a frame than it needs (a whole
/// `serde_json::Value` per frame made the client the bound).
#[derive(serde::Deserialize)]
struct Delivered {
    value: Option<DeliveredValue>,
}

#[derive(serde::Deserialize)]
struct DeliveredValue {
    field1: Option<String>,
}

/// The next data frame's event, skipping control frames; `None` once closed.
async fn next_event(socket: &mut Socket) -> Option<Delivered> {
    loop {
        match socket.next().await? {
            Ok(Message::Text(text)) => return serde_json::from_str(&text).ok(),
            Ok(Message::Binary(_) | Message::Ping(_) | Message::Pong(_) | Message::Frame(_)) => continue,
            Ok(Message::Close(_)) | Err(_) => return None,
        }
    }
}

/// One round against one server.
pub async fn run(
    target: &Target,
    client: &HttpClient,
    params: FanoutParams,
    round: usize,
) -> anyhow::Result<Measurement> {
    let FanoutParams { subscribers, writes, concurrency } = params;
    let id = format!("fanout-{round}");
    let path = format!("/usertable/{id}");
    let (status, body) = client.rest(hyper::Method::PUT, &path, Bytes::from(r#"{"field0":"start"}"#)).await?;
    anyhow::ensure!(status < 300, "PUT {path} answered {status}: {}", String::from_utf8_lossy(&body));
    let mut sockets = Vec::with_capacity(subscribers);
    for _ in 0..subscribers {
        let mut socket = subscribe(target, &path).await?;
        tokio::time::timeout(IDLE_LIMIT, next_event(&mut socket))
            .await
            .context("no current record on subscribing")?
            .context("the subscription closed before its current record")?;
        sockets.push(socket);
    }
    let epoch = Instant::now();
    let before = target.sample_tree();
    let load_before = ProcessSample::of_self();
    let readers: Vec<_> = sockets
        .into_iter()
        .map(|mut socket| {
            tokio::spawn(async move {
                let (mut latencies, mut received) = (histogram(), 0u64);
                while received < writes {
                    let Ok(Some(event)) = tokio::time::timeout(IDLE_LIMIT, next_event(&mut socket)).await else {
                        break;
                    };
                    let sent = event.value.and_then(|v| v.field1).and_then(|s| s.parse::<u64>().ok());
                    if let Some(sent) = sent {
                        let now = epoch.elapsed().as_micros() as u64;
                        let _ = latencies.record(now.saturating_sub(sent).clamp(1, 100_000_000));
                        received += 1;
                    }
                }
                (latencies, received)
            })
        })
        .collect();
    let started = Instant::now();
    let next = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut writers = Vec::new();
    for _ in 0..concurrency.max(1) {
        let (client, next, path) = (client.clone(), next.clone(), path.clone());
        writers.push(tokio::spawn(async move {
            let mut failed = 0u64;
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= writes {
                    return failed;
                }
                let sent = epoch.elapsed().as_micros() as u64;
                let body = Bytes::from(format!(r#"{{"field0":"{i}","field1":"{sent}"}}"#));
                match client.call(&Call::Put(path.clone(), body)).await {
                    Ok((status, _)) if status < 300 => {}
                    _ => failed += 1,
                }
            }
        }));
    }
    let mut failed_writes = 0;
    for writer in writers {
        failed_writes += writer.await?;
    }
    let (latencies, delivered) = gather_receivers(readers).await?;
    let elapsed = started.elapsed();
    let expected = writes * subscribers as u64;
    if failed_writes > 0 || delivered < expected {
        eprintln!("{}: {failed_writes} writes failed; {delivered} of {expected} deliveries arrived", target.name);
    }
    let server = before.zip(target.sample_tree()).map(|(b, a)| ServerUse::between(b, a, delivered));
    Ok(Measurement::new(
        "ws-fanout",
        &target.name,
        round,
        delivered,
        delivered,
        expected - delivered.min(expected),
        elapsed,
        &latencies,
        server,
    )
    .with_load_cpu(load_before, ProcessSample::of_self()))
}
