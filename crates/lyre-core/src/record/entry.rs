//! A stored record as core sees it: header (version, flags, node), the record, and
//! the versions of its properties.
//!
//! Property versions let an out-of-order write (one carrying a version older than the
//! stored one, as a replicated write may) be merged property by property: a property
//! written later keeps its value. They are kept compactly as a base version (of every
//! property not listed) and the properties written at other versions. A record whose
//! properties all share its version stores no clock at all (the common case: inserts
//! and replaces); otherwise the body is `[record, clock]` and the header carries
//! [`Flags::PROPERTY_VERSIONS`].

use lyre_store::{Flags, RecordHeader, Version, decode_record, encode_record};

use crate::error::{Error, Result};
use crate::value::{Object, Value, write_msgpack, write_object};

/// Versions of a record's properties.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Clock {
    /// The version of every property not in `newer`.
    pub base: Version,
    /// Properties last written at another version.
    pub newer: Vec<(String, Version)>,
}

impl Clock {
    /// Every property at `version`.
    pub fn uniform(version: Version) -> Self {
        Self { base: version, newer: Vec::new() }
    }

    /// The version that last wrote `property`.
    pub fn of(&self, property: &str) -> Version {
        self.newer.iter().find(|(p, _)| p == property).map_or(self.base, |(_, v)| *v)
    }

    /// Records that `property` was written at `version`.
    pub fn set(&mut self, property: &str, version: Version) {
        match self.newer.iter_mut().find(|(p, _)| p == property) {
            Some(entry) => entry.1 = version,
            None if same(self.base, version) => {}
            None => self.newer.push((property.to_string(), version)),
        }
    }

    /// Drops entries for properties the record no longer has, and entries equal to
    /// the base.
    pub fn compact(&mut self, record: &Object) {
        let base = self.base;
        self.newer.retain(|(p, v)| record.contains_key(p) && !same(*v, base));
    }

    fn is_uniform(&self) -> bool {
        self.newer.is_empty()
    }
}

/// Version equality (time and node).
pub(crate) fn same(a: Version, b: Version) -> bool {
    a.time.to_bits() == b.time.to_bits() && a.node == b.node
}

/// A decoded stored record.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub record: Object,
    pub header: RecordHeader,
    pub clock: Clock,
}

impl Entry {
    /// The version of the record's last write.
    pub fn version(&self) -> Version {
        Version { time: self.header.version, node: self.header.node }
    }
}

/// Decodes a stored record with its clock.
pub(crate) fn decode_entry(stored: &[u8]) -> Result<Entry> {
    let (header, body) = decode_record(stored)?;
    let version = Version { time: header.version, node: header.node };
    if !header.flags.contains(Flags::PROPERTY_VERSIONS) {
        return Ok(Entry { record: object(decode_stored(body)?)?, header, clock: Clock::uniform(version) });
    }
    let Value::Array(mut parts) = decode_stored(body)? else {
        return Err(Error::Corrupt("a record with property versions is not a pair".into()));
    };
    if parts.len() != 2 {
        return Err(Error::Corrupt("a record with property versions is not a pair".into()));
    }
    let clock = decode_clock(parts.pop().unwrap_or_default())?;
    let record = object(parts.pop().unwrap_or_default())?;
    Ok(Entry { record, header, clock })
}

/// Decodes a stored record for a write that replaces it whole at `version`: only
/// its attributes among `names` when that write supersedes the rest (the record
/// has no property versions and was not written after `version`; an older write
/// merges property by property), else all of it, as [`decode_entry`] does.
pub(crate) fn decode_entry_replaced(stored: &[u8], names: &[String], version: Version) -> Result<Entry> {
    let (header, body) = decode_record(stored)?;
    let stored_version = Version { time: header.version, node: header.node };
    if header.flags.contains(Flags::PROPERTY_VERSIONS) || stored_version.cmp_order(&version).is_gt() {
        return decode_entry(stored);
    }
    let record = crate::raw::decode_object_only(body, names).map_err(|e| Error::Corrupt(e.into()))?;
    Ok(Entry { record, header, clock: Clock::uniform(stored_version) })
}

/// The header and the record's MessagePack bytes (without its property versions),
/// undecoded: what a read serves as it is stored.
pub(crate) fn stored_record(stored: &[u8]) -> Result<(RecordHeader, &[u8])> {
    let (header, body) = decode_record(stored)?;
    if !header.flags.contains(Flags::PROPERTY_VERSIONS) {
        return Ok((header, body));
    }
    let record = crate::raw::first_of_pair(body)
        .ok_or_else(|| Error::Corrupt("a record with property versions is not a pair".into()))?;
    Ok((header, record))
}

