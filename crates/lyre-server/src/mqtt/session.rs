//! A session: what the broker keeps for one client id across its connections —
//! its subscriptions, the QoS 1 and 2 messages sent and not yet acknowledged, the
//! QoS 2 packet ids received and not yet released, the messages queued for it
//! (its mailbox, bounded), and for each record subscription the feed position a
//! durable session resumes after.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use lyre_core::services::Position;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

use super::message::Delivery;
use super::topic::Filter;

/// The messages waiting for one session, bounded: past the limit a message is
/// dropped (and counted) rather than memory growing with a client that does not
/// read or stays away.
pub(crate) struct Mailbox {
    queue: Mutex<Queue>,
    notify: Notify,
    limit: MailboxLimit,
    dropped: AtomicU64,
    /// Deliveries pushed while parked whose stored copy is still being written
    /// (a reconnecting session waits for them before it clears its stored queue).
    storing: AtomicUsize,
}

/// What became of a message pushed to a mailbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pushed {
    /// Queued, and nothing more to do.
    Queued,
    /// Queued for a session that is not connected, to be stored (QoS 1 and 2):
    /// the caller stores it, then calls [`Mailbox::stored`].
    Store,
    /// Dropped: the mailbox was full.
    Dropped,
}

/// How much one mailbox holds at most.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MailboxLimit {
    /// Messages.
    pub(crate) messages: usize,
    /// About this many bytes of them.
    pub(crate) bytes: usize,
}

#[derive(Default)]
struct Queue {
    deliveries: VecDeque<Delivery>,
    bytes: usize,
    /// Its session is not connected: what it is sent is also stored.
    parked: bool,
}

impl Mailbox {
    /// An empty mailbox holding at most `limit`.
    pub(crate) fn new(limit: MailboxLimit) -> Arc<Mailbox> {
        Arc::new(Mailbox {
            queue: Mutex::new(Queue::default()),
            notify: Notify::new(),
            limit,
            dropped: AtomicU64::new(0),
            storing: AtomicUsize::new(0),
        })
    }

    /// Queues `delivery`, or drops it when the mailbox is full.
    pub(crate) fn push(&self, delivery: Delivery) -> Pushed {
        let pushed = {
            let mut queue = self.queue.lock();
            let weight = delivery.message.weight();
            if queue.deliveries.len() >= self.limit.messages || queue.bytes + weight > self.limit.bytes {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                return Pushed::Dropped;
            }
            // Decided under the lock, against `unpark` and `park_and_hold`.
            let store = queue.parked && delivery.qos != mqtt5_protocol::QoS::AtMostOnce;
            if store {
                self.storing.fetch_add(1, Ordering::AcqRel);
            }
            queue.bytes += weight;
            queue.deliveries.push_back(delivery);
            if store { Pushed::Store } else { Pushed::Queued }
        };
        self.notify.notify_one();
        pushed
    }

    /// Notes that the stored copy of a [`Pushed::Store`] delivery is written (or
    /// failed).
    pub(crate) fn stored(&self) {
        self.storing.fetch_sub(1, Ordering::AcqRel);
    }

    /// Its session disconnects: from now on what it is sent is stored as it
    /// comes. Answers copies of the QoS 1 and 2 messages it holds already (to
    /// store now), taken at the same instant, and what `reserve` answers for
    /// their number (called at that instant too, so the places they are stored
    /// at come before those of anything sent later).
    pub(crate) fn park_and_hold(&self, reserve: impl FnOnce(usize) -> u64) -> (Vec<Delivery>, u64) {
        let mut queue = self.queue.lock();
        queue.parked = true;
        let held: Vec<Delivery> =
            queue.deliveries.iter().filter(|d| d.qos != mqtt5_protocol::QoS::AtMostOnce).cloned().collect();
        let first = reserve(held.len());
        (held, first)
    }

    /// Its session connects again: waits (up to 5 s) until every stored copy of
    /// what it was sent while away is written, so clearing its stored queue next
    /// leaves none behind.
    pub(crate) async fn unpark(&self) {
        self.queue.lock().parked = false;
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
        while self.storing.load(Ordering::Acquire) > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
    }

