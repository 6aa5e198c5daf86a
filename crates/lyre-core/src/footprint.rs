//! How much memory a [`Value`] decoded from a document will take, learned without
//! decoding it.
//!
//! A request body is small on the wire and large once decoded: `{"id":1}` is 8 bytes
//! of JSON and about 300 bytes of `Value` (an object, its index table, its entry, its
//! key). The server reads a body's [`Footprint`] first (the same deserializer, walking
//! the document without keeping anything) and reserves that much memory before it
//! builds the value, so neither one request nor many together can take more memory
//! than they were granted.
//!
//! The estimate follows `Value`'s layout as [`Value`]'s own decoder builds it (exact
//! capacities, see `value.rs`) and rounds every allocation up the way an allocator's
//! size classes do; it is checked against a counting allocator in
//! `tests/footprint.rs`.

use std::fmt;
use std::mem::size_of;

use serde::de::{self, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};

use crate::value::Value;

/// The heap bytes a decoded document would take, as a `Value` (the root slot included).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Footprint(pub usize);

/// One entry of an object: indexmap keeps the key's hash beside the key and value.
const ENTRY: usize = size_of::<(u64, String, Value)>();

/// An allocation of `n` bytes, rounded up as an allocator's size classes round it
/// (16-byte granules, classes about 1/8 apart).
fn allocation(n: usize) -> usize {
    match n {
        0 => 0,
        n => (n + n / 8).next_multiple_of(16),
    }
}

/// The index table of an object with `n` entries: hashbrown buckets of one `usize`,
/// a control byte per bucket and a group of trailing control bytes.
fn index_table(n: usize) -> usize {
    let buckets = match n {
        0 => return 0,
        1..=3 => 4,
        4..=7 => 8,
        n => (n * 8 / 7).next_power_of_two(),
    };
    allocation(buckets * size_of::<usize>() + buckets + 16)
}

/// The heap beneath one value (its slot is counted by whoever holds it): what stays
/// once it is decoded, and the most held above that while it is being decoded.
#[derive(Clone, Copy, Default)]
struct Below {
    kept: usize,
    transient: usize,
}

impl Below {
    const NOTHING: Below = Below { kept: 0, transient: 0 };

    fn kept(bytes: usize) -> Below {
        Below { kept: bytes, transient: 0 }
    }

    /// A container holding `children` in a buffer of `buffer` bytes once decoded.
    /// While its length is unknown the buffer grows by doubling, and at the moment it
    /// grows the old buffer and one twice as large are both alive: up to twice the
    /// final buffer above it. A child's own transient comes and goes while it is
    /// decoded, one child at a time, so only the largest counts.
    fn container(children: Below, buffer: usize) -> Below {
        Below {
            kept: children.kept.saturating_add(buffer),
            transient: children.transient.max(buffer.saturating_mul(2)),
        }
    }

    /// An array of `items` values, whose heap beneath is `children`.
    fn array(items: usize, children: Below) -> Below {
        Below::container(children, allocation(items.saturating_mul(size_of::<Value>())))
    }

    /// An object of `entries` entries, whose keys' and values' heap is `children`.
    fn object(entries: usize, children: Below) -> Below {
        Below::container(children, allocation(entries.saturating_mul(ENTRY)).saturating_add(index_table(entries)))
    }

    /// What decoding `value` took, as the decoder builds it: the same figure the walk
    /// of a document that decodes to it gives (a document with a repeated key counts
    /// both; the value keeps one).
    fn of(value: &Value) -> Below {
        match value {
            Value::Null | Value::Bool(_) | Value::Int(_) | Value::Float(_) => Below::NOTHING,
            Value::String(s) => Below::kept(allocation(s.len())),
            Value::Bytes(b) => Below::kept(allocation(b.len())),
            // No body decodes to a blob; counted for completeness.
            Value::Blob(blob) => Below::kept(
                allocation(size_of::<crate::value::BlobRef>()).saturating_add(allocation(blob.content_type.len())),
            ),
            Value::Array(items) => Below::array(
                items.len(),
                items.iter().fold(Below::NOTHING, |children, item| children.and(Below::of(item))),
            ),
            Value::Object(object) => {
                let children = object.iter().fold(Below::NOTHING, |children, (key, value)| {
                    children.and(Below::kept(allocation(key.len()))).and(Below::of(value))
                });
                Below::object(object.len(), children)
            }
        }
    }

    /// The footprint of a document whose root value has `self` beneath it.
    fn with_root(self) -> Footprint {
        Footprint(self.kept.saturating_add(self.transient).saturating_add(size_of::<Value>()))
    }

    /// `self` and then `next` decoded beside it.
    fn and(self, next: Below) -> Below {
        Below { kept: self.kept.saturating_add(next.kept), transient: self.transient.max(next.transient) }
    }
}

impl<'de> Deserialize<'de> for Below {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Below, D::Error> {
        deserializer.deserialize_any(BelowVisitor)
    }
}

