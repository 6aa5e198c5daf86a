//! The load driver: N requests from C concurrent workers, latency per request.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use crate::client::{Call, HttpClient};
use crate::stats::{Measurement, ServerUse, histogram};
use crate::target::Target;

/// Builds request `i`.
pub type RequestFn = Arc<dyn Fn(u64) -> Call + Send + Sync>;
/// Checks a response (status, body); returns the records it carried or wrote.
pub type CheckFn = Arc<dyn Fn(u16, &[u8]) -> Result<u64, String> + Send + Sync>;

/// The check of a load whose every request counts one record: a 2xx answer
/// (200–204), else the status and the start of the body as the error.
pub fn one_per_success() -> CheckFn {
    Arc::new(|status: u16, body: &[u8]| -> Result<u64, String> {
        match status {
            200..=204 => Ok(1),
            other => Err(format!("status {other}: {}", String::from_utf8_lossy(&body[..body.len().min(200)]))),
        }
    })
}

/// What a timed load sends.
pub struct LoadSpec<'a> {
    /// Workload name for the report.
    pub workload: &'a str,
    /// Round number.
    pub round: usize,
    /// Requests to send.
    pub requests: u64,
    /// Requests in flight at once.
    pub concurrency: usize,
    /// Builds request `i`'s body.
    pub request: RequestFn,
    /// Checks a response; returns the number of records it carried or wrote.
    pub check: CheckFn,
}

/// Runs `spec` against `target` and measures it.
pub async fn run_load(target: &Target, client: &HttpClient, spec: LoadSpec<'_>) -> anyhow::Result<Measurement> {
    let next = Arc::new(AtomicU64::new(0));
    let before = target.sample_tree();
    let started = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..spec.concurrency.max(1) {
        let (client, next, request, check) = (client.clone(), next.clone(), spec.request.clone(), spec.check.clone());
        let total = spec.requests;
        workers.push(tokio::spawn(async move {
            let mut latencies = histogram();
            let (mut items, mut errors, mut first_error) = (0u64, 0u64, None);
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total {
                    break;
                }
                let call = request(i);
                let sent = Instant::now();
                let outcome = client.call(&call).await;
                let micros = sent.elapsed().as_micros().clamp(1, u128::from(u64::MAX)) as u64;
                let _ = latencies.record(micros.min(100_000_000));
                match outcome.map_err(|e| e.to_string()).and_then(|(status, bytes)| check(status, &bytes)) {
                    Ok(n) => items += n,
                    Err(err) => {
                        errors += 1;
                        first_error.get_or_insert(err);
                    }
                }
            }
            (latencies, items, errors, first_error)
        }));
    }
    let mut latencies = histogram();
    let (mut items, mut errors) = (0, 0);
    for worker in workers {
        let (h, n, e, first_error) = worker.await?;
        latencies.add(&h).map_err(|e| anyhow::anyhow!("merging histograms: {e}"))?;
        items += n;
        errors += e;
        if let Some(err) = first_error {
            eprintln!("{}: a request failed: {err}", target.name);
        }
    }
    let elapsed = started.elapsed();
    let server = before.zip(target.sample_tree()).map(|(b, a)| ServerUse::between(b, a, spec.requests));
    Ok(Measurement::new(
        spec.workload,
        &target.name,
        spec.round,
        spec.requests,
        items,
        errors,
        elapsed,
        &latencies,
        server,
    ))
}
