//! Bulk loads: a CSV document streamed into a table in batches, what the
//! `csv_data_load`, `csv_file_load` and `csv_url_load` operations run as jobs
//! (`download.rs` reads a document from a URL as it arrives).
//!
//! The CSV is parsed on a blocking thread, [`BATCH_ROWS`] rows at a time, and each
//! batch is written as one transaction through [`Table::write_with`] (so permissions,
//! validation and the transaction log apply as to any write). At most two batches
//! wait between the parser and the writer, so memory stays bounded whatever the
//! document's size. A row that cannot be loaded (a line with the wrong number of
//! fields, bytes that are not UTF-8, a value its attribute's type refuses) is
//! rejected with its line number while the rest loads; a document without a header
//! row fails the load.

mod cast;
pub mod download;
mod lines;

use std::io::Read;

use lyre_core::services::Progress;
use lyre_core::{Code, Context, Object, Table, WriteMode, WriteOptions};

pub use cast::cast;

/// Rows written per transaction.
pub const BATCH_ROWS: usize = 1_000;
/// Rejected rows described in a report (all of them are counted).
pub const REJECTIONS_SHOWN: usize = 20;

/// How a load went.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct LoadReport {
    /// Data rows read (the header not counted).
    pub rows: u64,
    /// Records written.
    pub loaded: u64,
    /// Rows skipped by the action (an existing key on insert, a missing one on update).
    pub skipped: u64,
    /// Rows rejected.
    pub rejected: u64,
    /// The first [`REJECTIONS_SHOWN`] rejections: line number and reason.
    pub rejections: Vec<(u64, String)>,
}

impl LoadReport {
    /// The job's closing message: Harper's `successfully loaded N of M records` (M
    /// leaves out the rows the action skipped, as Harper counts), and what was
    /// rejected.
    pub fn message(&self) -> String {
        if self.rows == 0 {
            return "No records parsed from csv file.".to_string();
        }
        let mut text = format!("successfully loaded {} of {} records", self.loaded, self.rows - self.skipped);
        if self.rejected > 0 {
            let lines: Vec<String> =
                self.rejections.iter().map(|(line, reason)| format!("line {line}: {reason}")).collect();
            let more = self.rejected.saturating_sub(self.rejections.len() as u64);
            text.push_str(&format!("; {} rows rejected ({})", self.rejected, lines.join("; ")));
            if more > 0 {
                text.push_str(&format!(" and {more} more"));
            }
        }
        text
    }

    fn reject(&mut self, line: u64, reason: String) {
        self.rejected += 1;
        if self.rejections.len() < REJECTIONS_SHOWN {
            self.rejections.push((line, reason));
        }
    }
}

/// Why a load stopped before its end.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The document is not CSV with a header row.
    #[error("{0}")]
    NotCsv(String),
    /// Reading the document failed.
    #[error("reading the CSV failed: {0}")]
    Read(#[from] std::io::Error),
    /// A write failed for a reason no single row explains (storage, permissions, a
    /// dropped table): the batches before it stay loaded.
    #[error("{message} (after {loaded} records were loaded)")]
    Write {
        /// The write's error.
        message: String,
        /// Records loaded before it.
        loaded: u64,
    },
}

/// One batch of parsed rows: each with the line it starts on.
type Batch = Vec<(u64, Object)>;

/// What the parser hands the writer.
enum Parsed {
    Rows(Batch),
    /// A row rejected by the parser.
    Rejected(u64, String),
}

