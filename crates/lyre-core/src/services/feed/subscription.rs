//! One subscriber's side of the change feed.
//!
//! A subscription moves through three phases:
//! * **current**: the records it covers as of a snapshot, a page at a time, when
//!   it starts now (unless the current state is omitted); changes up to the
//!   snapshot's log position are then skipped, since the snapshot shows them.
//! * **behind**: the log read by position, in bounded steps, up to the entry the
//!   hub had dispatched when the subscription (re)joined it: for history from a
//!   time or the last few changes, and after its queue overflowed.
//! * **live**: the events the hub queued for it.
//!
//! Memory is one page or one log step plus the bounded queue, whatever the lag. A
//! subscription that stays behind longer than the configured limit ends with
//! [`FeedEnd::TooSlow`]. It holds no database while live, so it never holds up a
//! drop or restore; those end it with [`FeedEnd::DatabaseGone`].

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Weak};
use std::time::Instant;

use crate::access::{Action, Context, TableAccess, check_table};
use crate::db::log::{ChangeKind, Cursor};
use crate::db::{Db, Lease};
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::query::SharedSnapshot;
use crate::services::feed::event::{Event, Position};
use crate::services::feed::hub::{Hub, Registration, Slot};
use crate::services::feed::{FeedEnd, FeedOptions, Start, SubscribeRequest, Target};
use crate::table::Table;
use crate::task::blocking;

/// What [`Subscription::start`] is given by the feed.
pub(super) struct Setup {
    pub(super) engine: Weak<Engine>,
    pub(super) db: Arc<Db>,
    pub(super) hub: Arc<Hub>,
    pub(super) registration: Registration,
    pub(super) target: Arc<Target>,
    /// The subscriber's access to the one table it names.
    pub(super) access: Option<TableAccess>,
    pub(super) ctx: Context,
}

/// Where a subscription is (see the module docs).
enum Phase {
    /// Sending the current records of `table` from `snapshot`, after key `after`.
    Current { table: Table, snapshot: SharedSnapshot, after: Option<Vec<u8>>, _lease: Lease },
    /// Reading the log from `from` through entry `through`, leaving out changes
    /// made before `since` (ms).
    Behind { from: Position, through: u64, since: Option<f64> },
    /// Taking the events the hub queues.
    Live,
}

/// One subscriber's feed: call [`Subscription::next`] for each event. Dropping it
/// unsubscribes.
pub struct Subscription {
    engine: Weak<Engine>,
    database: String,
    hub: Arc<Hub>,
    id: u64,
    slot: Arc<Slot>,
    target: Arc<Target>,
    ctx: Context,
    /// Per table: the subscriber's access and the table's primary key, or `None`
    /// when it may not read the table.
    access: HashMap<Arc<str>, Option<(TableAccess, String)>>,
    phase: Phase,
    /// Events read but not yet handed out (one page or one log step at most).
    pending: VecDeque<Arc<Event>>,
    /// Queued events of this entry or earlier are dropped: the current state or
    /// the log already gave them.
    skip_through: u64,
    /// Since when it has been behind the live feed.
    behind_since: Option<Instant>,
    options: FeedOptions,
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.hub.unregister(self.id);
    }
}

impl Subscription {
    /// Sets the subscription up where `request` asks it to start.
    pub(super) async fn start(setup: Setup, request: &SubscribeRequest, options: FeedOptions) -> Result<Self> {
        let Setup { engine, db, hub, registration, target, access, ctx } = setup;
        let dispatched = registration.dispatched;
        let mut access_by_table = HashMap::new();
        if let (Some(table), Some(access)) = (&target.table, access) {
            let primary_key = db.table(table)?.schema().primary_key.clone();
            access_by_table.insert(table.clone(), Some((access, primary_key)));
        }
        let mut subscription = Subscription {
            engine,
            database: db.name().to_string(),
            hub,
            id: registration.id,
            slot: registration.slot,
            target,
            ctx,
            access: access_by_table,
            phase: Phase::Live,
            pending: VecDeque::new(),
            skip_through: dispatched,
            behind_since: None,
            options,
        };
        match request.start {
            Start::Now => {
                if let (Some(table), false) = (&request.table, request.omit_current) {
                    let table = db.table(table)?;
                    let snapshot = db.shared_snapshot()?;
                    let at = snapshot.log_position()?.seq;
                    subscription.skip_through = at.max(dispatched);
                    let lease = db.lease(format!("a subscription to {}.{}", db.name(), table.schema().name));
                    subscription.phase = Phase::Current { table, snapshot, after: None, _lease: lease };
                }
            }
            Start::After(position) => {
                subscription.fall_behind(position.next(), dispatched, None);
            }
            Start::Since(time) => {
                subscription.fall_behind(Position::start_of(1), dispatched, Some(time));
            }
            Start::Previous(count) => {
                let target = subscription.target.clone();
                let (reader, ctx) = (db.clone(), Context::system());
                let step = (options.read_entries, options.read_bytes);
                let from = blocking(move || nth_last_change(&reader, &ctx, &target, dispatched, count, step)).await?;
                subscription.fall_behind(from, dispatched, None);
            }
        }
        Ok(subscription)
    }

