//! How a write combines with the stored record.
//!
//! * A replace (insert, `PUT`) sets the whole record; an update/upsert/`PATCH`
//!   merges top-level properties.
//! * A property value `{"__op__": "add", "value": n}` adds `n` to the stored number
//!   (a missing or non-numeric stored value counts as 0): Harper's `addTo` /
//!   `subtractFrom`. Adds commute, so they apply whatever the write's version.
//! * A write whose version is older than the stored record's (a replicated or origin
//!   write arriving out of order) is resequenced: each plain property takes the write's
//!   value only if nothing later wrote that property; the record keeps the newer
//!   version and is flagged [`Flags::VERSION_NOT_UNIQUE`], because its content changed
//!   while its version did not. The next in-order write clears the flag.

use lyre_store::{Flags, Version};

use crate::catalog::TableSchema;
use crate::error::{Error, Result};
use crate::record::entry::{Clock, Entry};
use crate::value::{Object, Value, object_with_capacity};

/// How a write treats existing and missing records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteMode {
    /// Create; skip records whose key exists.
    Insert,
    /// Merge into existing records; skip records with no match.
    Update,
    /// Merge into existing records, creating missing ones.
    Upsert,
    /// Replace the whole record, creating it if missing (REST `PUT`).
    Replace,
}

impl WriteMode {
    /// The operation name the transaction log records for a write in this mode.
    pub(crate) fn operation(self) -> &'static str {
        match self {
            WriteMode::Insert => "insert",
            WriteMode::Update => "update",
            WriteMode::Upsert => "upsert",
            WriteMode::Replace => "put",
        }
    }
}

/// A CRDT operation carried as a property value.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Op {
    /// Add this number (negative subtracts).
    Add(Value),
}

/// The operation a property value carries, if it is one; an object with `__op__` that
/// is not a valid operation is an error naming the property.
pub(crate) fn crdt_op(property: &str, value: &Value) -> Result<Option<Op>> {
    let Value::Object(object) = value else { return Ok(None) };
    let Some(op) = object.get("__op__") else { return Ok(None) };
    match (op, object.get("value")) {
        (Value::String(name), Some(n @ (Value::Int(_) | Value::Float(_)))) if name == "add" && object.len() == 2 => {
            Ok(Some(Op::Add(n.clone())))
        }
        (Value::String(name), _) if name == "add" => {
            Err(Error::invalid(format!("{property}: an \"add\" operation needs a numeric \"value\"")))
        }
        _ => {
            let shown = match op {
                Value::String(name) => format!("\"{name}\""),
                other => other.to_string(),
            };
            Err(Error::invalid(format!(
                "{property}: unknown operation {shown}; the supported one is {{\"__op__\": \"add\", \"value\": n}}"
            )))
        }
    }
}

/// `base + n`, integers staying integers when they can; an error naming `property`
/// when the sum is not a finite number.
pub(crate) fn add(property: &str, base: Option<&Value>, n: &Value) -> Result<Value> {
    let base = match base {
        Some(v @ (Value::Int(_) | Value::Float(_))) => v.clone(),
        _ => Value::Int(0),
    };
    let sum = match (&base, n) {
        (Value::Int(a), Value::Int(b)) => {
            a.checked_add(*b).map(Value::Int).unwrap_or(Value::Float(*a as f64 + *b as f64))
        }
        _ => Value::Float(base.as_f64().unwrap_or(0.0) + n.as_f64().unwrap_or(0.0)),
    };
    match sum {
        Value::Float(f) if !f.is_finite() => {
            Err(Error::invalid(format!("{property}: the sum of this \"add\" is too large to store")))
        }
        sum => Ok(sum),
    }
}

/// Whether `a` is later than `b` (time, then node).
fn later(a: Version, b: Version) -> bool {
    a.cmp_order(&b) == std::cmp::Ordering::Greater
}

/// Whether a write at `a` comes after one at `b`. An equal version is the same
/// transaction writing the record again (the clock never issues a version twice, and
/// a redelivered write is skipped before it is merged), so the later write wins.
fn not_older(a: Version, b: Version) -> bool {
    a.cmp_order(&b) != std::cmp::Ordering::Less
}

/// The outcome of a merge.
#[derive(Debug)]
pub(crate) struct Merged {
    /// The record to store (without server time stamps).
    pub record: Object,
    /// Its property versions.
    pub clock: Clock,
    /// Its version: the later of the stored and the written.
    pub version: Version,
    /// Its flags.
    pub flags: Flags,
}

