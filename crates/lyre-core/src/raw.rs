//! MessagePack served as the [`Value`](crate::value::Value) it encodes, without
//! building that value: a read that answers a whole stored record walks its bytes
//! once and hands every scalar straight to the response's serializer.
//!
//! [`RawValue`] makes exactly the serializer calls the decoded `Value` would make
//! (`Value::serialize`: integral floats as integers, maps in stored order, numeric
//! and boolean map keys as text), so every wire format gets the same bytes either
//! way; `crates/lyre-core/tests/raw_value.rs` checks that over arbitrary values in
//! each format. Decoding and re-encoding a 1 KB record cost about as much as the
//! B-tree lookup that found it; walking it costs a fraction of that.
//!
//! The same reader decodes stored records into `Value`s ([`decode_value`]), and
//! decodes only the attributes a search reads ([`decode_object_only`]).

use std::borrow::Cow;
use std::cell::Cell;

use rmp::Marker;
use serde::ser::{Error as _, SerializeMap, SerializeSeq};
use serde::{Serialize, Serializer};

use crate::value::{BLOB_EXT, BlobRef, Object, Value, object_with_capacity, serialize_float};

/// Nesting deeper than this is refused as corrupt, so a damaged record cannot
/// exhaust the stack. No stored value is deeper: MessagePack bodies, the deepest a
/// write accepts, are decoded with `rmp_serde`'s limit of 1,024 levels (JSON's is
/// 128, CBOR's 256).
const MAX_DEPTH: usize = 1100;

/// One MessagePack value, as bytes, that serializes as the `Value` it decodes to.
#[derive(Debug, Clone, Copy)]
pub struct RawValue<'a>(pub &'a [u8]);

impl Serialize for RawValue<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let input = Cell::new(self.0);
        let ok = Next { input: &input, depth: 0 }.serialize(serializer)?;
        match input.get().is_empty() {
            true => Ok(ok),
            false => Err(S::Error::custom("stored value has trailing bytes")),
        }
    }
}

/// The next value in `input`, consumed as it is serialized.
struct Next<'i, 'a> {
    input: &'i Cell<&'a [u8]>,
    depth: usize,
}

impl Serialize for Next<'_, '_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if self.depth > MAX_DEPTH {
            return Err(S::Error::custom("stored value nests too deeply"));
        }
        let mut reader = Reader(self.input.get());
        let marker = reader.marker().map_err(S::Error::custom)?;
        let scalar = reader.scalar(marker).map_err(S::Error::custom)?;
        self.input.set(reader.0);
        let nested = Next { input: self.input, depth: self.depth + 1 };
        match scalar {
            Scalar::Nil => serializer.serialize_unit(),
            Scalar::Bool(b) => serializer.serialize_bool(b),
            Scalar::Int(i) => serializer.serialize_i64(i),
            Scalar::Float(f) => serialize_float(f, serializer),
            Scalar::Str(s) => serializer.serialize_str(s),
            Scalar::Bin(b) => serializer.serialize_bytes(b),
            Scalar::Blob(blob) => blob.placeholder().serialize(serializer),
            Scalar::Array(len) => {
                let mut seq = serializer.serialize_seq(Some(len))?;
                for _ in 0..len {
                    seq.serialize_element(&nested)?;
                }
                seq.end()
            }
            Scalar::Map(len) => {
                let mut map = serializer.serialize_map(Some(len))?;
                for _ in 0..len {
                    map.serialize_entry(&Key { input: self.input }, &nested)?;
                }
                map.end()
            }
        }
    }
}

/// A map key ([`Reader::key`]).
struct Key<'i, 'a> {
    input: &'i Cell<&'a [u8]>,
}

impl Serialize for Key<'_, '_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut reader = Reader(self.input.get());
        let key = reader.key().map_err(S::Error::custom)?;
        self.input.set(reader.0);
        serializer.serialize_str(&key)
    }
}