    /// The next event, waiting for one; an error once the feed has ended for this
    /// subscriber (the reason is to be told to the client). Cancel-safe: a call
    /// dropped before it answers loses no event.
    pub async fn next(&mut self) -> std::result::Result<Arc<Event>, FeedEnd> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                match self.viewed(event) {
                    Ok(Some(event)) => return Ok(event),
                    Ok(None) => continue,
                    Err(err) => return Err(FeedEnd::Failed(err.to_string())),
                }
            }
            match &self.phase {
                Phase::Current { .. } => self.read_current()?,
                Phase::Behind { .. } => self.read_behind().await?,
                Phase::Live => {
                    if let Some(event) = self.take_queued()? {
                        self.pending.push_back(event);
                        continue;
                    }
                    self.slot.wake.notified().await;
                }
            }
        }
    }

    /// How many events, and about how many bytes, wait in its queue now (what the
    /// feed holds for it besides one page or log step).
    pub fn queued(&self) -> (usize, usize) {
        let state = self.slot.state.lock();
        (state.queue.len(), state.bytes)
    }

    /// The next queued event, if any; when the queue overflowed and is now empty,
    /// rejoins the hub and falls behind to read what was missed.
    fn take_queued(&mut self) -> std::result::Result<Option<Arc<Event>>, FeedEnd> {
        let mut state = self.slot.state.lock();
        while let Some(event) = state.queue.pop_front() {
            state.bytes -= event.size();
            if event.position.seq > self.skip_through {
                return Ok(Some(event));
            }
        }
        if let Some(ended) = state.ended.clone() {
            return Err(ended);
        }
        let Some(missed) = state.missed_from else { return Ok(None) };
        drop(state);
        let dispatched = self.hub.rejoin(self.id)?;
        self.fall_behind(missed, dispatched, None);
        Ok(None)
    }

    /// Switches to reading the log from `from` through entry `through`.
    fn fall_behind(&mut self, from: Position, through: u64, since: Option<f64>) {
        self.skip_through = through;
        self.behind_since.get_or_insert_with(Instant::now);
        self.phase = Phase::Behind { from, through, since };
    }

    /// Reads the next page of current records into `pending`.
    fn read_current(&mut self) -> std::result::Result<(), FeedEnd> {
        let failed = |e: Error| FeedEnd::Failed(e.to_string());
        let Phase::Current { table, snapshot, after, .. } = &mut self.phase else { return Ok(()) };
        if table.db().is_closing() {
            return Err(FeedEnd::DatabaseGone { database: self.database.clone() });
        }
        let page = table
            .current_page(
                &self.ctx,
                snapshot,
                &self.target.scope,
                after.as_deref(),
                self.options.page_records,
                self.options.read_bytes,
            )
            .map_err(failed)?;
        let position = Position::end_of(self.skip_through);
        let name: Arc<str> = Arc::from(table.schema().name.as_str());
        for record in page.records {
            let key = crate::record::validate::encode_primary_key(&record.id).map_err(failed)?;
            if self.target.wants(&name, &record.id, &key) {
                self.pending.push_back(Arc::new(Event::of_current(name.clone(), key, record, position)));
            }
        }
        match page.next {
            Some(next) => *after = Some(next),
            None => self.phase = Phase::Live,
        }
        Ok(())
    }

    /// Reads the next step of the log into `pending`; goes live once through.
    async fn read_behind(&mut self) -> std::result::Result<(), FeedEnd> {
        let Phase::Behind { from, through, since } = self.phase else { return Ok(()) };
        if from.seq > through {
            self.phase = Phase::Live;
            self.behind_since = None;
            return Ok(());
        }
        if let Some(since) = self.behind_since
            && since.elapsed() > self.options.max_behind
        {
            return Err(FeedEnd::TooSlow { limit_s: self.options.max_behind.as_secs(), at: from.seq });
        }
        let gone = || FeedEnd::DatabaseGone { database: self.database.clone() };
        let db = self.engine.upgrade().ok_or(FeedEnd::ShuttingDown)?.database(&self.database).map_err(|_| gone())?;
        if db.is_closing() {
            return Err(gone());
        }
        let (ctx, step) = (Context::system(), (self.options.read_entries, self.options.read_bytes));
        let batch = blocking(move || db.read_log(&ctx, Cursor::after(from.seq.saturating_sub(1)), step.0, step.1))
            .await
            .map_err(|e| FeedEnd::Failed(e.to_string()))?;
        let mut next = Position::start_of(through + 1);
        for entry in &batch.entries {
            if entry.seq > through {
                break;
            }
            next = Position::start_of(entry.seq + 1);
            if since.is_some_and(|since| entry.version < since) {
                continue;
            }
            for (index, change) in entry.changes.iter().enumerate() {
                if (Position { seq: entry.seq, index: index as u32 }) < from {
                    continue;
                }
                if change.kind == ChangeKind::Released && self.target.table.as_deref() == Some(change.table.as_str()) {
                    return Err(FeedEnd::TableDropped { table: change.table.clone() });
                }
                if let Some(event) = covered_event(&self.target, entry, index, change)? {
                    self.pending.push_back(Arc::new(event));
                }
            }
        }
        // An empty step means nothing is left up to `through` (pruned): go live.
        self.phase = Phase::Behind { from: next, through, since };
        Ok(())
    }

    /// `event` as the subscriber may see it; `None` when it may not read its table.
    fn viewed(&mut self, event: Arc<Event>) -> Result<Option<Arc<Event>>> {
        if !self.access.contains_key(&event.table) {
            let access = self.table_access(&event.table);
            self.access.insert(event.table.clone(), access);
        }
        match self.access.get(&event.table) {
            Some(Some((access, primary_key))) => event.viewed_by(access, primary_key).map(Some),
            _ => Ok(None),
        }
    }

    /// The subscriber's read access to `table` and its primary key, if it has any.
    fn table_access(&self, table: &str) -> Option<(TableAccess, String)> {
        let access = check_table(&self.ctx, &self.database, table, &[Action::Read]).ok()?;
        let db = self.engine.upgrade()?.database(&self.database).ok()?;
        let primary_key = db.table(table).ok()?.schema().primary_key.clone();
        Some((access, primary_key))
    }
}

