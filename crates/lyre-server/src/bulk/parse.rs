//! Reading a CSV document into batches of records (on a blocking thread).

use std::io::Read;

use lyre_core::{Object, object_with_capacity};

use super::lines;
use super::{BATCH_BYTES, BATCH_ROWS, Batch, LoadError, cast};

/// Reads `source` as CSV with a header row, sending batches of rows (each a record
/// or the reason it was rejected, by line) in document order; stops early (with
/// `Ok`) when the receiver is gone. `declared` names the type the table declares
/// for an attribute, if any.
pub fn parse<R: Read>(
    source: R,
    declared: &dyn Fn(&str) -> Option<String>,
    sender: &tokio::sync::mpsc::Sender<Batch>,
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
    line_of(row.position());
    let mut batch = Batch::with_capacity(BATCH_ROWS);
    let mut batch_bytes = 0;
    loop {
        match reader.read_byte_record(&mut row) {
            Ok(false) => break,
            Ok(true) => {}
            Err(err) => return Err(not_csv(err)),
        }
        let line = line_of(row.position());
        batch_bytes += row.as_slice().len();
        match record(&header, &row) {
            Ok(None) => continue, // every cell empty: a spreadsheet's trailing row
            Ok(Some(record)) => batch.push((line, Ok(record))),
            Err(reason) => batch.push((line, Err(reason))),
        }
        if batch.len() == BATCH_ROWS || batch_bytes >= BATCH_BYTES {
            batch_bytes = 0;
            if sender.blocking_send(std::mem::replace(&mut batch, Batch::with_capacity(BATCH_ROWS))).is_err() {
                return Ok(());
            }
        }
    }
    if !batch.is_empty() {
        let _ = sender.blocking_send(batch);
    }
    Ok(())
}

