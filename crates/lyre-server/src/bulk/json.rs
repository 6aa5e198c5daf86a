//! Reading a JSON document (one array of records, as `import_from_s3` takes a
//! `.json` key) into batches of records, one element at a time (on a blocking
//! thread), so the array never sits whole in memory; one element may take at most
//! [`MAX_RECORD_BYTES`] of the document, so neither does a huge one.

use std::cell::Cell;
use std::fmt;
use std::io::Read;
use std::rc::Rc;

use lyre_core::Value;
use serde::de::{self, DeserializeSeed, SeqAccess, Visitor};

use super::lines::MAX_RECORD_BYTES;
use super::{BATCH_BYTES, BATCH_ROWS, Batch, LoadError};

/// Reads `source` as a JSON array of records, sending batches (each element a
/// record, or the reason it is not one, by its position from 1) in document order;
/// stops early (with `Ok`) when the receiver is gone.
pub fn parse<R: Read>(source: R, sender: &tokio::sync::mpsc::Sender<Batch>) -> Result<(), LoadError> {
    let read_since_element = Rc::new(Cell::new(0));
    let counted = Counted { inner: source, read: read_since_element.clone() };
    let mut reader = serde_json::Deserializer::from_reader(std::io::BufReader::new(counted));
    let mut feed = Feed {
        sender,
        batch: Batch::with_capacity(BATCH_ROWS),
        elements: 0,
        receiver_gone: false,
        read_since_element,
        batch_bytes: 0,
    };
    let read = (&mut feed).deserialize(&mut reader).and_then(|()| reader.end());
    match read {
        _ if feed.receiver_gone => Ok(()),
        Ok(()) => {
            if !feed.batch.is_empty() {
                let _ = sender.blocking_send(feed.batch);
            }
            Ok(())
        }
        Err(err) if err.is_io() => Err(LoadError::Read(err.into())),
        Err(err) if feed.elements == 0 => Err(LoadError::NotCsv(format!("the document is not a JSON array: {err}"))),
        Err(err) => Err(LoadError::NotCsv(format!("the JSON is malformed after record {}: {err}", feed.elements))),
    }
}

/// The visitor that batches the array's elements as they are read.
struct Feed<'a> {
    sender: &'a tokio::sync::mpsc::Sender<Batch>,
    batch: Batch,
    elements: u64,
    receiver_gone: bool,
    /// Bytes read since the last element ended.
    read_since_element: Rc<Cell<u64>>,
    /// Bytes of the elements in `batch`.
    batch_bytes: u64,
}

/// The document's reader, failing once one element has taken more than
/// [`MAX_RECORD_BYTES`] (counted from where the last one ended).
struct Counted<R> {
    inner: R,
    read: Rc<Cell<u64>>,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.read.get() > MAX_RECORD_BYTES {
            return Err(std::io::Error::other(format!("a record is longer than {} MiB", MAX_RECORD_BYTES >> 20)));
        }
        let n = self.inner.read(buf)?;
        self.read.set(self.read.get() + n as u64);
        Ok(n)
    }
}

impl<'de> DeserializeSeed<'de> for &mut Feed<'_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for &mut Feed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON array of records")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut elements: A) -> Result<(), A::Error> {
        while let Some(element) = elements.next_element::<Value>()? {
            self.elements += 1;
            self.batch_bytes += self.read_since_element.replace(0);
            let row = match element {
                Value::Object(record) => Ok(record),
                other => Err(format!("not an object but {}", kind(&other))),
            };
            self.batch.push((self.elements, row));
            if self.batch.len() == BATCH_ROWS || self.batch_bytes >= BATCH_BYTES as u64 {
                self.batch_bytes = 0;
                let full = std::mem::replace(&mut self.batch, Batch::with_capacity(BATCH_ROWS));
                if self.sender.blocking_send(full).is_err() {
                    self.receiver_gone = true;
                    return Err(de::Error::custom("the load stopped"));
                }
            }
        }
        Ok(())
    }
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Array(_) => "an array",
        Value::String(_) => "a string",
        _ => "a number",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each element's position and its record as JSON, or why it was rejected.
    type Rows = Vec<(u64, Result<String, String>)>;

    fn parsed(text: &str) -> (Result<(), String>, Rows) {
        let (sender, mut receiver) = tokio::sync::mpsc::channel(1_000);
        let result = parse(text.as_bytes(), &sender).map_err(|e| e.to_string());
        drop(sender);
        let mut rows = Vec::new();
        while let Ok(batch) = receiver.try_recv() {
            for (n, row) in batch {
                rows.push((n, row.map(|r| serde_json::to_string(&Value::Object(r)).unwrap())));
            }
        }
        (result, rows)
    }

    #[test]
    fn elements_become_records_and_others_are_rejected_by_position() {
        let (result, rows) = parsed(r#" [{"id":1,"tags":["a"]}, 7, {"id":2}] "#);
        assert_eq!(result, Ok(()));
        assert_eq!(rows[0], (1, Ok(r#"{"id":1,"tags":["a"]}"#.to_string())));
        assert_eq!(rows[1], (2, Err("not an object but a number".to_string())));
        assert_eq!(rows[2].0, 3);
    }

    #[test]
    fn a_document_that_is_not_an_array_fails_and_a_broken_one_says_where() {
        let (result, rows) = parsed(r#"{"id":1}"#);
        assert!(result.unwrap_err().starts_with("the document is not a JSON array"));
        assert!(rows.is_empty());
        let (result, _) = parsed(r#"[{"id":1},{"id":"#);
        assert!(result.unwrap_err().starts_with("the JSON is malformed after record 1"));
        let (result, _) = parsed(r#"[{"id":1}] trailing"#);
        assert!(result.is_err());
    }

    #[test]
    fn an_element_too_large_fails_the_load_instead_of_filling_memory() {
        let huge =
            format!(r#"[{{"id":1}},{{"id":2,"blob":"{}"}}]"#, "x".repeat(MAX_RECORD_BYTES as usize + (64 << 10)));
        let (result, rows) = parsed(&huge);
        let err = result.unwrap_err();
        assert!(err.contains("a record is longer than 16 MiB"), "{err}");
        assert!(rows.len() <= 1);
        // Many ordinary elements together pass the limit without tripping it.
        let many = format!("[{}]", vec![format!(r#"{{"note":"{}"}}"#, "y".repeat(1 << 20)); 20].join(","));
        assert_eq!(parsed(&many).0, Ok(()));
    }

    #[test]
    fn batches_hold_at_most_batch_rows() {
        let text = format!("[{}]", vec!["{}"; BATCH_ROWS + 5].join(","));
        let (sender, mut receiver) = tokio::sync::mpsc::channel(10);
        parse(text.as_bytes(), &sender).unwrap();
        assert_eq!(receiver.try_recv().unwrap().len(), BATCH_ROWS);
        assert_eq!(receiver.try_recv().unwrap().len(), 5);
    }
}
