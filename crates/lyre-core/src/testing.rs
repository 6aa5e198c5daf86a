//! Strategies for property tests, shared with other crates' tests through the
//! `testing` feature.

use proptest::prelude::*;

use crate::value::Value;

/// Arbitrary values up to three levels deep: every kind a record can hold (floats
/// without NaN, which never equals itself).
pub fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::Int),
        any::<f64>().prop_filter("NaN never equals itself", |f| !f.is_nan()).prop_map(Value::Float),
        ".{0,12}".prop_map(Value::String),
        proptest::collection::vec(any::<u8>(), 0..8).prop_map(Value::Bytes),
    ];
    leaf.prop_recursive(3, 24, 5, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            proptest::collection::vec(("[a-z]{1,4}", inner), 0..5)
                .prop_map(|pairs| Value::Object(pairs.into_iter().collect())),
        ]
    })
}

/// Arbitrary records: objects of up to eight attributes of any kind.
pub fn record() -> impl Strategy<Value = crate::value::Object> {
    proptest::collection::vec(("[a-z_]{1,6}", value()), 0..8).prop_map(|pairs| pairs.into_iter().collect())
}
