//! The dynamic record value: what a record, an attribute value and a query value are.
//!
//! Numbers keep their integer/float distinction; objects keep their key order.
//! Stored as MessagePack; the protocols render it as JSON, CBOR or MessagePack.

use std::cmp::Ordering;
use std::fmt;

use indexmap::IndexMap;
use lyre_store::KeyValue;
use serde::de::{self, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A record or nested object: attribute names to values, in insertion order.
/// Hashed with foldhash (a random seed per process and per map): every read looks
/// attribute names up (decoding, filtering, projecting), and SipHash cost about a
/// fifth of a large join's time. foldhash resists hash flooding less than SipHash;
/// an object's keys are bounded by the request body's size limit. Build one with
/// `Object::default()` or [`object_with_capacity`].
pub type Object = IndexMap<String, Value, foldhash::fast::RandomState>;

/// An empty object with room for `capacity` attributes.
pub fn object_with_capacity(capacity: usize) -> Object {
    Object::with_capacity_and_hasher(capacity, foldhash::fast::RandomState::default())
}

/// A dynamically typed value.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Value {
    /// JSON null.
    #[default]
    Null,
    /// A boolean.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A float.
    Float(f64),
    /// A UTF-8 string.
    String(String),
    /// Raw bytes (from CBOR or MessagePack bodies).
    Bytes(Vec<u8>),
    /// An array.
    Array(Vec<Value>),
    /// An object.
    Object(Object),
    /// A reference to a blob: a large value stored in a file beside the database
    /// (`blobs/`). Only the server makes one (a write to a `Blob` attribute); no
    /// request format decodes to it, so a client cannot point a record at a file.
    Blob(Box<BlobRef>),
}

/// Where a blob's bytes are and what they are: stored in the record (MessagePack
/// extension type [`BLOB_EXT`]) in place of the bytes themselves.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BlobRef {
    /// Which of the database's blob roots (`storage.blobPaths`) holds the file.
    pub root: u8,
    /// The file's id, unique within the database (random).
    pub id: u64,
    /// The blob's length in bytes.
    pub size: u64,
    /// Its media type (`application/octet-stream` when none was given).
    pub content_type: String,
}

/// The MessagePack extension type a stored [`BlobRef`] carries.
pub const BLOB_EXT: i8 = 11;

/// The version byte that starts a stored [`BlobRef`]'s extension data.
const BLOB_FORMAT: u8 = 1;

/// What JSON shows for a blob that is not text (Harper's words).
pub const BLOB_DESCRIPTION: &str = "Blobs that are not of type text/* can not be directly serialized as JSON, use as the body of a response or convert to another type";

impl BlobRef {
    /// The extension data: format, root, id, size, then the media type.
    pub fn encode_ext(&self) -> Vec<u8> {
        let mut data = Vec::with_capacity(18 + self.content_type.len());
        data.push(BLOB_FORMAT);
        data.push(self.root);
        data.extend_from_slice(&self.id.to_be_bytes());
        data.extend_from_slice(&self.size.to_be_bytes());
        data.extend_from_slice(self.content_type.as_bytes());
        data
    }

    /// Reads [`BlobRef::encode_ext`]'s data back; `None` when it is not that.
    pub fn decode_ext(data: &[u8]) -> Option<BlobRef> {
        let (&BLOB_FORMAT, rest) = data.split_first()? else { return None };
        let (&root, rest) = rest.split_first()?;
        let id = u64::from_be_bytes(rest.get(..8)?.try_into().ok()?);
        let size = u64::from_be_bytes(rest.get(8..16)?.try_into().ok()?);
        let content_type = std::str::from_utf8(rest.get(16..)?).ok()?.to_string();
        Some(BlobRef { root, id, size, content_type })
    }

    /// How a blob shows inside a record rendered as JSON, CBOR or MessagePack: a
    /// text blob as `[blob: <type>, <size> bytes]`, any other as Harper's
    /// description object. The bytes themselves are served by `GET /T/<id>.<attr>`.
    pub fn placeholder(&self) -> Value {
        if self.content_type.starts_with("text") {
            return Value::String(format!("[blob: {}, {} bytes]", self.content_type, self.size));
        }
        let mut object = object_with_capacity(1);
        object.insert("description".to_string(), Value::String(BLOB_DESCRIPTION.to_string()));
        Value::Object(object)
    }
}

