//! Everything that runs in the background or consumes the transaction log, and the
//! one owner that starts and stops it all.
//!
//! * `audit.rs`: the audit view, a table's reading of the log.
//! * `retention.rs`: removes log entries older than `logging.auditRetention`, never
//!   past the slowest durable cursor, and drops cursors whose consumers are gone.
//! * `expiry.rs`: the sweeper that evicts expired records.
//! * `blobs.rs`: the reclaimer that removes the files of blobs writes freed.
//! * `consistency.rs`: the checker that walks indexes against records.
//! * `jobs.rs`: operations answered with a job id, run as tasks of the services.
//! * `derived.rs`: the runners that keep vector indexes up to date from the log,
//!   each owning its index by epoch, and the supervisor that (re)starts them.
//! * `feed/`: the change feed: every committed record change delivered to its
//!   subscribers, each bounded in memory however far behind it falls.
//! * `log.rs`: the [`Consumer`] trait and the runner that feeds a consumer the log
//!   from its durable cursor: the place the change feed, derived-index runners and
//!   replication plug in.
//!
//! Nothing else in core imports this module. Services reach storage only through
//! what `Engine`, `Db` and `Table` hand them, and the log only through `db/log.rs`.
//! [`Services::start`] is called by the server once the engine is open, and
//! [`Services::shutdown`] before the engine closes; every task is spawned here
//! ([`Tasks`]), so none outlives the services.

mod audit;
mod blobs;
mod consistency;
mod derived;
mod expiry;
mod feed;
mod jobs;
mod log;
mod retention;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::watch;
use tokio::task::JoinSet;

pub use audit::{AuditEntry, AuditSearch, read_audit_log};
pub use consistency::{ConsistencyReport, check_consistency};
pub use feed::{
    Event, EventKind, EventValue, Feed, FeedEnd, FeedOptions, Matcher, Position, Start, SubscribeRequest, Subscription,
};
pub use jobs::{JobCounts, JobEnd, Jobs, Progress};
pub use log::{Consumer, RunnerOptions};

use crate::engine::Engine;
use crate::error::Result;

/// How the services run.
#[derive(Debug, Clone)]
pub struct ServiceOptions {
    /// How long log entries are kept (Harper's `logging.auditRetention`); `None`
    /// keeps them until deleted with `delete_audit_logs_before`.
    pub audit_retention: Option<Duration>,
    /// How long a durable log cursor may go without its consumer before retention
    /// drops it (and stops keeping the log for it).
    pub consumer_timeout: Duration,
    /// How long [`Services::shutdown`] lets tasks finish before stopping them.
    pub shutdown_grace: Duration,
    /// The change feed's bounds.
    pub feed: FeedOptions,
}

impl Default for ServiceOptions {
    fn default() -> Self {
        Self {
            audit_retention: None,
            consumer_timeout: Duration::from_secs(7 * 86_400),
            shutdown_grace: Duration::from_secs(5),
            feed: FeedOptions::default(),
        }
    }
}

/// The set of background tasks and the signal that tells them to stop.
pub(crate) struct Tasks {
    set: Mutex<JoinSet<()>>,
    stop: watch::Sender<bool>,
}

impl Tasks {
    fn new() -> Self {
        Self { set: Mutex::new(JoinSet::new()), stop: watch::Sender::new(false) }
    }

    /// Runs `task` until it ends or the services shut down; once they have, it is
    /// not started. Finished tasks are reaped here (a panicked one is logged), so the
    /// set holds only live ones.
    pub(crate) fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) {
        let mut set = self.set.lock();
        while let Some(ended) = set.try_join_next() {
            log_panic(ended);
        }
        if *self.stop.borrow() {
            tracing::warn!("a background task was not started: the services are shutting down");
            return;
        }
        set.spawn(task);
    }

    /// A receiver that turns `true` when the services shut down.
    pub(crate) fn stopping(&self) -> watch::Receiver<bool> {
        self.stop.subscribe()
    }

    /// Tells every task to stop, waits up to `grace` for them, then aborts the rest.
    async fn shutdown(&self, grace: Duration) {
        self.stop.send_replace(true);
        let mut set = std::mem::take(&mut *self.set.lock());
        let drained = tokio::time::timeout(grace, async {
            while let Some(ended) = set.join_next().await {
                log_panic(ended);
            }
        })
        .await;
        if drained.is_err() {
            tracing::warn!(tasks = set.len(), "background tasks did not stop in time; aborting them");
            set.shutdown().await;
        }
    }
}