/// The event for a change `target` covers, if it does.
fn covered_event(
    target: &Target,
    entry: &crate::db::log::LogEntry,
    index: usize,
    change: &crate::db::log::Change,
) -> std::result::Result<Option<Event>, FeedEnd> {
    if !matches!(change.kind, ChangeKind::Put | ChangeKind::Delete | ChangeKind::Message) {
        return Ok(None);
    }
    if target.table.as_deref().is_some_and(|table| table != change.table) {
        return Ok(None);
    }
    let event = Event::of_change(entry, index, change, Arc::from(change.table.as_str()))
        .map_err(|e| FeedEnd::Failed(e.to_string()))?;
    Ok(event.filter(|event| target.wants(&event.table, &event.id, &event.key)))
}

/// The position of the `count`th last change `target` covers at or before entry
/// `through` (the first entry's when there are fewer), read backwards from
/// `through` in bounded steps.
fn nth_last_change(
    db: &Db,
    ctx: &Context,
    target: &Target,
    through: u64,
    count: usize,
    step: (usize, usize),
) -> Result<Position> {
    if count == 0 {
        return Ok(Position::start_of(through + 1));
    }
    let mut found = 0;
    let mut before = through + 1;
    loop {
        let entries = db.read_log_back(ctx, Cursor::after(before), step.0, step.1)?;
        let Some(last) = entries.last() else { return Ok(Position::start_of(1)) };
        before = last.seq;
        for entry in &entries {
            for (index, change) in entry.changes.iter().enumerate().rev() {
                if covered_event(target, entry, index, change).map_err(|e| Error::Corrupt(e.to_string()))?.is_some() {
                    found += 1;
                    if found == count {
                        return Ok(Position { seq: entry.seq, index: index as u32 });
                    }
                }
            }
        }
    }
}
