//! WebSocket subscriptions: `ws://host:9926/T/<id>` and `/T/`.
//!
//! As Harper, every well-formed upgrade is accepted (101, echoing the first
//! subprotocol offered) before anything is checked; what then fails closes the
//! socket with Harper's codes: 3000 for a missing or failed login, 3003 for a role
//! that may not read the table, 1011 for anything else (an unknown path: "No
//! resource was found to handle <path>"). Each event is one frame: text for JSON,
//! binary for CBOR and MessagePack. Messages from the client are read (so pings,
//! pongs and closes are answered) and otherwise ignored, as Harper's tables do.
//!
//! Beyond Harper: the server pings every [`PING_EVERY`] and closes a socket that
//! has sent nothing for [`SILENT_LIMIT`] (1001), or that has not taken a frame for
//! [`SEND_LIMIT`] (1008): a client that stops reading costs its bounded feed queue,
//! nothing more, and is gone after the limit. A frame over [`MAX_MESSAGE`] from the
//! client closes with 1009; one that does not decode with 1002. A feed that ends
//! (the table dropped, the subscriber too far behind) closes with 1011 and the
//! reason; a server shutting down with 1001.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures_util::{FutureExt as _, SinkExt, StreamExt};
use hyper_util::rt::TokioIo;
use lyre_core::Code;
use lyre_core::services::FeedEnd;
use tokio::time::{Instant, timeout};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role, WebSocketConfig};

use crate::app::AppState;
use crate::http::error::ApiError;
use crate::http::format::Format;
use crate::http::realtime::{Opened, open, stopped};

/// How often the server pings an open socket.
const PING_EVERY: Duration = Duration::from_secs(30);
/// How long a socket may send nothing (not even a pong) before it is closed.
const SILENT_LIMIT: Duration = Duration::from_secs(75);
/// How long one frame may wait for the client to take it.
const SEND_LIMIT: Duration = Duration::from_secs(30);
/// Most events sent with one flush.
const TURN: usize = 256;
/// What one read from the socket takes at most. tungstenite zeroes this much of its
/// buffer on every read attempt (128 KiB by default: a third of a fan-out's CPU);
/// clients send little, and a larger frame still grows the buffer to fit.
const READ_CHUNK: usize = 4 * 1024;
/// The largest message (and frame) accepted from a client.
const MAX_MESSAGE: usize = 1 << 20;
/// How long a closing socket waits for the client's close in answer.
const CLOSE_WAIT: Duration = Duration::from_secs(5);
/// Close reasons are cut to this many bytes (a close frame's payload is at most 125).
const MAX_REASON: usize = 120;

/// Whether `key` is a WebSocket key: sixteen bytes in base64 (RFC 6455 §4.1),
/// judged by its shape as `ws` judges it (22 base64 characters, then `==`).
fn is_key(key: &[u8]) -> bool {
    let base64 = |b: &u8| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/');
    key.len() == 24 && key[..22].iter().all(base64) && &key[22..] == b"=="
}

