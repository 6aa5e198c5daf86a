//! Topics bound to records: `<export>/<id>` names the record `<id>` of an exported
//! table, in the same namespace as REST. A retained publish writes the record (an
//! empty one deletes it; a payload that is not a JSON object is kept as content,
//! `{contentType, data}`, and sent back as it came), a publish without retain is a
//! message to it (logged,
//! the record unchanged); a subscription whose filter can match such topics
//! follows the tables' change feeds, the current record first as a retained
//! message.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use lyre_core::access::Action;
use lyre_core::services::{Event, EventKind, EventValue, FeedEnd, Matcher, Position, Start, SubscribeRequest};
use lyre_core::{Context, KeyScope, Value, WriteOptions};
use mqtt5_protocol::QoS;
use tokio::sync::mpsc;

use super::message::{Delivery, Message, Origin, min_qos};
use super::session::SubOptions;
use super::topic::{has_wildcard, matches};
use crate::app::AppState;
use crate::components::Export;
use crate::http::error::ApiError;
use crate::http::rest::url;

/// A topic name that names a record.
pub(crate) struct RecordTopic {
    /// The table's database.
    pub(crate) database: String,
    /// The table.
    pub(crate) table: String,
    /// The record's primary key.
    pub(crate) id: Value,
}

/// The record `topic` names, if its first level is an exported table (`Err` for
/// an id the table's key cannot be, and for a table's bare name, which is no plain
/// topic). A `?query` after the id is no part of it (Harper reads record topics
/// as REST paths).
pub(crate) fn record_topic(state: &AppState, topic: &str) -> Result<Option<RecordTopic>, ApiError> {
    let exports = state.components.exports();
    let Some((first, id)) = topic.split_once('/') else {
        // A table's own name is its namespace, not a plain topic (Harper refuses it).
        return match exports.get(topic) {
            Some(_) => {
                Err(ApiError::bad_request(format!("the topic '{topic}' names table '{topic}' but no record id")))
            }
            None => Ok(None),
        };
    };
    let Some(export) = exports.get(first) else { return Ok(None) };
    let id = without_query(id);
    if id.is_empty() {
        return Err(ApiError::bad_request(format!("the topic '{topic}' names table '{first}' but no record id")));
    }
    let db = state.engine.database(&export.database)?;
    let table = db.table(&export.table)?;
    let id = url::typed_key(table.schema(), id)?;
    Ok(Some(RecordTopic { database: export.database.clone(), table: export.table.clone(), id }))
}

/// Writes a publish to a record: a retained payload replaces the record (a JSON
/// object, or else content), an empty retained one deletes it, one without retain is a
/// message to it. A message is queued for the writer and its commit is what the
/// answer waits for, so a connection may go on meanwhile (its publishes stay in
/// order); a write is committed before this answers.
pub(crate) async fn publish(
    state: &AppState,
    ctx: &Context,
    target: RecordTopic,
    payload: &Bytes,
    retain: bool,
) -> Result<Committed, ApiError> {
    let table = state.engine.database(&target.database)?.table(&target.table)?;
    match (retain, payload.is_empty()) {
        (true, true) => {
            table.delete(ctx, vec![target.id]).await?;
        }
        (true, false) => {
            // As Harper reads a payload of no stated type: a JSON object is the
            // record; anything else is kept as content, sent back as it came.
            let record = match json_object(payload) {
                Some(record) => record,
                None => lyre_core::content_record(lyre_core::blobs::DEFAULT_CONTENT_TYPE, payload.to_vec()),
            };
            table.put(ctx, target.id, record, WriteOptions::default()).await?;
        }
        (false, _) => {
            let message = match payload.first() {
                Some(b'{' | b'[') => serde_json::from_slice(payload).unwrap_or_else(|_| Value::Bytes(payload.to_vec())),
                _ => Value::Bytes(payload.to_vec()),
            };
            let committed = table.publish_queued(ctx, &target.id, &message).await?;
            return Ok(Box::pin(async move { committed.await.map(drop).map_err(ApiError::from) }));
        }
    }
    Ok(Box::pin(std::future::ready(Ok(()))))
}

