//! One database's hub: reads each committed log entry once, after its commit, and
//! hands every record change to the subscribers it concerns, found through an
//! index by table, primary key and key prefix (a change costs the same whatever
//! the number of subscribers on other records).
//!
//! Each subscriber has a [`Slot`]: a queue bounded by events and bytes. When a
//! change would overflow it, the hub stops queuing for that subscriber and notes
//! where it stopped; the subscriber reads on from the log by position (see
//! `subscription.rs`) and then rejoins. So the hub never waits for a subscriber, and
//! a slow one costs memory for its queue only, however far behind it falls.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Weak};

use indexmap::IndexSet;
use parking_lot::Mutex;
use tokio::sync::{Notify, watch};

use crate::access::Context;
use crate::db::Db;
use crate::db::log::{ChangeKind, Cursor, LogEntry};
use crate::services::feed::event::{Event, Position};
use crate::services::feed::{FeedEnd, FeedOptions, Target};
use crate::task::blocking;

/// A subscriber's queue, shared by the hub (which fills it) and the subscription
/// (which drains it).
#[derive(Default)]
pub(super) struct Slot {
    pub(super) state: Mutex<SlotState>,
    /// Woken whenever the state changes.
    pub(super) wake: Notify,
}

/// What a slot holds.
#[derive(Default)]
pub(super) struct SlotState {
    /// Events queued for the subscriber, in order.
    pub(super) queue: VecDeque<Arc<Event>>,
    /// Their sizes' sum ([`Event::size`]).
    pub(super) bytes: usize,
    /// The first event not queued because the queue was full: the subscriber reads
    /// the log from there. Nothing is queued while it is set.
    pub(super) missed_from: Option<Position>,
    /// Why the feed ended for this subscriber, once it has.
    pub(super) ended: Option<FeedEnd>,
}

impl Slot {
    /// Queues `event` unless the queue is full (then notes where the subscriber must
    /// read the log from) or the subscriber already missed one.
    fn offer(&self, event: &Arc<Event>, options: &FeedOptions) {
        let mut state = self.state.lock();
        if state.ended.is_some() || state.missed_from.is_some() {
            return;
        }
        let full = state.queue.len() >= options.queue_events
            || (state.bytes + event.size() > options.queue_bytes && !state.queue.is_empty());
        if full {
            state.missed_from = Some(event.position);
        } else {
            state.bytes += event.size();
            state.queue.push_back(event.clone());
        }
        drop(state);
        self.wake.notify_one();
    }

    /// Whether events are queued to it now (it has not overflowed or ended).
    fn takes_events(&self) -> bool {
        let state = self.state.lock();
        state.ended.is_none() && state.missed_from.is_none()
    }

    /// Ends the feed for this subscriber with `reason` (the first reason stays).
    pub(super) fn end(&self, reason: FeedEnd) {
        self.state.lock().ended.get_or_insert(reason);
        self.wake.notify_one();
    }
}

/// Subscribers of one table, indexed by what they cover.
#[derive(Default)]
struct TableIndex {
    /// Whole-table subscribers, and those whose scope the index cannot narrow.
    whole: IndexSet<u64>,
    /// Subscribers of one record, by encoded primary key.
    keys: HashMap<Vec<u8>, IndexSet<u64>>,
    /// Subscribers of the keys starting with a prefix ending in `/`, by prefix.
    prefixes: HashMap<String, IndexSet<u64>>,
}

impl TableIndex {
    fn is_empty(&self) -> bool {
        self.whole.is_empty() && self.keys.is_empty() && self.prefixes.is_empty()
    }
}

/// A registered subscriber.
struct Registered {
    slot: Arc<Slot>,
    target: Arc<Target>,
}

/// The hub's state, behind one lock: registering and dispatching an entry are
/// atomic with respect to each other.
#[derive(Default)]
struct HubState {
    /// The last log entry dispatched: a subscriber registered now is queued
    /// everything after it.
    dispatched: u64,
    /// Set once the hub has stopped: it takes no more subscribers.
    ended: Option<FeedEnd>,
    next_id: u64,
    subscribers: HashMap<u64, Registered>,
    tables: HashMap<String, TableIndex>,
    /// Subscribers across every table.
    any_table: IndexSet<u64>,
}

/// One database's hub.
pub(super) struct Hub {
    /// The open database it reads (a database dropped and created again under the
    /// name is another, with a hub of its own).
    db: Weak<Db>,
    state: Mutex<HubState>,
    options: FeedOptions,
}

