//! Jobs: operations Harper answers with a job id (`delete_audit_logs_before`,
//! ...) run here, and `get_job` reports on them.
//!
//! Each job is a record of `system.hdb_job` (Harper's table), written when the job
//! starts and again when it ends, so `get_job` answers across restarts. A job's work
//! is an ordinary core call, so a restart never leaves half a job: each of its writer
//! steps committed or did not. A job still `IN_PROGRESS` when the server starts was
//! cut short by a stop or a crash (or, rarely, finished but could not record its end),
//! and is marked `ERROR` saying so. Finished jobs are kept, as Harper keeps them.

use std::future::Future;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use uuid::Uuid;

use crate::access::Context;
use crate::catalog::{SYSTEM_DATABASE, TableSpec};
use crate::db::Db;
use crate::engine::Engine;
use crate::error::Result;
use crate::query::{Comparator, Condition, Query, Select, SortKey};
use crate::services::Tasks;
use crate::table::Table;
use crate::value::{Object, Value};

/// Harper's table of jobs.
const JOB_TABLE: &str = "hdb_job";
const IN_PROGRESS: &str = "IN_PROGRESS";
/// Most jobs one `search_jobs_by_start_date` lists.
pub const MAX_LISTED: usize = 10_000;
/// Tries at recording a job's end before giving up.
const END_WRITE_ATTEMPTS: u64 = 5;
/// What `get_job` shows of a job, in Harper's order (the table also keeps `job_body`),
/// and `result` when the job ended with one.
const SHOWN: [&str; 8] =
    ["id", "status", "message", "end_datetime", "type", "start_datetime", "created_datetime", "user"];

/// How a job ended well: a message, or (as Harper's exports do) a result object,
/// with the message `Successfully completed job: <id>`.
#[derive(Debug, Clone, PartialEq)]
pub enum JobEnd {
    /// The job's closing message.
    Message(String),
    /// The job's result, shown as `result`.
    Result(Value),
}

impl From<String> for JobEnd {
    fn from(message: String) -> Self {
        JobEnd::Message(message)
    }
}

/// The registry of jobs: the `hdb_job` table, and the services' tasks that run them.
pub struct Jobs {
    system: Arc<Db>,
    tasks: Arc<Tasks>,
    counts: JobCounters,
}

/// How many jobs this run started and how they ended, for metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JobCounts {
    /// Jobs started.
    pub started: u64,
    /// Jobs that ended `COMPLETE`.
    pub completed: u64,
    /// Jobs that ended `ERROR`.
    pub failed: u64,
}

#[derive(Default)]
struct JobCounters {
    started: AtomicU64,
    completed: AtomicU64,
    failed: AtomicU64,
}

impl Jobs {
    /// Opens (creating if needed) the job table, and marks the jobs a previous run
    /// left unfinished as failed.
    pub(crate) async fn open(engine: &Engine, tasks: Arc<Tasks>) -> Result<Arc<Jobs>> {
        let ctx = Context::system();
        let system = engine.database(SYSTEM_DATABASE)?;
        system.table_or_create(&ctx, TableSpec::dynamic(JOB_TABLE, "id")).await?;
        let jobs = Jobs { system, tasks, counts: JobCounters::default() };
        let interrupted = jobs.unfinished(&ctx)?;
        if !interrupted.is_empty() {
            let end = Value::Int(now_ms());
            let records = interrupted
                .into_iter()
                .map(|mut job| {
                    job.insert("status".into(), "ERROR".into());
                    job.insert("message".into(), "interrupted: the server stopped before the job finished".into());
                    job.insert("end_datetime".into(), end.clone());
                    job
                })
                .collect();
            jobs.table()?.upsert(&ctx, records).await?;
        }
        Ok(Arc::new(jobs))
    }

    /// Records a job of type `kind` for `user`, then runs `work` as a task of the
    /// services; returns the job's id once the job is recorded. A job still running
    /// at shutdown is stopped and reported interrupted at the next start.
    pub async fn start<F, D>(self: &Arc<Self>, user: &str, kind: &str, body: Value, work: F) -> Result<String>
    where
        F: Future<Output = Result<D, String>> + Send + 'static,
        D: Into<JobEnd>,
    {
        self.start_reporting(user, kind, body, |_| work).await
    }