    /// Whether its session is away.
    pub(crate) fn is_parked(&self) -> bool {
        self.queue.lock().parked
    }

    /// The next queued message.
    pub(crate) fn pop(&self) -> Option<Delivery> {
        let mut queue = self.queue.lock();
        let delivery = queue.deliveries.pop_front()?;
        queue.bytes = queue.bytes.saturating_sub(delivery.message.weight());
        Some(delivery)
    }

    /// Waits until something may have been queued since the last wait.
    pub(crate) async fn ready(&self) {
        self.notify.notified().await;
    }

    /// How many messages were dropped because the mailbox was full.
    pub(crate) fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

/// What one subscription asked for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct SubOptions {
    /// The most mqtt5_protocol::QoS it is sent with.
    pub(crate) qos: mqtt5_protocol::QoS,
    /// Not sent the messages its own client publishes.
    pub(crate) no_local: bool,
    /// Keeps the RETAIN flag of what it is sent.
    pub(crate) retain_as_published: bool,
    /// Its subscription identifier.
    pub(crate) id: Option<u32>,
}

/// Where a record subscription stands in its feed.
#[derive(Debug, Clone, Default)]
pub(crate) struct RecordCursor {
    /// The session-unique number its deliveries carry.
    pub(crate) id: u64,
    /// The feed it follows (`<database>/<table>`).
    pub(crate) feed: String,
    /// The last change sent (a reconnect within this process resumes after it;
    /// what was sent and not acknowledged is sent again from `inflight`).
    pub(crate) sent: Option<Position>,
    /// The last change acknowledged with every change before it (what a session
    /// restored after a restart resumes after).
    pub(crate) acked: Option<Position>,
    /// Changes sent and not yet acknowledged, in order, each with whether it is.
    pending: VecDeque<(Position, bool)>,
}

impl RecordCursor {
    /// A cursor numbered `id` that has sent nothing.
    pub(crate) fn new(id: u64) -> RecordCursor {
        RecordCursor { id, ..RecordCursor::default() }
    }

    /// Notes `position` as sent, acknowledged at once when `done` (QoS 0).
    pub(crate) fn sent(&mut self, position: Position, done: bool) {
        self.sent = Some(position);
        self.pending.push_back((position, done));
        self.advance();
    }

    /// Notes `position` as acknowledged.
    pub(crate) fn acked(&mut self, position: Position) {
        if let Some(entry) = self.pending.iter_mut().find(|(p, _)| *p == position) {
            entry.1 = true;
        }
        self.advance();
    }

    fn advance(&mut self) {
        while let Some(&(position, true)) = self.pending.front() {
            self.acked = Some(position);
            self.pending.pop_front();
        }
    }
}

/// One subscription of a session.
#[derive(Debug, Clone)]
pub(crate) struct SessionSub {
    /// Its filter.
    pub(crate) filter: Filter,
    /// What it asked for.
    pub(crate) options: SubOptions,
    /// Its place in each change feed it follows (one per database whose records
    /// its filter can match).
    pub(crate) records: Vec<RecordCursor>,
}

/// A message sent with QoS 1 or 2 and not yet acknowledged.
#[derive(Debug, Clone)]
pub(crate) enum Inflight {
    /// PUBLISH sent; waiting for PUBACK (QoS 1) or PUBREC (QoS 2).
    Published(Delivery),
    /// PUBREL sent; waiting for PUBCOMP.
    Released(Delivery),
}

/// The messages a session has in flight, by packet id, remembering the order
/// they were sent in (to send them again in it). Acknowledgements come in any
/// order and cost the same wherever the message stands.
#[derive(Default)]
pub(crate) struct Unacknowledged {
    by_id: HashMap<u16, (u64, Inflight)>,
    next: u64,
}

impl Unacknowledged {
    /// The message in flight with packet id `id`.
    pub(crate) fn get(&self, id: u16) -> Option<&Inflight> {
        self.by_id.get(&id).map(|(_, inflight)| inflight)
    }

    /// Whether packet id `id` is in use.
    pub(crate) fn contains(&self, id: u16) -> bool {
        self.by_id.contains_key(&id)
    }

