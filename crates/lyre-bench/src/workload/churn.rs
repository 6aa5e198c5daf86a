//! TTL churn: a stream of new records into a table whose records expire and are
//! evicted after a few seconds (`churn` in the cache application: expiration and
//! eviction 10 s), written at a fixed pace to every server at once, while the size
//! of each server's database directory on disk is sampled. A store that reuses
//! the space of evicted records levels off at what a few seconds of writes take;
//! one that does not grows with every write.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::client::HttpClient;
use crate::target::Target;
use crate::workload::cache::DATABASE;

/// The churned table.
pub const TABLE: &str = "churn";

/// Parameters of a run.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct ChurnParams {
    /// Records written in all.
    pub writes: u64,
    /// Records per `upsert`.
    pub batch: u64,
    /// Records per second.
    pub rate: u64,
    /// Seconds between size samples.
    pub sample: u64,
    /// Seconds sampled after the last write (eviction catching up).
    pub tail: u64,
}

/// One server's size over time.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Series {
    /// The server.
    pub server: String,
    /// `(seconds since the start, bytes on disk, records sent by then, refused ones
    /// included: see `errors`)`.
    pub points: Vec<(f64, u64, u64)>,
    /// Seconds its writes took (past the schedule when it fell behind).
    pub writing_s: f64,
    /// Writes it refused.
    pub errors: u64,
}

/// Bytes the files under `dir` take on disk (allocated blocks, as `du`: a sparse
/// memory-mapped file counts what it holds, not its length).
pub fn disk_usage(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt as _;
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .flatten()
        .map(|entry| match entry.metadata() {
            Ok(meta) if meta.is_dir() => disk_usage(&entry.path()),
            Ok(meta) => meta.blocks() * 512,
            Err(_) => 0,
        })
        .sum()
}

/// Writes `params.writes` records to each target at the same pace, each its own
/// writer, sampling each `data` directory's size every `params.sample` seconds
/// until `params.tail` seconds after the slowest writer finished.
pub async fn run(targets: &[(Target, HttpClient, PathBuf)], params: ChurnParams) -> anyhow::Result<Vec<Series>> {
    let started = Instant::now();
    let written: Vec<_> = targets.iter().map(|_| std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0))).collect();
    let mut writers: Vec<_> = targets
        .iter()
        .zip(&written)
        .map(|((_, client, _), written)| {
            let (client, written) = (client.clone(), written.clone());
            Some(tokio::spawn(async move { write_paced(&client, params, started, &written).await }))
        })
        .collect();
    let mut points: Vec<Vec<(f64, u64, u64)>> = vec![Vec::new(); targets.len()];
    let mut finished: Vec<Option<(f64, u64)>> = vec![None; targets.len()];
    let mut all_done_at: Option<Instant> = None;
    loop {
        let now = started.elapsed().as_secs_f64();
        for (i, (_, _, data)) in targets.iter().enumerate() {
            let count = written[i].load(std::sync::atomic::Ordering::Relaxed);
            points[i].push((now, disk_usage(data), count));
        }
        for (i, writer) in writers.iter_mut().enumerate() {
            if writer.as_ref().is_some_and(|w| w.is_finished())
                && let Some(handle) = writer.take()
            {
                finished[i] = Some(handle.await??);
            }
        }
        if all_done_at.is_none() && finished.iter().all(Option::is_some) {
            all_done_at = Some(Instant::now());
        }
        if all_done_at.is_some_and(|at| at.elapsed() >= Duration::from_secs(params.tail)) {
            break;
        }
        tokio::time::sleep(Duration::from_secs(params.sample.max(1))).await;
    }
    Ok(targets
        .iter()
        .zip(points)
        .zip(finished)
        .map(|(((target, _, _), points), done)| {
            let (writing_s, errors) = done.unwrap_or_default();
            Series { server: target.name.clone(), points, writing_s, errors }
        })
        .collect())
}

/// Writes every record in batches, each batch at its time on the schedule (or
/// at once when behind it); when it finished (seconds since `started`) and the
/// count of failed batches' records.
async fn write_paced(
    client: &HttpClient,
    params: ChurnParams,
    started: Instant,
    written: &std::sync::atomic::AtomicU64,
) -> anyhow::Result<(f64, u64)> {
    let batches = params.writes.div_ceil(params.batch.max(1));
    let every = Duration::from_secs_f64(params.batch as f64 / params.rate.max(1) as f64);
    let mut errors = 0;
    for b in 0..batches {
        tokio::time::sleep_until((started + every * b as u32).into()).await;
        let first = b * params.batch;
        let records: Vec<serde_json::Value> = (first..(first + params.batch).min(params.writes))
            .map(|n| serde_json::json!({"id": format!("c{n}"), "field0": crate::workload::ycsb::key(n), "field1": "x".repeat(100)}))
            .collect();
        let count = records.len() as u64;
        let request =
            serde_json::json!({"operation": "upsert", "database": DATABASE, "table": TABLE, "records": records});
        if client.op(&request).await.is_err() {
            errors += count;
        }
        written.fetch_add(count, std::sync::atomic::Ordering::Relaxed);
    }
    Ok((started.elapsed().as_secs_f64(), errors))
}
