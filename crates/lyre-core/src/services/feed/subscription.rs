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
//! Memory is one page or one log step plus the bounded queue, whatever the lag.
//! Reads run on the blocking pool and survive a cancelled [`Subscription::next`]
//! (the step is picked up by the next call), so a caller that races `next` against
//! its client's input loses neither events nor work. A subscription that stays
//! behind (or in its current state) longer than the configured limit ends with
//! [`FeedEnd::TooSlow`]. Only the current phase holds the database (a snapshot and
//! a lease naming it), and it lets go as soon as a drop or restore starts; those end
//! every subscription with [`FeedEnd::DatabaseGone`].

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Weak};
use std::time::Instant;

use tokio::task::JoinHandle;

use crate::access::{Action, Context, TableAccess, check_table};
use crate::db::log::{Change, ChangeKind, Cursor, LogBatch, LogEntry};
use crate::db::{Db, Lease};
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::query::SharedSnapshot;
use crate::services::feed::event::{Event, Position};
use crate::services::feed::hub::Registration;
use crate::services::feed::{FeedEnd, FeedOptions, Start, SubscribeRequest, Target};
use crate::table::{CurrentPage, Table};

/// What [`Subscription::start`] is given by the feed.
pub(super) struct Setup {
    pub(super) engine: Weak<Engine>,
    pub(super) db: Arc<Db>,
    pub(super) registration: Registration,
    pub(super) target: Arc<Target>,
    /// The subscriber's access to the one table it names, and the table's key.
    pub(super) access: Option<(TableAccess, String)>,
    pub(super) ctx: Context,
}

/// A read under way on the blocking pool.
type Step<T> = Option<JoinHandle<Result<T>>>;

/// Where a subscription is (see the module docs).
enum Phase {
    /// Sending the current records of `table` from `snapshot`, after key `after`.
    Current { table: Table, snapshot: SharedSnapshot, after: Option<Vec<u8>>, step: Step<CurrentPage>, _lease: Lease },
    /// Reading the log from `from` through entry `through`, leaving out changes
    /// made before `since` (ms).
    Behind { from: Position, through: u64, since: Option<f64>, step: Step<LogBatch> },
    /// Taking the events the hub queues.
    Live,
}

/// One subscriber's feed: call [`Subscription::next`] for each event. Dropping it
/// unsubscribes.
pub struct Subscription {
    engine: Weak<Engine>,
    database: String,
    registration: Registration,
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
    /// Since when it has been behind the live feed (or sending its current state).
    behind_since: Option<Instant>,
    options: FeedOptions,
    /// The users' generation its user and access were read at: after a change to
    /// users or roles, they are read again before the next event.
    security: u64,
}

impl Subscription {
    /// Sets the subscription up where `request` asks it to start.
    pub(super) async fn start(setup: Setup, request: &SubscribeRequest, options: FeedOptions) -> Result<Self> {
        let Setup { engine, db, registration, target, access, ctx } = setup;
        let dispatched = registration.dispatched;
        let mut access_by_table = HashMap::new();
        if let (Some(table), Some(access)) = (&target.table, access) {
            access_by_table.insert(table.clone(), Some(access));
        }
        let mut subscription = Subscription {
            engine,
            database: db.name().to_string(),
            registration,
            target,
            ctx,
            access: access_by_table,
            phase: Phase::Live,
            pending: VecDeque::new(),
            skip_through: dispatched,
            behind_since: None,
            options,
            // The user was read before the subscription: whatever changed since is
            // looked at before the first event.
            security: u64::MAX,
        };
        match request.start {
            Start::Now => {
                if let (Some(table), false) = (&request.table, request.omit_current) {
                    let table = db.table(table)?;
                    let snapshot = db.shared_snapshot()?;
                    let at = snapshot.log_position()?.seq;
                    subscription.skip_through = at.max(dispatched);
                    subscription.behind_since = Some(Instant::now());
                    let lease = db.lease(format!("a subscription to {}.{}", db.name(), table.schema().name));
                    subscription.phase = Phase::Current { table, snapshot, after: None, step: None, _lease: lease };
                }
            }
            Start::After(position) => {
                subscription.fall_behind(&db, position.next(), dispatched, None).map_err(refused)?
            }
            Start::Since(time) => {
                subscription.fall_behind(&db, Position::start_of(0), dispatched, Some(time)).map_err(refused)?;
            }
            Start::Previous(count) => {
                let (target, reader, limit) = (subscription.target.clone(), db.clone(), options);
                let from =
                    crate::task::blocking(move || nth_last_change(&reader, &target, dispatched, count, limit)).await?;
                subscription.fall_behind(&db, from, dispatched, None).map_err(refused)?;
            }
        }
        Ok(subscription)
    }

