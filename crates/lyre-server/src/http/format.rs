//! The wire formats Lyre answers in (JSON, CBOR, MessagePack, CSV, YAML, plain
//! text): their media types and how a whole value is encoded in each. Reading a
//! body and choosing a format from the request's headers is `negotiate.rs`.

use serde::Serialize;

/// A wire format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `application/json`.
    Json,
    /// `application/cbor`.
    Cbor,
    /// `application/x-msgpack`.
    MessagePack,
    /// `text/csv` (responses only).
    Csv,
    /// `text/yaml`, as Harper serves and reads it.
    Yaml,
    /// `text/plain` (responses only): a scalar as its text, anything else as JSON.
    Text,
}

/// A value could not be encoded in the format asked (answered as a 500).
#[derive(Debug)]
pub struct EncodeError(pub String);

impl std::fmt::Display for EncodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "encoding the response failed: {}", self.0)
    }
}

impl Format {
    /// The `Content-Type` of a response in this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Json => "application/json",
            Format::Cbor => "application/cbor",
            Format::MessagePack => "application/x-msgpack",
            Format::Csv => "text/csv",
            Format::Yaml => "text/yaml; charset=utf-8",
            Format::Text => "text/plain; charset=utf-8",
        }
    }

    /// The format an error is answered in: the binary formats as asked, the text
    /// ones (CSV, YAML, plain) as JSON, the `{"error": ...}` shape clients parse.
    pub fn for_errors(self) -> Format {
        match self {
            Format::Csv | Format::Yaml | Format::Text => Format::Json,
            binary => binary,
        }
    }

    /// The format a media type names, if it is one of ours.
    pub(crate) fn from_media_type(media: &str) -> Option<Format> {
        match media {
            "application/json" | "*/*" | "application/*" | "" => Some(Format::Json),
            "application/cbor" => Some(Format::Cbor),
            "application/x-msgpack" | "application/msgpack" => Some(Format::MessagePack),
            "text/csv" => Some(Format::Csv),
            "text/yaml" | "application/yaml" | "application/x-yaml" => Some(Format::Yaml),
            "text/plain" | "text/*" => Some(Format::Text),
            _ => None,
        }
    }

    /// Encodes a whole value.
    pub fn encode<T: Serialize>(self, value: &T) -> Result<Vec<u8>, EncodeError> {
        self.encode_sized(value, 0)
    }

    /// Encodes one record (a whole-record read): JSON straight from its stored
    /// bytes, the other formats through their serializers.
    pub fn encode_record(self, record: &lyre_core::RecordBody) -> Result<Vec<u8>, EncodeError> {
        if self != Format::Json {
            return self.encode_sized(record, record.size_hint());
        }
        let mut out = Vec::with_capacity(record.size_hint());
        record.write_json(&mut out).map_err(|e| EncodeError(e.to_string()))?;
        Ok(out)
    }

    /// Encodes a whole value into a buffer made for about `size` bytes (a known
    /// size saves the buffer's regrowth on the hot path).
    pub fn encode_sized<T: Serialize>(self, value: &T, size: usize) -> Result<Vec<u8>, EncodeError> {
        let failed = EncodeError;
        let mut out = Vec::with_capacity(size.max(128));
        match self {
            Format::Json => serde_json::to_writer(&mut out, value).map(|()| out).map_err(|e| failed(e.to_string())),
            Format::Cbor => {
                ciborium::into_writer(value, &mut out).map_err(|e| failed(e.to_string()))?;
                Ok(out)
            }
            Format::MessagePack => {
                rmp_serde::encode::write(&mut out, value).map(|()| out).map_err(|e| failed(e.to_string()))
            }
            Format::Csv => {
                let value = serde_json::to_value(value).map_err(|e| failed(e.to_string()))?;
                let rows = match value {
                    serde_json::Value::Array(items) => items,
                    other => vec![other],
                };
                let mut csv = CsvWriter::default();
                for row in &rows {
                    csv.row(row);
                }
                Ok(csv.finish())
            }
            Format::Yaml => serde_saphyr::to_string(value).map(String::into_bytes).map_err(|e| failed(e.to_string())),
            Format::Text => match serde_json::to_value(value).map_err(|e| failed(e.to_string()))? {
                serde_json::Value::String(text) => Ok(text.into_bytes()),
                other => Ok(other.to_string().into_bytes()),
            },
        }
    }
}

/// Writes rows as Harper's CSV: a header of the first row's keys (all quoted), string
/// values quoted, numbers and booleans bare, null empty, objects and arrays as quoted
/// JSON; rows separated by `\n`, no trailing newline.
#[derive(Default)]
pub struct CsvWriter {
    out: Vec<u8>,
    columns: Option<Vec<String>>,
}

impl CsvWriter {
    /// Appends one row (an object; any other value is one `value` column).
    pub fn row(&mut self, row: &serde_json::Value) {
        if self.columns.is_none() {
            let columns: Vec<String> = match row {
                serde_json::Value::Object(map) => map.keys().cloned().collect(),
                _ => vec!["value".to_string()],
            };
            let header: Vec<String> = columns.iter().map(|c| quote(c)).collect();
            self.out.extend_from_slice(header.join(",").as_bytes());
            self.columns = Some(columns);
        }
        let columns = self.columns.as_deref().unwrap_or_default();
        let cells: Vec<String> = match row {
            serde_json::Value::Object(map) => columns.iter().map(|c| cell(map.get(c))).collect(),
            other => vec![cell(Some(other))],
        };
        self.out.push(b'\n');
        self.out.extend_from_slice(cells.join(",").as_bytes());
    }

    /// Takes what has been written so far.
    pub fn take(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.out)
    }

    /// The whole output.
    pub fn finish(self) -> Vec<u8> {
        self.out
    }
}

fn quote(text: &str) -> String {
    format!("\"{}\"", text.replace('"', "\"\""))
}

fn cell(value: Option<&serde_json::Value>) -> String {
    match value {
        None | Some(serde_json::Value::Null) => String::new(),
        Some(serde_json::Value::String(s)) => quote(s),
        Some(serde_json::Value::Number(n)) => n.to_string(),
        Some(serde_json::Value::Bool(b)) => b.to_string(),
        Some(other) => quote(&other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use lyre_core::testing::record;
    use lyre_core::{RecordBody, Value};
    use proptest::prelude::*;

    use super::Format;

    const EVERY_FORMAT: [Format; 6] =
        [Format::Json, Format::Cbor, Format::MessagePack, Format::Csv, Format::Yaml, Format::Text];

    proptest! {
        /// A record served from its stored bytes (the whole-record `GET`) is byte
        /// for byte what the decoded record encodes to, in every format.
        #[test]
        fn a_stored_record_encodes_as_its_decoded_form(r in record()) {
            let stored = RecordBody::Stored(Value::Object(r.clone()).to_msgpack());
            let decoded = RecordBody::Decoded(r.clone());
            for format in EVERY_FORMAT {
                let general = format.encode(&Value::Object(r.clone())).map_err(|e| e.0);
                prop_assert_eq!(&format.encode_record(&stored).map_err(|e| e.0), &general);
                prop_assert_eq!(&format.encode_record(&decoded).map_err(|e| e.0), &general);
                prop_assert_eq!(&format.encode(&stored).map_err(|e| e.0), &general);
            }
        }
    }
}