    /// [`Jobs::start`] for work that reports its progress: `work` is handed the
    /// job's [`Progress`], whose reports `get_job` shows as the job's message while
    /// it runs.
    pub async fn start_reporting<W, F, D>(
        self: &Arc<Self>,
        user: &str,
        kind: &str,
        body: Value,
        work: W,
    ) -> Result<String>
    where
        W: FnOnce(Progress) -> F,
        F: Future<Output = Result<D, String>> + Send + 'static,
        D: Into<JobEnd>,
    {
        let id = Uuid::new_v4().to_string();
        let now = Value::Int(now_ms());
        let mut job = Object::default();
        job.insert("id".into(), id.clone().into());
        job.insert("status".into(), IN_PROGRESS.into());
        job.insert("message".into(), Value::Null);
        job.insert("end_datetime".into(), Value::Null);
        job.insert("type".into(), kind.into());
        job.insert("start_datetime".into(), now.clone());
        job.insert("created_datetime".into(), now);
        job.insert("user".into(), user.into());
        job.insert("job_body".into(), body);
        let ctx = Context::system();
        self.table()?.insert(&ctx, vec![job]).await?;
        self.counts.started.fetch_add(1, Ordering::Relaxed);
        let stopping = self.tasks.stopping();
        let work = work(Progress { jobs: Arc::clone(self), id: id.clone(), last: None, stopping });
        let jobs = Arc::clone(self);
        let job_id = id.clone();
        self.tasks.spawn(async move {
            let mut end = Object::default();
            let (status, message) = match work.await.map(Into::into) {
                Ok(JobEnd::Message(message)) => ("COMPLETE", message),
                Ok(JobEnd::Result(result)) => {
                    end.insert("result".into(), result);
                    ("COMPLETE", format!("Successfully completed job: {job_id}"))
                }
                Err(message) => ("ERROR", message),
            };
            let counter = if status == "ERROR" { &jobs.counts.failed } else { &jobs.counts.completed };
            counter.fetch_add(1, Ordering::Relaxed);
            end.insert("id".into(), job_id.clone().into());
            end.insert("status".into(), status.into());
            end.insert("message".into(), message.into());
            end.insert("end_datetime".into(), Value::Int(now_ms()));
            // A busy writer may refuse for a moment; a job whose end is never recorded
            // is reported interrupted at the next start.
            for attempt in 1..=END_WRITE_ATTEMPTS {
                let updated = match jobs.table() {
                    Ok(table) => table.update(&ctx, vec![end.clone()]).await.map(|_| ()),
                    Err(err) => Err(err),
                };
                match updated {
                    Ok(()) => break,
                    Err(err) if attempt == END_WRITE_ATTEMPTS => {
                        tracing::error!(job = %job_id, error = %err, "recording the end of a job failed")
                    }
                    Err(_) => tokio::time::sleep(std::time::Duration::from_millis(200 * attempt)).await,
                }
            }
        });
        Ok(id)
    }

    /// How many jobs this run started, completed and failed (those running are
    /// the started less the ended).
    pub fn counts(&self) -> JobCounts {
        JobCounts {
            started: self.counts.started.load(Ordering::Relaxed),
            completed: self.counts.completed.load(Ordering::Relaxed),
            failed: self.counts.failed.load(Ordering::Relaxed),
        }
    }

    /// `get_job`'s answer for `id`: a one-element array, or empty when unknown.
    pub fn get(&self, id: &str) -> Result<Value> {
        let found = self.table()?.get_many(&Context::system(), &[Value::from(id)], &Select::Raw)?;
        Ok(Value::Array(found.into_iter().map(|job| Value::Object(shown(job))).collect()))
    }