/// What one marker (and the bytes after it) holds; containers give their length.
enum Scalar<'a> {
    Nil,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(&'a str),
    Bin(&'a [u8]),
    Blob(BlobRef),
    Array(usize),
    Map(usize),
}

/// A cursor over MessagePack bytes.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], &'static str> {
        if self.0.len() < n {
            return Err("stored value is truncated");
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], &'static str> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    fn marker(&mut self) -> Result<Marker, &'static str> {
        Ok(Marker::from_u8(self.take(1)?[0]))
    }

    fn length(&mut self, bytes: usize) -> Result<usize, &'static str> {
        Ok(match bytes {
            1 => usize::from(self.take(1)?[0]),
            2 => usize::from(u16::from_be_bytes(self.array()?)),
            _ => u32::from_be_bytes(self.array()?) as usize,
        })
    }

    /// The bytes after a length of `width` bytes.
    fn sized(&mut self, width: usize) -> Result<&'a [u8], &'static str> {
        let len = self.length(width)?;
        self.take(len)
    }

    /// The next value, which must be a map key: text as it is, numbers and booleans
    /// as their text (as `Value`'s decoder reads them).
    fn key(&mut self) -> Result<Cow<'a, str>, &'static str> {
        let marker = self.marker()?;
        self.key_of(marker)
    }

    /// [`Reader::key`] whose marker was read already.
    fn key_of(&mut self, marker: Marker) -> Result<Cow<'a, str>, &'static str> {
        Ok(match self.scalar(marker)? {
            Scalar::Str(s) => Cow::Borrowed(s),
            Scalar::Int(i) => Cow::Owned(i.to_string()),
            Scalar::Bool(b) => Cow::Owned(b.to_string()),
            Scalar::Bin(b) => Cow::Borrowed(std::str::from_utf8(b).map_err(|_| "map key is not UTF-8")?),
            _ => return Err("stored map key is not a string"),
        })
    }

    /// The bytes of the text `marker` starts, unchecked (`None` for another type):
    /// JSON output checks them as it escapes them.
    fn text_bytes(&mut self, marker: Marker) -> Result<Option<&'a [u8]>, &'static str> {
        Ok(Some(match marker {
            Marker::FixStr(n) => self.take(usize::from(n))?,
            Marker::Str8 => self.sized(1)?,
            Marker::Str16 => self.sized(2)?,
            Marker::Str32 => self.sized(4)?,
            _ => return Ok(None),
        }))
    }

    /// The next value, decoded.
    fn value(&mut self, depth: usize) -> Result<Value, &'static str> {
        if depth > MAX_DEPTH {
            return Err("stored value nests too deeply");
        }
        let marker = self.marker()?;
        Ok(match self.scalar(marker)? {
            Scalar::Nil => Value::Null,
            Scalar::Bool(b) => Value::Bool(b),
            Scalar::Int(i) => Value::Int(i),
            Scalar::Float(f) => Value::Float(f),
            Scalar::Str(s) => Value::String(s.to_owned()),
            Scalar::Bin(b) => Value::Bytes(b.to_vec()),
            Scalar::Blob(blob) => Value::Blob(Box::new(blob)),
            Scalar::Array(len) => {
                // Every element takes at least a byte, and a level reserves at most
                // 4,096 (as serde does): corrupt lengths, nested or not, cannot
                // reserve more than the input could fill.
                let mut items = Vec::with_capacity(len.min(self.0.len()).min(4096));
                for _ in 0..len {
                    items.push(self.value(depth + 1)?);
                }
                items.shrink_to_fit();
                Value::Array(items)
            }
            Scalar::Map(len) => Value::Object(self.object(len, len, depth, &|_| true)?),
        })
    }

    /// The `len` entries of a map whose header was just read, those `wanted` keeps
    /// (at most `kept` of them: the walk ends once it has that many).
    fn object(
        &mut self,
        kept: usize,
        len: usize,
        depth: usize,
        wanted: &dyn Fn(&str) -> bool,
    ) -> Result<Object, &'static str> {
        // Every entry takes at least two bytes: a corrupt length cannot reserve
        // more than the input could hold (nor, nested, more than 4,096 a level).
        let mut object = object_with_capacity(kept.min(self.0.len() / 2).min(4096));
        for _ in 0..len {
            if object.len() == kept {
                // Every wanted entry is in (stored keys are unique): the rest is not read.
                break;
            }
            let key = self.key()?;
            if wanted(&key) {
                let value = self.value(depth + 1)?;
                object.insert(key.into_owned(), value);
            } else {
                let skipped = value_len(self.0, depth + 1).ok_or("stored value is truncated")?;
                self.take(skipped)?;
            }
        }
        object.shrink_to_fit();
        Ok(object)
    }

    /// An extension whose length field is `width` bytes: only a blob reference.
    fn sized_blob(&mut self, width: usize) -> Result<Scalar<'a>, &'static str> {
        let len = self.length(width)?;
        self.blob(len)
    }

    /// An extension of `len` data bytes after its type: only a blob reference.
    fn blob(&mut self, len: usize) -> Result<Scalar<'a>, &'static str> {
        let ext = self.take(1)?[0] as i8;
        let data = self.take(len)?;
        match ext {
            BLOB_EXT => BlobRef::decode_ext(data).map(Scalar::Blob).ok_or("stored blob reference is malformed"),
            _ => Err("stored value holds a MessagePack type Lyre never writes"),
        }
    }

    fn scalar(&mut self, marker: Marker) -> Result<Scalar<'a>, &'static str> {
        let utf8 = |bytes: &'a [u8]| std::str::from_utf8(bytes).map_err(|_| "stored string is not UTF-8");
        Ok(match marker {
            Marker::Null => Scalar::Nil,
            Marker::True => Scalar::Bool(true),
            Marker::False => Scalar::Bool(false),
            Marker::FixPos(n) => Scalar::Int(i64::from(n)),
            Marker::FixNeg(n) => Scalar::Int(i64::from(n)),
            Marker::U8 => Scalar::Int(i64::from(self.take(1)?[0])),
            Marker::U16 => Scalar::Int(i64::from(u16::from_be_bytes(self.array()?))),
            Marker::U32 => Scalar::Int(i64::from(u32::from_be_bytes(self.array()?))),
            Marker::U64 => {
                let n = u64::from_be_bytes(self.array()?);
                i64::try_from(n).map_or(Scalar::Float(n as f64), Scalar::Int)
            }
            Marker::I8 => Scalar::Int(i64::from(i8::from_be_bytes(self.array()?))),
            Marker::I16 => Scalar::Int(i64::from(i16::from_be_bytes(self.array()?))),
            Marker::I32 => Scalar::Int(i64::from(i32::from_be_bytes(self.array()?))),
            Marker::I64 => Scalar::Int(i64::from_be_bytes(self.array()?)),
            Marker::F32 => Scalar::Float(f64::from(f32::from_be_bytes(self.array()?))),
            Marker::F64 => Scalar::Float(f64::from_be_bytes(self.array()?)),
            Marker::FixStr(n) => Scalar::Str(utf8(self.take(usize::from(n))?)?),
            Marker::Str8 => Scalar::Str(utf8(self.sized(1)?)?),
            Marker::Str16 => Scalar::Str(utf8(self.sized(2)?)?),
            Marker::Str32 => Scalar::Str(utf8(self.sized(4)?)?),
            Marker::Bin8 => Scalar::Bin(self.sized(1)?),
            Marker::Bin16 => Scalar::Bin(self.sized(2)?),
            Marker::Bin32 => Scalar::Bin(self.sized(4)?),
            Marker::FixArray(n) => Scalar::Array(usize::from(n)),
            Marker::Array16 => Scalar::Array(self.length(2)?),
            Marker::Array32 => Scalar::Array(self.length(4)?),
            Marker::FixMap(n) => Scalar::Map(usize::from(n)),
            Marker::Map16 => Scalar::Map(self.length(2)?),
            Marker::Map32 => Scalar::Map(self.length(4)?),
            Marker::FixExt1 => self.blob(1)?,
            Marker::FixExt2 => self.blob(2)?,
            Marker::FixExt4 => self.blob(4)?,
            Marker::FixExt8 => self.blob(8)?,
            Marker::FixExt16 => self.blob(16)?,
            Marker::Ext8 => self.sized_blob(1)?,
            Marker::Ext16 => self.sized_blob(2)?,
            Marker::Ext32 => self.sized_blob(4)?,
            _ => return Err("stored value holds a MessagePack type Lyre never writes"),
        })
    }
}

