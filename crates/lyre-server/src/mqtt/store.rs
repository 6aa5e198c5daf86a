//! What the broker keeps across restarts, in tables of the `system` database:
//! durable sessions (`hdb_mqtt_session`: the subscriptions, and for each record
//! subscription the feed position acknowledged through), the retained messages
//! of plain topics (`hdb_mqtt_retained`), and the QoS 1 and 2 plain-topic messages
//! waiting for a durable session that is not connected (`hdb_mqtt_queued`). A
//! retained or queued message is stored before its PUBACK; a session when it
//! subscribes, unsubscribes or disconnects, and every few seconds while it
//! receives. (Record changes need no queue: a session resumes from the log.)

use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use lyre_core::catalog::TableSpec;
use lyre_core::query::{Comparator, Condition, Query, Select};
use lyre_core::{Context, Engine, SYSTEM_DATABASE, Table, Value, WriteOptions, now_ms};
use mqtt5_protocol::QoS;

use super::message::{Delivery, Message, Origin};
use super::session::StoredSession;

const SESSIONS: &str = "hdb_mqtt_session";
const RETAINED: &str = "hdb_mqtt_retained";
const QUEUED: &str = "hdb_mqtt_queued";

/// A session read back at start-up.
pub(crate) struct LoadedSession {
    /// Its client id.
    pub(crate) client_id: String,
    /// What was kept.
    pub(crate) stored: StoredSession,
    /// When it expires, counted from when it was stored.
    pub(crate) expires_at: Option<Instant>,
}

/// The broker's tables.
pub(crate) struct Store {
    sessions: Table,
    retained: Table,
    queued: Table,
}

/// A message waiting for a session that is not connected, read back at start-up.
pub(crate) struct QueuedMessage {
    /// Its place in the queue (ordering every session's messages).
    pub(crate) seq: u64,
    /// The session's client id.
    pub(crate) client: String,
    /// The delivery as it will be sent.
    pub(crate) delivery: Delivery,
}

impl Store {
    /// Opens the tables, creating them on first start.
    pub(crate) async fn open(engine: &Engine) -> lyre_core::Result<Store> {
        let system = engine.database(SYSTEM_DATABASE)?;
        let ctx = Context::system();
        // Not audited: the broker's own bookkeeping, rewritten often (payloads
        // would be written a second time into the log).
        let spec = |name: &str, key: &str| TableSpec { audit: false, ..TableSpec::dynamic(name, key) };
        let sessions = system.table_or_create(&ctx, spec(SESSIONS, "id")).await?;
        let retained = system.table_or_create(&ctx, spec(RETAINED, "topic")).await?;
        let queued = system.table_or_create(&ctx, spec(QUEUED, "seq")).await?;
        Ok(Store { sessions, retained, queued })
    }

    /// Keeps `session` of `client_id`.
    pub(crate) async fn save_session(&self, client_id: &str, session: &StoredSession) -> lyre_core::Result<()> {
        let text = serde_json::to_string(session).map_err(|e| lyre_core::Error::Invalid(e.to_string()))?;
        let mut record = lyre_core::Object::default();
        record.insert("state".into(), Value::String(text));
        record.insert("saved".into(), Value::Float(now_ms()));
        self.sessions.put(&Context::system(), Value::String(client_id.into()), record, WriteOptions::default()).await?;
        Ok(())
    }

    /// Forgets the session of `client_id`.
    pub(crate) async fn remove_session(&self, client_id: &str) -> lyre_core::Result<()> {
        self.sessions.delete(&Context::system(), vec![Value::String(client_id.into())]).await?;
        Ok(())
    }

    /// Keeps `message` as its topic's retained message (an empty one removes it).
    pub(crate) async fn save_retained(&self, message: &Message) -> lyre_core::Result<()> {
        let topic = Value::String(message.topic.to_string());
        if message.payload.is_empty() {
            self.retained.delete(&Context::system(), vec![topic]).await?;
            return Ok(());
        }
        let record = message_record(message, message.qos, true);
        self.retained.put(&Context::system(), topic, record, WriteOptions::default()).await?;
        Ok(())
    }

    /// Keeps deliveries for sessions that are not connected, as one write.
    pub(crate) async fn queue(&self, entries: &[(u64, &str, &Delivery)]) -> lyre_core::Result<()> {
        let records = entries
            .iter()
            .map(|(seq, client, delivery)| {
                let mut record = message_record(&delivery.message, delivery.qos, delivery.retain);
                record.insert("seq".into(), Value::Int(*seq as i64));
                record.insert("client".into(), Value::String(client.to_string()));
                let ids = delivery.subscription_ids.iter().map(|id| Value::Int(i64::from(*id))).collect();
                record.insert("subscriptions".into(), Value::Array(ids));
                record
            })
            .collect();
        self.queued.upsert(&Context::system(), records).await?;
        Ok(())
    }

