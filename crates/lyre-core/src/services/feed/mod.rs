//! The change feed: every committed change to a record, in commit order, delivered
//! to each subscriber that covers it (WebSocket, SSE and MQTT subscriptions are
//! built on it).
//!
//! * `hub.rs`: one per database with subscribers; reads each committed log entry
//!   once and queues its changes to the subscribers it concerns, each queue bounded.
//! * `subscription.rs`: one subscriber's side: the current state first, then the
//!   queued changes; after its queue overflowed, the log read by position until it
//!   has caught up (so memory per subscriber stays bounded however far it falls
//!   behind); history from a time or the last few changes, from the log.
//! * `event.rs`: what a subscriber receives.
//!
//! The hub is not a durable consumer: a subscription lives as long as its client.
//! A durable subscriber (an MQTT session) keeps the position of the last event it
//! acknowledged and subscribes again from there.

mod event;
mod hub;
mod subscription;

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;

pub use event::{Event, EventKind, EventValue, Position};
pub use subscription::Subscription;

use crate::access::{Action, Context, check_table};
use crate::db::Db;
use crate::db::log::Change;
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::record::validate::encode_primary_key;
use crate::services::Tasks;
use crate::table::KeyScope;
use crate::value::Value;
use hub::{Hub, IndexKey};

/// Bounds on what the feed holds per subscriber, and how far behind one may stay.
#[derive(Debug, Clone, Copy)]
pub struct FeedOptions {
    /// Most events queued for one subscriber before it reads the log instead.
    pub queue_events: usize,
    /// About the most bytes of events queued for one subscriber.
    pub queue_bytes: usize,
    /// How long a subscriber may go on reading the log without catching up with
    /// the live feed before it is disconnected (a replay from a time counts).
    pub max_behind: Duration,
    /// Most log entries read in one step (by the hub, or by a subscriber behind).
    pub read_entries: usize,
    /// About the most bytes of log read in one step.
    pub read_bytes: usize,
    /// Most current records read in one step when a subscription starts.
    pub page_records: usize,
}

impl Default for FeedOptions {
    fn default() -> Self {
        FeedOptions {
            queue_events: 1_024,
            queue_bytes: 1 << 20,
            max_behind: Duration::from_secs(300),
            read_entries: 256,
            read_bytes: 512 << 10,
            page_records: 256,
        }
    }
}

/// Why a subscription's feed ended: said to the client when it is disconnected.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FeedEnd {
    /// The server is stopping.
    #[error("the server is shutting down")]
    ShuttingDown,
    /// The database was dropped, or is being restored.
    #[error("database '{database}' was dropped or is being restored")]
    DatabaseGone {
        /// The database.
        database: String,
    },
    /// The table was dropped.
    #[error("table '{table}' was dropped")]
    TableDropped {
        /// The table.
        table: String,
    },
    /// The subscriber read too slowly: it stayed behind the live feed too long.
    #[error(
        "the subscriber fell behind the change feed for more than {limit_s} s (it was at log entry {at}); subscribe again to resume"
    )]
    TooSlow {
        /// The configured limit, in seconds.
        limit_s: u64,
        /// The log entry it had reached.
        at: u64,
    },
    /// The log no longer holds changes the subscriber has not received (retention
    /// or `delete_audit_logs_before` pruned them).
    #[error(
        "the log no longer holds entry {needed}, the first the subscriber needs (it begins at entry {head}); subscribe again"
    )]
    HistoryGone {
        /// The first entry the subscriber needs.
        needed: u64,
        /// The oldest entry the log holds.
        head: u64,
    },
    /// The subscriber may no longer read what it subscribed to: its user was
    /// dropped or deactivated, or its role lost the permission.
    #[error("{0}")]
    AccessRevoked(String),
    /// Reading the log failed.
    #[error("the change feed failed: {0}")]
    Failed(String),
}

/// Where a subscription starts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Start {
    /// With what commits from now on (after the current state, unless omitted).
    Now,
    /// With every change made at or after this time (ms since the epoch), from the
    /// log (Harper's `startTime`).
    Since(f64),
    /// With the last this many changes it covers, from the log (Harper's
    /// `previousCount`).
    Previous(usize),
    /// With the changes after this position, from the log: a client resuming
    /// where it left off (SSE's `Last-Event-ID`).
    After(Position),
}

/// A filter beyond the key scope, called for each change of a covered table with
/// the table's name and the record's primary key (MQTT's wildcard topics).
pub type Matcher = Arc<dyn Fn(&str, &Value) -> bool + Send + Sync>;

/// What to subscribe to.
#[derive(Clone)]
pub struct SubscribeRequest {
    /// The database.
    pub database: String,
    /// The table; `None` for every table of the database (which needs a super
    /// user, or read access to a table for each of its events to be delivered).
    pub table: Option<String>,
    /// Which of the table's records.
    pub scope: KeyScope,
    /// A further filter, if any.
    pub matcher: Option<Matcher>,
    /// Where to start.
    pub start: Start,
    /// Whether to leave out the current state a subscription starting now sends
    /// first (Harper's `omitCurrent`).
    pub omit_current: bool,
}

