//! What a subscriber receives: one change to one record (or a message published to
//! it), read from the log once and shared by every subscriber it goes to.

use std::sync::{Arc, OnceLock};

use crate::access::TableAccess;
use crate::db::log::{Change, ChangeKind, LogEntry, change_key};
use crate::error::{Error, Result};
use crate::record::stored_record;
use crate::table::{CurrentRecord, RecordBody};
use crate::value::Value;

/// About the memory an event of `table` and `key` takes, with a value of
/// `value_weight` bytes.
fn weight(table: &str, key: &[u8], value_weight: usize) -> usize {
    160 + key.len() + table.len() + value_weight
}

/// A place in the change feed: a log entry and a change inside it. Events are
/// delivered in this order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Hash)]
pub struct Position {
    /// The log entry's sequence number.
    pub seq: u64,
    /// The change's index inside the entry.
    pub index: u32,
}

impl Position {
    /// The first change of entry `seq`.
    pub fn start_of(seq: u64) -> Self {
        Self { seq, index: 0 }
    }

    /// After every change of entry `seq`: where the events of a snapshot that
    /// reflects the log through `seq` stand.
    pub fn end_of(seq: u64) -> Self {
        Self { seq, index: u32::MAX }
    }

    /// The first position after this one.
    pub fn next(self) -> Self {
        match self.index.checked_add(1) {
            Some(index) => Self { seq: self.seq, index },
            None => Self::start_of(self.seq.saturating_add(1)),
        }
    }
}

/// What happened to the record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// It was written (created, replaced or patched; the whole record is sent), or,
    /// for an event of the current state, it exists.
    Put,
    /// It was removed.
    Delete,
    /// A message was published to it; the record did not change.
    Message,
}

impl EventKind {
    /// Harper's name for it (the `type` of a subscription message).
    pub fn name(self) -> &'static str {
        match self {
            EventKind::Put => "put",
            EventKind::Delete => "delete",
            EventKind::Message => "message",
        }
    }
}

/// What an event carries.
#[derive(Debug, Clone)]
pub enum EventValue {
    /// Nothing (a delete).
    None,
    /// The record as written, without what the subscriber's role may not read.
    Record(RecordBody),
    /// A published message, as its publisher sent it.
    Message(Value),
}

/// One change delivered to subscribers.
#[derive(Debug, Clone)]
pub struct Event {
    /// The table, by name.
    pub table: Arc<str>,
    /// The record's primary key.
    pub id: Value,
    /// The primary key encoded as stored (what subscriptions to one record match).
    pub key: Vec<u8>,
    /// What happened.
    pub kind: EventKind,
    /// The record, the message, or nothing.
    pub value: EventValue,
    /// The version of the write (ms since the epoch).
    pub version: f64,
    /// When it was committed here (ms since the epoch).
    pub local_time: f64,
    /// Where it is in the log (for an event of the current state: the position of
    /// the snapshot it was read from).
    pub position: Position,
    /// Whether it is the first change of its transaction.
    pub begin_txn: bool,
    /// Whether it is part of the current state sent when a subscription starts
    /// (MQTT's retained message), not a change.
    pub current: bool,
    /// The client connection that made the change, when it named itself (see
    /// [`crate::Context::origin`]).
    pub origin: Option<Arc<str>>,
    /// About the memory it takes (see [`Event::size`]).
    weight: usize,
    /// The value as JSON, made by the first subscriber that asks (see
    /// [`Event::value_json`]).
    json: OnceLock<Arc<[u8]>>,
    /// The record's content, if it is a content record, worked out by the first
    /// subscriber that asks (see [`Event::content`]).
    content: OnceLock<Option<(String, Value)>>,
}