    /// Forgets the messages queued for `client` (it is connected, or its session
    /// ended).
    pub(crate) async fn clear_queue(&self, client: &str) -> lyre_core::Result<()> {
        let query = Query {
            conditions: vec![Condition::Compare {
                attribute: "client".into(),
                comparator: Comparator::Equals,
                value: Value::String(client.into()),
            }],
            select: Select::Attributes(vec!["seq".into()]),
            ..Query::default()
        };
        // The table is dynamic: `client` comes with the first message ever queued,
        // after the handle opened at start-up, so the search goes through a
        // current one; before that, nothing was queued.
        let queued = self.queued.current()?;
        if queued.schema().attribute("client").is_none() {
            return Ok(());
        }
        let mut seqs = Vec::new();
        queued.search(&Context::system(), query)?.run(&mut |record| {
            if let Value::Object(record) = record
                && let Some(seq) = record.get("seq")
            {
                seqs.push(seq.clone());
            }
            ControlFlow::Continue(())
        })?;
        if !seqs.is_empty() {
            self.queued.delete(&Context::system(), seqs).await?;
        }
        Ok(())
    }

    /// Forgets the queued messages numbered `seqs`.
    pub(crate) async fn forget_queued(&self, seqs: Vec<u64>) -> lyre_core::Result<()> {
        if !seqs.is_empty() {
            let ids = seqs.into_iter().map(|seq| Value::Int(seq as i64)).collect();
            self.queued.delete(&Context::system(), ids).await?;
        }
        Ok(())
    }

    /// Every queued message not yet expired, in queue order.
    pub(crate) fn queued(&self) -> lyre_core::Result<Vec<QueuedMessage>> {
        let mut out = Vec::new();
        each_record(&self.queued, |record| {
            let (Some(Value::Int(seq)), Some(Value::String(client))) = (record.get("seq"), record.get("client")) else {
                return;
            };
            let Some(message) = stored_message(record) else { return };
            let subscription_ids = match record.get("subscriptions") {
                Some(Value::Array(ids)) => ids
                    .iter()
                    .filter_map(|id| if let Value::Int(id) = id { u32::try_from(*id).ok() } else { None })
                    .collect(),
                _ => Vec::new(),
            };
            let delivery = Delivery {
                retain: message.retain,
                qos: message.qos,
                message: Arc::new(message),
                subscription_ids,
                origin: Origin::Plain,
            };
            out.push(QueuedMessage { seq: *seq as u64, client: client.clone(), delivery });
        })?;
        out.sort_by_key(|queued| queued.seq);
        Ok(out)
    }

    /// Every stored session.
    pub(crate) fn sessions(&self) -> lyre_core::Result<Vec<LoadedSession>> {
        let mut out = Vec::new();
        let now = now_ms();
        each_record(&self.sessions, |record| {
            if let Some(Value::String(id)) = record.get("id")
                && let Some(Value::String(state)) = record.get("state")
                && let Ok(stored) = serde_json::from_str::<StoredSession>(state)
            {
                let saved = match record.get("saved") {
                    Some(Value::Float(ms)) => *ms,
                    _ => now,
                };
                let expires_at = (stored.expiry != u32::MAX).then(|| {
                    let left = saved + f64::from(stored.expiry) * 1000.0 - now;
                    Instant::now() + Duration::from_millis(left.max(0.0) as u64)
                });
                out.push(LoadedSession { client_id: id.clone(), stored, expires_at });
            }
        })?;
        Ok(out)
    }

    /// Every stored retained message not yet expired.
    pub(crate) fn retained(&self) -> lyre_core::Result<Vec<Message>> {
        let mut out = Vec::new();
        each_record(&self.retained, |record| {
            out.extend(stored_message(record).map(|m| Message { retain: true, ..m }))
        })?;
        Ok(out)
    }
}

/// Every record of `table`, each handed to `take`.
fn each_record(table: &Table, mut take: impl FnMut(&lyre_core::Object)) -> lyre_core::Result<()> {
    table.search(&Context::system(), Query::default())?.run(&mut |record| {
        if let Value::Object(record) = record {
            take(&record);
        }
        ControlFlow::Continue(())
    })?;
    Ok(())
}

/// What a stored message keeps: its topic, payload, QoS and retain flag, and
/// when it expires (ms since the epoch, so it means the same after a restart).
fn message_record(message: &Message, qos: QoS, retain: bool) -> lyre_core::Object {
    let mut record = lyre_core::Object::default();
    record.insert("topic".into(), Value::String(message.topic.to_string()));
    record.insert("payload".into(), Value::Bytes(message.payload.to_vec()));
    record.insert("qos".into(), Value::Int(qos as i64));
    record.insert("retain".into(), Value::Bool(retain));
    if let Some(at) = message.expires_at {
        let left = at.saturating_duration_since(Instant::now());
        record.insert("expires".into(), Value::Float(now_ms() + left.as_millis() as f64));
    }
    record
}

/// The message [`message_record`] kept; `None` for one expired (or unreadable).
fn stored_message(record: &lyre_core::Object) -> Option<Message> {
    let (Some(Value::String(topic)), Some(Value::Bytes(payload))) = (record.get("topic"), record.get("payload")) else {
        return None;
    };
    let now = now_ms();
    let expires = match record.get("expires") {
        Some(Value::Float(ms)) if *ms <= now => return None,
        Some(Value::Float(ms)) => Some(Instant::now() + Duration::from_millis((ms - now) as u64)),
        _ => None,
    };
    let qos = match record.get("qos") {
        Some(Value::Int(q)) => QoS::from(*q as u8),
        _ => QoS::AtMostOnce,
    };
    Some(Message {
        topic: Arc::from(topic.as_str()),
        payload: Bytes::from(payload.clone()),
        qos,
        retain: matches!(record.get("retain"), Some(Value::Bool(true))),
        properties: Default::default(),
        expires_at: expires,
        publisher: None,
    })
}