impl Value {
    /// The value as an index or primary key, when it is a scalar that can be one.
    pub fn as_key(&self) -> Option<KeyValue<'_>> {
        match self {
            Value::Null => Some(KeyValue::Null),
            Value::Bool(b) => Some(KeyValue::Bool(*b)),
            Value::Int(i) => Some(KeyValue::Int(*i)),
            Value::Float(f) if !f.is_nan() => Some(KeyValue::Float(*f)),
            Value::String(s) => Some(KeyValue::Str(s)),
            _ => None,
        }
    }

    /// The string, when the value is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// The number as a float, when the value is one.
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Value::Int(i) => Some(*i as f64),
            Value::Float(f) => Some(*f),
            _ => None,
        }
    }

    /// The name of the value's type, for error messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Bool(_) => "boolean",
            Value::Int(_) | Value::Float(_) => "number",
            Value::String(_) => "string",
            Value::Bytes(_) => "bytes",
            Value::Array(_) => "array",
            Value::Object(_) => "object",
            Value::Blob(_) => "blob",
        }
    }

    /// Orders two scalars the way their index keys order: null < booleans < numbers <
    /// strings; numbers numerically. `None` when either is not a scalar.
    pub fn cmp_scalar(&self, other: &Value) -> Option<Ordering> {
        let rank = |v: &Value| match v {
            Value::Null => Some(0),
            Value::Bool(_) => Some(1),
            Value::Int(_) | Value::Float(_) => Some(2),
            Value::String(_) => Some(3),
            _ => None,
        };
        let (ra, rb) = (rank(self)?, rank(other)?);
        if ra != rb {
            return Some(ra.cmp(&rb));
        }
        Some(match (self, other) {
            (Value::Null, Value::Null) => Ordering::Equal,
            (Value::Bool(a), Value::Bool(b)) => a.cmp(b),
            (Value::Int(a), Value::Int(b)) => a.cmp(b),
            (Value::String(a), Value::String(b)) => a.as_bytes().cmp(b.as_bytes()),
            (Value::Int(a), Value::Float(b)) => cmp_int_float(*a, *b)?,
            (Value::Float(a), Value::Int(b)) => cmp_int_float(*b, *a)?.reverse(),
            (Value::Float(a), Value::Float(b)) => a.partial_cmp(b)?,
            _ => return None,
        })
    }

    /// Decodes a value from MessagePack.
    pub fn from_msgpack(bytes: &[u8]) -> Result<Value, rmp_serde::decode::Error> {
        rmp_serde::from_slice(bytes)
    }

    /// Encodes the value as MessagePack.
    pub fn to_msgpack(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64);
        write_msgpack(self, &mut out);
        out
    }
}

/// Compares an integer with a float exactly (no rounding of the integer).
fn cmp_int_float(i: i64, f: f64) -> Option<Ordering> {
    if f.is_nan() {
        return None;
    }
    // Beyond ±2^63 every i64 is on one side; within it, compare with the float's floor.
    if f >= 9_223_372_036_854_775_808.0 {
        return Some(Ordering::Less);
    }
    if f < -9_223_372_036_854_775_808.0 {
        return Some(Ordering::Greater);
    }
    let whole = f.floor();
    Some(match i128::from(i).cmp(&(whole as i128)) {
        Ordering::Equal if f > whole => Ordering::Less,
        other => other,
    })
}

impl From<lyre_store::OwnedKey> for Value {
    /// The value a decoded key stands for (a truncated string key gives its prefix).
    fn from(key: lyre_store::OwnedKey) -> Self {
        use lyre_store::OwnedKey;
        match key {
            OwnedKey::Null => Value::Null,
            OwnedKey::Bool(b) => Value::Bool(b),
            OwnedKey::Int(i) => Value::Int(i),
            OwnedKey::Float(f) => Value::Float(f),
            OwnedKey::Str { text, .. } => Value::String(text),
            OwnedKey::Array(parts) => Value::Array(parts.into_iter().map(Value::from).collect()),
        }
    }
}

/// Writes `record` as a MessagePack map without copying it into a [`Value`].
pub(crate) fn write_object(record: &Object, out: &mut Vec<u8>) {
    let _ = rmp::encode::write_map_len(out, record.len() as u32);
    for (k, v) in record {
        let _ = rmp::encode::write_str(out, k);
        write_msgpack(v, out);
    }
}