/// Writes the MessagePack value `bytes` holds as JSON, byte for byte what
/// `serde_json` writes for the decoded `Value` (the tests hold it to that), but in
/// one pass with no serializer in between and strings checked many bytes at a time
/// (`json_escape.rs`): the body of every whole-record JSON read. On error `out` holds a partial
/// value and must be discarded.
pub fn write_json(bytes: &[u8], out: &mut Vec<u8>) -> Result<(), &'static str> {
    write_json_noting(bytes, out, None).map(drop)
}

/// [`write_json`], answering too whether the value is a map with the text key
/// `key` (when one is given): a question about the record answered by the pass
/// that writes it, not by a second scan. The pass stops at that key: when the
/// answer is yes, `out` holds part of the value and must be discarded.
pub(crate) fn write_json_noting(bytes: &[u8], out: &mut Vec<u8>, key: Option<&[u8]>) -> Result<bool, &'static str> {
    let mut reader = Reader(bytes);
    let mut watch = Watch { key, seen: false };
    json_value(&mut reader, out, 0, &mut watch)?;
    if watch.seen {
        return Ok(true);
    }
    match reader.0.is_empty() {
        true => Ok(false),
        false => Err("stored value has trailing bytes"),
    }
}

/// A top-level map key [`json_value`] looks out for, and whether it saw it.
struct Watch<'k> {
    key: Option<&'k [u8]>,
    seen: bool,
}

