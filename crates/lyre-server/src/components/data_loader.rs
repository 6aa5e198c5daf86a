//! The `dataLoader` plugin: JSON or YAML files of records (`{database?, table,
//! records: [...]}`) loaded into tables at each load, idempotently (Harper's
//! `resources/dataLoader.ts`).
//!
//! A record is written when its table has none with its primary key, or when the
//! file's version of it changed since it was loaded and nobody has changed the
//! loaded attributes since. A record the loader did not write, or whose loaded
//! attributes were changed through the API, is left alone. What was loaded is
//! remembered in `system.hdb_dataloader_hash`, one entry per record: the hash of
//! the file's record (`hash`, as Harper keeps it) and of those attributes as stored
//! (`stored`: the table may have coerced them, so the stored form is what a later
//! comparison sees).
//!
//! Each record the loader updates is written only if it is still the version it
//! read: one changed through the API in between fails the load (nothing of the file
//! is written) instead of being overwritten.
//!
//! Unlike Harper, which logs a bad record and loads the rest, a bad record fails the
//! component's load naming the file and the record, and nothing of that file is
//! written: every record is checked first, and a file's records are written in one
//! transaction.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;

use lyre_core::catalog::TableSpec;
use lyre_core::query::Select;

use lyre_core::{
    Context, Engine, Error, Expect, Object, RecordVersion, SYSTEM_DATABASE, Table, Value, WriteMode, WriteOptions,
};

use super::config::Patterns;

/// The system table remembering what was loaded.
const HASH_TABLE: &str = "hdb_dataloader_hash";

/// The largest data file read (it is parsed whole).
const MAX_FILE_BYTES: u64 = 64 << 20;

/// The database a file without `database` loads into.
const DEFAULT_DATABASE: &str = "data";

/// One data file, read and checked for shape.
#[derive(Debug)]
pub struct DataFile {
    /// Its path inside the component, for messages.
    file: String,
    /// `database`, when the file names one.
    database: Option<String>,
    table: String,
    records: Vec<Object>,
}

impl DataFile {
    /// `database.table`, or `table` when the file names no database (Harper's form in
    /// messages and hash ids).
    fn table_name(&self) -> String {
        match &self.database {
            Some(database) => format!("{database}.{}", self.table),
            None => self.table.clone(),
        }
    }
}

/// Reads every file matching `files`; fails naming the file that is not a data file
/// (extension, syntax, missing or mistyped `table` and `records`, a record that is
/// not an object, the `system` database).
pub fn read_files(dir: &Path, files: &Patterns) -> Result<Vec<DataFile>, String> {
    let mut out = Vec::new();
    for relative in files.globs().map_err(|e| format!("dataLoader.files: {e}"))?.files(dir)? {
        let file = relative.display().to_string();
        let path = dir.join(&relative);
        let extension = path.extension().and_then(|e| e.to_str()).unwrap_or("");
        let size = std::fs::metadata(&path).map_err(|e| format!("{file}: {e}"))?.len();
        if size > MAX_FILE_BYTES {
            return Err(format!("Data file {file} is {size} bytes; data files may hold at most {MAX_FILE_BYTES}"));
        }
        let text = std::fs::read_to_string(&path).map_err(|e| format!("{file}: {e}"))?;
        let parsed: Result<serde_json::Value, String> = match extension {
            "json" => serde_json::from_str(&text).map_err(|e| e.to_string()),
            "yaml" | "yml" => serde_saphyr::from_str(&text).map_err(|e| e.to_string()),
            _ => {
                return Err(format!(
                    "Unsupported file extension in {file}: .{extension}. Only YAML and JSON files are supported."
                ));
            }
        };
        let parsed = parsed.map_err(|e| format!("Failed to parse data file {file}: {e}"))?;
        out.push(shape(&file, parsed)?);
    }
    Ok(out)
}