/// The attribute names of the header row (a UTF-8 byte-order mark before the first
/// is dropped): each a valid attribute name, none twice.
fn header_names(row: &csv::ByteRecord) -> Result<Vec<String>, LoadError> {
    let mut names: Vec<String> = Vec::with_capacity(row.len());
    for (n, field) in row.iter().enumerate() {
        let field = if n == 0 { field.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(field) } else { field };
        let column = n + 1;
        let name = std::str::from_utf8(field)
            .map_err(|_| LoadError::NotCsv("the CSV's header row is not UTF-8 text".into()))?
            .trim();
        if name.is_empty() {
            return Err(LoadError::NotCsv(format!(
                "the CSV's header row must name an attribute in every column; column {column} is empty"
            )));
        }
        if let Err(err) = lyre_core::catalog::validate_attribute_name(name) {
            return Err(LoadError::NotCsv(format!("the CSV's header row, column {column}: {err}")));
        }
        if let Some(first) = names.iter().position(|seen| seen == name) {
            return Err(LoadError::NotCsv(format!(
                "the CSV's header row names '{name}' twice (columns {} and {column})",
                first + 1
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

/// The record a row makes: each non-empty cell, cast, under its column's name;
/// `None` when every cell is empty.
fn record(header: &[Column], row: &csv::ByteRecord) -> Result<Option<Object>, String> {
    if row.iter().all(<[u8]>::is_empty) {
        return Ok(None);
    }
    if row.len() != header.len() {
        return Err(format!("{} fields where the header names {}", row.len(), header.len()));
    }
    let mut record = object_with_capacity(header.len());
    for (column, field) in header.iter().zip(row.iter()) {
        let name = &column.name;
        let text = std::str::from_utf8(field).map_err(|_| format!("the value of '{name}' is not UTF-8 text"))?;
        if text.is_empty() {
            continue; // an empty cell is an absent attribute
        }
        record.insert(name.clone(), cast(column.type_name.as_deref(), text));
    }
    Ok(Some(record))
}

fn not_csv(err: csv::Error) -> LoadError {
    match err.into_kind() {
        csv::ErrorKind::Io(io) if io.kind() == std::io::ErrorKind::InvalidData => LoadError::NotCsv(io.to_string()),
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
    type Outcome = (Vec<(u64, Object)>, Vec<(u64, String)>, Result<(), String>);

    fn parsed(text: &[u8]) -> Outcome {
        let (sender, mut receiver) = tokio::sync::mpsc::channel(1_000);
        let result = parse(std::io::Cursor::new(text.to_vec()), &dynamic, &sender).map_err(|e| e.to_string());
        drop(sender);
        let (mut rows, mut rejected) = (Vec::new(), Vec::new());
        while let Ok(batch) = receiver.try_recv() {
            for (line, row) in batch {
                match row {
                    Ok(record) => rows.push((line, record)),
                    Err(reason) => rejected.push((line, reason)),
                }
            }
        }
        (rows, rejected, result)
    }

    #[test]
    fn rows_keep_their_line_numbers_across_quoted_newlines() {
        let (rows, rejected, result) = parsed("\u{feff}id,name\n1,\"two\nlines\"\n2,plain\n".as_bytes());
        assert_eq!(result, Ok(()));
        assert!(rejected.is_empty());
        assert_eq!(rows.iter().map(|(line, _)| *line).collect::<Vec<_>>(), [2, 4]);
        assert_eq!(rows[0].1.get("name"), Some(&Value::from("two\nlines")));
        assert_eq!(rows[0].1.get("id"), Some(&Value::Int(1)), "the BOM is not part of the first name");
    }

    #[test]
    fn a_row_with_the_wrong_field_count_is_rejected_and_the_rest_loads() {
        let (rows, rejected, result) = parsed(b"id,name\n1,a\n2,b,extra\n3,c\n\n4\n,\n");
        assert_eq!(result, Ok(()));
        assert_eq!(rows.len(), 2, "the all-empty row at the end is skipped");
        assert_eq!(rejected.iter().map(|(line, _)| *line).collect::<Vec<_>>(), [3, 6]);
        assert!(rejected[0].1.contains("3 fields where the header names 2"), "{}", rejected[0].1);
    }

    #[test]
    fn empty_cells_are_absent_attributes() {
        let (rows, _, _) = parsed(b"id,name,age\n1,,7\n");
        assert_eq!(rows[0].1.get("name"), None);
        assert_eq!(rows[0].1.len(), 2);
    }

    #[test]
    fn a_document_without_a_usable_header_fails() {
        assert!(parsed(b"").2.unwrap_err().contains("header row"));
        assert!(parsed(b"id,,name\n1,2,3\n").2.unwrap_err().contains("column 2 is empty"));
        assert!(parsed(b"id,name,id\n1,2,3\n").2.unwrap_err().contains("names 'id' twice (columns 1 and 3)"));
        assert!(parsed(b"id,a/b\n1,2\n").2.unwrap_err().contains("column 2"));
        assert!(parsed(b"\xff\xfe,x\n").2.unwrap_err().contains("not UTF-8"));
    }

    #[test]
    fn bytes_that_are_not_utf8_reject_their_row() {
        let (rows, rejected, result) = parsed(b"id,name\n1,ok\n2,\xff\xfe\n3,fine\n");
        assert_eq!(result, Ok(()));
        assert_eq!(rows.len(), 2);
        assert_eq!(rejected.len(), 1);
        assert_eq!(rejected[0].0, 3);
    }

    #[test]
    fn rows_and_rejections_arrive_in_line_order() {
        let (sender, mut receiver) = tokio::sync::mpsc::channel(1_000);
        let text = b"id\n1\n2,x\n3\n".to_vec();
        parse(std::io::Cursor::new(text), &dynamic, &sender).unwrap();
        drop(sender);
        let lines: Vec<u64> = receiver.try_recv().unwrap().into_iter().map(|(line, _)| line).collect();
        assert_eq!(lines, [2, 3, 4]);
    }
}
