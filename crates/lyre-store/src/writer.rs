//! The single writer of a database: queue, group commit, acknowledgement.
//!
//! Every write is a job submitted to its database's writer thread. The thread drains
//! its queue and applies the queued jobs in order inside one LMDB write transaction,
//! commits once, and then acknowledges each job (group commit). Because jobs run one
//! at a time, a read-modify-write inside a job is serial by construction. Woken by a
//! lone job, the thread yields once before draining, so a producer on the same core
//! can queue the rest of its burst into the same commit (on 1 core with 64 writers in
//! flight, batches grew from 17 to 50 jobs and throughput by 11%), and on Linux it
//! runs as a batch thread (`SCHED_BATCH`), so waking it never preempts the request
//! thread that queued the job.
//!
//! # The job contract: check, then write
//!
//! A job that fails must fail before its first write; its batch neighbours are then
//! untouched. Jobs validate everything they can before the writer runs them, and
//! check what depends on stored state (existence, conflicts) before writing. A job
//! that fails *after* writing (a storage failure, a corrupt record, a bug) cannot be
//! undone alone, so its whole batch is rolled back and every job in it fails with
//! [`Error::BatchAborted`], which is safe to retry. No savepoints (LMDB nested
//! transactions) are used: they cost a dirty-page lookup on every page touched and
//! rule out the faster write-through map.
//!
//! The writer also carries a piece of caller state `S` (lyre-core's catalog): a job may
//! change it, a failed job's change is rolled back with its transaction, and after each
//! commit the caller's `on_commit` hook sees the committed state before any job of the
//! batch is acknowledged.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::{mpsc, oneshot};

use crate::database::Database;
use crate::error::{Error, Result};
use crate::txlog::JobMeta;
use crate::txn::{BatchMemo, WriteTxn, classify};
use crate::version::VersionClock;

/// Tuning of a writer.
#[derive(Debug, Clone)]
pub struct WriterOptions {
    /// Jobs that may wait in the queue; beyond it submitters wait.
    pub queue_capacity: usize,
    /// How long a submitter waits for room in a full queue before it is told to retry.
    pub queue_timeout: Duration,
    /// Most jobs applied in one LMDB transaction.
    pub max_batch: usize,
}

impl Default for WriterOptions {
    fn default() -> Self {
        Self { queue_capacity: 4096, queue_timeout: Duration::from_secs(45), max_batch: 512 }
    }
}

/// Called after each commit with the committed state and last log sequence.
pub type OnCommit<S> = Box<dyn FnMut(&S, u64) + Send>;

trait Job<S>: Send {
    fn meta(&self) -> &JobMeta;
    /// Marks an applied job as failed (its changes could not be kept).
    fn fail(&mut self, err: Error);
    /// Runs the job; returns whether it succeeded (and its changes should be kept).
    fn apply(&mut self, txn: &mut WriteTxn<'_, '_>, state: &mut S) -> bool;
    /// Delivers the outcome once the batch's commit is known.
    fn complete(self: Box<Self>, commit: std::result::Result<(), &Error>);
}

struct TypedJob<F, T, E> {
    meta: JobMeta,
    work: Option<F>,
    outcome: Option<std::result::Result<T, E>>,
    reply: oneshot::Sender<std::result::Result<T, E>>,
}

impl<S, F, T, E> Job<S> for TypedJob<F, T, E>
where
    F: FnOnce(&mut WriteTxn<'_, '_>, &mut S) -> std::result::Result<T, E> + Send,
    T: Send,
    E: From<Error> + Send,
{
    fn meta(&self) -> &JobMeta {
        &self.meta
    }

    fn fail(&mut self, err: Error) {
        self.outcome = Some(Err(E::from(err)));
    }

    fn apply(&mut self, txn: &mut WriteTxn<'_, '_>, state: &mut S) -> bool {
        let Some(work) = self.work.take() else {
            return false;
        };
        let outcome = work(txn, state);
        let ok = outcome.is_ok();
        self.outcome = Some(outcome);
        ok
    }

    fn complete(self: Box<Self>, commit: std::result::Result<(), &Error>) {
        let result = match (self.outcome, commit) {
            (Some(Ok(value)), Ok(())) => Ok(value),
            (Some(Err(err)), _) => Err(err),
            (_, Err(err)) => Err(E::from(duplicate(err))),
            (None, Ok(())) => Err(E::from(Error::JobPanicked("see the server log".into()))),
        };
        // The submitter may have given up waiting; nothing to do then.
        let _ = self.reply.send(result);
    }
}