/// Answers an upgrade request: 101 and the subscription run on its own task, or the
/// refusal Harper's WebSocket server (`ws`) gives a handshake it cannot take: 405
/// for a method other than `GET`, 400 for a missing or malformed key or a version
/// other than 13 (or 8), the latter naming the versions taken (RFC 6455 §4.4).
pub(crate) fn upgrade(state: &Arc<AppState>, peer: SocketAddr, mut parts: axum::http::request::Parts) -> Response {
    if parts.method != axum::http::Method::GET {
        let mut response = ApiError::new(Code::MethodNotAllowed, "Invalid HTTP method: a WebSocket upgrade is a GET")
            .render_rest(Format::Json);
        response.headers_mut().insert(header::ALLOW, HeaderValue::from_static("GET"));
        return response;
    }
    let Some(key) = parts.headers.get(header::SEC_WEBSOCKET_KEY).map(|k| k.as_bytes().to_vec()).filter(|k| is_key(k))
    else {
        return ApiError::bad_request("Missing or invalid Sec-WebSocket-Key header").render_rest(Format::Json);
    };
    if !parts.headers.get(header::SEC_WEBSOCKET_VERSION).is_some_and(|v| matches!(v.as_bytes(), b"13" | b"8")) {
        let mut response =
            ApiError::bad_request("Missing or invalid Sec-WebSocket-Version header").render_rest(Format::Json);
        response.headers_mut().insert(header::SEC_WEBSOCKET_VERSION, HeaderValue::from_static("13, 8"));
        return response;
    }
    let Some(on_upgrade) = parts.extensions.remove::<hyper::upgrade::OnUpgrade>() else {
        return ApiError::bad_request("this connection cannot be upgraded to a WebSocket (HTTP/1.1 is needed)")
            .render_rest(Format::Json);
    };
    let protocol = parts
        .headers
        .get(header::SEC_WEBSOCKET_PROTOCOL)
        .and_then(|p| p.to_str().ok())
        .and_then(|p| p.split(',').next())
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty());
    let mut response = StatusCode::SWITCHING_PROTOCOLS.into_response();
    let headers = response.headers_mut();
    headers.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    headers.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    if let Ok(accept) = HeaderValue::from_str(&derive_accept_key(&key)) {
        headers.insert(header::SEC_WEBSOCKET_ACCEPT, accept);
    }
    if let Some(protocol) = protocol.as_deref().and_then(|p| HeaderValue::from_str(p).ok()) {
        headers.insert(header::SEC_WEBSOCKET_PROTOCOL, protocol);
    }
    let state = state.clone();
    // The socket keeps its connection's place under the limits until it ends.
    let guard = parts.extensions.remove::<crate::http::serve::ConnectionGuard>();
    tokio::spawn(async move {
        let _guard = guard;
        let upgraded = match on_upgrade.await {
            Ok(upgraded) => upgraded,
            Err(err) => return tracing::debug!(%peer, error = %err, "a WebSocket upgrade did not complete"),
        };
        let config = WebSocketConfig::default()
            .read_buffer_size(READ_CHUNK)
            .max_message_size(Some(MAX_MESSAGE))
            .max_frame_size(Some(MAX_MESSAGE));
        let socket = WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, Some(config)).await;
        serve(state, peer, parts, protocol, socket).await;
    });
    response
}

type Socket = WebSocketStream<TokioIo<hyper::upgrade::Upgraded>>;

/// Runs one upgraded socket to its end.
async fn serve(
    state: Arc<AppState>,
    peer: SocketAddr,
    parts: axum::http::request::Parts,
    protocol: Option<String>,
    mut socket: Socket,
) {
    if protocol.as_deref() == Some("mqtt") {
        return match state.mqtt.get().and_then(std::sync::Weak::upgrade) {
            Some(broker) => super::mqtt::serve(broker, socket, peer).await,
            None => close(&mut socket, CloseCode::Again, "the MQTT broker is not running".into()).await,
        };
    }
    let opened = match open(&state, peer, &parts, None).await {
        Ok(opened) => opened,
        Err(err) => {
            let code = match err.code() {
                Code::MustLogin | Code::LoginFailed => CloseCode::Library(3000),
                Code::Forbidden => CloseCode::Library(3003),
                _ => CloseCode::Error,
            };
            let reason = if err.code() == Code::NotFound { err.message().to_string() } else { err.rest_text() };
            return close(&mut socket, code, reason).await;
        }
    };
    match relay(&state, opened, &mut socket).await {
        Some((code, reason)) => close(&mut socket, code, reason).await,
        // The socket queued its answer to the client's close (RFC 6455 5.5.1): sent
        // now, or the client sees the connection drop (1006).
        None => {
            let _ = timeout(CLOSE_WAIT, socket.flush()).await;
        }
    }
}