/// Writes `value` as MessagePack. Infallible: writing to a `Vec` cannot fail.
pub(crate) fn write_msgpack(value: &Value, out: &mut Vec<u8>) {
    use rmp::encode;
    // Writes into a Vec return `Result<_, Infallible>`-like errors that cannot occur.
    let _ = match value {
        Value::Null => encode::write_nil(out).map_err(|_| ()),
        Value::Bool(b) => encode::write_bool(out, *b).map_err(|_| ()),
        Value::Int(i) => encode::write_sint(out, *i).map(|_| ()).map_err(|_| ()),
        Value::Float(f) => encode::write_f64(out, *f).map_err(|_| ()),
        Value::String(s) => encode::write_str(out, s).map_err(|_| ()),
        Value::Bytes(b) => encode::write_bin(out, b).map_err(|_| ()),
        Value::Blob(blob) => {
            let data = blob.encode_ext();
            let _ = encode::write_ext_meta(out, data.len() as u32, BLOB_EXT);
            out.extend_from_slice(&data);
            Ok(())
        }
        Value::Array(items) => {
            let _ = encode::write_array_len(out, items.len() as u32);
            items.iter().for_each(|item| write_msgpack(item, out));
            Ok(())
        }
        Value::Object(map) => {
            let _ = encode::write_map_len(out, map.len() as u32);
            for (k, v) in map {
                let _ = encode::write_str(out, k);
                write_msgpack(v, out);
            }
            Ok(())
        }
    };
}

impl From<&str> for Value {
    fn from(s: &str) -> Self {
        Value::String(s.to_string())
    }
}

impl From<String> for Value {
    fn from(s: String) -> Self {
        Value::String(s)
    }
}

impl From<i64> for Value {
    fn from(i: i64) -> Self {
        Value::Int(i)
    }
}

impl From<f64> for Value {
    fn from(f: f64) -> Self {
        Value::Float(f)
    }
}

impl From<bool> for Value {
    fn from(b: bool) -> Self {
        Value::Bool(b)
    }
}

impl From<Object> for Value {
    fn from(o: Object) -> Self {
        Value::Object(o)
    }
}

impl From<Vec<Value>> for Value {
    fn from(v: Vec<Value>) -> Self {
        Value::Array(v)
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Null => f.write_str("null"),
            Value::Bool(b) => write!(f, "{b}"),
            Value::Int(i) => write!(f, "{i}"),
            Value::Float(x) => write!(f, "{x}"),
            Value::String(s) => f.write_str(s),
            Value::Bytes(b) => write!(f, "<{} bytes>", b.len()),
            Value::Blob(blob) => write!(f, "[blob: {}, {} bytes]", blob.content_type, blob.size),
            Value::Array(_) => f.write_str("[array]"),
            Value::Object(_) => f.write_str("[object]"),
        }
    }
}

impl Serialize for Value {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Value::Null => serializer.serialize_unit(),
            Value::Bool(b) => serializer.serialize_bool(*b),
            Value::Int(i) => serializer.serialize_i64(*i),
            Value::Float(f) => serialize_float(*f, serializer),
            Value::String(s) => serializer.serialize_str(s),
            Value::Bytes(b) => serializer.serialize_bytes(b),
            Value::Blob(blob) => blob.placeholder().serialize(serializer),
            Value::Array(items) => items.serialize(serializer),
            Value::Object(map) => map.serialize(serializer),
        }
    }
}

/// A float as it goes on the wire: an integral one as an integer, as JavaScript
/// prints it (Harper's clients see `5`, not `5.0`). Storage keeps the float.
pub(crate) fn serialize_float<S: Serializer>(f: f64, serializer: S) -> Result<S::Ok, S::Error> {
    match f.fract() == 0.0 && f.abs() < 9_007_199_254_740_992.0 {
        true => serializer.serialize_i64(f as i64),
        false => serializer.serialize_f64(f),
    }
}

impl<'de> Deserialize<'de> for Value {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(ValueVisitor)
    }
}

struct ValueVisitor;