enum Message<S> {
    Job(Box<dyn Job<S>>),
    /// Create a table's storage in a transaction of its own.
    PrepareTable(String, oneshot::Sender<Result<()>>),
    /// Finish the queued jobs, refuse new ones, exit.
    Stop,
}

/// The writer of one database. Cheap to share behind an `Arc`.
pub struct Writer<S> {
    queue: mpsc::Sender<Message<S>>,
    options: WriterOptions,
    thread: Mutex<Option<JoinHandle<()>>>,
    stats: Arc<WriterStats>,
}

/// Upper bounds of the batch-size buckets [`WriterStats`] counts commits in.
pub const BATCH_BUCKETS: [u64; 10] = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512];

/// What a writer has done since it started, for metrics: commits, the jobs they
/// held, how batches were sized, and the time spent committing. Counted with
/// relaxed atomics by the writer thread; read at any time.
#[derive(Debug, Default)]
pub struct WriterStats {
    commits: std::sync::atomic::AtomicU64,
    jobs: std::sync::atomic::AtomicU64,
    failed_commits: std::sync::atomic::AtomicU64,
    commit_micros: std::sync::atomic::AtomicU64,
    /// Commits whose batch held at most `BATCH_BUCKETS[i]` jobs (and more than the
    /// bucket before); the last bucket also counts larger batches.
    batches: [std::sync::atomic::AtomicU64; BATCH_BUCKETS.len()],
}

/// A reading of [`WriterStats`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriterCounts {
    /// Transactions committed.
    pub commits: u64,
    /// Jobs in committed transactions.
    pub jobs: u64,
    /// Transactions that failed to commit.
    pub failed_commits: u64,
    /// Time spent applying and committing batches, in microseconds.
    pub commit_micros: u64,
    /// Commits per batch-size bucket (not cumulative), as [`BATCH_BUCKETS`].
    pub batches: [u64; BATCH_BUCKETS.len()],
}

impl WriterStats {
    fn record(&self, jobs: usize, committed: bool, elapsed: Duration) {
        use std::sync::atomic::Ordering::Relaxed;
        self.commit_micros.fetch_add(elapsed.as_micros() as u64, Relaxed);
        if !committed {
            self.failed_commits.fetch_add(1, Relaxed);
            return;
        }
        self.commits.fetch_add(1, Relaxed);
        self.jobs.fetch_add(jobs as u64, Relaxed);
        let bucket = BATCH_BUCKETS.iter().position(|&bound| jobs as u64 <= bound).unwrap_or(BATCH_BUCKETS.len() - 1);
        self.batches[bucket].fetch_add(1, Relaxed);
    }

    /// The counts now.
    pub fn read(&self) -> WriterCounts {
        use std::sync::atomic::Ordering::Relaxed;
        WriterCounts {
            commits: self.commits.load(Relaxed),
            jobs: self.jobs.load(Relaxed),
            failed_commits: self.failed_commits.load(Relaxed),
            commit_micros: self.commit_micros.load(Relaxed),
            batches: std::array::from_fn(|i| self.batches[i].load(Relaxed)),
        }
    }
}