/// Sends the subscription's events until it ends, the client goes or the server
/// stops; answers the close code and reason to end with, or `None` when the client
/// closed or went.
async fn relay(state: &AppState, mut opened: Opened, socket: &mut Socket) -> Option<(CloseCode, String)> {
    let mut stopping = state.stopping.clone();
    let mut ping = tokio::time::interval_at(Instant::now() + PING_EVERY, PING_EVERY);
    let mut heard = Instant::now();
    loop {
        tokio::select! {
            event = opened.subscription.next() => {
                if let Err(close) = send_ready(&mut opened, socket, event).await {
                    return Some(close);
                }
            }
            incoming = socket.next() => {
                heard = Instant::now();
                match incoming {
                    None | Some(Ok(Message::Close(_))) => return None,
                    // Pings are answered by the socket itself; messages are ignored, as Harper's tables do.
                    Some(Ok(_)) => {}
                    Some(Err(err)) => return Some(refused(&err)),
                }
            }
            _ = ping.tick() => {
                if heard.elapsed() > SILENT_LIMIT {
                    return Some((CloseCode::Away, format!("nothing heard from the client for {} s", SILENT_LIMIT.as_secs())));
                }
                if timeout(SEND_LIMIT, socket.send(Message::Ping(Vec::new().into()))).await.is_err() {
                    return Some(not_taking());
                }
            }
            () = stopped(&mut stopping) => return Some((CloseCode::Away, "the server is shutting down".into())),
        }
    }
}

/// Sends `first` and the events ready behind it, a turn's worth, with one flush
/// (a flush per event was most of a fan-out's CPU); `Err` with the close to end
/// with when the feed ended or the client does not take frames.
async fn send_ready(
    opened: &mut Opened,
    socket: &mut Socket,
    first: Result<std::sync::Arc<lyre_core::services::Event>, FeedEnd>,
) -> Result<(), (CloseCode, String)> {
    let mut next = first;
    for taken in 1..=TURN {
        let event = match next {
            Ok(event) => event,
            // 3003, as a subscription refused at the start is.
            Err(end @ FeedEnd::AccessRevoked(_)) => return Err((CloseCode::Library(3003), end.to_string())),
            Err(end) => return Err((CloseCode::Error, end.to_string())),
        };
        let frame = match opened.encode(&event) {
            Ok(bytes) if opened.format == Format::Json => match String::from_utf8(bytes) {
                Ok(text) => Message::text(text),
                Err(err) => Message::text(String::from_utf8_lossy(err.as_bytes()).into_owned()),
            },
            Ok(bytes) => Message::binary(bytes),
            Err(err) => return Err((CloseCode::Error, err.rest_text())),
        };
        match timeout(SEND_LIMIT, socket.feed(frame)).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => return Err((CloseCode::Away, String::new())),
            Err(_) => return Err(not_taking()),
        }
        if taken == TURN {
            break;
        }
        // `next` is cancel-safe: an event not ready now is taken by the next call.
        match opened.subscription.next().now_or_never() {
            Some(ready) => next = ready,
            None => break,
        }
    }
    match timeout(SEND_LIMIT, socket.flush()).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(_)) => Err((CloseCode::Away, String::new())),
        Err(_) => Err(not_taking()),
    }
}

/// The close for a client that took no frame within [`SEND_LIMIT`].
fn not_taking() -> (CloseCode, String) {
    (CloseCode::Policy, format!("the client took no frame for {} s", SEND_LIMIT.as_secs()))
}

/// The close for a frame from the client that could not be read.
fn refused(err: &tokio_tungstenite::tungstenite::Error) -> (CloseCode, String) {
    use tokio_tungstenite::tungstenite::Error;
    match err {
        Error::Capacity(err) => (CloseCode::Size, format!("{err}; the limit is {MAX_MESSAGE} bytes")),
        Error::Protocol(err) => (CloseCode::Protocol, err.to_string()),
        Error::Utf8(_) => (CloseCode::Invalid, "a text frame was not UTF-8".into()),
        other => (CloseCode::Away, other.to_string()),
    }
}

/// Closes the socket with `code` and `reason` (cut to fit a close frame), waiting
/// briefly for the client's close in answer.
async fn close(socket: &mut Socket, code: CloseCode, mut reason: String) {
    if reason.len() > MAX_REASON {
        let mut cut = MAX_REASON;
        while !reason.is_char_boundary(cut) {
            cut -= 1;
        }
        reason.truncate(cut);
    }
    let frame = CloseFrame { code, reason: reason.into() };
    let _ = timeout(CLOSE_WAIT, async {
        socket.close(Some(frame)).await?;
        while socket.next().await.is_some() {}
        Ok::<_, tokio_tungstenite::tungstenite::Error>(())
    })
    .await;
}
