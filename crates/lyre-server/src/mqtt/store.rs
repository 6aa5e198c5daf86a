//! What the broker keeps across restarts, in tables of the `system` database:
//! durable sessions (`hdb_mqtt_session`: the subscriptions, and for each record
//! subscription the feed position acknowledged through) and the retained messages
//! of plain topics (`hdb_mqtt_retained`). A retained message is stored before its
//! PUBACK; a session when it subscribes, unsubscribes or disconnects, and every few
//! seconds while it receives.

use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use lyre_core::catalog::TableSpec;
use lyre_core::query::Query;
use lyre_core::{Context, Engine, SYSTEM_DATABASE, Table, Value, WriteOptions, now_ms};
use mqtt5_protocol::QoS;

use super::message::Message;
use super::session::StoredSession;

const SESSIONS: &str = "hdb_mqtt_session";
const RETAINED: &str = "hdb_mqtt_retained";

/// A session read back at start-up.
pub(crate) struct LoadedSession {
    /// Its client id.
    pub(crate) client_id: String,
    /// What was kept.
    pub(crate) stored: StoredSession,
    /// When it expires, counted from when it was stored.
    pub(crate) expires_at: Option<Instant>,
}

/// The broker's two tables.
pub(crate) struct Store {
    sessions: Table,
    retained: Table,
}

impl Store {
    /// Opens the tables, creating them on first start.
    pub(crate) async fn open(engine: &Engine) -> lyre_core::Result<Store> {
        let system = engine.database(SYSTEM_DATABASE)?;
        let ctx = Context::system();
        let sessions = system.table_or_create(&ctx, TableSpec::dynamic(SESSIONS, "id")).await?;
        let retained = system.table_or_create(&ctx, TableSpec::dynamic(RETAINED, "topic")).await?;
        Ok(Store { sessions, retained })
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
        let mut record = lyre_core::Object::default();
        record.insert("payload".into(), Value::Bytes(message.payload.to_vec()));
        record.insert("qos".into(), Value::Int(message.qos as i64));
        if let Some(at) = message.expires_at {
            let left = at.saturating_duration_since(Instant::now());
            record.insert("expires".into(), Value::Float(now_ms() + left.as_millis() as f64));
        }
        self.retained.put(&Context::system(), topic, record, WriteOptions::default()).await?;
        Ok(())
    }

    /// Every stored session.
    pub(crate) fn sessions(&self) -> lyre_core::Result<Vec<LoadedSession>> {
        let mut out = Vec::new();
        let now = now_ms();
        self.sessions.search(&Context::system(), Query::default())?.run(&mut |record| {
            if let Value::Object(record) = record
                && let Some(Value::String(id)) = record.get("id")
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
            ControlFlow::Continue(())
        })?;
        Ok(out)
    }

    /// Every stored retained message not yet expired.
    pub(crate) fn retained(&self) -> lyre_core::Result<Vec<Message>> {
        let mut out = Vec::new();
        let now = now_ms();
        self.retained.search(&Context::system(), Query::default())?.run(&mut |record| {
            if let Value::Object(record) = record
                && let Some(Value::String(topic)) = record.get("topic")
                && let Some(Value::Bytes(payload)) = record.get("payload")
            {
                let expires = match record.get("expires") {
                    Some(Value::Float(ms)) => Some(*ms),
                    _ => None,
                };
                if expires.is_some_and(|at| at <= now) {
                    return ControlFlow::Continue(());
                }
                let qos = match record.get("qos") {
                    Some(Value::Int(q)) => QoS::from(*q as u8),
                    _ => QoS::AtMostOnce,
                };
                out.push(Message {
                    topic: Arc::from(topic.as_str()),
                    payload: Bytes::from(payload.clone()),
                    qos,
                    retain: true,
                    properties: Default::default(),
                    expires_at: expires.map(|at| Instant::now() + Duration::from_millis((at - now) as u64)),
                    publisher: None,
                });
            }
            ControlFlow::Continue(())
        })?;
        Ok(out)
    }
}