impl<S: Clone + Send + 'static> Writer<S> {
    /// Starts the writer thread of `db`, owning `state`.
    pub fn spawn(
        db: Database,
        clock: Arc<VersionClock>,
        state: S,
        on_commit: OnCommit<S>,
        options: WriterOptions,
    ) -> Result<Self> {
        // Versions issued from now on exceed every version this database stores.
        clock.observe(db.highest_version()?);
        let (queue, messages) = mpsc::channel(options.queue_capacity);
        let stats = Arc::new(WriterStats::default());
        let mut worker = Worker { db, clock, state, on_commit, max_batch: options.max_batch, stats: stats.clone() };
        let thread = std::thread::Builder::new().name(format!("writer-{}", worker.db.name())).spawn(move || {
            yield_to_request_threads("the writer");
            worker.run(messages)
        })?;
        Ok(Self { queue, options, thread: Mutex::new(Some(thread)), stats })
    }

    /// What this writer has done since it started.
    pub fn stats(&self) -> WriterCounts {
        self.stats.read()
    }

    /// Submits a job and waits until it is committed (or failed). The job runs on the
    /// writer thread with the transaction and the writer's state.
    ///
    /// Cancel safety: dropping the future before it completes does not withdraw a job
    /// that was already queued; it will still be applied.
    pub async fn submit<T, E, F>(&self, meta: JobMeta, work: F) -> std::result::Result<T, E>
    where
        F: FnOnce(&mut WriteTxn<'_, '_>, &mut S) -> std::result::Result<T, E> + Send + 'static,
        T: Send + 'static,
        E: From<Error> + Send + 'static,
    {
        self.enqueue(meta, work).await?.await
    }

    /// Queues a job and answers as soon as it is queued, with a future that
    /// resolves once it is committed (or failed). Jobs run in the order they are
    /// queued, so a client that pipelines its writes keeps their order without
    /// waiting for each commit (and the writer commits them together).
    pub async fn enqueue<T, E, F>(
        &self,
        meta: JobMeta,
        work: F,
    ) -> std::result::Result<impl Future<Output = std::result::Result<T, E>> + Send + 'static, E>
    where
        F: FnOnce(&mut WriteTxn<'_, '_>, &mut S) -> std::result::Result<T, E> + Send + 'static,
        T: Send + 'static,
        E: From<Error> + Send + 'static,
    {
        let (reply, outcome) = oneshot::channel();
        let job = Message::Job(Box::new(TypedJob { meta, work: Some(work), outcome: None, reply }));
        self.send(job).await?;
        Ok(async move { outcome.await.unwrap_or_else(|_| Err(Error::Closed.into())) })
    }

    /// Makes sure the storage of `table` exists, committing its creation on its own.
    ///
    /// Table storage is created apart from the catalog change that names the table,
    /// because LMDB sub-database handles only become usable once their creating
    /// transaction commits. Storage without a catalog entry is harmless: it is what a
    /// dropped table leaves, and it is reused when the name is created again.
    pub async fn prepare_table(&self, table: &str) -> Result<()> {
        let (reply, done) = oneshot::channel();
        self.send(Message::PrepareTable(table.to_string(), reply)).await?;
        done.await.unwrap_or(Err(Error::Closed))
    }

    /// Queues `message`, waiting up to `queue_timeout` for room in a full queue.
    ///
    /// Room is tried first without a timer: a timeout reads the clock and its timer
    /// makes every submitter's future (moved whole at each hand-over) hundreds of
    /// bytes larger, for the rare full queue. That wait is boxed, so it costs only
    /// when taken.
    async fn send(&self, message: Message<S>) -> Result<()> {
        let message = match self.queue.try_send(message) {
            Ok(()) => return Ok(()),
            Err(mpsc::error::TrySendError::Closed(_)) => return Err(Error::Closed),
            Err(mpsc::error::TrySendError::Full(message)) => message,
        };
        let wait = Box::pin(tokio::time::timeout(self.options.queue_timeout, self.queue.send(message)));
        match wait.await {
            Err(_) => Err(Error::Overloaded),
            Ok(Err(_)) => Err(Error::Closed),
            Ok(Ok(())) => Ok(()),
        }
    }

    /// Stops accepting jobs, applies the ones already queued, and waits for the thread
    /// to exit. Later submissions fail with [`Error::Closed`]. Idempotent.
    ///
    /// Blocks the calling thread until the queue drains: call it from a blocking
    /// context, not from an async task.
    pub fn shutdown(&self) {
        let thread = self.thread.lock().take();
        if let Some(thread) = thread {
            self.send_stop();
            if thread.join().is_err() {
                tracing::error!("a writer thread panicked");
            }
        }
    }
}

