//! What the broker moves: a published message (plain topic or record event), and
//! a delivery of one to one session (the granted QoS, the retain flag as the
//! subscription sees it, the subscription identifiers).

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use lyre_core::services::Position;
use mqtt5_protocol::{Properties, QoS};

/// A message as published, shared by every session it goes to.
#[derive(Debug)]
pub(crate) struct Message {
    /// The topic it was published to.
    pub(crate) topic: Arc<str>,
    /// Its bytes.
    pub(crate) payload: Bytes,
    /// The QoS it was published with.
    pub(crate) qos: QoS,
    /// Its RETAIN flag as published.
    pub(crate) retain: bool,
    /// The MQTT 5 properties passed on to subscribers (payload format, content
    /// type, response topic, correlation data, user properties); the expiry is
    /// kept in `expires_at`.
    pub(crate) properties: Properties,
    /// When it expires (the message expiry interval), if ever.
    pub(crate) expires_at: Option<Instant>,
    /// The client that published it (for no-local subscriptions); `None` for a
    /// change written some other way.
    pub(crate) publisher: Option<Arc<str>>,
}

impl Message {
    /// Whether its expiry interval has passed.
    pub(crate) fn expired(&self, now: Instant) -> bool {
        self.expires_at.is_some_and(|at| at <= now)
    }

    /// About the bytes it takes (for the bounds on queues).
    pub(crate) fn weight(&self) -> usize {
        96 + self.topic.len() + self.payload.len()
    }
}

/// Where a delivery came from: the broker's own routing, or a record
/// subscription's change feed (whose position a durable session keeps).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Origin {
    /// A plain topic (or a will, or a retained message).
    Plain,
    /// A change to a record, at this position of its database's feed, for the
    /// record subscription numbered `subscription`.
    Record {
        /// The session's record subscription.
        subscription: u64,
        /// The change's place in the feed.
        position: Position,
    },
}

/// One message on its way to one session.
#[derive(Debug, Clone)]
pub(crate) struct Delivery {
    /// The message.
    pub(crate) message: Arc<Message>,
    /// The QoS it is sent with: the lower of the message's and the subscription's.
    pub(crate) qos: QoS,
    /// The RETAIN flag sent: set for a retained message sent because of a new
    /// subscription; else the published flag where the subscription keeps it
    /// (retain as published), else clear.
    pub(crate) retain: bool,
    /// The identifiers of the subscriptions it matched.
    pub(crate) subscription_ids: Vec<u32>,
    /// Where it came from.
    pub(crate) origin: Origin,
}

/// The lower of two QoS levels.
pub(crate) fn min_qos(a: QoS, b: QoS) -> QoS {
    if (a as u8) <= (b as u8) { a } else { b }
}
