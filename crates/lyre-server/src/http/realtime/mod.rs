//! Subscriptions on the REST port: a WebSocket upgrade (`ws.rs`) or a `GET` whose
//! `Accept` is exactly `text/event-stream` (`sse.rs`) on a table's URL subscribes
//! to its changes through the change feed (`lyre_core::services::Feed`).
//!
//! `/T/<id>` covers one record, `/T/` (and `/T`) the table, `/T/<prefix>/` the keys
//! starting with `<prefix>/`. Each event is Harper's message
//! `{"id","localTime","value","version","type"}` (`value` left out of a delete;
//! `size` on the current records of a collection), in the format `Accept` or the
//! URL's extension asks. Beyond Harper, the query string may say where to start
//! (`previousCount`, `startTime`, `omitCurrent`), and an event stream names each
//! event (`id:`) so a client resumes with `Last-Event-ID`.

pub(crate) mod mqtt;
pub(crate) mod sse;
pub(crate) mod ws;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::http::{HeaderMap, header};
use lyre_core::services::{Event, EventValue, Position, Start, SubscribeRequest, Subscription};
use lyre_core::{Code, Context, KeyScope, Value};
use serde::Serialize;

use crate::app::AppState;
use crate::http::auth::authenticate;
use crate::http::error::ApiError;
use crate::http::format::{EncodeError, Format};
use crate::http::negotiate::response_format;
use crate::http::rest::query::decode;
use crate::http::rest::url::{self, Target};

/// The most changes `previousCount` replays (Harper's bound).
const MAX_PREVIOUS: usize = 1_000;

/// Whether the request asks to upgrade to a WebSocket.
pub(crate) fn is_websocket(headers: &HeaderMap) -> bool {
    let has = |name, token: &str| {
        headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .any(|v| v.split(',').any(|part| part.trim().eq_ignore_ascii_case(token)))
    };
    has(header::UPGRADE, "websocket") && has(header::CONNECTION, "upgrade")
}

/// Whether a `GET` asks for an event stream: `Accept` exactly `text/event-stream`,
/// as Harper decides (a list that also accepts other types is a plain read).
pub(crate) fn is_event_stream(headers: &HeaderMap) -> bool {
    headers.get(header::ACCEPT).is_some_and(|accept| accept.as_bytes().trim_ascii() == b"text/event-stream")
}

/// A subscription opened for a request, and how its events are written.
pub(crate) struct Opened {
    pub(crate) subscription: Subscription,
    pub(crate) format: Format,
    /// The URL names a collection (its current records carry their `size`).
    collection: bool,
}

/// Authenticates the request and opens the subscription its path and query ask
/// for, resuming after `resume` when given.
pub(crate) async fn open(
    state: &Arc<AppState>,
    peer: SocketAddr,
    parts: &axum::http::request::Parts,
    resume: Option<Position>,
) -> Result<Opened, ApiError> {
    let client = parts.extensions.get::<crate::tls::ClientCertificate>();
    let user = authenticate(state, &parts.headers, peer, client).await?;
    let ctx = Context::new(user);
    let no_resource = || ApiError::new(Code::NotFound, format!("No resource was found to handle {}", parts.uri.path()));
    let path = url::split(parts.uri.path()).ok_or_else(no_resource)?;
    let exports = state.components.exports();
    let export = exports.get(&path.export).ok_or_else(no_resource)?;
    let format = match path.format {
        Some(format) => format,
        None => response_format(&parts.headers).unwrap_or(Format::Json),
    };
    let start = match resume {
        Some(position) => (Start::After(position), true),
        None => start_from_query(parts.uri.query().unwrap_or(""))?,
    };
    let place = TablePlace { database: &export.database, table: &export.table, rest: path.rest.as_deref() };
    open_table(state, &ctx, place, start, format).await
}

/// Where a subscription reads: a table by its database and name, and the part of
/// the URL after the table (a record, a prefix, or nothing for the whole table).
pub(crate) struct TablePlace<'a> {
    pub(crate) database: &'a str,
    pub(crate) table: &'a str,
    pub(crate) rest: Option<&'a str>,
}

/// Opens `ctx`'s subscription to `place` from `start` (where to begin, and whether
/// to leave out the current records), its events written in `format`.
pub(crate) async fn open_table(
    state: &AppState,
    ctx: &Context,
    place: TablePlace<'_>,
    (start, omit_current): (Start, bool),
    format: Format,
) -> Result<Opened, ApiError> {
    let db = state.engine.database(place.database).map_err(|e| ApiError::from(e).hidden_from(ctx))?;
    let table = db.table(place.table).map_err(|e| ApiError::from(e).hidden_from(ctx))?;
    let (scope, collection) = match url::target(place.rest, table.schema())? {
        Target::Table | Target::Collection => (KeyScope::Table, true),
        Target::Prefix(prefix) => (KeyScope::Prefix(format!("{prefix}/")), true),
        Target::Record(id) => (KeyScope::Record(id), false),
        Target::Property(..) => {
            return Err(ApiError::bad_request("a subscription names a record or a collection, not a property"));
        }
    };
    drop(db);
    let request = SubscribeRequest {
        database: place.database.to_string(),
        table: Some(place.table.to_string()),
        scope,
        matcher: None,
        start,
        omit_current,
    };
    let subscription =
        state.services.feed().subscribe(ctx, request).await.map_err(|e| ApiError::from(e).hidden_from(ctx))?;
    Ok(Opened { subscription, format: format.for_errors(), collection })
}