impl<'de> Deserialize<'de> for Footprint {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Footprint, D::Error> {
        Ok(Below::deserialize(deserializer)?.with_root())
    }
}

impl Footprint {
    /// The most heap a JSON document's decoded value takes per byte of its text, as
    /// estimated: an array of one-digit numbers is the densest (two bytes per
    /// element, each a 64-byte slot rounded up to 72, and twice that again while the
    /// array grows), 108 bytes per byte. `tests/footprint.rs` holds every dense shape
    /// to it.
    pub const MOST_PER_JSON_BYTE: usize = 128;

    /// The footprint of a value already decoded: what walking the document it was
    /// decoded from would have said. A small body is decoded first and measured
    /// after (`lyre-server`'s `body.rs`): one pass over its text instead of two.
    pub fn of(value: &Value) -> Footprint {
        Below::of(value).with_root()
    }
}

struct BelowVisitor;

impl<'de> Visitor<'de> for BelowVisitor {
    type Value = Below;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any value")
    }

    fn visit_unit<E>(self) -> Result<Below, E> {
        Ok(Below::NOTHING)
    }
    fn visit_none<E>(self) -> Result<Below, E> {
        Ok(Below::NOTHING)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Below, D::Error> {
        Below::deserialize(d)
    }
    fn visit_bool<E>(self, _: bool) -> Result<Below, E> {
        Ok(Below::NOTHING)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Below, E> {
        Ok(Below::NOTHING)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Below, E> {
        Ok(Below::NOTHING)
    }
    fn visit_i128<E>(self, _: i128) -> Result<Below, E> {
        Ok(Below::NOTHING)
    }
    fn visit_u128<E>(self, _: u128) -> Result<Below, E> {
        Ok(Below::NOTHING)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Below, E> {
        Ok(Below::NOTHING)
    }
    fn visit_str<E>(self, s: &str) -> Result<Below, E> {
        Ok(Below::kept(allocation(s.len())))
    }
    fn visit_bytes<E>(self, b: &[u8]) -> Result<Below, E> {
        Ok(Below::kept(allocation(b.len())))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Below, A::Error> {
        let (mut items, mut children) = (0usize, Below::NOTHING);
        while let Some(item) = seq.next_element::<Below>()? {
            items += 1;
            children = children.and(item);
        }
        Ok(Below::array(items, children))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Below, A::Error> {
        let (mut entries, mut children) = (0usize, Below::NOTHING);
        while let Some(KeyBelow(key)) = map.next_key()? {
            let value = map.next_value::<Below>()?;
            entries += 1;
            children = children.and(Below::kept(key)).and(value);
        }
        Ok(Below::object(entries, children))
    }
}

/// The heap a map key takes as the `String` `Value`'s decoder makes of it.
struct KeyBelow(usize);

impl<'de> Deserialize<'de> for KeyBelow {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<KeyBelow, D::Error> {
        struct KeyVisitor;
        impl Visitor<'_> for KeyVisitor {
            type Value = KeyBelow;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string map key")
            }
            fn visit_str<E>(self, s: &str) -> Result<KeyBelow, E> {
                Ok(KeyBelow(allocation(s.len())))
            }
            fn visit_i64<E>(self, _: i64) -> Result<KeyBelow, E> {
                Ok(KeyBelow(allocation(20)))
            }
            fn visit_u64<E>(self, _: u64) -> Result<KeyBelow, E> {
                Ok(KeyBelow(allocation(20)))
            }
            fn visit_bool<E>(self, _: bool) -> Result<KeyBelow, E> {
                Ok(KeyBelow(allocation(5)))
            }
            fn visit_bytes<E: de::Error>(self, b: &[u8]) -> Result<KeyBelow, E> {
                std::str::from_utf8(b)
                    .map(|s| KeyBelow(allocation(s.len())))
                    .map_err(|_| E::custom("map key is not UTF-8"))
            }
        }
        deserializer.deserialize_any(KeyVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(json: &str) -> usize {
        serde_json::from_str::<Footprint>(json).unwrap().0
    }

    #[test]
    fn a_larger_document_of_the_same_shape_costs_more() {
        assert!(of(r#"{"id":1}"#) < of(r#"{"id":1,"name":"x"}"#));
        assert!(of("[1]") < of("[1,2,3,4,5]"));
        assert!(of(r#""ab""#) < of(&format!("\"{}\"", "a".repeat(100))));
    }

    #[test]
    fn a_scalar_costs_its_slot() {
        assert_eq!(of("1"), size_of::<Value>());
        assert_eq!(of("null"), size_of::<Value>());
    }

    #[test]
    fn malformed_input_is_refused_as_the_decoder_refuses_it() {
        assert!(serde_json::from_str::<Footprint>(r#"{"id":"#).is_err());
        assert!(serde_json::from_str::<Value>(r#"{"id":"#).is_err());
    }
}