/// A subscriber's place in a hub; dropping it unregisters the subscriber.
pub(super) struct Registration {
    pub(super) hub: Arc<Hub>,
    pub(super) id: u64,
    pub(super) slot: Arc<Slot>,
    /// Every entry after this one is queued to the slot; those up to it are read
    /// from the log.
    pub(super) dispatched: u64,
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.hub.unregister(self.id);
    }
}

impl Hub {
    /// A hub for `db` whose dispatching starts after log entry `tail`.
    pub(super) fn new(db: &Arc<Db>, tail: u64, options: FeedOptions) -> Self {
        Hub { db: Arc::downgrade(db), state: Mutex::new(HubState { dispatched: tail, ..HubState::default() }), options }
    }

    /// Whether the hub is running for `db` (the same open database).
    pub(super) fn serves(&self, db: &Arc<Db>) -> bool {
        std::ptr::eq(self.db.as_ptr(), Arc::as_ptr(db)) && self.state.lock().ended.is_none()
    }

    /// Registers a subscriber of `target`.
    pub(super) fn register(self: &Arc<Self>, target: Arc<Target>) -> Result<Registration, FeedEnd> {
        let mut state = self.state.lock();
        if let Some(ended) = &state.ended {
            return Err(ended.clone());
        }
        state.next_id += 1;
        let id = state.next_id;
        match &target.table {
            None => {
                state.any_table.insert(id);
            }
            Some(table) => {
                let index = state.tables.entry(table.to_string()).or_default();
                match target.index_key() {
                    IndexKey::Whole => index.whole.insert(id),
                    IndexKey::Key(key) => index.keys.entry(key).or_default().insert(id),
                    IndexKey::Prefix(prefix) => index.prefixes.entry(prefix).or_default().insert(id),
                };
            }
        }
        let slot = Arc::new(Slot::default());
        state.subscribers.insert(id, Registered { slot: slot.clone(), target });
        Ok(Registration { hub: self.clone(), id, slot, dispatched: state.dispatched })
    }

    /// Lets subscriber `id`, whose queue overflowed and who has read it empty,
    /// rejoin: it is queued every entry after the returned one again.
    pub(super) fn rejoin(&self, id: u64) -> Result<u64, FeedEnd> {
        let state = self.state.lock();
        if let Some(ended) = &state.ended {
            return Err(ended.clone());
        }
        if let Some(registered) = state.subscribers.get(&id) {
            registered.slot.state.lock().missed_from = None;
        }
        Ok(state.dispatched)
    }

    /// Removes subscriber `id`.
    fn unregister(&self, id: u64) {
        let mut state = self.state.lock();
        let Some(registered) = state.subscribers.remove(&id) else { return };
        let target = registered.target;
        let Some(table) = &target.table else {
            state.any_table.swap_remove(&id);
            return;
        };
        let Some(index) = state.tables.get_mut(&**table) else { return };
        match target.index_key() {
            IndexKey::Whole => {
                index.whole.swap_remove(&id);
            }
            IndexKey::Key(key) => remove_from(&mut index.keys, &key, id),
            IndexKey::Prefix(prefix) => remove_from(&mut index.prefixes, &prefix, id),
        }
        if index.is_empty() {
            state.tables.remove(&**table);
        }
    }

    /// Hands `entry`'s record changes to the subscribers they concern, and ends the
    /// subscriptions to a table the entry drops. A change is decoded only when a
    /// subscriber still taking events covers it.
    fn dispatch(&self, entry: &LogEntry) {
        let mut state = self.state.lock();
        let state = &mut *state;
        for (index, change) in entry.changes.iter().enumerate() {
            if change.kind == ChangeKind::Released {
                end_table(state, change);
                continue;
            }
            if !matches!(change.kind, ChangeKind::Put | ChangeKind::Delete | ChangeKind::Message) {
                continue;
            }
            let mut ids: Vec<u64> = state.any_table.iter().copied().collect();
            if let Some(table) = state.tables.get(&change.table) {
                ids.extend(table.whole.iter().copied());
                ids.extend(table.keys.get(&change.key).into_iter().flatten().copied());
                if !table.prefixes.is_empty() {
                    append_prefix_subscribers(table, &change.key, &mut ids);
                }
            }
            ids.retain(|id| {
                state.subscribers.get(id).is_some_and(|r| r.target.may_cover(change) && r.slot.takes_events())
            });
            if ids.is_empty() {
                continue;
            }
            let event = match Event::of_change(entry, index, change, Arc::from(change.table.as_str())) {
                Ok(Some(event)) => Arc::new(event),
                Ok(None) => continue,
                Err(err) => {
                    tracing::error!(seq = entry.seq, table = %change.table, error = %err, "a logged change could not be read for its subscribers; it is not delivered");
                    continue;
                }
            };
            for id in ids {
                if let Some(registered) = state.subscribers.get(&id)
                    && registered.target.wants(&event.table, &event.id, &event.key)
                {
                    registered.slot.offer(&event, &self.options);
                }
            }
        }
        state.dispatched = entry.seq;
    }

