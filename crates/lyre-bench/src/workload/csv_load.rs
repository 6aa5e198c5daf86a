//! CSV bulk load: `csv_file_load` of a generated file into a fresh dynamic table,
//! timed from the request to the job's end (`get_job` polled), with the server's
//! peak memory. Both servers must be able to read the file's path (they run here).

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::client::HttpClient;
use crate::stats::{Measurement, ServerUse, histogram};
use crate::target::Target;
use crate::workload::ops::{DATABASE, TABLE, reset_table};

/// How often the job is asked about.
const POLL: Duration = Duration::from_millis(100);
/// Longest a load may take before the round is given up.
const LOAD_TIMEOUT: Duration = Duration::from_secs(3_600);

/// Parameters of the CSV load workload.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CsvLoadParams {
    /// Rows in the file.
    pub rows: u64,
    /// Where the file is (made on first use).
    pub file: PathBuf,
}

/// Writes the CSV of `rows` rows to `file` unless a file of that many rows is there:
/// an integer id, text, an e-mail, an integer, a float, a boolean, text, and a
/// quoted note with a comma (about 107 bytes a row).
pub fn ensure_file(file: &Path, rows: u64) -> anyhow::Result<()> {
    let stamp = file.with_extension("rows");
    if file.exists() && std::fs::read_to_string(&stamp).ok().and_then(|s| s.trim().parse().ok()) == Some(rows) {
        return Ok(());
    }
    let mut out = std::io::BufWriter::new(std::fs::File::create(file)?);
    writeln!(out, "id,name,email,age,score,active,city,note")?;
    for n in 0..rows {
        writeln!(
            out,
            "{n},name {n},user{n}@example.com,{},{}.25,{},city {},\"a note, number {n:08} with some text\"",
            n % 90,
            (n * 7) % 1000,
            n % 2 == 1,
            n % 500
        )?;
    }
    out.flush()?;
    std::fs::write(stamp, rows.to_string())?;
    Ok(())
}

/// One timed load into a fresh table; fails unless every row loaded.
pub async fn run(
    target: &Target,
    client: &HttpClient,
    params: &CsvLoadParams,
    round: usize,
) -> anyhow::Result<Measurement> {
    reset_table(client).await?;
    let before = target.sample_tree();
    let started = Instant::now();
    let file = params.file.display().to_string();
    let answer = client
        .op(&json!({"operation": "csv_file_load", "database": DATABASE, "table": TABLE, "file_path": file}))
        .await?;
    let Some(id) = answer["job_id"].as_str() else { anyhow::bail!("{}: no job id in {answer}", target.name) };
    // The most resident memory seen while the load ran, heap and mapped files apart.
    let (mut most_anon, mut most_file) = (0, 0);
    let job = loop {
        if let Some(now) = target.sample_tree() {
            (most_anon, most_file) = (most_anon.max(now.rss_anon_kib), most_file.max(now.rss_file_kib));
        }
        let jobs = client.op(&json!({"operation": "get_job", "id": id})).await?;
        let job = jobs[0].clone();
        if job["status"] != "IN_PROGRESS" && job["status"] != "CREATED" {
            break job;
        }
        anyhow::ensure!(started.elapsed() < LOAD_TIMEOUT, "{}: the load is still running", target.name);
        tokio::time::sleep(POLL).await;
    };
    let elapsed = started.elapsed();
    eprintln!(
        "{} round {round}: most resident while loading (sampled every {} ms): heap {:.0} MiB, mapped files {:.0} MiB",
        target.name,
        POLL.as_millis(),
        most_anon as f64 / 1024.0,
        most_file as f64 / 1024.0
    );
    let expected = format!("successfully loaded {0} of {0} records", params.rows);
    anyhow::ensure!(job["message"] == expected.as_str(), "{}: the load ended {job}", target.name);
    // The one "request" is the whole load; past the histogram's range (100 s) its
    // latency is shown as the range's end, and the elapsed time stays exact.
    let mut latency = histogram();
    latency.saturating_record(u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX).max(1));
    let server = before.zip(target.sample_tree()).map(|(b, a)| ServerUse::between(b, a, params.rows));
    Ok(Measurement::new("csv-load", &target.name, round, 1, params.rows, 0, elapsed, &latency, server))
}