/// Resolves once a record publish is committed.
pub(crate) type Committed = std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), ApiError>> + Send>>;

/// The payload as a record, when it is a JSON object.
fn json_object(payload: &[u8]) -> Option<lyre_core::Object> {
    match serde_json::from_slice(payload) {
        Ok(Value::Object(record)) if payload.first() == Some(&b'{') => Some(record),
        _ => None,
    }
}

/// One change feed a subscription follows: one table's, with what to ask it.
pub(crate) struct FeedPlan {
    /// Names the feed among a subscription's: `<database>/<table>`.
    pub(crate) feed: String,
    /// The request (without its start, which the session decides).
    pub(crate) request: SubscribeRequest,
    /// The export name of the table (the first level of its topics).
    pub(crate) names: Arc<HashMap<String, String>>,
}

/// The database of feed `feed` (see [`FeedPlan::feed`]).
pub(crate) fn feed_database(feed: &str) -> &str {
    feed.split_once('/').map_or(feed, |(database, _)| database)
}

/// The change feeds `filter` needs, as `ctx`'s user: none when it can match no
/// record topic. A filter with a wildcard first level follows every exported
/// table the user may read.
pub(crate) fn plan(state: &AppState, ctx: &Context, filter: &str) -> Result<Vec<FeedPlan>, ApiError> {
    let exports = state.components.exports();
    let (first, rest) = filter.split_once('/').unwrap_or((filter, ""));
    let feed = |export: &Export, scope, matcher| FeedPlan {
        feed: format!("{}/{}", export.database, export.table),
        request: SubscribeRequest {
            database: export.database.clone(),
            table: Some(export.table.clone()),
            scope,
            matcher,
            start: Start::Now,
            omit_current: false,
        },
        names: names_of(export),
    };
    if first != "+" && first != "#" {
        let Some(export) = exports.get(first) else { return Ok(Vec::new()) };
        let rest = without_query(rest);
        if rest.is_empty() && !filter.ends_with('/') {
            return Ok(Vec::new()); // the table's name alone is no record's topic
        }
        let plan = match (has_wildcard(rest), rest) {
            (false, id) => {
                let table = state.engine.database(&export.database)?.table(&export.table)?;
                feed(export, KeyScope::Record(url::typed_key(table.schema(), id)?), None)
            }
            (true, "#") => feed(export, KeyScope::Table, None),
            (true, _) => {
                let names = names_of(export);
                feed(export, KeyScope::Table, Some(topic_matcher(filter, names)))
            }
        };
        return Ok(vec![plan]);
    }
    let mut plans = Vec::new();
    for export in exports.iter() {
        let Ok(table) = state.engine.database(&export.database).and_then(|db| db.table(&export.table)) else {
            continue;
        };
        if table.access(ctx, &[Action::Read]).is_err() {
            continue; // a wildcard covers what the user may read
        }
        let names = names_of(export);
        let matcher = (filter != "#").then(|| topic_matcher(filter, names));
        plans.push(feed(export, KeyScope::Table, matcher));
    }
    Ok(plans)
}

/// A record topic's levels without the `?query` Harper allows after them (a
/// subscription's query is for resources that read one; a table's feed has none).
fn without_query(levels: &str) -> &str {
    levels.split_once('?').map_or(levels, |(levels, _)| levels)
}

/// The topic name of `export`'s table (the first level of its records' topics).
fn names_of(export: &Export) -> Arc<HashMap<String, String>> {
    Arc::new(HashMap::from([(export.table.clone(), export.name.clone())]))
}