impl std::fmt::Debug for SubscribeRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SubscribeRequest")
            .field("database", &self.database)
            .field("table", &self.table)
            .field("scope", &self.scope)
            .field("matcher", &self.matcher.is_some())
            .field("start", &self.start)
            .field("omit_current", &self.omit_current)
            .finish()
    }
}

/// What a registered subscriber covers, as the hub matches it.
pub(crate) struct Target {
    table: Option<Arc<str>>,
    /// The incarnation of the table when it was subscribed to: changes to an
    /// earlier table of the name (in history) are not its own.
    incarnation: u64,
    scope: KeyScope,
    /// The encoded key of a one-record scope.
    record_key: Option<Vec<u8>>,
    matcher: Option<Matcher>,
}

impl Target {
    fn new(request: &SubscribeRequest, incarnation: u64) -> Result<Self> {
        let record_key = match &request.scope {
            KeyScope::Record(id) => Some(encode_primary_key(id)?),
            _ => None,
        };
        Ok(Target {
            table: request.table.as_deref().map(Arc::from),
            incarnation,
            scope: request.scope.clone(),
            record_key,
            matcher: request.matcher.clone(),
        })
    }

    /// How the hub's index finds it.
    fn index_key(&self) -> IndexKey {
        match (&self.scope, &self.record_key) {
            (KeyScope::Record(_), Some(key)) => IndexKey::Key(key.clone()),
            (KeyScope::Prefix(prefix), _) if prefix.ends_with('/') => IndexKey::Prefix(prefix.clone()),
            _ => IndexKey::Whole,
        }
    }

    /// Whether `change` is to its table (the same incarnation), before looking at
    /// the record.
    fn owns(&self, change: &Change) -> bool {
        match &self.table {
            None => true,
            Some(table) => {
                **table == *change.table && (change.incarnation == 0 || change.incarnation == self.incarnation)
            }
        }
    }

    /// Whether a record change with encoded key `key` may be covered (a one-record
    /// scope is settled by the key alone, before anything is decoded).
    fn may_cover(&self, change: &Change) -> bool {
        self.owns(change) && self.record_key.as_ref().is_none_or(|key| *key == change.key)
    }

    /// Whether the change to record `id` (encoded `key`) of `table` is covered.
    fn wants(&self, table: &str, id: &Value, key: &[u8]) -> bool {
        if self.table.as_deref().is_some_and(|wanted| wanted != table) {
            return false;
        }
        let in_scope = match (&self.scope, &self.record_key) {
            (KeyScope::Record(_), Some(wanted)) => wanted.as_slice() == key,
            (scope, _) => scope.covers(id, key),
        };
        in_scope && self.matcher.as_ref().is_none_or(|matcher| matcher(table, id))
    }
}

/// The change feed of every database: its hubs, started on first use.
pub struct Feed {
    engine: Weak<Engine>,
    tasks: Arc<Tasks>,
    hubs: Mutex<HashMap<String, Arc<Hub>>>,
    options: FeedOptions,
}

impl Feed {
    pub(super) fn new(engine: Weak<Engine>, tasks: Arc<Tasks>, options: FeedOptions) -> Self {
        Feed { engine, tasks, hubs: Mutex::new(HashMap::new()), options }
    }

    /// Subscribes `ctx`'s user to `request`: fails at once for an unknown database
    /// or table, or a role that may not read the table.
    pub async fn subscribe(&self, ctx: &Context, request: SubscribeRequest) -> Result<Subscription> {
        let engine = self.engine.upgrade().ok_or_else(|| Error::Stopped("the server is shutting down".into()))?;
        let db = engine.database(&request.database)?;
        let (access, incarnation) = match &request.table {
            Some(table) => {
                let primary_key = db.table(table)?.schema().primary_key.clone();
                let access = check_table(ctx, &request.database, table, &[Action::Read])?;
                (Some((access, primary_key)), db.table_incarnation(table)?)
            }
            None => (None, 0),
        };
        let target = Arc::new(Target::new(&request, incarnation)?);
        // Fails when the hub ended between finding and joining it (its database closed).
        let registration = self.hub(&db)?.register(target.clone()).map_err(|end| Error::Conflict(end.to_string()))?;
        Subscription::start(
            subscription::Setup { engine: self.engine.clone(), db, registration, target, access, ctx: ctx.clone() },
            &request,
            self.options,
        )
        .await
    }

    /// The running hub of `db` (this open database, not an earlier one of the
    /// name), started when there is none or the last one ended.
    fn hub(&self, db: &Arc<Db>) -> Result<Arc<Hub>> {
        let mut hubs = self.hubs.lock();
        if let Some(hub) = hubs.get(db.name())
            && hub.serves(db)
        {
            return Ok(hub.clone());
        }
        if *self.tasks.stopping().borrow() {
            return Err(Error::Stopped("the server is shutting down".into()));
        }
        let hub = Arc::new(Hub::new(db, db.log_tail()?.seq, self.options));
        hubs.insert(db.name().to_string(), hub.clone());
        self.tasks.spawn(hub::run(hub.clone(), Arc::downgrade(db), self.tasks.stopping()));
        Ok(hub)
    }
}