impl Event {
    /// The event for `entry`'s change number `index`, when it is a change to one
    /// record (put, delete, message); `None` for changes to a table as a whole.
    pub(crate) fn of_change(entry: &LogEntry, index: usize, change: &Change, table: Arc<str>) -> Result<Option<Self>> {
        // The value, and about what it takes decoded (a message's encoded size,
        // doubled, stands for its decoded one).
        let (kind, value_weight, value, version) = match (change.kind, &change.record) {
            (ChangeKind::Put, Some(stored)) => {
                let (header, body) = stored_record(stored)?;
                let body = RecordBody::Stored(body.to_vec());
                (EventKind::Put, body.size_hint(), EventValue::Record(body), header.version)
            }
            (ChangeKind::Delete, _) => (EventKind::Delete, 0, EventValue::None, entry.version),
            (ChangeKind::Message, Some(message)) => {
                let decoded = Value::from_msgpack(message)
                    .map_err(|e| Error::Corrupt(format!("a logged message does not decode: {e}")))?;
                (EventKind::Message, message.len() * 2, EventValue::Message(decoded), entry.version)
            }
            _ => return Ok(None),
        };
        Ok(Some(Event {
            weight: weight(&table, &change.key, value_weight),
            table,
            id: change_key(change)?,
            key: change.key.clone(),
            kind,
            value,
            version,
            local_time: entry.version,
            position: Position { seq: entry.seq, index: index as u32 },
            begin_txn: index == 0,
            current: false,
            origin: entry.origin.as_deref().map(Arc::from),
            json: OnceLock::new(),
            content: OnceLock::new(),
        }))
    }

    /// The event that sends `record`, read from a snapshot at `position`.
    pub(crate) fn of_current(table: Arc<str>, key: Vec<u8>, record: CurrentRecord, position: Position) -> Self {
        Event {
            weight: weight(&table, &key, record.body.size_hint()),
            table,
            id: record.id,
            key,
            kind: EventKind::Put,
            value: EventValue::Record(record.body),
            version: record.version.time,
            local_time: record.version.time,
            position,
            begin_txn: true,
            current: true,
            origin: None,
            json: OnceLock::new(),
            content: OnceLock::new(),
        }
    }

    /// The record's media type and data when it is a content record
    /// ([`RecordBody::content`]), worked out once however many subscribers send
    /// it: a protocol that sends payloads (MQTT) sends that data as it is, as
    /// Harper does.
    pub fn content(&self) -> Option<&(String, Value)> {
        self.content
            .get_or_init(|| match &self.value {
                EventValue::Record(body) => body.content().ok().flatten(),
                _ => None,
            })
            .as_ref()
    }

    /// The value as JSON (empty for a delete), encoded once however many
    /// subscribers send it: a record's attributes, or a message's value (one
    /// published as raw bytes comes out as JSON's rendering of bytes, so a
    /// protocol that sends bytes as they came takes them from `value`).
    pub fn value_json(&self) -> Result<Arc<[u8]>> {
        if let Some(json) = self.json.get() {
            return Ok(json.clone());
        }
        let encoded = match &self.value {
            EventValue::None => Ok(Vec::new()),
            EventValue::Record(body) => serde_json::to_vec(body),
            EventValue::Message(value) => serde_json::to_vec(value),
        }
        .map_err(|e| Error::Corrupt(format!("an event's value does not encode as JSON: {e}")))?;
        Ok(self.json.get_or_init(|| Arc::from(encoded)).clone())
    }

    /// About the memory it takes, for the bounds on queued events.
    pub fn size(&self) -> usize {
        self.weight
    }

    /// The event as a role with `access` sees it: without the record's attributes
    /// it may not read (the same event when it reads them all).
    pub(crate) fn viewed_by(self: Arc<Self>, access: &TableAccess, primary_key: &str) -> Result<Arc<Self>> {
        let EventValue::Record(body) = &self.value else { return Ok(self) };
        if !access.restricts_attributes() {
            return Ok(self);
        }
        let mut record = body.clone().into_object()?;
        access.strip(&mut record, primary_key);
        let mut event = (*self).clone();
        event.value = EventValue::Record(RecordBody::Decoded(record));
        event.json = OnceLock::new();
        Ok(Arc::new(event))
    }
}