    /// Stops the hub: every subscriber's feed ends with `reason`, and no one may
    /// register any more.
    fn end(&self, reason: FeedEnd) {
        let mut state = self.state.lock();
        for registered in state.subscribers.values() {
            registered.slot.end(reason.clone());
        }
        state.ended = Some(reason);
    }
}

/// What a subscriber is found by in a table's index.
pub(super) enum IndexKey {
    Whole,
    Key(Vec<u8>),
    Prefix(String),
}

fn remove_from<K: std::hash::Hash + Eq>(map: &mut HashMap<K, IndexSet<u64>>, key: &K, id: u64) {
    if let Some(set) = map.get_mut(key) {
        set.swap_remove(&id);
        if set.is_empty() {
            map.remove(key);
        }
    }
}

/// Adds the subscribers of every `/`-ended prefix of a string key.
fn append_prefix_subscribers(table: &TableIndex, key: &[u8], ids: &mut Vec<u64>) {
    let Ok((lyre_store::OwnedKey::Str { text: id, .. }, _)) = lyre_store::decode_key(key) else { return };
    for (at, _) in id.match_indices('/') {
        if let Some(set) = table.prefixes.get(&id[..=at]) {
            ids.extend(set.iter().copied());
        }
    }
}

/// Ends the subscriptions to the table `released` releases (it was dropped).
fn end_table(state: &mut HubState, released: &crate::db::log::Change) {
    let Some(index) = state.tables.get(&released.table) else { return };
    let ids = index.whole.iter().chain(index.keys.values().flatten()).chain(index.prefixes.values().flatten());
    for id in ids {
        if let Some(registered) = state.subscribers.get(id)
            && registered.target.owns(released)
        {
            registered.slot.end(FeedEnd::TableDropped { table: released.table.clone() });
        }
    }
}

/// Runs `hub` for database `db` until the services stop or the database closes
/// (dropped or restored); then ends every subscription with the reason. Waits on
/// the committed sequence, never polls; reads nothing while no one subscribes.
pub(super) async fn run(hub: Arc<Hub>, db: Weak<Db>, mut stop: watch::Receiver<bool>) {
    let reason = dispatch_until_ended(&hub, &db, &mut stop).await;
    hub.end(reason);
}

async fn dispatch_until_ended(hub: &Arc<Hub>, db: &Weak<Db>, stop: &mut watch::Receiver<bool>) -> FeedEnd {
    let Some((mut committed, mut closing, name)) =
        db.upgrade().map(|db| (db.committed(), db.closing_signal(), db.name().to_string()))
    else {
        return FeedEnd::DatabaseGone { database: String::new() };
    };
    let gone = || FeedEnd::DatabaseGone { database: name.clone() };
    let ctx = Context::system();
    loop {
        if *stop.borrow() {
            return FeedEnd::ShuttingDown;
        }
        if *closing.borrow() {
            return gone();
        }
        let last = *committed.borrow_and_update();
        loop {
            let from = {
                let mut state = hub.state.lock();
                if state.subscribers.is_empty() {
                    state.dispatched = state.dispatched.max(last); // no one to read for
                }
                state.dispatched
            };
            if from >= last {
                break;
            }
            let Some(reader) = db.upgrade() else { return gone() };
            let (reading, options, dispatching) = (ctx.clone(), hub.options, hub.clone());
            // Read and dispatched off the async workers: decoding a bulk entry
            // holds the hub's lock, which unsubscribing (on any worker) also takes.
            let step = blocking(move || {
                let batch = reader.read_log(&reading, Cursor::after(from), options.read_entries, options.read_bytes)?;
                if batch.entries.is_empty() {
                    dispatching.state.lock().dispatched = last; // what was between was pruned
                }
                batch.entries.iter().for_each(|entry| dispatching.dispatch(entry));
                Ok(())
            })
            .await;
            if let Err(err) = step {
                return FeedEnd::Failed(err.to_string());
            }
        }
        tokio::select! {
            changed = committed.changed() => if changed.is_err() { return gone() },
            _ = closing.changed() => {}
            _ = stop.changed() => {}
        }
    }
}
