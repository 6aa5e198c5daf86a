//! The benchmark dataset: YCSB-shaped records (an id and ten 100-byte fields), with
//! `field0` a low-cardinality category so value searches return a few records.

use rand::Rng;
use rand::SeedableRng;
use rand::rngs::StdRng;
use serde_json::{Map, Value, json};

/// Records per category in `field0`.
pub const PER_CATEGORY: u64 = 10;

/// The category value stored in `field0` of record `id`.
pub fn category(id: u64, records: u64) -> String {
    format!("cat-{:0>96}", id % (records / PER_CATEGORY).max(1))
}

/// Record `id` of a dataset of `records`: deterministic, so every server gets the same.
pub fn record(id: u64, records: u64) -> Value {
    let mut rng = StdRng::seed_from_u64(id);
    let mut fields = Map::new();
    fields.insert("id".into(), json!(id));
    fields.insert("field0".into(), json!(category(id, records)));
    for f in 1..10 {
        let text: String = (0..100).map(|_| char::from(b'a' + rng.random_range(0..26))).collect();
        fields.insert(format!("field{f}"), Value::String(text));
    }
    Value::Object(fields)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_have_ten_100_byte_fields_and_are_deterministic() {
        let r = record(7, 1000);
        assert_eq!(r, record(7, 1000));
        for f in 0..10 {
            assert_eq!(r[format!("field{f}")].as_str().unwrap().len(), 100, "field{f}");
        }
        assert_eq!(category(7, 1000), category(107, 1000));
        assert_ne!(category(7, 1000), category(8, 1000));
    }
}