/// Logs a background task that ended by panicking (the process goes on without it).
fn log_panic(ended: std::result::Result<(), tokio::task::JoinError>) {
    if let Err(err) = ended
        && err.is_panic()
    {
        tracing::error!(error = %err, "a background task panicked and stopped");
    }
}

/// Runs `work` unless the services shut down first (then drops it: a writer job it
/// had queued still commits, nothing is left half-done); returns whether it ran.
pub(crate) async fn unless_stopped<T>(stop: &mut watch::Receiver<bool>, work: impl Future<Output = T>) -> Option<T> {
    if *stop.borrow() {
        return None;
    }
    tokio::select! {
        out = work => Some(out),
        _ = stop.changed() => None,
    }
}

/// Sleeps `period`, or less if the services shut down meanwhile; returns whether to
/// go on (false: stop now).
pub(crate) async fn pause(stop: &mut watch::Receiver<bool>, period: Duration) -> bool {
    if *stop.borrow() {
        return false;
    }
    tokio::select! {
        _ = tokio::time::sleep(period) => !*stop.borrow(),
        _ = stop.changed() => false,
    }
}

/// The running services of one engine.
pub struct Services {
    engine: Arc<Engine>,
    tasks: Arc<Tasks>,
    jobs: Arc<Jobs>,
    feed: Feed,
    options: ServiceOptions,
}

impl Services {
    /// Starts the services of `engine`: opens the job table (marking jobs a previous
    /// run left unfinished as interrupted), then the expiry sweeper and, when a
    /// retention period is set, log retention.
    pub async fn start(engine: &Arc<Engine>, options: ServiceOptions) -> Result<Arc<Services>> {
        let tasks = Arc::new(Tasks::new());
        let jobs = Jobs::open(engine, tasks.clone()).await?;
        tasks.spawn(expiry::sweep_forever(Arc::downgrade(engine), tasks.stopping()));
        tasks.spawn(derived::supervise(Arc::downgrade(engine), tasks.stopping()));
        tasks.spawn(blobs::reclaim_forever(Arc::downgrade(engine), tasks.stopping()));
        if let Some(retention) = options.audit_retention {
            let limits = retention::Limits { retention, consumer_timeout: options.consumer_timeout };
            tasks.spawn(retention::keep_within(Arc::downgrade(engine), limits, tasks.stopping()));
        }
        let feed = Feed::new(Arc::downgrade(engine), tasks.clone(), options.feed);
        Ok(Arc::new(Services { engine: engine.clone(), tasks, jobs, feed, options }))
    }

    /// The jobs (`get_job`, and operations answered with a job id).
    pub fn jobs(&self) -> &Arc<Jobs> {
        &self.jobs
    }

    /// The change feed: subscriptions to records' changes.
    pub fn feed(&self) -> &Feed {
        &self.feed
    }

    /// Runs `step` every `period` as a task of the services until they shut down
    /// (a step under way finishes first): periodic work of the layers above
    /// (aggregating analytics) lives here, where its start and stop are owned.
    pub fn every<F, Fut>(&self, period: Duration, mut step: F)
    where
        F: FnMut() -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send,
    {
        let mut stop = self.tasks.stopping();
        self.tasks.spawn(async move {
            while pause(&mut stop, period).await {
                step().await;
            }
        });
    }

    /// Feeds `consumer` the log of database `database` from its durable cursor, as
    /// a task of the services, until they shut down (or the database is dropped).
    pub fn consume<C: Consumer>(&self, database: &str, consumer: C, options: RunnerOptions) {
        let run =
            log::run(Arc::downgrade(&self.engine), database.to_string(), consumer, options, self.tasks.stopping());
        self.tasks.spawn(run);
    }

    /// Stops every task: each finishes its current step (a writer job already
    /// queued still commits), waiting at most the configured grace period.
    pub async fn shutdown(&self) {
        self.tasks.shutdown(self.options.shutdown_grace).await;
    }
}