/// Where the query string says to start: `previousCount=N` (at most 1,000),
/// `startTime=<ms or ISO 8601>`, `omitCurrent=true`; other parameters are ignored,
/// as Harper ignores every one of them.
pub(crate) fn start_from_query(query: &str) -> Result<(Start, bool), ApiError> {
    let (mut start, mut omit_current) = (Start::Now, false);
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let value = decode(value);
        match decode(name).as_str() {
            "previousCount" => {
                let count = value.parse::<usize>().ok().filter(|c| *c <= MAX_PREVIOUS).ok_or_else(|| {
                    ApiError::bad_request(format!(
                        "previousCount must be a whole number up to {MAX_PREVIOUS}, not '{value}'"
                    ))
                })?;
                start = Start::Previous(count);
            }
            "startTime" => {
                let time = value
                    .parse::<f64>()
                    .ok()
                    .filter(|t| t.is_finite())
                    .or_else(|| lyre_core::parse_iso8601(&value))
                    .ok_or_else(|| {
                        ApiError::bad_request(format!(
                            "startTime must be ms since the epoch or an ISO 8601 time, not '{value}'"
                        ))
                    })?;
                start = Start::Since(time);
            }
            "omitCurrent" => omit_current = value.is_empty() || value == "true",
            _ => {}
        }
    }
    if start != Start::Now {
        omit_current = true; // history replaces the current state
    }
    Ok((start, omit_current))
}

/// Waits until the server starts shutting down.
async fn stopped(stopping: &mut tokio::sync::watch::Receiver<bool>) {
    let _ = stopping.wait_for(|stop| *stop).await;
}

/// The name of a change for `Last-Event-ID`: `<seq>.<index>` (`<seq>` alone
/// stands for the end of entry `<seq>`).
pub(crate) fn event_id(position: Position) -> String {
    if position.index == u32::MAX { position.seq.to_string() } else { format!("{}.{}", position.seq, position.index) }
}

/// The position an event name stands for ([`event_id`]'s inverse).
pub(crate) fn parse_event_id(text: &str) -> Option<Position> {
    match text.trim().split_once('.') {
        None => text.trim().parse().ok().map(Position::end_of),
        Some((seq, index)) => Some(Position { seq: seq.parse().ok()?, index: index.parse().ok()? }),
    }
}

/// An event as Harper's subscription message.
#[derive(Serialize)]
struct Message<'a> {
    id: &'a Value,
    #[serde(rename = "localTime")]
    local_time: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    value: Option<MessageValue<'a>>,
    version: f64,
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    size: Option<usize>,
}

#[derive(Serialize)]
#[serde(untagged)]
enum MessageValue<'a> {
    Record(&'a lyre_core::RecordBody),
    Message(&'a Value),
}

impl Opened {
    /// `event` encoded as the subscription's message.
    pub(crate) fn encode(&self, event: &Event) -> Result<Vec<u8>, ApiError> {
        let (value, size) = match &event.value {
            EventValue::None => (None, None),
            EventValue::Record(body) => {
                let size = match body {
                    lyre_core::RecordBody::Stored(bytes) if event.current && self.collection => Some(bytes.len()),
                    _ => None,
                };
                (Some(MessageValue::Record(body)), size)
            }
            EventValue::Message(message) => (Some(MessageValue::Message(message)), None),
        };
        if self.format == Format::Json {
            return json_message(event, value.is_some(), size);
        }
        let message = Message {
            id: &event.id,
            local_time: event.local_time,
            value,
            version: event.version,
            kind: event.kind.name(),
            size,
        };
        Ok(self.format.encode_sized(&message, event.size())?)
    }
}

/// [`Message`] as JSON around the event's value encoded once for every subscriber
/// ([`Event::value_json`]), the same bytes as serializing [`Message`].
fn json_message(event: &Event, with_value: bool, size: Option<usize>) -> Result<Vec<u8>, ApiError> {
    fn put<T: Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) -> Result<(), ApiError> {
        serde_json::to_writer(out, value).map_err(|e| EncodeError(e.to_string()).into())
    }
    let value = if with_value { Some(event.value_json()?) } else { None };
    let mut out = Vec::with_capacity(value.as_ref().map_or(0, |v| v.len()) + 128);
    out.extend_from_slice(b"{\"id\":");
    put(&mut out, &event.id)?;
    out.extend_from_slice(b",\"localTime\":");
    put(&mut out, &event.local_time)?;
    if let Some(value) = value {
        out.extend_from_slice(b",\"value\":");
        out.extend_from_slice(&value);
    }
    out.extend_from_slice(b",\"version\":");
    put(&mut out, &event.version)?;
    out.extend_from_slice(b",\"type\":");
    put(&mut out, event.kind.name())?;
    if let Some(size) = size {
        out.extend_from_slice(b",\"size\":");
        put(&mut out, &size)?;
    }
    out.push(b'}');
    Ok(out)
}