/// Checks a parsed data file's shape and takes its records.
fn shape(file: &str, parsed: serde_json::Value) -> Result<DataFile, String> {
    let serde_json::Value::Object(mut document) = parsed else {
        return Err(format!("Data file {file} is empty or invalid"));
    };
    let missing = |property: &str| format!("Data file {file} is missing required \"{property}\" property");
    let table = match document.remove("table") {
        Some(serde_json::Value::String(table)) if !table.is_empty() => table,
        None | Some(serde_json::Value::Null) => return Err(missing("table")),
        Some(_) => return Err(format!("Data file {file} has invalid \"table\" property, expected string")),
    };
    let database = match document.remove("database") {
        None | Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::String(database)) => Some(database),
        Some(_) => return Err(format!("Data file {file} has invalid \"database\" property, expected string")),
    };
    if database.as_deref().is_some_and(|d| d.eq_ignore_ascii_case(SYSTEM_DATABASE)) {
        return Err(format!("{file}: Cannot load data into system database: {SYSTEM_DATABASE}.{table}"));
    }
    let records = match document.remove("records") {
        Some(serde_json::Value::Array(records)) => records,
        None | Some(serde_json::Value::Null) => return Err(missing("records")),
        Some(_) => return Err(format!("Data file {file} has invalid \"records\" property, expected array")),
    };
    let records = records
        .into_iter()
        .enumerate()
        .map(|(index, record)| match serde_json::from_value::<Value>(record) {
            Ok(Value::Object(record)) => Ok(record),
            _ => Err(format!("{file}: record {index} is not an object")),
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok(DataFile { file: file.to_string(), database, table, records })
}

/// A data file checked against its table: every record has a primary key and
/// values its attributes accept.
pub struct Checked {
    data: DataFile,
    table: Table,
    ids: Vec<Value>,
}

/// Checks one file's records against its table (created when missing), before
/// anything of the component is written.
pub async fn check(engine: &Engine, data: DataFile) -> Result<Checked, String> {
    let table = target_table(engine, &data).await.map_err(|e| format!("{}: {e}", data.file))?;
    let key = table.schema().primary_key.clone();
    let mut ids = Vec::with_capacity(data.records.len());
    for (index, record) in data.records.iter().enumerate() {
        let id = match record.get(&key) {
            Some(id) if id.as_key().is_some() && !matches!(id, Value::Null) => id.clone(),
            _ => return Err(format!("{}: record {index} has no '{key}'", data.file)),
        };
        table
            .check_record(WriteMode::Upsert, record)
            .map_err(|e| format!("{}: record {index} ({key} {}): {e}", data.file, json(&id)))?;
        ids.push(id);
    }
    Ok(Checked { data, table, ids })
}

/// What to do with one record of a file.
enum Step {
    /// Write it (new, or changed in the file and untouched since it was loaded).
    Write,
    /// Leave the record; remember it as loaded (it is what the file says, though
    /// the loader's memory of it was lost).
    Adopt(String),
    /// Leave it.
    Skip,
}

/// Loads one checked file's records (see the module's comment); returns Harper's
/// summary.
pub async fn load(engine: &Engine, checked: Checked) -> Result<String, String> {
    let Checked { data, table, ids } = checked;
    let system = Context::system();
    let file = data.file.clone();
    let failed = |e: Error| format!("{file}: {e}");
    let key = table.schema().primary_key.clone();
    let hashes = engine
        .database(SYSTEM_DATABASE)
        .map_err(failed)?
        .table_or_create(&system, TableSpec::dynamic(HASH_TABLE, "id"))
        .await
        .map_err(failed)?;
    let hash_ids: Vec<Value> = ids.iter().map(|id| Value::from(hash_id(&data, id))).collect();
    // Each existing record with the version it was read at: a record changed
    // between this read and the write fails the write (412) instead of being
    // overwritten.
    let mut existing = HashMap::new();
    for id in &ids {
        if let Some((record, version)) = table.get(&system, id).map_err(failed)? {
            existing.insert(json(id), (record, version.time));
        }
    }
    let remembered = by_id(hashes.get_many(&system, &hash_ids, &Select::Raw).map_err(failed)?, "id");

    let name = data.table_name();
    let (mut new, mut updated, mut skipped) = (0usize, 0usize, 0usize);
    let mut writes = Vec::new();
    let mut entries = Vec::new();
    for ((record, id), hash_key) in data.records.into_iter().zip(&ids).zip(&hash_ids) {
        let file_hash = hash(&record);
        let read = existing.get(&json(id));
        let step = match read {
            None => {
                new += 1;
                Step::Write
            }
            Some((stored, _)) => {
                let now = hash(&subset(stored, &record));
                let loaded = remembered.get(&json(hash_key));
                let loaded_hash = loaded.and_then(|l| l.get("hash")).and_then(Value::as_str);
                // Harper's entries hold the file's hash alone: it stands for the stored form.
                let loaded_stored = loaded.and_then(|l| l.get("stored")).and_then(Value::as_str).or(loaded_hash);
                match (loaded_hash, loaded_stored) {
                    (None, _) if now == file_hash => Step::Adopt(now),
                    (None, _) => Step::Skip,
                    (_, Some(stored_hash)) if stored_hash != now => Step::Skip,
                    (Some(loaded_hash), _) if loaded_hash == file_hash => Step::Skip,
                    _ => {
                        updated += 1;
                        Step::Write
                    }
                }
            }
        };
        match step {
            Step::Write => writes.push((record, hash_key.clone(), file_hash, read.map(|(_, version)| *version))),
            Step::Adopt(stored) => {
                skipped += 1;
                entries.push(hash_entry(hash_key, &file_hash, Some(stored)));
            }
            Step::Skip => skipped += 1,
        }
    }
    if !writes.is_empty() {
        let records: Vec<Object> = writes.iter().map(|(record, ..)| record.clone()).collect();
        let expect = writes
            .iter()
            .map(|(.., read_at)| {
                read_at.map(|read_at| Expect::Version(Arc::new(move |now: RecordVersion| now.time == read_at)))
            })
            .collect();
        let options = WriteOptions { expect, ..Default::default() };
        lyre_core::failpoint::hit("data-loader-write").map_err(failed)?;
        table.write_with(&system, WriteMode::Upsert, records, options).await.map_err(|e| match e.code() {
            lyre_core::Code::PreconditionFailed => {
                format!("{file}: records changed while the file was loading; nothing of it was written (load it again)")
            }
            _ => failed(e),
        })?;
        let written_ids: Vec<Value> = writes.iter().filter_map(|(record, ..)| record.get(&key).cloned()).collect();
        let stored = by_id(table.get_many(&system, &written_ids, &Select::Raw).map_err(failed)?, &key);
        for (record, hash_key, file_hash, _) in &writes {
            let as_stored = record.get(&key).and_then(|id| stored.get(&json(id))).map(|s| hash(&subset(s, record)));
            entries.push(hash_entry(hash_key, file_hash, as_stored));
        }
    }
    // Written after the records (they live in another database): a failure between
    // the two leaves records the next load adopts, since they are what the file says.
    if !entries.is_empty() {
        hashes.upsert(&system, entries).await.map_err(failed)?;
    }
    Ok(if new + updated > 0 {
        let skipped = if skipped > 0 { format!(" ({skipped} records skipped)") } else { String::new() };
        format!("Loaded {new} new and updated {updated} records in {name}{skipped}")
    } else if skipped > 0 {
        format!("All {skipped} records in {name} already up-to-date")
    } else {
        format!("No records to process in {name}")
    })
}

/// The hash table's entry for one record.
fn hash_entry(hash_key: &Value, file_hash: &str, stored: Option<String>) -> Object {
    let mut entry = Object::default();
    entry.insert("id".into(), hash_key.clone());
    entry.insert("hash".into(), Value::from(file_hash));
    entry.insert("stored".into(), stored.map_or(Value::Null, Value::from));
    entry
}

/// The file's table, created (dynamic, keyed by `id`) when it does not exist.
async fn target_table(engine: &Engine, data: &DataFile) -> Result<Table, Error> {
    let database = data.database.as_deref().unwrap_or(DEFAULT_DATABASE);
    if let Ok(table) = engine.database(database).and_then(|db| db.table(&data.table)) {
        return Ok(table);
    }
    let created = engine.create_table(&Context::system(), database, TableSpec::dynamic(&data.table, "id")).await;
    match engine.database(database).and_then(|db| db.table(&data.table)) {
        Ok(table) => Ok(table),
        Err(err) => Err(created.err().unwrap_or(err)),
    }
}

/// A record's entry id in the hash table: `database:table:id` (Harper's).
fn hash_id(data: &DataFile, id: &Value) -> String {
    let id = match id {
        Value::String(text) => text.to_string(),
        other => json(other),
    };
    match &data.database {
        Some(database) => format!("{database}:{}:{id}", data.table),
        None => format!("{}:{id}", data.table),
    }
}

/// The records by their `key` attribute (as JSON text, so any key type works).
fn by_id(records: Vec<Object>, key: &str) -> HashMap<String, Object> {
    records.into_iter().filter_map(|r| Some((json(r.get(key)?), r))).collect()
}

/// The attributes of `stored` that `record` sets.
fn subset(stored: &Object, record: &Object) -> Object {
    record.keys().filter_map(|k| Some((k.clone(), stored.get(k)?.clone()))).collect()
}

/// SHA-256 (hex) of a record's JSON with its top-level keys sorted (Harper's
/// `computeRecordHash`).
fn hash(record: &Object) -> String {
    let sorted: BTreeMap<&String, &Value> = record.iter().collect();
    let text = serde_json::to_vec(&sorted).unwrap_or_default();
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, &text);
    digest.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

fn json(value: &Value) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn files_are_checked_for_shape_before_anything_loads() {
        let good = shape("d.json", json!({"table": "dogs", "records": [{"id": 1, "name": "Rex"}]})).unwrap();
        assert_eq!((good.table_name().as_str(), good.records.len()), ("dogs", 1));
        let named = shape("d.json", json!({"database": "dev", "table": "dogs", "records": []})).unwrap();
        assert_eq!(hash_id(&named, &Value::from("a")), "dev:dogs:a");
        assert_eq!(hash_id(&good, &Value::from(7)), "dogs:7");
        for (document, expected) in [
            (json!(null), "empty or invalid"),
            (json!({"records": []}), "missing required \"table\""),
            (json!({"table": "t"}), "missing required \"records\""),
            (json!({"table": "t", "records": {}}), "expected array"),
            (json!({"table": "t", "records": [1]}), "record 0 is not an object"),
            (json!({"database": "System", "table": "t", "records": []}), "system database"),
        ] {
            let err = shape("d.json", document.clone()).unwrap_err();
            assert!(err.contains(expected) && err.contains("d.json"), "{document}: {err}");
        }
    }

    #[test]
    fn hashes_ignore_key_order() {
        let a: Object = [("a".to_string(), Value::from(1)), ("b".to_string(), Value::from("x"))].into_iter().collect();
        let b: Object = [("b".to_string(), Value::from("x")), ("a".to_string(), Value::from(1))].into_iter().collect();
        assert_eq!(hash(&a), hash(&b));
        // Harper's computeRecordHash: SHA-256 of JSON.stringify({a: 1, b: "x"}).
        assert_eq!(hash(&a), "ecf9e98ec0641e23113ff3ce8bdc78d0ddd249886517fd4a7f68cc83d4e65667");
        let c: Object = [("a".to_string(), Value::from(2))].into_iter().collect();
        assert_ne!(hash(&a), hash(&c));
    }
}
