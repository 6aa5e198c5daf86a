//! Bulk loads: a CSV document (or a JSON array of records) streamed into a table in
//! batches, what the `csv_data_load`, `csv_file_load`, `csv_url_load` and
//! `import_from_s3` operations run as jobs (`download.rs` reads a document from a
//! URL as it arrives, `s3.rs` from an S3 bucket, both through `chunks.rs`).
//!
//! The document is parsed on a blocking thread, [`BATCH_ROWS`] rows (or
//! [`BATCH_BYTES`]) at a time, and each
//! batch is written as one transaction through [`Table::write_with`] (so permissions,
//! validation and the transaction log apply as to any write). At most two batches
//! wait between the parser and the writer (four are in memory at most, with the one
//! being read and the one being written), and one record may take at most
//! [`lines::MAX_RECORD_BYTES`], so memory stays bounded whatever the document's size
//! or shape. A row that cannot be loaded (a line with the wrong number of
//! fields, bytes that are not UTF-8, a value its attribute's type refuses) is
//! rejected with its line number while the rest loads; a document without a header
//! row fails the load.

mod cast;
pub mod chunks;
pub mod download;
mod json;
mod lines;
mod parse;
pub mod s3;

use std::io::Read;

use lyre_core::services::Progress;
use lyre_core::{Code, Context, Db, Object, Table, WriteMode, WriteOptions};

use cast::cast;

/// Rows written per transaction at most. Measured side by side on a million
/// 107-byte rows (`bench/results/2026-12-02-csv-load-memory.md`): 4,000 loaded 1.60× as
/// fast as 1,000 (11.5 against 17.1 µs of CPU a row): a commit's costs (the
/// B-tree paths copied, the freed pages' list, the log entry, the flush) are shared
/// by four times the rows.
pub const BATCH_ROWS: usize = 4_000;
/// Bytes of document per transaction at most, whatever the rows' width: with at
/// most four batches in memory, a load holds a few times this.
pub const BATCH_BYTES: usize = 4 << 20;
/// Resident pages of mapped files past which a load releases the database map's
/// pages (checked before each batch): a load walks every index of the table, and
/// the pages it touched would otherwise stay in the process's resident memory
/// (over a gigabyte for a million rows). Measured (`bench/results/2026-12-02-csv-load-memory.md`):
/// releasing every 32 batches cost nothing but let a load after a large drop reach
/// 530 MiB (LMDB rereads the freed pages' list at each commit); every 8 batches
/// held it near 120 MiB at 7% of the rate; a budget releases only as often as the
/// working set needs. 64 MiB leaves room for the larger batches' heap under 200 MiB.
const MAPPED_BUDGET: usize = 64 << 20;
/// Rejected rows described in a report (all of them are counted).
pub const REJECTIONS_SHOWN: usize = 20;
/// Longest reason kept for a rejected row (a refused value can be long).
const REASON_CHARS: usize = 200;

/// What a loaded document is.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub enum Document {
    /// CSV with a header row; rows are found by line.
    #[default]
    Csv,
    /// One JSON array of records; records are found by position.
    Json,
}

impl Document {
    /// How a rejected row is placed in a report.
    fn position(self) -> &'static str {
        match self {
            Document::Csv => "line",
            Document::Json => "record",
        }
    }
}

/// How a load went.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct LoadReport {
    /// What was loaded.
    pub document: Document,
    /// Data rows read (the header not counted).
    pub rows: u64,
    /// Records written.
    pub loaded: u64,
    /// Rows skipped by the action (an existing key on insert, a missing one on update).
    pub skipped: u64,
    /// Rows rejected.
    pub rejected: u64,
    /// The first [`REJECTIONS_SHOWN`] rejections: line number (CSV) or position
    /// (JSON) and reason.
    pub rejections: Vec<(u64, String)>,
}

impl LoadReport {
    /// The job's closing message: Harper's `successfully loaded N of M records` (M
    /// leaves out the rows the action skipped, as Harper counts), and what was
    /// rejected.
    pub fn message(&self) -> String {
        if self.rows == 0 {
            return match self.document {
                Document::Csv => "No records parsed from csv file.",
                Document::Json => "No records parsed from json file.",
            }
            .to_string();
        }
        let mut text =
            format!("successfully loaded {} of {} records", self.loaded, self.rows.saturating_sub(self.skipped));
        if self.rejected > 0 {
            let lines: Vec<String> = self
                .rejections
                .iter()
                .map(|(at, reason)| format!("{} {at}: {reason}", self.document.position()))
                .collect();
            let more = self.rejected.saturating_sub(self.rejections.len() as u64);
            text.push_str(&format!("; {} rows rejected ({})", self.rejected, lines.join("; ")));
            if more > 0 {
                text.push_str(&format!(" and {more} more"));
            }
        }
        text
    }

    fn reject(&mut self, line: u64, mut reason: String) {
        self.rejected += 1;
        if self.rejections.len() < REJECTIONS_SHOWN {
            if reason.len() > REASON_CHARS {
                let cut = (0..=REASON_CHARS).rev().find(|at| reason.is_char_boundary(*at)).unwrap_or(0);
                reason.truncate(cut);
                reason.push('…');
            }
            self.rejections.push((line, reason));
        }
    }
}

/// Why a load stopped before its end.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The document is not CSV with a header row (or not a JSON array of records).
    #[error("{0}")]
    NotCsv(String),
    /// Reading the document failed.
    #[error("reading the document failed: {0}")]
    Read(#[from] std::io::Error),
    /// The load stopped part-way for a reason no single row explains (storage,
    /// permissions, a drop, a shutdown, a read failing mid-document): the batches
    /// before it stay loaded.
    #[error("{message} (after {loaded} records were loaded)")]
    Stopped {
        /// Why.
        message: String,
        /// Records loaded before it.
        loaded: u64,
    },
}

