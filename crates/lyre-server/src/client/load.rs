//! `lyre load <file> --table T`: a CSV file streamed into a table of a running
//! server, with a progress bar (bytes sent, rows per second, time left).
//!
//! The file is cut at record boundaries (found by the `csv` crate, so quoted
//! newlines never split a record) into pieces of about [`PIECE_BYTES`]; each piece,
//! with the header row before it, is one `csv_data_load` job, waited for before the
//! next is sent, so the client holds one piece at a time and the server loads in
//! file order. It works against any server the user may write to, local or not.

use std::io::{Read as _, Seek as _, SeekFrom};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;

use super::Target;

/// Bytes of CSV per job.
pub const PIECE_BYTES: u64 = 4 << 20;
/// How often a job's state is asked for.
const POLL: Duration = Duration::from_millis(100);

/// What to load where.
#[derive(Debug, Clone)]
pub struct Load {
    /// The CSV file, with a header row.
    pub file: PathBuf,
    /// The database (default `data`).
    pub database: String,
    /// The table.
    pub table: String,
    /// `insert`, `update` or `upsert`.
    pub action: String,
}

/// How a load went.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Loaded {
    /// Data rows sent.
    pub rows: u64,
    /// Records the server loaded.
    pub loaded: u64,
}

/// Loads the file, drawing progress on stderr (hidden when it is not a terminal).
pub async fn load(target: &Target, load: &Load) -> anyhow::Result<Loaded> {
    let mut records = std::fs::File::open(&load.file).with_context(|| format!("opening {}", load.file.display()))?;
    // A second handle of its own (a cloned one would share the reader's offset).
    let mut raw = std::fs::File::open(&load.file)?;
    let size = records.metadata()?.len();
    let mut reader = csv::ReaderBuilder::new().has_headers(false).flexible(true).from_reader(&mut records);
    let mut record = csv::ByteRecord::new();
    if !reader.read_byte_record(&mut record)? {
        bail!("{} is empty: it needs a header row naming the attributes", load.file.display());
    }
    let header_end = reader.position().byte();
    let header = read_range(&mut raw, 0, header_end)?;
    let bar = ProgressBar::new(size);
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {bytes}/{total_bytes} {msg} eta {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    bar.set_position(header_end);
    let started = Instant::now();
    let mut done = Loaded::default();
    let (mut piece_start, mut piece_rows, mut first_line) = (header_end, 0u64, 2u64);
    loop {
        let more = reader.read_byte_record(&mut record)?;
        piece_rows += u64::from(more);
        let at = reader.position().byte();
        if piece_rows > 0 && (!more || at - piece_start >= PIECE_BYTES) {
            let body = read_range(&mut raw, piece_start, at)?;
            let mut data = utf8(header.clone(), 1)?;
            data.push_str(&utf8(body, first_line)?);
            let message = run_piece(target, load, data).await?;
            done.rows += piece_rows;
            done.loaded += loaded_count(&message);
            if message.contains("rejected") {
                let report = format!("rows from line {first_line}: {message}");
                // A bar not drawn (stderr is not a terminal) prints nothing itself.
                if bar.is_hidden() { eprintln!("{report}") } else { bar.println(report) }
            }
            let rate = done.rows as f64 / started.elapsed().as_secs_f64().max(0.001);
            bar.set_message(format!("{} rows, {rate:.0} rows/s", done.rows));
            bar.set_position(at);
            first_line = reader.position().line();
            (piece_start, piece_rows) = (at, 0);
        }
        if !more {
            break;
        }
    }
    bar.finish_with_message(format!("{} of {} rows loaded", done.loaded, done.rows));
    Ok(done)
}

/// Sends one piece as a `csv_data_load` job and waits for it; its closing message.
async fn run_piece(target: &Target, load: &Load, data: String) -> anyhow::Result<String> {
    let started = target
        .call(&json!({"operation": "csv_data_load", "database": load.database, "table": load.table,
            "action": load.action, "data": data}))
        .await?;
    let id = started["job_id"].as_str().context("the server did not answer with a job id")?.to_string();
    loop {
        let job = target.call(&json!({"operation": "get_job", "id": id})).await?;
        let Some(job) = job.get(0).cloned() else { bail!("the server has no job {id}") };
        let message = job["message"].as_str().unwrap_or_default().to_string();
        match job["status"].as_str() {
            Some("COMPLETE") => return Ok(message),
            Some("ERROR") => bail!("the load stopped: {message}"),
            _ => tokio::time::sleep(POLL).await,
        }
    }
}

/// The `N` of a load's `successfully loaded N of M records`.
fn loaded_count(message: &str) -> u64 {
    message
        .strip_prefix("successfully loaded ")
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// `bytes` as text, or an error naming the line they start on: a CSV must be UTF-8.
fn utf8(bytes: Vec<u8>, line: u64) -> anyhow::Result<String> {
    String::from_utf8(bytes).map_err(|_| anyhow::anyhow!("the rows from line {line} are not UTF-8 text"))
}

/// Bytes `from..to` of `file`.
fn read_range(file: &mut std::fs::File, from: u64, to: u64) -> std::io::Result<Vec<u8>> {
    file.seek(SeekFrom::Start(from))?;
    let mut bytes = vec![0; (to - from) as usize];
    file.read_exact(&mut bytes)?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_loaded_count_is_read_from_harpers_message() {
        assert_eq!(loaded_count("successfully loaded 998 of 1000 records; 2 rows rejected (…)"), 998);
        assert_eq!(loaded_count("No records parsed from csv file."), 0);
    }
}