impl<S> Writer<S> {
    /// Queues the stop message behind the jobs already queued.
    fn send_stop(&self) {
        loop {
            match self.queue.try_send(Message::Stop) {
                Ok(()) | Err(mpsc::error::TrySendError::Closed(_)) => return,
                Err(mpsc::error::TrySendError::Full(_)) => std::thread::sleep(Duration::from_millis(1)),
            }
        }
    }
}

impl<S> Drop for Writer<S> {
    fn drop(&mut self) {
        if let Some(thread) = self.thread.get_mut().take() {
            self.send_stop();
            let _ = thread.join();
        }
    }
}

struct Worker<S> {
    db: Database,
    clock: Arc<VersionClock>,
    state: S,
    on_commit: OnCommit<S>,
    max_batch: usize,
    stats: Arc<WriterStats>,
}

impl<S: Clone + Send + 'static> Worker<S> {
    fn run(&mut self, mut messages: mpsc::Receiver<Message<S>>) {
        let mut seq = *self.db.inner.committed.borrow();
        let mut stopping = false;
        while let Some(first) = messages.blocking_recv() {
            if messages.is_empty() {
                // Gather: the first job's submitter usually has more in hand (other
                // requests it is parsing on this core). Yielding once lets it queue
                // them, so they share this commit instead of each paying for one.
                std::thread::yield_now();
            }
            let mut batch = Vec::new();
            let mut next = Some(first);
            while let Some(message) = next.take() {
                match message {
                    Message::Job(job) => batch.push(job),
                    Message::PrepareTable(table, reply) => {
                        // Jobs queued before it commit first, preserving queue order.
                        if !batch.is_empty() {
                            self.run_batch(std::mem::take(&mut batch), &mut seq);
                        }
                        let _ = reply.send(self.db.create_table_storage(&table).map(|_| ()));
                    }
                    Message::Stop => {
                        // Refuse new jobs; the ones already queued still run.
                        messages.close();
                        stopping = true;
                    }
                }
                if batch.len() < self.max_batch {
                    next = messages.try_recv().ok();
                }
            }
            if !batch.is_empty() {
                self.run_batch(batch, &mut seq);
            }
        }
        if stopping {
            tracing::debug!(database = self.db.name(), "writer stopped");
        }
    }

    fn run_batch(&mut self, mut batch: Vec<Box<dyn Job<S>>>, seq: &mut u64) {
        let before = self.state.clone();
        let seq_before = *seq;
        let started = std::time::Instant::now();
        let committed = self.apply_and_commit(&mut batch, seq);
        self.stats.record(batch.len(), committed.is_ok(), started.elapsed());
        match &committed {
            Ok(()) => {
                (self.on_commit)(&self.state, *seq);
                self.db.inner.committed.send_replace(*seq);
            }
            Err(err) => {
                tracing::error!(database = self.db.name(), error = %err, "write batch failed to commit");
                self.state = before;
                *seq = seq_before;
            }
        }
        for job in batch {
            job.complete(committed.as_ref().map(|_| ()));
        }
    }

    fn apply_and_commit(&mut self, batch: &mut [Box<dyn Job<S>>], seq: &mut u64) -> Result<()> {
        let db = self.db.clone();
        let mut txn = db.inner.env.write_txn().map_err(|e| classify(&db, e))?;
        let memo = BatchMemo::default();
        for job in batch.iter_mut() {
            if let Err(poisoned) = self.run_job(job.as_mut(), &mut txn, &memo, seq) {
                // Dropping `txn` aborts everything the batch wrote.
                return Err(Error::BatchAborted(poisoned.to_string()));
            }
        }
        memo.write_at_commit(&mut txn, &db)?;
        db.record_highest_version(&mut txn, self.clock.last()).map_err(|e| classify(&db, e))?;
        txn.commit().map_err(|e| classify(&db, e))?;
        db.inner.snapshots.clear();
        Ok(())
    }

    /// Runs one job. `Ok` when its changes are kept or it failed before writing (then
    /// its state changes and log sequence are rolled back); `Err` when it failed after
    /// writing, which poisons the whole transaction.
    fn run_job(
        &mut self,
        job: &mut dyn Job<S>,
        txn: &mut heed::RwTxn<'_>,
        memo: &BatchMemo,
        seq: &mut u64,
    ) -> Result<()> {
        let saved_state = self.state.clone();
        let saved_seq = *seq;
        let mut write = WriteTxn::new(txn, &self.db, memo, self.clock.next());
        let applied = catch_unwind(AssertUnwindSafe(|| job.apply(&mut write, &mut self.state)));
        let wrote = write.has_written();
        // A job may carry a version from elsewhere; later local versions must exceed it.
        self.clock.observe(write.version().time);
        let failure = match applied {
            Ok(true) => match write.finish(seq, job.meta()) {
                Ok(()) => return Ok(()),
                Err(err) => {
                    let message = err.to_string();
                    job.fail(err);
                    message
                }
            },
            Ok(false) => "a write job failed after writing".to_string(),
            Err(panic) => {
                let message = panic_message(&panic);
                tracing::error!(panic = %message, "a write job panicked");
                format!("a write job panicked: {message}")
            }
        };
        self.state = saved_state;
        *seq = saved_seq;
        if wrote {
            tracing::error!(database = self.db.name(), failure = %failure, "a write job failed after writing; rolling back its batch");
            return Err(Error::Internal(failure));
        }
        Ok(())
    }
}