/// Decodes only the record (what reads need).
pub(crate) fn decode_object(stored: &[u8]) -> Result<Object> {
    let (_, body) = stored_record(stored)?;
    object(decode_stored(body)?)
}

/// Decodes only the record's attributes among `names` (what a search that reads a
/// few attributes needs).
pub(crate) fn decode_object_only(stored: &[u8], names: &[String]) -> Result<Object> {
    let (_, body) = stored_record(stored)?;
    crate::raw::decode_object_only(body, names).map_err(|e| Error::Corrupt(e.into()))
}

/// A stored MessagePack value, decoded.
fn decode_stored(body: &[u8]) -> Result<Value> {
    crate::raw::decode_value(body).map_err(|e| Error::Corrupt(e.into()))
}

/// Encodes a record for storage.
pub(crate) fn encode_entry(record: &Object, version: Version, flags: Flags, clock: &Clock) -> Vec<u8> {
    let mut body = Vec::with_capacity(64 + record.len() * 24);
    let flags = if clock.is_uniform() {
        flags.without(Flags::PROPERTY_VERSIONS)
    } else {
        // [record, [base time, base node, name, time, node, ...]]
        let _ = rmp::encode::write_array_len(&mut body, 2);
        flags.with(Flags::PROPERTY_VERSIONS)
    };
    write_object(record, &mut body);
    if !clock.is_uniform() {
        let mut items = vec![Value::Float(clock.base.time), Value::Int(i64::from(clock.base.node))];
        for (name, v) in &clock.newer {
            items.extend([Value::String(name.clone()), Value::Float(v.time), Value::Int(i64::from(v.node))]);
        }
        write_msgpack(&Value::Array(items), &mut body);
    }
    encode_record(&RecordHeader { version: version.time, flags, node: version.node }, &body)
}

fn object(value: Value) -> Result<Object> {
    match value {
        Value::Object(record) => Ok(record),
        other => Err(Error::Corrupt(format!("a stored record is a {}", other.type_name()))),
    }
}

fn decode_clock(value: Value) -> Result<Clock> {
    let corrupt = || Error::Corrupt("malformed property versions".into());
    let Value::Array(items) = value else { return Err(corrupt()) };
    let version = |time: &Value, node: &Value| -> Result<Version> {
        let time = time.as_f64().ok_or_else(corrupt)?;
        let node = match node {
            Value::Int(n) => u16::try_from(*n).map_err(|_| corrupt())?,
            _ => return Err(corrupt()),
        };
        Ok(Version { time, node })
    };
    let [time, node, rest @ ..] = items.as_slice() else { return Err(corrupt()) };
    let base = version(time, node)?;
    if rest.len() % 3 != 0 {
        return Err(corrupt());
    }
    let newer = rest
        .chunks(3)
        .map(|c| match &c[0] {
            Value::String(name) => Ok((name.clone(), version(&c[1], &c[2])?)),
            _ => Err(corrupt()),
        })
        .collect::<Result<_>>()?;
    Ok(Clock { base, newer })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(time: f64) -> Version {
        Version { time, node: 1 }
    }

    #[test]
    fn entries_round_trip_with_and_without_a_clock() {
        let record: Object =
            [("id".to_string(), Value::Int(1)), ("a".to_string(), Value::from("x"))].into_iter().collect();
        let plain = encode_entry(&record, v(10.0), Flags::empty(), &Clock::uniform(v(10.0)));
        let entry = decode_entry(&plain).unwrap();
        assert_eq!((entry.record.clone(), entry.clock.clone()), (record.clone(), Clock::uniform(v(10.0))));
        assert!(!entry.header.flags.contains(Flags::PROPERTY_VERSIONS));
        let mut clock = Clock::uniform(v(5.0));
        clock.set("a", v(10.0));
        let stored = encode_entry(&record, v(10.0), Flags::VERSION_NOT_UNIQUE, &clock);
        let entry = decode_entry(&stored).unwrap();
        assert_eq!(entry.clock, clock);
        assert_eq!(entry.record, record);
        assert!(
            entry.header.flags.contains(Flags::PROPERTY_VERSIONS)
                && entry.header.flags.contains(Flags::VERSION_NOT_UNIQUE)
        );
        assert_eq!(decode_object(&stored).unwrap(), record);
        assert_eq!(entry.clock.of("a").time, 10.0);
        assert_eq!(entry.clock.of("id").time, 5.0);
    }
}