/// One batch of parsed rows, in document order: each with the line it starts on,
/// and its record or the reason the parser rejected it.
type Batch = Vec<(u64, Result<Object, String>)>;

/// Loads `source`, a `document` of records, into `table` of `db` with `mode`
/// (insert, update or upsert) for `ctx`, reporting the rows read and loaded so far
/// to `progress` after each batch. Stops between batches when `db` is going away (a
/// drop or restore waits for the load) or the server is shutting down.
pub async fn load<R>(
    db: &Db,
    table: &Table,
    ctx: &Context,
    mode: WriteMode,
    (source, document): (R, Document),
    progress: &mut Progress,
) -> Result<LoadReport, LoadError>
where
    R: Read + Send + 'static,
{
    let (sender, mut batches) = tokio::sync::mpsc::channel::<Batch>(2);
    let schema = table.schema().clone();
    let declared = move |name: &str| schema.attribute(name).and_then(|a| a.type_name.clone());
    let parser = tokio::task::spawn_blocking(move || match document {
        Document::Csv => parse::parse(source, &declared, &sender),
        Document::Json => json::parse(source, &sender),
    });
    let mut report = LoadReport { document, ..LoadReport::default() };
    while let Some(batch) = batches.recv().await {
        // Dropping `batches` stops the parser at its next batch.
        let stop = if db.is_closing() {
            Some("the database is being dropped or restored")
        } else if progress.stopping() {
            Some("stopped: the server is shutting down")
        } else {
            None
        };
        if let Some(reason) = stop {
            return Err(LoadError::Stopped { message: reason.into(), loaded: report.loaded });
        }
        // The table as it is now: it may have gained attributes, and a table dropped
        // (and perhaps made again) meanwhile ends the load rather than taking the
        // rest of a document meant for the one that went.
        let current = match table.current() {
            Ok(current) if current.schema().created_seq == table.schema().created_seq => current,
            Ok(_) | Err(lyre_core::Error::TableNotFound { .. }) => {
                let message = format!("the table {} was dropped during the load", table.schema().name);
                return Err(LoadError::Stopped { message, loaded: report.loaded });
            }
            Err(err) => return Err(LoadError::Stopped { message: err.to_string(), loaded: report.loaded }),
        };
        report.rows += batch.len() as u64;
        write_batch(&current, ctx, mode, batch, &mut report).await?;
        if let Err(err) = db.release_resident_pages_over(MAPPED_BUDGET).await {
            tracing::debug!(error = %err, "releasing a database's resident pages failed");
        }
        progress.report(format!("loading: {} rows read, {} loaded", report.rows, report.loaded)).await;
    }
    match parser.await {
        Ok(Ok(())) => Ok(report),
        Ok(Err(err)) if report.rows > 0 => Err(LoadError::Stopped { message: err.to_string(), loaded: report.loaded }),
        Ok(Err(err)) => Err(err),
        Err(join) => Err(LoadError::NotCsv(format!("the document's reader stopped: {join}"))),
    }
}

/// Writes the rows of `batch` the table accepts as one transaction, rejecting the
/// others by line.
async fn write_batch(
    table: &Table,
    ctx: &Context,
    mode: WriteMode,
    batch: Batch,
    report: &mut LoadReport,
) -> Result<(), LoadError> {
    let mut lines = Vec::with_capacity(batch.len());
    let mut records = Vec::with_capacity(batch.len());
    for (line, row) in batch {
        match row.and_then(|record| table.check_record(mode, &record).map(|()| record).map_err(|e| e.to_string())) {
            Ok(record) => {
                lines.push(line);
                records.push(record);
            }
            Err(reason) => report.reject(line, reason),
        }
    }
    if records.is_empty() {
        return Ok(());
    }
    let count = records.len() as u64;
    match table.write_with(ctx, mode, records, WriteOptions::default()).await {
        Ok(summary) => {
            let written = summary.written.len() as u64;
            report.loaded += written;
            report.skipped += count.saturating_sub(written);
            Ok(())
        }
        // Refused inside the writer (an increment past its type): the batch is one
        // transaction, so all of its rows are.
        Err(err) if err.code() == Code::BadRequest => {
            let reason = err.to_string();
            for line in lines {
                report.reject(line, format!("{reason} (in the batch of rows written with it)"));
            }
            Ok(())
        }
        // Storage, permissions, a writer still busy after its queue's wait: the
        // batches before stay loaded, the load stops.
        Err(err) => Err(LoadError::Stopped { message: err.to_string(), loaded: report.loaded }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_counts_as_harper_and_lists_the_first_rejections_briefly() {
        let mut report = LoadReport { rows: 30, loaded: 4, skipped: 1, ..LoadReport::default() };
        for line in 2..27 {
            report.reject(line, format!("bad value {}", "é".repeat(150)));
        }
        let message = report.message();
        assert!(
            message.starts_with("successfully loaded 4 of 29 records; 25 rows rejected (line 2: bad value é"),
            "{message}"
        );
        assert!(message.ends_with(" and 5 more"), "{message}");
        assert_eq!(report.rejections.len(), REJECTIONS_SHOWN);
        assert!(report.rejections.iter().all(|(_, reason)| reason.len() <= REASON_CHARS + '…'.len_utf8()));
        assert_eq!(LoadReport::default().message(), "No records parsed from csv file.");
    }
}