/// Makes the calling thread (a writer, a JavaScript worker) a batch thread for
/// Linux's scheduler: waking it no longer preempts the request thread that queued a
/// job, so on a shared core that thread goes on reading its other requests and
/// queues them into the same commit (or the same run of a JavaScript worker).
/// Woken at once, the writer committed nearly every job alone and the two threads
/// switched twice per write. Measured with `wrk` (32 connections, one request thread,
/// server on one core, `writeAsync`): PUT 33,000 → 40,700/s, 29.7 → 24.2 µs of CPU per
/// request; half reads, half PUTs 43,200 → 54,000/s. A batch thread keeps its full
/// share of the CPU (unlike an idle-priority one), so a busy server never starves it.
/// Only a thread under the default policy changes: one an operator started under a
/// real-time or idle policy (`chrt`) keeps it. Elsewhere than Linux, or if the change
/// is refused, the thread keeps its policy.
pub fn yield_to_request_threads(what: &str) {
    #[cfg(target_os = "linux")]
    {
        let mut policy = 0;
        let mut param = libc::sched_param { sched_priority: 0 };
        // SAFETY: pthread_self names the calling thread, which outlives both calls;
        // pthread_getschedparam writes only into `policy` and `param`, which live
        // across the call, and pthread_setschedparam only reads `param` during it.
        // Moving from SCHED_OTHER to SCHED_BATCH at priority 0 needs no privilege.
        let outcome = unsafe {
            let thread = libc::pthread_self();
            match libc::pthread_getschedparam(thread, &mut policy, &mut param) {
                0 if policy != libc::SCHED_OTHER => return,
                0 => libc::pthread_setschedparam(thread, libc::SCHED_BATCH, &libc::sched_param { sched_priority: 0 }),
                error => error,
            }
        };
        if outcome != 0 {
            let error = std::io::Error::from_raw_os_error(outcome);
            tracing::info!(%error, "{what} keeps the default scheduling policy (it works in smaller batches)");
        }
    }
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_string())
}

/// A copy of `err` for each job of a failed batch.
fn duplicate(err: &Error) -> Error {
    match err {
        Error::MapFull { map_size } => Error::MapFull { map_size: *map_size },
        Error::Io(io) => Error::Io(std::io::Error::new(io.kind(), io.to_string())),
        Error::Corrupt(m) => Error::Corrupt(m.clone()),
        Error::BatchAborted(m) => Error::BatchAborted(m.clone()),
        other => Error::Internal(other.to_string()),
    }
}