/// Matches a change by the topic it is published on.
fn topic_matcher(filter: &str, names: Arc<HashMap<String, String>>) -> Matcher {
    let filter = filter.to_string();
    Arc::new(move |table: &str, id: &Value| {
        names.get(table).is_some_and(|name| matches(&filter, &format!("{name}/{}", id_text(id))))
    })
}

/// A primary key as it stands in a topic.
pub(crate) fn id_text(id: &Value) -> String {
    match id {
        Value::String(s) => s.clone(),
        Value::Int(i) => i.to_string(),
        Value::Float(f) => f.to_string(),
        Value::Bool(b) => b.to_string(),
        other => serde_json::to_string(other).unwrap_or_default(),
    }
}

/// What a record subscription's forwarder hands its connection.
pub(crate) enum FeedItem {
    /// A change, as a delivery.
    Delivery(Delivery),
    /// The feed ended.
    Ended(FeedEnd),
}

/// How the writes of MQTT client `client` are logged as made by it (see
/// [`Context::origin`]).
pub(crate) fn origin_of(client: &str) -> String {
    format!("mqtt:{client}")
}

/// Takes `subscription`'s events, as deliveries for the subscription with
/// `options` and the session's `cursor`, to the connection behind `out`
/// (bounded: a connection that does not keep up leaves the feed to fall behind
/// and read from the log). With `own_origin` (a no-local subscription), the
/// changes its own connection made are left out.
pub(crate) async fn forward(
    mut subscription: lyre_core::services::Subscription,
    names: Arc<HashMap<String, String>>,
    options: SubOptions,
    (cursor, own_origin): (u64, Option<Arc<str>>),
    out: mpsc::Sender<FeedItem>,
) {
    loop {
        let item = match subscription.next().await {
            Ok(event) if own_origin.is_some() && event.origin == own_origin => continue,
            Ok(event) => match delivery(&event, &names, options, cursor) {
                Some(delivery) => FeedItem::Delivery(delivery),
                None => continue,
            },
            Err(end) => FeedItem::Ended(end),
        };
        let ended = matches!(item, FeedItem::Ended(_));
        if out.send(item).await.is_err() || ended {
            return;
        }
    }
}

/// `event` as a delivery: the record as JSON, or a content record's data as it is
/// (a delete `null`, as Harper sends it; a message as its publisher sent it), the
/// current state retained.
pub(crate) fn delivery(
    event: &Event,
    names: &HashMap<String, String>,
    options: SubOptions,
    cursor: u64,
) -> Option<Delivery> {
    let name = names.get(&*event.table)?;
    let payload = match (&event.value, event.content()) {
        (EventValue::None, _) => Bytes::from_static(b"null"),
        (EventValue::Message(Value::Bytes(bytes)), _) => Bytes::from(bytes.clone()),
        (_, Some((_, Value::String(text)))) => Bytes::from(text.clone()),
        (_, Some((_, Value::Bytes(bytes)))) => Bytes::from(bytes.clone()),
        _ => Bytes::from_owner(event.value_json().ok()?),
    };
    let retained_state = event.kind != EventKind::Message;
    let message = Message {
        topic: format!("{name}/{}", id_text(&event.id)).into(),
        payload,
        qos: QoS::ExactlyOnce,
        retain: retained_state,
        properties: Default::default(),
        expires_at: None,
        publisher: None,
    };
    Some(Delivery {
        qos: min_qos(message.qos, options.qos),
        retain: event.current || (options.retain_as_published && retained_state),
        message: Arc::new(message),
        subscription_ids: options.id.into_iter().collect(),
        origin: Origin::Record { subscription: cursor, position: event.position },
    })
}

/// Where a feed of `database` stands now: a subscription resuming after it sees
/// what commits from now on.
pub(crate) fn position_now(state: &AppState, database: &str) -> Option<Position> {
    let db = state.engine.database(database).ok()?;
    db.log_tail().ok().map(|cursor| Position::end_of(cursor.seq))
}