impl<'de> Visitor<'de> for ValueVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any value")
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        Value::deserialize(d)
    }
    fn visit_bool<E>(self, b: bool) -> Result<Value, E> {
        Ok(Value::Bool(b))
    }
    fn visit_i64<E>(self, i: i64) -> Result<Value, E> {
        Ok(Value::Int(i))
    }
    fn visit_u64<E>(self, u: u64) -> Result<Value, E> {
        Ok(i64::try_from(u).map(Value::Int).unwrap_or(Value::Float(u as f64)))
    }
    fn visit_i128<E>(self, i: i128) -> Result<Value, E> {
        Ok(i64::try_from(i).map(Value::Int).unwrap_or(Value::Float(i as f64)))
    }
    fn visit_u128<E>(self, u: u128) -> Result<Value, E> {
        Ok(i64::try_from(u).map(Value::Int).unwrap_or(Value::Float(u as f64)))
    }
    fn visit_f64<E>(self, f: f64) -> Result<Value, E> {
        Ok(Value::Float(f))
    }
    fn visit_str<E>(self, s: &str) -> Result<Value, E> {
        Ok(Value::String(s.to_string()))
    }
    fn visit_string<E>(self, s: String) -> Result<Value, E> {
        Ok(Value::String(s))
    }
    fn visit_bytes<E>(self, b: &[u8]) -> Result<Value, E> {
        Ok(Value::Bytes(b.to_vec()))
    }
    fn visit_byte_buf<E>(self, b: Vec<u8>) -> Result<Value, E> {
        Ok(Value::Bytes(b))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        // Exact capacities keep a decoded body's size what `footprint.rs` estimates.
        items.shrink_to_fit();
        Ok(Value::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = object_with_capacity(map.size_hint().unwrap_or(0).min(4096));
        while let Some(key) = map.next_key::<MapKey>()? {
            object.insert(key.0, map.next_value()?);
        }
        object.shrink_to_fit();
        Ok(Value::Object(object))
    }
}

/// A map key: strings as they are, numbers and booleans (CBOR, MessagePack) as text.
struct MapKey(String);

impl<'de> Deserialize<'de> for MapKey {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<MapKey, D::Error> {
        struct KeyVisitor;
        impl Visitor<'_> for KeyVisitor {
            type Value = MapKey;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string map key")
            }
            fn visit_str<E>(self, s: &str) -> Result<MapKey, E> {
                Ok(MapKey(s.to_string()))
            }
            fn visit_string<E>(self, s: String) -> Result<MapKey, E> {
                Ok(MapKey(s))
            }
            fn visit_i64<E>(self, i: i64) -> Result<MapKey, E> {
                Ok(MapKey(i.to_string()))
            }
            fn visit_u64<E>(self, u: u64) -> Result<MapKey, E> {
                Ok(MapKey(u.to_string()))
            }
            fn visit_bool<E>(self, b: bool) -> Result<MapKey, E> {
                Ok(MapKey(b.to_string()))
            }
            fn visit_bytes<E: de::Error>(self, b: &[u8]) -> Result<MapKey, E> {
                String::from_utf8(b.to_vec()).map(MapKey).map_err(|_| E::custom("map key is not UTF-8"))
            }
        }
        deserializer.deserialize_any(KeyVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    use crate::testing::value;

    proptest! {
        #[test]
        fn msgpack_round_trips(v in value()) {
            let bytes = v.to_msgpack();
            prop_assert_eq!(Value::from_msgpack(&bytes).unwrap(), v);
        }

        #[test]
        fn scalar_order_matches_key_order(a in value(), b in value()) {
            if let (Some(order), Some(ka), Some(kb)) = (a.cmp_scalar(&b), a.as_key(), b.as_key()) {
                let ea = lyre_store::encode_key(ka).unwrap();
                let eb = lyre_store::encode_key(kb).unwrap();
                if !ea.1 && !eb.1 {
                    prop_assert_eq!(ea.0.cmp(&eb.0), order);
                }
            }
        }

        #[test]
        fn garbage_msgpack_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = Value::from_msgpack(&bytes);
        }
    }

    #[test]
    fn a_blob_reference_is_stored_but_never_decoded_from_a_request() {
        let blob = BlobRef { root: 2, id: 0xfeed_beef, size: 12_345, content_type: "image/png".into() };
        let mut record = object_with_capacity(1);
        record.insert("image".into(), Value::Blob(Box::new(blob.clone())));
        let stored = Value::Object(record).to_msgpack();
        // Storage reads it back as the reference...
        let read = crate::raw::decode_value(&stored).unwrap();
        let Value::Object(fields) = &read else { panic!("{read:?}") };
        assert_eq!(fields["image"], Value::Blob(Box::new(blob)));
        // ...but a MessagePack request body carrying the same bytes does not
        // decode: a client cannot point a record at a blob file.
        assert!(Value::from_msgpack(&stored).is_err());
        // Rendered, it is described, not shown.
        let json = serde_json::to_string(&read).unwrap();
        assert!(json.contains(BLOB_DESCRIPTION), "{json}");
    }

    #[test]
    fn json_keeps_integers_and_key_order() {
        let v: Value = serde_json::from_str(r#"{"b":1,"a":2.5,"c":[true,null,"x"]}"#).unwrap();
        assert_eq!(serde_json::to_string(&v).unwrap(), r#"{"b":1,"a":2.5,"c":[true,null,"x"]}"#);
    }
}