    /// Puts `inflight` under `id` (keeping its place when the id is there: a
    /// QoS 2 message moving on to PUBREL).
    pub(crate) fn insert(&mut self, id: u16, inflight: Inflight) {
        let next = &mut self.next;
        let entry = self.by_id.entry(id).or_insert_with(|| {
            *next += 1;
            (*next, inflight.clone())
        });
        entry.1 = inflight;
    }

    /// Takes `id` out.
    pub(crate) fn remove(&mut self, id: u16) -> Option<Inflight> {
        self.by_id.remove(&id).map(|(_, inflight)| inflight)
    }

    /// How many are in flight.
    pub(crate) fn len(&self) -> usize {
        self.by_id.len()
    }

    /// Every one, in the order sent.
    pub(crate) fn in_order(&self) -> Vec<(u16, Inflight)> {
        let mut all: Vec<(u64, u16, Inflight)> =
            self.by_id.iter().map(|(id, (seq, inflight))| (*seq, *id, inflight.clone())).collect();
        all.sort_by_key(|(seq, _, _)| *seq);
        all.into_iter().map(|(_, id, inflight)| (id, inflight)).collect()
    }
}

/// The state of one client id's session.
pub(crate) struct Session {
    /// The client id.
    pub(crate) client_id: Arc<str>,
    /// The user whose session it is.
    pub(crate) owner: String,
    /// Its queued messages.
    pub(crate) mailbox: Arc<Mailbox>,
    /// Its subscriptions, by the filter as subscribed (`$share/…` included).
    pub(crate) subscriptions: BTreeMap<String, SessionSub>,
    /// Messages sent with QoS > 0 and not yet acknowledged, in the order sent.
    pub(crate) inflight: Unacknowledged,
    /// QoS 2 packet ids received and not yet released (the message is not
    /// delivered again when its PUBLISH is resent).
    pub(crate) incoming_qos2: HashSet<u16>,
    /// The session expiry interval in seconds (`u32::MAX`: never).
    pub(crate) expiry: u32,
    next_packet_id: u16,
    next_record_id: u64,
}

impl Session {
    /// A new, empty session.
    pub(crate) fn new(client_id: Arc<str>, owner: &str, mailbox_limit: MailboxLimit) -> Session {
        Session {
            client_id,
            owner: owner.to_string(),
            mailbox: Mailbox::new(mailbox_limit),
            subscriptions: BTreeMap::new(),
            inflight: Unacknowledged::default(),
            incoming_qos2: HashSet::new(),
            expiry: 0,
            next_packet_id: 1,
            next_record_id: 1,
        }
    }

    /// A free packet id for a message sent with QoS > 0, `None` when all 65,535
    /// are in flight.
    pub(crate) fn packet_id(&mut self) -> Option<u16> {
        for _ in 0..u16::MAX {
            let id = self.next_packet_id;
            self.next_packet_id = if id == u16::MAX { 1 } else { id + 1 };
            if !self.inflight.contains(id) {
                return Some(id);
            }
        }
        None
    }

    /// A new record cursor's number.
    pub(crate) fn record_id(&mut self) -> u64 {
        let id = self.next_record_id;
        self.next_record_id += 1;
        id
    }

    /// The record cursor numbered `id`.
    pub(crate) fn cursor(&mut self, id: u64) -> Option<&mut RecordCursor> {
        self.subscriptions.values_mut().flat_map(|s| s.records.iter_mut()).find(|c| c.id == id)
    }

    /// What is kept of it across a restart.
    pub(crate) fn stored(&self) -> StoredSession {
        StoredSession {
            owner: self.owner.clone(),
            expiry: self.expiry,
            subscriptions: self
                .subscriptions
                .iter()
                .map(|(text, sub)| StoredSub {
                    filter: text.clone(),
                    qos: sub.options.qos as u8,
                    no_local: sub.options.no_local,
                    retain_as_published: sub.options.retain_as_published,
                    id: sub.options.id,
                    acked: sub
                        .records
                        .iter()
                        .filter_map(|c| c.acked.map(|p| (c.feed.clone(), p.seq, p.index)))
                        .collect(),
                })
                .collect(),
        }
    }