    /// `search_jobs_by_start_date`: the jobs started strictly between `from` and `to`
    /// (ms since the epoch), oldest first and at most [`MAX_LISTED`], each with its
    /// start and end also as ISO 8601 (`start_datetime_converted`,
    /// `end_datetime_converted`); only `user`'s own unless `all_users`. Runs on the
    /// blocking pool.
    pub async fn started_between(&self, from: f64, to: f64, user: &str, all_users: bool) -> Result<Vec<Value>> {
        let table = self.table()?;
        if table.schema().attribute("start_datetime").is_none() {
            return Ok(Vec::new()); // no job has been recorded yet
        }
        let compare = |attribute: &str, comparator, value: Value| Condition::Compare {
            attribute: attribute.into(),
            comparator,
            value,
        };
        let mut conditions = vec![
            compare("start_datetime", Comparator::GreaterThan, Value::Float(from)),
            compare("start_datetime", Comparator::LessThan, Value::Float(to)),
        ];
        if !all_users {
            conditions.push(compare("user", Comparator::Equals, user.into()));
        }
        let sort = vec![SortKey { attribute: "start_datetime".into(), descending: false }];
        let query = Query { conditions, sort, limit: Some(MAX_LISTED), ..Query::default() };
        crate::task::blocking(move || {
            let mut out = Vec::new();
            table.search(&Context::system(), query)?.run(&mut |record| {
                if let Value::Object(job) = record {
                    let mut job = shown(job);
                    for (stamp, converted) in
                        [("start_datetime", "start_datetime_converted"), ("end_datetime", "end_datetime_converted")]
                    {
                        if let Some(time) = job.get(stamp).and_then(Value::as_f64) {
                            job.insert(converted.into(), crate::time::iso8601(time).into());
                        }
                    }
                    out.push(Value::Object(job));
                }
                ControlFlow::Continue(())
            })?;
            Ok(out)
        })
        .await
    }

    /// The job table, with its current schema (a dynamic table's attributes grow
    /// with its records, so a `Table` is not kept).
    fn table(&self) -> Result<Table> {
        self.system.table(JOB_TABLE)
    }

    /// Jobs recorded as in progress (found through the `status` index).
    fn unfinished(&self, ctx: &Context) -> Result<Vec<Object>> {
        let table = self.table()?;
        if table.schema().attribute("status").is_none() {
            return Ok(Vec::new()); // no job has been recorded yet
        }
        let status = Condition::Compare {
            attribute: "status".into(),
            comparator: Comparator::Equals,
            value: IN_PROGRESS.into(),
        };
        let mut out = Vec::new();
        table.search(ctx, Query { conditions: vec![status], ..Query::default() })?.run(&mut |record| {
            if let Value::Object(job) = record {
                out.push(job);
            }
            ControlFlow::Continue(())
        })?;
        Ok(out)
    }
}

/// A running job's progress reports: each sets the job's message, at most once a
/// second (the rest are dropped, the latest state is what matters).
pub struct Progress {
    jobs: Arc<Jobs>,
    id: String,
    last: Option<std::time::Instant>,
    stopping: tokio::sync::watch::Receiver<bool>,
}

impl Progress {
    /// Whether the server is shutting down: a job that can stop between steps
    /// should, so its end is recorded (one still running when the grace period
    /// ends is cut off and reported interrupted at the next start).
    pub fn stopping(&self) -> bool {
        *self.stopping.borrow()
    }

    /// Least time between two recorded reports.
    const INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

    /// Records `message` as the job's message, unless a report was recorded less
    /// than a second ago. A report that cannot be written is dropped: the job goes
    /// on, and its end is recorded as usual.
    pub async fn report(&mut self, message: impl Into<String>) {
        if self.last.is_some_and(|last| last.elapsed() < Self::INTERVAL) {
            return;
        }
        self.last = Some(std::time::Instant::now());
        let mut update = Object::default();
        update.insert("id".into(), self.id.clone().into());
        update.insert("message".into(), message.into().into());
        let written = match self.jobs.table() {
            Ok(table) => table.update(&Context::system(), vec![update]).await.map(drop),
            Err(err) => Err(err),
        };
        if let Err(err) = written {
            tracing::debug!(job = %self.id, error = %err, "a job's progress was not recorded");
        }
    }
}

/// What a job's record shows: [`SHOWN`] in order, and `result` when there is one.
fn shown(job: Object) -> Object {
    let mut out: Object =
        SHOWN.iter().map(|name| (name.to_string(), job.get(*name).cloned().unwrap_or(Value::Null))).collect();
    if let Some(result) = job.get("result") {
        out.insert("result".into(), result.clone());
    }
    out
}

/// Now, in whole ms since the epoch (Harper's job stamps).
fn now_ms() -> i64 {
    crate::time::now_ms() as i64
}