fn json_value(
    reader: &mut Reader<'_>,
    out: &mut Vec<u8>,
    depth: usize,
    watch: &mut Watch<'_>,
) -> Result<(), &'static str> {
    if depth > MAX_DEPTH {
        return Err("stored value nests too deeply");
    }
    let marker = reader.marker()?;
    if let Some(text) = reader.text_bytes(marker)? {
        return json_text(text, out);
    }
    match reader.scalar(marker)? {
        Scalar::Nil => out.extend_from_slice(b"null"),
        Scalar::Bool(true) => out.extend_from_slice(b"true"),
        Scalar::Bool(false) => out.extend_from_slice(b"false"),
        Scalar::Int(i) => out.extend_from_slice(itoa::Buffer::new().format(i).as_bytes()),
        Scalar::Float(f) if f.fract() == 0.0 && f.abs() < 9_007_199_254_740_992.0 => {
            out.extend_from_slice(itoa::Buffer::new().format(f as i64).as_bytes());
        }
        Scalar::Float(f) if f.is_finite() => {
            use serde_json::ser::Formatter as _;
            // serde_json's own float text (its exponent form differs from ryu's).
            let _ = serde_json::ser::CompactFormatter.write_f64(out, f);
        }
        Scalar::Float(_) => out.extend_from_slice(b"null"),
        // Not reached: `text_bytes` took every text marker above.
        Scalar::Str(s) => json_text(s.as_bytes(), out)?,
        Scalar::Blob(blob) => {
            serde_json::to_writer(&mut *out, &blob.placeholder()).map_err(|_| "a blob did not render")?;
        }
        Scalar::Bin(b) => {
            out.push(b'[');
            for (i, byte) in b.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                out.extend_from_slice(itoa::Buffer::new().format(*byte).as_bytes());
            }
            out.push(b']');
        }
        Scalar::Array(len) => {
            out.push(b'[');
            for i in 0..len {
                if i > 0 {
                    out.push(b',');
                }
                json_value(reader, out, depth + 1, watch)?;
            }
            out.push(b']');
        }
        Scalar::Map(len) => {
            out.push(b'{');
            for n in 0..len {
                if n > 0 {
                    out.push(b',');
                }
                let marker = reader.marker()?;
                match reader.text_bytes(marker)? {
                    Some(text) if depth == 0 && watch.key == Some(text) => {
                        // What the caller asked about is known; the rest is not written.
                        watch.seen = true;
                        return Ok(());
                    }
                    Some(text) => json_text(text, out)?,
                    None => json_text(reader.key_of(marker)?.as_bytes(), out)?,
                }
                out.push(b':');
                json_value(reader, out, depth + 1, watch)?;
            }
            out.push(b'}');
        }
    }
    Ok(())
}