    /// A session restored from what [`Session::stored`] kept.
    pub(crate) fn restore(client_id: Arc<str>, stored: &StoredSession, mailbox_limit: MailboxLimit) -> Session {
        let mut session = Session::new(client_id, &stored.owner, mailbox_limit);
        session.expiry = stored.expiry;
        for sub in &stored.subscriptions {
            let Ok(filter) = Filter::parse(&sub.filter) else { continue };
            let options = SubOptions {
                qos: sub.qos.into(),
                no_local: sub.no_local,
                retain_as_published: sub.retain_as_published,
                id: sub.id,
            };
            let records = sub
                .acked
                .iter()
                .map(|(feed, seq, index)| {
                    let position = Position { seq: *seq, index: *index };
                    RecordCursor {
                        id: session.record_id(),
                        feed: feed.clone(),
                        sent: Some(position),
                        acked: Some(position),
                        pending: VecDeque::new(),
                    }
                })
                .collect();
            session.subscriptions.insert(sub.filter.clone(), SessionSub { filter, options, records });
        }
        session
    }
}

/// A durable session as stored in `system.hdb_mqtt_session`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(crate) struct StoredSession {
    /// The user whose session it is.
    pub(crate) owner: String,
    /// Session expiry interval, seconds.
    pub(crate) expiry: u32,
    /// Its subscriptions.
    pub(crate) subscriptions: Vec<StoredSub>,
}

/// One subscription of a stored session.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(crate) struct StoredSub {
    /// The filter as subscribed.
    pub(crate) filter: String,
    /// Its QoS.
    pub(crate) qos: u8,
    /// No local.
    pub(crate) no_local: bool,
    /// Retain as published.
    pub(crate) retain_as_published: bool,
    /// Its subscription identifier.
    pub(crate) id: Option<u32>,
    /// For a record subscription, the position acknowledged through in each feed
    /// it follows.
    pub(crate) acked: Vec<(String, u64, u32)>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_is_acknowledged_only_through_an_unbroken_run() {
        let p = |seq| Position { seq, index: 0 };
        let mut cursor = RecordCursor::default();
        cursor.sent(p(1), false);
        cursor.sent(p(2), false);
        cursor.sent(p(3), true);
        cursor.acked(p(2));
        assert_eq!(cursor.acked, None, "1 is still out");
        cursor.acked(p(1));
        assert_eq!(cursor.acked, Some(p(3)));
        assert_eq!(cursor.sent, Some(p(3)));
    }

    #[test]
    fn packet_ids_skip_those_in_flight_and_wrap() {
        let mut session = Session::new("c".into(), "u", MailboxLimit { messages: 10, bytes: 1 << 20 });
        session.next_packet_id = u16::MAX;
        assert_eq!(session.packet_id(), Some(u16::MAX));
        session.inflight.insert(1, Inflight::Released(test_delivery()));
        assert_eq!(session.packet_id(), Some(2), "0 is never used and 1 is taken");
    }

    #[test]
    fn in_flight_keeps_the_order_sent_whatever_is_acknowledged() {
        let mut inflight = Unacknowledged::default();
        for id in [7, 3, 9] {
            inflight.insert(id, Inflight::Published(test_delivery()));
        }
        assert!(inflight.remove(3).is_some());
        // Moving on to PUBREL keeps its place.
        inflight.insert(7, Inflight::Released(test_delivery()));
        inflight.insert(1, Inflight::Published(test_delivery()));
        let order: Vec<u16> = inflight.in_order().into_iter().map(|(id, _)| id).collect();
        assert_eq!(order, vec![7, 9, 1]);
        assert!(matches!(inflight.get(7), Some(Inflight::Released(_))));
        assert_eq!(inflight.len(), 3);
    }

    fn test_delivery() -> Delivery {
        use super::super::message::{Message, Origin};
        Delivery {
            message: Arc::new(Message {
                topic: "t".into(),
                payload: bytes::Bytes::new(),
                qos: mqtt5_protocol::QoS::AtLeastOnce,
                retain: false,
                properties: Default::default(),
                expires_at: None,
                publisher: None,
            }),
            qos: mqtt5_protocol::QoS::AtLeastOnce,
            retain: false,
            subscription_ids: vec![],
            origin: Origin::Plain,
        }
    }
}