    /// The next event, waiting for one; an error once the feed has ended for this
    /// subscriber (the reason is to be told to the client). Cancel-safe: a call
    /// dropped before it answers loses no event, and a read it started goes on.
    pub async fn next(&mut self) -> std::result::Result<Arc<Event>, FeedEnd> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                if let Phase::Current { table, .. } = &self.phase
                    && table.db().is_closing()
                {
                    self.phase = Phase::Live; // lets go of the snapshot and lease
                    return Err(FeedEnd::DatabaseGone { database: self.database.clone() });
                }
                self.check_access()?;
                match self.viewed(event) {
                    Ok(Some(event)) => return Ok(event),
                    Ok(None) => continue,
                    Err(err) => return Err(FeedEnd::Failed(err.to_string())),
                }
            }
            self.check_behind()?;
            match &self.phase {
                Phase::Current { .. } => self.read_current().await?,
                Phase::Behind { .. } => self.read_behind().await?,
                Phase::Live => {
                    if let Some(event) = self.take_queued()? {
                        self.pending.push_back(event);
                        continue;
                    }
                    self.registration.slot.wake.notified().await;
                }
            }
        }
    }

    /// How many events, and about how many bytes, wait in its queue now (what the
    /// feed holds for it besides one page or log step).
    pub fn queued(&self) -> (usize, usize) {
        let state = self.registration.slot.state.lock();
        (state.queue.len(), state.bytes)
    }

    /// The next queued event, if any; when the queue overflowed and is now empty,
    /// rejoins the hub and falls behind to read what was missed.
    fn take_queued(&mut self) -> std::result::Result<Option<Arc<Event>>, FeedEnd> {
        let mut state = self.registration.slot.state.lock();
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
        let dispatched = self.registration.hub.rejoin(self.registration.id)?;
        // What the current state or an earlier read already gave is not read again.
        let from = missed.max(Position::start_of(self.skip_through.saturating_add(1)));
        let db = self.database()?;
        self.fall_behind(&db, from, dispatched, None)?;
        Ok(None)
    }

    /// Switches to reading the log from `from` through entry `through`; fails when
    /// the log no longer holds what lies between (pruned).
    fn fall_behind(
        &mut self,
        db: &Db,
        from: Position,
        through: u64,
        since: Option<f64>,
    ) -> std::result::Result<(), FeedEnd> {
        if since.is_none() && from.seq <= through && from.seq > 0 {
            let head = db.log_head().map_err(|e| FeedEnd::Failed(e.to_string()))?;
            if let Some(head) = head.filter(|head| *head > from.seq) {
                return Err(FeedEnd::HistoryGone { needed: from.seq, head });
            }
        }
        self.skip_through = through;
        self.behind_since.get_or_insert_with(Instant::now);
        self.phase = Phase::Behind { from, through, since, step: None };
        Ok(())
    }

    /// Ends the feed of a subscriber that has been behind (or in its current
    /// state) longer than the limit.
    fn check_behind(&self) -> std::result::Result<(), FeedEnd> {
        match self.behind_since {
            Some(since) if since.elapsed() > self.options.max_behind => {
                let at = match &self.phase {
                    Phase::Behind { from, .. } => from.seq,
                    _ => self.skip_through,
                };
                Err(FeedEnd::TooSlow { limit_s: self.options.max_behind.as_secs(), at })
            }
            _ => Ok(()),
        }
    }

    /// The database, while it is open and not closing.
    fn database(&self) -> std::result::Result<Arc<Db>, FeedEnd> {
        let gone = || FeedEnd::DatabaseGone { database: self.database.clone() };
        let db = self.engine.upgrade().ok_or(FeedEnd::ShuttingDown)?.database(&self.database).map_err(|_| gone())?;
        if db.is_closing() {
            return Err(gone());
        }
        Ok(db)
    }

    /// Reads the next page of current records into `pending`, on the blocking pool.
    async fn read_current(&mut self) -> std::result::Result<(), FeedEnd> {
        let failed = |e: Error| FeedEnd::Failed(e.to_string());
        let Phase::Current { table, snapshot, after, step, .. } = &mut self.phase else { return Ok(()) };
        if table.db().is_closing() {
            self.phase = Phase::Live; // lets go of the snapshot and lease
            return Err(FeedEnd::DatabaseGone { database: self.database.clone() });
        }
        let handle = step.get_or_insert_with(|| {
            let (table, snapshot, after, ctx) = (table.clone(), snapshot.clone(), after.clone(), self.ctx.clone());
            let (scope, (max, max_bytes)) =
                (self.target.scope.clone(), (self.options.page_records, self.options.read_bytes));
            tokio::task::spawn_blocking(move || {
                table.current_page(&ctx, &snapshot, &scope, after.as_deref(), max, max_bytes)
            })
        });
        let page = handle.await.map_err(|e| FeedEnd::Failed(e.to_string()))?;
        *step = None;
        let page = page.map_err(failed)?;
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
            None => {
                self.phase = Phase::Live;
                self.behind_since = None;
            }
        }
        Ok(())
    }

    /// Reads the next step of the log into `pending`, on the blocking pool; goes
    /// live once through. One step holds about `read_bytes` of events: a large
    /// transaction is taken a part at a time.
    async fn read_behind(&mut self) -> std::result::Result<(), FeedEnd> {
        let Phase::Behind { from, through, since, step } = &self.phase else { return Ok(()) };
        let (from, through, since, started) = (*from, *through, *since, step.is_some());
        if from.seq > through {
            self.phase = Phase::Live;
            self.behind_since = None;
            return Ok(());
        }
        let db = if started { None } else { Some(self.database()?) };
        let (entries, bytes) = (self.options.read_entries, self.options.read_bytes);
        let Phase::Behind { step, .. } = &mut self.phase else { return Ok(()) };
        if let Some(db) = db {
            let after = Cursor::after(from.seq.saturating_sub(1));
            *step = Some(tokio::task::spawn_blocking(move || db.read_log(&Context::system(), after, entries, bytes)));
        }
        let Some(handle) = step.as_mut() else { return Ok(()) };
        let batch = handle.await.map_err(|e| FeedEnd::Failed(e.to_string()))?;
        if let Phase::Behind { step, .. } = &mut self.phase {
            *step = None;
        }
        let batch = batch.map_err(|e| FeedEnd::Failed(e.to_string()))?;
        let mut next = Position::start_of(through.saturating_add(1));
        let mut bytes = 0;
        'entries: for entry in &batch.entries {
            if entry.seq > through {
                break;
            }
            next = Position::start_of(entry.seq + 1);
            if since.is_some_and(|since| entry.version < since) {
                continue;
            }
            for (index, change) in entry.changes.iter().enumerate() {
                let at = Position { seq: entry.seq, index: index as u32 };
                if at < from {
                    continue;
                }
                if bytes >= self.options.read_bytes {
                    next = at; // the rest of this entry in the next step
                    break 'entries;
                }
                if change.kind == ChangeKind::Released && self.target.table.is_some() && self.target.owns(change) {
                    return Err(FeedEnd::TableDropped { table: change.table.clone() });
                }
                if let Some(event) = covered_event(&self.target, entry, index, change) {
                    bytes += event.size();
                    self.pending.push_back(Arc::new(event));
                }
            }
        }
        // An empty step means nothing is left up to `through` (pruned): go live.
        self.phase = Phase::Behind { from: next, through, since, step: None };
        Ok(())
    }

    /// After users or roles changed: the subscriber's user as it is now, and its
    /// access read again; the feed ends when the user is gone or inactive, or may
    /// no longer read the one table it follows.
    fn check_access(&mut self) -> std::result::Result<(), FeedEnd> {
        if self.ctx.is_internal() {
            return Ok(());
        }
        let engine = self.engine.upgrade().ok_or(FeedEnd::ShuttingDown)?;
        let generation = engine.users().generation();
        if generation == self.security {
            return Ok(());
        }
        self.security = generation;
        let user = engine.users().current(&self.ctx.user).map_err(|err| match err.code() {
            crate::error::Code::LoginFailed => {
                FeedEnd::AccessRevoked(format!("user '{}' may no longer subscribe: {err}", self.ctx.username()))
            }
            _ => FeedEnd::Failed(err.to_string()),
        })?;
        self.ctx.user = user;
        self.access.clear();
        if let Some(table) = self.target.table.clone() {
            let access = self.table_access(&table).ok_or_else(|| {
                FeedEnd::AccessRevoked(format!(
                    "user '{}' may no longer read table '{}.{table}'",
                    self.ctx.username(),
                    self.database
                ))
            })?;
            self.access.insert(table, Some(access));
        }
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

/// A subscription refused at its start: the log cannot serve where it asked to start.
fn refused(end: FeedEnd) -> Error {
    Error::Conflict(end.to_string())
}

/// The event for a change `target` covers, if it does. A change that cannot be
/// decoded is logged and left out, as the hub leaves it out.
fn covered_event(target: &Target, entry: &LogEntry, index: usize, change: &Change) -> Option<Event> {
    if !matches!(change.kind, ChangeKind::Put | ChangeKind::Delete | ChangeKind::Message) || !target.may_cover(change) {
        return None;
    }
    match Event::of_change(entry, index, change, Arc::from(change.table.as_str())) {
        Ok(event) => event.filter(|event| target.wants(&event.table, &event.id, &event.key)),
        Err(err) => {
            tracing::error!(seq = entry.seq, table = %change.table, error = %err, "a logged change could not be read for a subscriber; it is not delivered");
            None
        }
    }
}

/// The position of the `count`th last change `target` covers at or before entry
/// `through` (the first entry's when there are fewer), read backwards from
/// `through` in bounded steps. Stops at the table's creation (an earlier table of
/// the name is not its own), when the database starts closing, and after
/// `max_behind`, so a rarely changed record cannot keep a scan of the whole log
/// going.
fn nth_last_change(db: &Db, target: &Target, through: u64, count: usize, options: FeedOptions) -> Result<Position> {
    if count == 0 {
        return Ok(Position::start_of(through.saturating_add(1)));
    }
    let (ctx, started) = (Context::system(), Instant::now());
    let (mut found, mut before) = (0, through.saturating_add(1));
    loop {
        if db.is_closing() {
            return Err(crate::error::LifecycleError::Closing { database: db.name().to_string() }.into());
        }
        if started.elapsed() > options.max_behind {
            return Ok(Position::start_of(before)); // as far back as the time allowed
        }
        let entries = db.read_log_back(&ctx, Cursor::after(before), options.read_entries, options.read_bytes)?;
        let Some(last) = entries.last() else { return Ok(Position::start_of(0)) };
        before = last.seq;
        for entry in &entries {
            for (index, change) in entry.changes.iter().enumerate().rev() {
                if change.kind == ChangeKind::Released && target.table.as_deref() == Some(change.table.as_str()) {
                    return Ok(Position { seq: entry.seq, index: index as u32 }.next());
                }
                if covered_event(target, entry, index, change).is_some() {
                    found += 1;
                    if found == count {
                        return Ok(Position { seq: entry.seq, index: index as u32 });
                    }
                }
            }
        }
    }
}