/// Stored text as a JSON string (`json_escape.rs`), refused when it is not UTF-8.
fn json_text(text: &[u8], out: &mut Vec<u8>) -> Result<(), &'static str> {
    crate::json_escape::write_string(text, out).map_err(|_| "stored string is not UTF-8")
}

/// Decodes the MessagePack value at the start of `bytes` into the [`Value`] that
/// `Value::from_msgpack` answers for it, for everything Lyre stores (the tests hold
/// it to that), without serde's visitor in between: how every stored record is
/// read. Stricter on what Lyre never writes: text that is not UTF-8 and map keys
/// that are not text, `i64` integers or booleans are refused as corrupt.
pub(crate) fn decode_value(bytes: &[u8]) -> Result<Value, &'static str> {
    Reader(bytes).value(0)
}

/// Decodes the MessagePack map `bytes` holds, keeping only the entries whose key
/// is one of `names` and stepping over the others' values undecoded: a search that
/// reads three attributes of a wide record builds three values, not all of them.
pub(crate) fn decode_object_only(bytes: &[u8], names: &[String]) -> Result<Object, &'static str> {
    let mut reader = Reader(bytes);
    let marker = reader.marker()?;
    match reader.scalar(marker)? {
        Scalar::Map(len) => reader.object(len.min(names.len()), len, 0, &|key| names.iter().any(|n| n == key)),
        _ => Err("stored record is not a map"),
    }
}

/// The bytes of the first element of the two-element MessagePack array `bytes`
/// starts with (a record stored with property versions is `[record, clock]`).
pub(crate) fn first_of_pair(bytes: &[u8]) -> Option<&[u8]> {
    let (&0x92, rest) = bytes.split_first()? else { return None };
    let len = value_len(rest, 0)?;
    rest.get(..len)
}

/// How many bytes the MessagePack value at the start of `bytes` takes. Skipping
/// is on every path that reads some attributes of a record (and every record
/// stored with property versions), so nothing is decoded: each value's size is
/// read off its marker and length, and only arrays and maps recurse.
fn value_len(bytes: &[u8], depth: usize) -> Option<usize> {
    if depth > MAX_DEPTH {
        return None;
    }
    let (mut used, items) = head_len(bytes)?;
    for _ in 0..items {
        let rest = bytes.get(used..)?;
        used += match head_len(rest)? {
            (len, 0) => len,
            _ => value_len(rest, depth + 1)?,
        };
    }
    Some(used)
}