/// `body` as a whole record: the primary key first, then the body's properties in
/// order, each `add` applied to its value in `stored` (or to nothing). Made in the
/// body's own map when the body carries no operation, the common write, so its
/// keys are not hashed and inserted again.
fn with_key_first(pk: &str, id: &Value, mut body: Object, stored: Option<&Object>) -> Result<Object> {
    if !body.contains_key(pk) && !carries_operation(&body)? {
        body.shift_insert(0, pk.to_string(), id.clone());
        return Ok(body);
    }
    let mut record = object_with_capacity(body.len() + 1);
    record.insert(pk.to_string(), id.clone());
    for (k, v) in body {
        let value = match crdt_op(&k, &v)? {
            Some(Op::Add(n)) => add(&k, stored.and_then(|record| record.get(&k)), &n)?,
            None => v,
        };
        record.insert(k, value);
    }
    Ok(record)
}

/// Whether any property of `body` is an operation; a malformed one is an error.
fn carries_operation(body: &Object) -> Result<bool> {
    for (k, v) in body {
        if crdt_op(k, v)?.is_some() {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Combines `body` (its primary key removed) written at `version` with the stored
/// `entry`, if any.
pub(crate) fn merge(
    table: &TableSchema,
    mode: WriteMode,
    entry: Option<&Entry>,
    body: Object,
    id: &Value,
    version: Version,
) -> Result<Merged> {
    let pk = &table.primary_key;
    let Some(entry) = entry else {
        let record = with_key_first(pk, id, body, None)?;
        return Ok(Merged { record, clock: Clock::uniform(version), version, flags: Flags::empty() });
    };
    let stored_version = entry.version();
    let in_order = not_older(version, stored_version);
    let replace = matches!(mode, WriteMode::Insert | WriteMode::Replace);
    let mut clock = entry.clock.clone();
    let record = if replace && in_order {
        // A newer full write supersedes everything; adds still apply to the stored value.
        clock = Clock::uniform(version);
        with_key_first(pk, id, body, Some(&entry.record))?
    } else {
        let mut record = object_with_capacity(entry.record.len() + body.len());
        record.insert(pk.clone(), id.clone());
        // Merge property by property; an older full write also removes the properties
        // it lacks, where nothing later wrote them.
        for (k, v) in &entry.record {
            if k == pk {
                continue;
            }
            let superseded = replace && !body.contains_key(k) && not_older(version, clock.of(k));
            if !superseded {
                record.insert(k.clone(), v.clone());
            }
        }
        for (k, v) in body {
            match crdt_op(&k, &v)? {
                Some(Op::Add(n)) => {
                    let sum = add(&k, record.get(&k), &n)?;
                    record.insert(k.clone(), sum);
                    if later(version, clock.of(&k)) {
                        clock.set(&k, version);
                    }
                }
                None if !record.contains_key(&k) || not_older(version, clock.of(&k)) => {
                    clock.set(&k, version);
                    record.insert(k, v);
                }
                None => {} // written later: the newer value wins
            }
        }
        record
    };
    let record_version = if in_order { version } else { stored_version };
    let flags = if in_order {
        entry.header.flags.without(Flags::VERSION_NOT_UNIQUE)
    } else {
        entry.header.flags.with(Flags::VERSION_NOT_UNIQUE)
    };
    clock.compact(&record);
    Ok(Merged { record, clock, version: record_version, flags })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{DatabaseSchema, TableSpec};
    use lyre_store::RecordHeader;

    fn table() -> TableSchema {
        let mut db = DatabaseSchema::new("dev");
        db.new_table(&TableSpec {
            name: "t".into(),
            primary_key: "id".into(),
            primary_key_type: None,
            attributes: Some(Vec::new()),
            audit: true,
            expiration: None,
            expires_at: None,
        })
    }

    fn obj(json: &str) -> Object {
        match serde_json::from_str::<Value>(json).unwrap() {
            Value::Object(o) => o,
            _ => panic!("not an object"),
        }
    }

    fn v(time: f64) -> Version {
        Version { time, node: 1 }
    }

    fn entry(merged: Merged) -> Entry {
        Entry {
            record: merged.record,
            header: RecordHeader { version: merged.version.time, flags: merged.flags, node: merged.version.node },
            clock: merged.clock,
        }
    }

    /// A new record is the body with the key first, in the body's order, whether
    /// it is made in the body's own map (no operation) or built anew (an `add`).
    #[test]
    fn a_body_becomes_the_record_with_its_key_first_in_its_order() {
        let keys = |record: &Object| record.keys().cloned().collect::<Vec<_>>();
        let plain = obj(r#"{"b":1,"a":{"x":[1,2]},"c":"z"}"#);
        let id = Value::Int(5);
        let stored = entry(merge(&table(), WriteMode::Replace, None, obj(r#"{"b":7,"d":true}"#), &id, v(1.0)).unwrap());
        for entry in [None, Some(&stored)] {
            let merged = merge(&table(), WriteMode::Replace, entry, plain.clone(), &id, v(2.0)).unwrap();
            assert_eq!(keys(&merged.record), ["id", "b", "a", "c"]);
            assert_eq!(merged.record["id"], Value::Int(5));
            assert_eq!(merged.record["a"], plain["a"]);
            let added = obj(r#"{"b":{"__op__":"add","value":2},"a":1}"#);
            let merged = merge(&table(), WriteMode::Replace, entry, added, &id, v(2.0)).unwrap();
            assert_eq!(keys(&merged.record), ["id", "b", "a"]);
            assert_eq!(merged.record["b"], Value::Int(if entry.is_some() { 9 } else { 2 }));
        }
    }

    #[test]
    fn adds_commute_and_count_from_zero() {
        let t = table();
        let id = Value::Int(1);
        let created = entry(
            merge(&t, WriteMode::Upsert, None, obj(r#"{"hits":{"__op__":"add","value":2}}"#), &id, v(1.0)).unwrap(),
        );
        assert_eq!(created.record["hits"], Value::Int(2));
        let next =
            merge(&t, WriteMode::Update, Some(&created), obj(r#"{"hits":{"__op__":"add","value":-5}}"#), &id, v(2.0))
                .unwrap();
        assert_eq!(next.record["hits"], Value::Int(-3));
        let float =
            merge(&t, WriteMode::Update, Some(&created), obj(r#"{"hits":{"__op__":"add","value":0.5}}"#), &id, v(2.0))
                .unwrap();
        assert_eq!(float.record["hits"], Value::Float(2.5));
        let text = entry(merge(&t, WriteMode::Upsert, None, obj(r#"{"hits":"many"}"#), &id, v(1.0)).unwrap());
        assert_eq!(
            merge(&t, WriteMode::Update, Some(&text), obj(r#"{"hits":{"__op__":"add","value":1}}"#), &id, v(2.0))
                .unwrap()
                .record["hits"],
            Value::Int(1)
        );
        // Out of order, an add still counts.
        let late =
            merge(&t, WriteMode::Update, Some(&created), obj(r#"{"hits":{"__op__":"add","value":10}}"#), &id, v(0.5))
                .unwrap();
        assert_eq!(late.record["hits"], Value::Int(12));
        assert!(crdt_op("x", &serde_json::from_str(r#"{"__op__":"mul","value":2}"#).unwrap()).is_err());
        assert!(crdt_op("x", &serde_json::from_str(r#"{"__op__":"add","value":"2"}"#).unwrap()).is_err());
    }

    #[test]
    fn out_of_order_writes_lose_to_newer_properties_and_flag_the_record() {
        let t = table();
        let id = Value::Int(1);
        let first = entry(merge(&t, WriteMode::Upsert, None, obj(r#"{"a":1,"b":1}"#), &id, v(1.0)).unwrap());
        let second = entry(merge(&t, WriteMode::Update, Some(&first), obj(r#"{"b":10}"#), &id, v(10.0)).unwrap());
        assert_eq!(second.clock.of("a").time, 1.0);
        assert_eq!(second.clock.of("b").time, 10.0);
        // A write at t=5: `a` (last written at 1) takes it, `b` (written at 10) keeps 10.
        let late = merge(&t, WriteMode::Update, Some(&second), obj(r#"{"a":5,"b":5,"c":5}"#), &id, v(5.0)).unwrap();
        assert_eq!(
            (late.record["a"].clone(), late.record["b"].clone(), late.record["c"].clone()),
            (Value::Int(5), Value::Int(10), Value::Int(5))
        );
        assert_eq!(late.version.time, 10.0, "the version does not go back");
        assert!(late.flags.contains(Flags::VERSION_NOT_UNIQUE));
        let late = entry(late);
        let next = merge(&t, WriteMode::Update, Some(&late), obj(r#"{"a":11}"#), &id, v(11.0)).unwrap();
        assert!(!next.flags.contains(Flags::VERSION_NOT_UNIQUE), "an in-order write clears the flag");
        // An older full write removes only what nothing later wrote.
        let replaced = merge(&t, WriteMode::Replace, Some(&late), obj(r#"{"z":1}"#), &id, v(6.0)).unwrap();
        assert!(
            !replaced.record.contains_key("a")
                && replaced.record.contains_key("b")
                && replaced.record.contains_key("z")
        );
    }
}
