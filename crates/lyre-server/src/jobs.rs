//! Background jobs: operations Harper answers with a job id (`delete_audit_logs_before`,
//! ...) run here, and `get_job` reports on them.
//!
//! Jobs live in memory: a restart forgets finished jobs (Harper keeps them in a
//! system table). A job's work is an ordinary core call, so a restart never leaves
//! half a job: each of its writer steps committed or did not.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use lyre_core::{Object, Value};
use uuid::Uuid;

/// Finished jobs kept for `get_job`; the oldest are forgotten beyond this.
const KEPT: usize = 10_000;

/// The registry of jobs.
#[derive(Default)]
pub struct Jobs {
    jobs: Mutex<HashMap<String, Job>>,
}

#[derive(Clone)]
struct Job {
    id: String,
    user: String,
    kind: String,
    status: &'static str,
    message: String,
    created: f64,
    start: f64,
    end: Option<f64>,
    body: Value,
}

impl Jobs {
    /// Starts `work` as a job of type `kind` for `user`; returns its id at once.
    pub fn start<F>(self: &Arc<Self>, user: &str, kind: &str, body: Value, work: F) -> String
    where
        F: Future<Output = Result<String, String>> + Send + 'static,
    {
        let id = Uuid::new_v4().to_string();
        let now = now_ms();
        let job = Job {
            id: id.clone(),
            user: user.to_string(),
            kind: kind.to_string(),
            status: "IN_PROGRESS",
            message: String::new(),
            created: now,
            start: now,
            end: None,
            body,
        };
        self.insert(job);
        let jobs = Arc::clone(self);
        let job_id = id.clone();
        tokio::spawn(async move {
            let outcome = work.await;
            let mut map = jobs.jobs.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            if let Some(job) = map.get_mut(&job_id) {
                job.end = Some(now_ms());
                (job.status, job.message) = match outcome {
                    Ok(message) => ("COMPLETE", message),
                    Err(message) => ("ERROR", message),
                };
            }
        });
        id
    }

    /// `get_job`'s answer for `id`: a one-element array, or empty when unknown.
    pub fn get(&self, id: &str) -> Value {
        let map = self.jobs.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        Value::Array(map.get(id).map(Job::to_value).into_iter().collect())
    }

    fn insert(&self, job: Job) {
        let mut map = self.jobs.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if map.len() >= KEPT {
            let finished = map.values().filter(|j| j.end.is_some()).min_by(|a, b| a.created.total_cmp(&b.created));
            if let Some(oldest) = finished.map(|j| j.id.clone()) {
                map.remove(&oldest);
            }
        }
        map.insert(job.id.clone(), job);
    }
}

impl Job {
    fn to_value(&self) -> Value {
        let mut out = Object::new();
        out.insert("id".into(), self.id.clone().into());
        out.insert("user".into(), self.user.clone().into());
        out.insert("type".into(), self.kind.clone().into());
        out.insert("status".into(), self.status.into());
        out.insert("message".into(), self.message.clone().into());
        out.insert("created_datetime".into(), Value::Float(self.created));
        out.insert("start_datetime".into(), Value::Float(self.start));
        out.insert("end_datetime".into(), self.end.map_or(Value::Null, Value::Float));
        out.insert("job_body".into(), self.body.clone());
        Value::Object(out)
    }
}

fn now_ms() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64() * 1000.0).unwrap_or(0.0)
}