/// Loads the CSV `source` into `table` with `mode` (insert, update or upsert) for
/// `ctx`, reporting the rows read and loaded so far to `progress` after each batch.
pub async fn load_csv<R>(
    table: &Table,
    ctx: &Context,
    mode: WriteMode,
    source: R,
    progress: &mut Progress,
) -> Result<LoadReport, LoadError>
where
    R: Read + Send + 'static,
{
    let (sender, mut batches) = tokio::sync::mpsc::channel::<Parsed>(2);
    let schema = table.schema().clone();
    let declared = move |name: &str| schema.attribute(name).and_then(|a| a.type_name.clone());
    let parser = tokio::task::spawn_blocking(move || parse(source, &declared, &sender));
    let mut report = LoadReport::default();
    while let Some(parsed) = batches.recv().await {
        match parsed {
            Parsed::Rejected(line, reason) => {
                report.rows += 1;
                report.reject(line, reason);
            }
            Parsed::Rows(batch) => {
                report.rows += batch.len() as u64;
                write_batch(table, ctx, mode, batch, &mut report).await?;
                progress.report(format!("loading: {} rows read, {} loaded", report.rows, report.loaded)).await;
            }
        }
    }
    match parser.await {
        Ok(result) => result.map(|()| report),
        Err(join) => Err(LoadError::NotCsv(format!("the CSV reader stopped: {join}"))),
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
    for (line, record) in batch {
        match table.check_record(mode, &record) {
            Ok(()) => {
                lines.push(line);
                records.push(record);
            }
            Err(err) => report.reject(line, err.to_string()),
        }
    }
    if records.is_empty() {
        return Ok(());
    }
    let count = records.len() as u64;
    match table.write_with(ctx, mode, records, WriteOptions::default()).await {
        Ok(summary) => {
            report.loaded += summary.written.len() as u64;
            report.skipped += count - summary.written.len() as u64;
            Ok(())
        }
        // Refused inside the writer (an increment past its type): the batch is one
        // transaction, so all of its rows are.
        Err(err) if err.code() == Code::BadRequest => {
            let reason = err.to_string();
            for line in lines {
                report.reject(line, format!("{reason} (the batch of rows it was written with)"));
            }
            Ok(())
        }
        Err(err) => Err(LoadError::Write { message: err.to_string(), loaded: report.loaded }),
    }
}

/// Reads `source` as CSV with a header row, sending batches of records; stops
/// early (with `Ok`) when the receiver is gone.
/// `declared` names the type the table declares for an attribute, if any.
fn parse<R: Read>(
    source: R,
    declared: &dyn Fn(&str) -> Option<String>,
    sender: &tokio::sync::mpsc::Sender<Parsed>,
) -> Result<(), LoadError> {
    let (source, lines) = lines::track(source);
    let mut reader = csv::ReaderBuilder::new().has_headers(false).flexible(true).from_reader(source);
    let line_of = |position: Option<&csv::Position>| lines.line_of(position.map_or(0, csv::Position::byte));
    let mut row = csv::ByteRecord::new();
    let header = match reader.read_byte_record(&mut row) {
        Ok(true) => columns(header_names(&row)?, declared),
        Ok(false) => {
            return Err(LoadError::NotCsv("the CSV is empty: it needs a header row naming the attributes".into()));
        }
        Err(err) => return Err(not_csv(err)),
    };
    let mut batch = Batch::with_capacity(BATCH_ROWS);
    loop {
        match reader.read_byte_record(&mut row) {
            Ok(false) => break,
            Ok(true) => {}
            Err(err) => match err.kind() {
                csv::ErrorKind::Io(_) => return Err(not_csv(err)),
                _ => {
                    let line = line_of(err.position());
                    if sender.blocking_send(Parsed::Rejected(line, err.to_string())).is_err() {
                        return Ok(());
                    }
                    continue;
                }
            },
        }
        let line = line_of(row.position());
        if row.len() == 1 && row.get(0).is_some_and(<[u8]>::is_empty) {
            continue; // a blank line
        }
        let parsed = match record(&header, &row) {
            Ok(record) => {
                batch.push((line, record));
                if batch.len() < BATCH_ROWS {
                    continue;
                }
                Parsed::Rows(std::mem::replace(&mut batch, Batch::with_capacity(BATCH_ROWS)))
            }
            Err(reason) => Parsed::Rejected(line, reason),
        };
        if sender.blocking_send(parsed).is_err() {
            return Ok(());
        }
    }
    if !batch.is_empty() {
        let _ = sender.blocking_send(Parsed::Rows(batch));
    }
    Ok(())
}

/// The attribute names of the header row (a UTF-8 byte-order mark before the first
/// is dropped).
fn header_names(row: &csv::ByteRecord) -> Result<Vec<String>, LoadError> {
    let mut names = Vec::with_capacity(row.len());
    for (n, field) in row.iter().enumerate() {
        let field = if n == 0 { field.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(field) } else { field };
        let name = std::str::from_utf8(field)
            .map_err(|_| LoadError::NotCsv("the CSV's header row is not UTF-8 text".into()))?
            .trim();
        if name.is_empty() || name.contains('\0') {
            return Err(LoadError::NotCsv(format!(
                "the CSV's header row must name an attribute in every column; column {} is {}",
                n + 1,
                if name.is_empty() { "empty" } else { "not text" }
            )));
        }
        names.push(name.to_string());
    }
    Ok(names)
}

/// A column: the attribute it fills and that attribute's declared type, if any.
struct Column {
    name: String,
    type_name: Option<String>,
}

/// The header's names with the types the table declares for them.
fn columns(names: Vec<String>, declared: &dyn Fn(&str) -> Option<String>) -> Vec<Column> {
    names.into_iter().map(|name| Column { type_name: declared(&name), name }).collect()
}

/// The record a row makes: each non-empty cell, cast, under its column's name.
fn record(header: &[Column], row: &csv::ByteRecord) -> Result<Object, String> {
    if row.len() != header.len() {
        return Err(format!("{} fields where the header names {}", row.len(), header.len()));
    }
    let mut record = Object::with_capacity(header.len());
    for (column, field) in header.iter().zip(row.iter()) {
        let name = &column.name;
        let text = std::str::from_utf8(field).map_err(|_| format!("the value of '{name}' is not UTF-8 text"))?;
        if text.is_empty() {
            continue; // an empty cell is an absent attribute
        }
        record.insert(name.clone(), cast(column.type_name.as_deref(), text));
    }
    Ok(record)
}

fn not_csv(err: csv::Error) -> LoadError {
    match err.into_kind() {
        csv::ErrorKind::Io(io) => LoadError::Read(io),
        other => LoadError::NotCsv(format!("the document is not CSV: {other:?}")),
    }
}

#[cfg(test)]
mod tests {
    use lyre_core::Value;

    use super::*;

    /// A table that declares no types.
    fn dynamic(_: &str) -> Option<String> {
        None
    }

    /// What parsing `text` sends: rows and rejections by line, and how it ended.
    type Outcome = (Batch, Vec<(u64, String)>, Result<(), String>);

    fn parsed(text: &str) -> Outcome {
        let (sender, mut receiver) = tokio::sync::mpsc::channel(1_000);
        let result =
            parse(std::io::Cursor::new(text.as_bytes().to_vec()), &dynamic, &sender).map_err(|e| e.to_string());
        drop(sender);
        let (mut rows, mut rejected) = (Vec::new(), Vec::new());
        while let Ok(item) = receiver.try_recv() {
            match item {
                Parsed::Rows(batch) => rows.extend(batch),
                Parsed::Rejected(line, reason) => rejected.push((line, reason)),
            }
        }
        (rows, rejected, result)
    }

    #[test]
    fn rows_keep_their_line_numbers_across_quoted_newlines() {
        let (rows, rejected, result) = parsed("\u{feff}id,name\n1,\"two\nlines\"\n2,plain\n");
        assert_eq!(result, Ok(()));
        assert!(rejected.is_empty());
        assert_eq!(rows.iter().map(|(line, _)| *line).collect::<Vec<_>>(), [2, 4]);
        assert_eq!(rows[0].1.get("name"), Some(&Value::from("two\nlines")));
        assert_eq!(rows[0].1.get("id"), Some(&Value::Int(1)), "the BOM is not part of the first name");
    }

    #[test]
    fn a_row_with_the_wrong_field_count_is_rejected_and_the_rest_loads() {
        let (rows, rejected, result) = parsed("id,name\n1,a\n2,b,extra\n3,c\n\n4\n");
        assert_eq!(result, Ok(()));
        assert_eq!(rows.len(), 2);
        assert_eq!(rejected.iter().map(|(line, _)| *line).collect::<Vec<_>>(), [3, 6]);
        assert!(rejected[0].1.contains("3 fields where the header names 2"), "{}", rejected[0].1);
    }

    #[test]
    fn empty_cells_are_absent_attributes() {
        let (rows, _, _) = parsed("id,name,age\n1,,7\n");
        assert_eq!(rows[0].1.get("name"), None);
        assert_eq!(rows[0].1.len(), 2);
    }

    #[test]
    fn a_document_without_a_header_fails() {
        assert!(parsed("").2.unwrap_err().contains("header row"));
        assert!(parsed("id,,name\n1,2,3\n").2.unwrap_err().contains("column 2 is empty"));
        assert!(parsed("\u{0}\u{1}garbage\n").2.unwrap_err().contains("not text"));
    }

    #[test]
    fn bytes_that_are_not_utf8_reject_their_row() {
        let mut text = b"id,name\n1,ok\n2,".to_vec();
        text.extend_from_slice(&[0xff, 0xfe]);
        text.extend_from_slice(b"\n");
        let (sender, mut receiver) = tokio::sync::mpsc::channel(100);
        parse(std::io::Cursor::new(text), &dynamic, &sender).unwrap();
        drop(sender);
        let mut rejected = Vec::new();
        while let Ok(item) = receiver.try_recv() {
            if let Parsed::Rejected(line, reason) = item {
                rejected.push((line, reason));
            }
        }
        assert_eq!(rejected.len(), 1);
        assert_eq!(rejected[0].0, 3);
    }
}
