//! Server-Sent Events: `GET /T/<id>` (or `/T/`) with `Accept: text/event-stream`.
//!
//! Each event is `data: <Harper's message as JSON>` as Harper writes it, and,
//! beyond Harper, each change carries `id: <position>` so a client that reconnects
//! with `Last-Event-ID` resumes from the log right after the last change it
//! received (missing nothing, seeing nothing twice). The current records sent first
//! carry no id: a client cut off among them starts over. A position the log no
//! longer holds (pruned) is refused with 409 rather than resumed with a gap. A comment line (`: keep-alive`) goes
//! out every [`HEARTBEAT`], so proxies keep an idle stream open and a client that
//! has gone away is noticed; a client that takes nothing for [`SEND_LIMIT`] is cut
//! off. When the feed ends (the table dropped, the subscriber too far behind, the
//! server stopping) an `event: end` with the reason closes the stream.
//!
//! Errors before the stream starts are ordinary responses with their status, the
//! body `data: <the REST error text>` as Harper sends them.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use lyre_core::services::FeedEnd;
use tokio::sync::mpsc;
use tokio::time::{Instant, timeout};

use crate::app::AppState;
use crate::http::error::ApiError;
use crate::http::realtime::{Opened, event_id, open, parse_event_id, stopped};

/// How often a comment line goes out on a stream.
const HEARTBEAT: Duration = Duration::from_secs(15);
/// How long the client may take nothing before the stream is ended.
const SEND_LIMIT: Duration = Duration::from_secs(30);
/// Chunks that may wait for the socket.
const CHUNKS_IN_FLIGHT: usize = 8;

/// Answers an event-stream request: the stream, or the error that refused it.
pub(crate) async fn stream(state: &Arc<AppState>, peer: SocketAddr, parts: axum::http::request::Parts) -> Response {
    let resume = match parts.headers.get("last-event-id").map(|v| v.to_str().ok().and_then(parse_event_id)) {
        None => None,
        Some(Some(position)) => Some(position),
        Some(None) => return refusal(&ApiError::bad_request("Last-Event-ID is not an event id this server sent")),
    };
    match open(state, peer, &parts, resume).await {
        Ok(opened) => send(state, opened),
        Err(err) => refusal(&err),
    }
}

/// Streams the events of a subscription already opened (its errors as JSON).
pub(crate) fn send(state: &AppState, mut opened: Opened) -> Response {
    opened.format = crate::http::format::Format::Json;
    let (tx, mut rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(CHUNKS_IN_FLIGHT);
    tokio::spawn(relay(opened, tx, state.stopping.clone()));
    let body = Body::from_stream(futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx)));
    let mut response = (StatusCode::OK, body).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(header::VARY, HeaderValue::from_static("Accept, Accept-Encoding"));
    response
}

/// Writes the subscription's events (and heartbeats) into the response body until
/// the feed ends, the client goes, or the server stops.
async fn relay(
    mut opened: Opened,
    tx: mpsc::Sender<Result<Bytes, std::io::Error>>,
    mut stopping: tokio::sync::watch::Receiver<bool>,
) {
    let mut heartbeat = tokio::time::interval_at(Instant::now() + HEARTBEAT, HEARTBEAT);
    let ended = loop {
        let chunk = tokio::select! {
            event = opened.subscription.next() => match event {
                Ok(event) => match opened.encode(&event) {
                    Ok(json) => {
                        // The current state carries no id: a client cut off inside it
                        // has not seen all of it, and starts over when it reconnects.
                        let id = if event.current { String::new() } else { format!("id: {}\n", event_id(event.position)) };
                        let mut chunk = format!("{id}data: ").into_bytes();
                        chunk.extend_from_slice(&json);
                        chunk.extend_from_slice(b"\n\n");
                        chunk
                    }
                    Err(err) => break Some(err.rest_text()),
                },
                Err(end) => break Some(end.to_string()),
            },
            _ = heartbeat.tick() => b": keep-alive\n\n".to_vec(),
            () = stopped(&mut stopping) => break Some(FeedEnd::ShuttingDown.to_string()),
        };
        match timeout(SEND_LIMIT, tx.send(Ok(Bytes::from(chunk)))).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => break None, // the client went away
            Err(_) => break None,     // the client took nothing for too long: end the body
        }
    };
    if let Some(reason) = ended {
        let chunk = format!("event: end\ndata: {}\n\n", reason.replace('\n', " "));
        let _ = timeout(SEND_LIMIT, tx.send(Ok(Bytes::from(chunk)))).await;
    }
}

/// An error before the stream started, as Harper answers it on an event stream.
pub(crate) fn refusal(err: &ApiError) -> Response {
    let status = StatusCode::from_u16(err.code().status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let body = format!("data: {}\n\n", err.rest_text().replace('\n', " "));
    let mut response = (status, body).into_response();
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    if matches!(err.code(), lyre_core::Code::MustLogin) {
        response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Basic"));
    }
    response
}