/// The bytes the value at the start of `bytes` takes apart from its elements, and
/// how many elements follow (an array's items, a map's keys and values); `None`
/// when they are not all there, or for a type Lyre never writes (extensions).
fn head_len(bytes: &[u8]) -> Option<(usize, usize)> {
    let be = |at: usize, width: usize| -> Option<usize> {
        let field = bytes.get(at..at + width)?;
        Some(field.iter().fold(0usize, |n, &b| (n << 8) | usize::from(b)))
    };
    let (len, items) = match *bytes.first()? {
        0x00..=0x7f | 0xe0..=0xff | 0xc0 | 0xc2 | 0xc3 => (1, 0),
        marker @ 0x80..=0x8f => (1, usize::from(marker & 0x0f) * 2),
        marker @ 0x90..=0x9f => (1, usize::from(marker & 0x0f)),
        marker @ 0xa0..=0xbf => (1 + usize::from(marker & 0x1f), 0),
        0xcc | 0xd0 => (2, 0),
        0xcd | 0xd1 => (3, 0),
        0xca | 0xce | 0xd2 => (5, 0),
        0xcb | 0xcf | 0xd3 => (9, 0),
        0xc4 | 0xd9 => (2 + be(1, 1)?, 0),
        0xc5 | 0xda => (3 + be(1, 2)?, 0),
        0xc6 | 0xdb => (5usize.checked_add(be(1, 4)?)?, 0),
        0xdc => (3, be(1, 2)?),
        0xdd => (5, be(1, 4)?),
        0xde => (3, be(1, 2)? * 2),
        0xdf => (5, be(1, 4)?.checked_mul(2)?),
        0xd4 => (3, 0),
        0xd5 => (4, 0),
        0xd6 => (6, 0),
        0xd7 => (10, 0),
        0xd8 => (18, 0),
        0xc7 => (3 + be(1, 1)?, 0),
        0xc8 => (4 + be(1, 2)?, 0),
        0xc9 => (6usize.checked_add(be(1, 4)?)?, 0),
        _ => return None,
    };
    (len <= bytes.len()).then_some((len, items))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::testing::{record, value};
    use crate::value::Value;

    proptest! {
        #[test]
        fn serializes_as_the_value_it_encodes(v in value()) {
            let bytes = v.to_msgpack();
            prop_assert_eq!(serde_json::to_vec(&RawValue(&bytes)).unwrap(), serde_json::to_vec(&v).unwrap());
            prop_assert_eq!(rmp_serde::to_vec(&RawValue(&bytes)).unwrap(), rmp_serde::to_vec(&v).unwrap());
            let mut json = Vec::new();
            write_json(&bytes, &mut json).unwrap();
            prop_assert_eq!(String::from_utf8(json).unwrap(), serde_json::to_string(&v).unwrap());
        }

        #[test]
        fn a_value_is_skipped_by_its_encoded_length(v in value()) {
            let bytes = v.to_msgpack();
            prop_assert_eq!(value_len(&bytes, 0), Some(bytes.len()));
            let followed = [bytes.as_slice(), &[0xc0]].concat();
            prop_assert_eq!(value_len(&followed, 0), Some(bytes.len()));
            for cut in 0..bytes.len() {
                prop_assert_eq!(value_len(&bytes[..cut], 0), None, "cut at {}", cut);
            }
        }

        #[test]
        fn strings_are_escaped_as_serde_json_escapes(s in "[\\x00-\\x7f]{0,30}[\\u{80}-\\u{10ffff}]?[\\x00-\\x7f]{0,10}") {
            let mut json = Vec::new();
            write_json(&Value::String(s.clone()).to_msgpack(), &mut json).unwrap();
            prop_assert_eq!(String::from_utf8(json).unwrap(), serde_json::to_string(&s).unwrap());
        }

        #[test]
        fn finds_the_record_of_a_pair(r in record(), clock in value()) {
            let record = Value::Object(r).to_msgpack();
            let mut pair = vec![0x92];
            pair.extend_from_slice(&record);
            pair.extend_from_slice(&clock.to_msgpack());
            prop_assert_eq!(first_of_pair(&pair), Some(&record[..]));
        }

        #[test]
        fn decodes_as_serde_decodes(v in value()) {
            let bytes = v.to_msgpack();
            let decoded = decode_value(&bytes).unwrap();
            prop_assert_eq!(&decoded, &Value::from_msgpack(&bytes).unwrap());
            prop_assert_eq!(decoded, v);
        }

        #[test]
        fn decodes_only_the_named_attributes(r in record(), pick in proptest::collection::vec(any::<bool>(), 0..8)) {
            let names: Vec<String> =
                r.keys().zip(pick.iter().chain(std::iter::repeat(&false))).filter(|(_, p)| **p).map(|(k, _)| k.clone()).collect();
            let mut wanted = names.clone();
            wanted.push("no such attribute".to_string());
            let bytes = Value::Object(r.clone()).to_msgpack();
            let only = decode_object_only(&bytes, &wanted).unwrap();
            let expected: Object = r.into_iter().filter(|(k, _)| names.contains(k)).collect();
            prop_assert_eq!(only.keys().collect::<Vec<_>>(), expected.keys().collect::<Vec<_>>());
            prop_assert_eq!(&only, &expected);
            // Every name present: the walk stops at the last of them, with the same answer.
            prop_assert_eq!(decode_object_only(&bytes, &names).unwrap(), expected);
        }

        #[test]
        fn damaged_bytes_are_an_error_not_a_panic(v in value(), cut in 0usize..64, flip in any::<u8>()) {
            let mut bytes = v.to_msgpack();
            let at = cut % bytes.len();
            bytes[at] ^= flip;
            bytes.truncate(bytes.len() - cut.min(bytes.len()) / 2);
            // Whatever the damage, the walk ends: an answer or an error.
            let _ = serde_json::to_vec(&RawValue(&bytes));
            let _ = write_json(&bytes, &mut Vec::new());
            let _ = first_of_pair(&bytes);
            let _ = decode_value(&bytes);
            let _ = decode_object_only(&bytes, &["a".to_string()]);
        }
    }

    /// Once it has every attribute it wants, the walk reads no further.
    #[test]
    fn decoding_some_attributes_stops_at_the_last_one_wanted() {
        // {"a": 1, "b": <truncated>}: nothing past "a" is read.
        let bytes = [0x82, 0xa1, b'a', 0x01, 0xa1, b'b', 0xd9];
        let only = decode_object_only(&bytes, &["a".to_string()]).unwrap();
        assert_eq!(only.get("a"), Some(&Value::Int(1)));
        assert_eq!(decode_object_only(&bytes, &[]).unwrap(), Object::default());
        assert!(decode_object_only(&bytes, &["b".to_string()]).is_err());
    }

    #[test]
    fn numeric_and_boolean_keys_read_as_text() {
        // {1: "a", true: "b"} as another writer may have stored it.
        let bytes = [0x82, 0x01, 0xa1, b'a', 0xc3, 0xa1, b'b'];
        let decoded = Value::from_msgpack(&bytes).unwrap();
        assert_eq!(serde_json::to_string(&RawValue(&bytes)).unwrap(), r#"{"1":"a","true":"b"}"#);
        assert_eq!(serde_json::to_string(&decoded).unwrap(), r#"{"1":"a","true":"b"}"#);
        let mut json = Vec::new();
        write_json(&bytes, &mut json).unwrap();
        assert_eq!(json, br#"{"1":"a","true":"b"}"#);
        assert_eq!(decode_value(&bytes).unwrap(), decoded);
    }

    #[test]
    fn a_corrupt_length_reserves_nothing_it_cannot_fill() {
        // An array and a map that claim 2^32 - 1 elements in a few bytes.
        assert!(decode_value(&[0xdd, 0xff, 0xff, 0xff, 0xff, 0x01]).is_err());
        assert!(decode_value(&[0xdf, 0xff, 0xff, 0xff, 0xff, 0xa1, b'a', 0x01]).is_err());
    }

    #[test]
    fn text_that_is_not_utf8_is_refused_as_a_value_and_as_a_key() {
        let not_utf8 = Err("stored string is not UTF-8");
        // "\xff" alone; a bad pair inside and past the first sixteen-byte chunk of a
        // 19-byte string; a bad key.
        assert_eq!(write_json(&[0xa1, 0xff], &mut Vec::new()), not_utf8);
        for text in [b"\xc3\x28abcdefghijklmnopq", b"abcdefghijklmnopq\xc3\x28"] {
            let stored = [&[0xb3][..], text].concat();
            assert_eq!(write_json(&stored, &mut Vec::new()), not_utf8);
        }
        assert_eq!(write_json(&[0x81, 0xa1, 0xff, 0xc0], &mut Vec::new()), not_utf8);
        let mut json = Vec::new();
        write_json(&[0x81, 0xa2, 0xc3, 0xa9, 0xa2, 0xc3, 0xa9], &mut json).unwrap();
        assert_eq!(json, "{\"é\":\"é\"}".as_bytes());
    }

    #[test]
    fn trailing_and_truncated_bytes_are_refused() {
        let err = serde_json::to_vec(&RawValue(&[0xc0, 0xc0])).unwrap_err().to_string();
        assert!(err.contains("trailing"), "{err}");
        let err = serde_json::to_vec(&RawValue(&[0xa5, b'a'])).unwrap_err().to_string();
        assert!(err.contains("truncated"), "{err}");
        let err = serde_json::to_vec(&RawValue(&[0xc1])).unwrap_err().to_string();
        assert!(err.contains("never writes"), "{err}");
    }

    #[test]
    fn the_deepest_value_a_write_accepts_is_served() {
        // 1,000 nested arrays: within what a MessagePack body may hold. (On a thread
        // of its own: unoptimised frames are several times a release build's.)
        let served = std::thread::Builder::new()
            .stack_size(16 << 20)
            .spawn(|| {
                let mut bytes = vec![0x91; 1000];
                bytes.push(0xc0);
                let decoded = Value::from_msgpack(&bytes).expect("a write accepts it");
                let mut json = Vec::new();
                write_json(&bytes, &mut json).unwrap();
                assert_eq!(json, serde_json::to_vec(&decoded).unwrap());
                assert_eq!(serde_json::to_vec(&RawValue(&bytes)).unwrap(), json);
            })
            .unwrap()
            .join();
        assert!(served.is_ok());
    }

    /// The wider markers (str8/16, bin16, array16, map16, every int width) are
    /// skipped by their lengths too.
    #[test]
    fn wide_values_are_skipped_by_their_encoded_length() {
        let map: crate::value::Object = (0..20).map(|i| (format!("k{i}"), Value::Int(i * 1_000_003))).collect();
        for v in [
            Value::String("s".repeat(40)),
            Value::String("t".repeat(300)),
            Value::Bytes(vec![7; 300]),
            Value::Array((0..20).map(|i| Value::Float(f64::from(i) / 3.0)).collect()),
            Value::Object(map),
            Value::Array(vec![Value::Int(-200), Value::Int(70_000), Value::Int(-5_000_000_000), Value::Int(i64::MAX)]),
        ] {
            let bytes = v.to_msgpack();
            assert_eq!(value_len(&bytes, 0), Some(bytes.len()), "{v:?}");
            assert_eq!(value_len(&bytes[..bytes.len() - 1], 0), None, "{v:?}");
        }
    }

    #[test]
    fn deep_nesting_is_refused() {
        let mut bytes = vec![0x91; MAX_DEPTH + 10];
        bytes.push(0xc0);
        let err = serde_json::to_vec(&RawValue(&bytes)).unwrap_err().to_string();
        assert!(err.contains("deeply"), "{err}");
        assert_eq!(write_json(&bytes, &mut Vec::new()), Err("stored value nests too deeply"));
        assert_eq!(value_len(&bytes, 0), None);
    }
}
