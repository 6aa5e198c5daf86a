//! Evaluating conditions against a record, consistently with index order, with
//! Harper's semantics (its `filterByType` and index searches):
//!
//! * values of different types compare in key order, null < booleans < numbers <
//!   strings, so a range matches across types;
//! * an array attribute matches when any element does (`!=` too: a record is kept
//!   when some element differs);
//! * a record that lacks the attribute matches no comparison, `!=` included (Harper
//!   finds `!=` candidates in the attribute's index, which holds no absent values);
//! * a null matches no `<`, `<=` or `!=` of a value that is not null: Harper's
//!   index search reads those from the first value past null (its `start = true`),
//!   and SQL's comparisons never hold for a null either;
//! * `contains` and `ends_with` test the text of numbers and booleans as well
//!   (`qty=ct=5` finds 5 and 15); `starts_with` tests strings only.

use std::cmp::Ordering;

use crate::error::Result;
use crate::query::ast::{Comparator, Condition, Operator};
use crate::query::related::Related;
use crate::value::{Object, Value};

/// Whether `record` satisfies every (AND) or any (OR) of `conditions`. `related`
/// resolves relationship conditions; without it they never match.
pub(crate) fn matches_all(
    operator: Operator,
    conditions: &[Condition],
    record: &Object,
    related: Option<&Related<'_>>,
) -> Result<bool> {
    // Consecutive conditions on one attribute (an OR of equalities, as a SQL join
    // batches its keys) look it up once.
    let mut last: Option<(&str, Option<&Value>)> = None;
    for condition in conditions {
        let hit = match condition {
            Condition::Compare { attribute, comparator, value } => {
                let found = match last {
                    Some((name, found)) if name == attribute => found,
                    _ => {
                        let found = record.get(attribute);
                        last = Some((attribute, found));
                        found
                    }
                };
                compare_found(found, *comparator, value)
            }
            _ => matches(condition, record, related)?,
        };
        match operator {
            Operator::And if !hit => return Ok(false),
            Operator::Or if hit => return Ok(true),
            _ => {}
        }
    }
    Ok(operator == Operator::And)
}

/// Whether `record` satisfies `condition`.
pub(crate) fn matches(condition: &Condition, record: &Object, related: Option<&Related<'_>>) -> Result<bool> {
    Ok(match condition {
        Condition::Group { operator, conditions } => matches_all(*operator, conditions, record, related)?,
        Condition::Related { relationship, condition } => {
            let Some(related) = related else { return Ok(false) };
            let Some(found) = related.relationship(relationship) else { return Ok(false) };
            // Inner conditions are evaluated on the related table, following its own
            // relationships in turn (`a.b.c`).
            let (schema, _) = related.target(found)?;
            let inner = related.of(&schema);
            let mut hit = false;
            for target in related.records(record, found)? {
                if matches(condition, &target, Some(&inner))? {
                    hit = true;
                    break;
                }
            }
            hit
        }
        Condition::Compare { attribute, comparator, value } => compare_found(record.get(attribute), *comparator, value),
    })
}

/// Whether an attribute's value (`None`: the record lacks it) compares as asked.
fn compare_found(found: Option<&Value>, comparator: Comparator, value: &Value) -> bool {
    let Some(found) = found else { return false };
    match (comparator, found) {
        (Comparator::NotEqual, Value::Array(items)) => items.iter().any(|x| compare(x, Comparator::NotEqual, value)),
        _ => any_element(found, |x| compare(x, comparator, value)),
    }
}

fn any_element(value: &Value, test: impl Fn(&Value) -> bool) -> bool {
    match value {
        Value::Array(items) => items.iter().any(&test) || test(value),
        other => test(other),
    }
}

fn equal(a: &Value, b: &Value) -> bool {
    match a.cmp_scalar(b) {
        Some(order) => order == Ordering::Equal,
        None => a == b,
    }
}

fn compare(x: &Value, comparator: Comparator, value: &Value) -> bool {
    let below_or_unequal =
        matches!(comparator, Comparator::LessThan | Comparator::LessThanEqual | Comparator::NotEqual);
    if below_or_unequal && *x == Value::Null && *value != Value::Null {
        return false;
    }
    match comparator {
        Comparator::Equals => equal(x, value),
        Comparator::NotEqual => !equal(x, value),
        Comparator::Contains => texts(x, value, |s, v| s.contains(v)),
        Comparator::StartsWith => matches!(x, Value::String(_)) && texts(x, value, |s, v| s.starts_with(v)),
        Comparator::EndsWith => texts(x, value, |s, v| s.ends_with(v)),
        Comparator::GreaterThan => x.cmp_scalar(value) == Some(Ordering::Greater),
        Comparator::GreaterThanEqual => matches!(x.cmp_scalar(value), Some(Ordering::Greater | Ordering::Equal)),
        Comparator::LessThan => x.cmp_scalar(value) == Some(Ordering::Less),
        Comparator::LessThanEqual => {
            matches!(x.cmp_scalar(value), Some(Ordering::Less | Ordering::Equal))
        }
        Comparator::Between => match value {
            Value::Array(bounds) if bounds.len() >= 2 => {
                matches!(x.cmp_scalar(&bounds[0]), Some(Ordering::Greater | Ordering::Equal))
                    && matches!(x.cmp_scalar(&bounds[1]), Some(Ordering::Less | Ordering::Equal))
            }
            _ => false,
        },
    }
}

/// Tests the text of two scalars (a string, a boolean, or a number in Rust's
/// formatting, which is JavaScript's for integers and short decimals, not for
/// exponents such as `1e21`); anything else never matches.
fn texts(x: &Value, value: &Value, test: impl Fn(&str, &str) -> bool) -> bool {
    match (text(x), text(value)) {
        (Some(s), Some(v)) => test(&s, &v),
        _ => false,
    }
}

fn text(value: &Value) -> Option<std::borrow::Cow<'_, str>> {
    Some(match value {
        Value::String(s) => std::borrow::Cow::Borrowed(s.as_str()),
        Value::Int(n) => std::borrow::Cow::Owned(n.to_string()),
        Value::Float(f) if f.is_finite() => std::borrow::Cow::Owned(f.to_string()),
        Value::Bool(b) => std::borrow::Cow::Borrowed(if *b { "true" } else { "false" }),
        _ => return None,
    })
}

/// A total order for sorting: a missing value equal to `null` and below every other
/// (Harper 5's sort compares an absent value as `null`, so the next sort key orders
/// the two), then scalars in key order, then other values.
pub(crate) fn cmp_sort_values(a: Option<&Value>, b: Option<&Value>) -> Ordering {
    let rank = |v: Option<&Value>| match v {
        None | Some(Value::Null) => 0,
        Some(Value::Bool(_)) => 1,
        Some(Value::Int(_) | Value::Float(_)) => 2,
        Some(Value::String(_)) => 3,
        Some(_) => 4,
    };
    match (a, b) {
        (Some(x), Some(y)) => x.cmp_scalar(y).unwrap_or_else(|| rank(a).cmp(&rank(b))),
        _ => rank(a).cmp(&rank(b)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hit(condition: &Condition, record: &Object) -> bool {
        matches(condition, record, None).unwrap()
    }

    fn record(json: &str) -> Object {
        match serde_json::from_str::<Value>(json).unwrap() {
            Value::Object(o) => o,
            _ => panic!("not an object"),
        }
    }

    fn cmp(attribute: &str, comparator: Comparator, value: Value) -> Condition {
        Condition::Compare { attribute: attribute.into(), comparator, value }
    }

    #[test]
    fn comparisons_follow_key_order_and_strict_types() {
        let r = record(r#"{"age":5,"name":"Labrador Mix","tags":["a","b"]}"#);
        assert!(hit(&cmp("age", Comparator::Equals, Value::Int(5)), &r));
        assert!(hit(&cmp("age", Comparator::Equals, Value::Float(5.0)), &r));
        assert!(!hit(&cmp("age", Comparator::Equals, "5".into()), &r));
        assert!(!hit(&cmp("age", Comparator::GreaterThan, "5".into()), &r));
        assert!(hit(&cmp("age", Comparator::GreaterThan, Value::Bool(true)), &r));
        assert!(hit(&cmp("name", Comparator::EndsWith, "Mix".into()), &r));
        assert!(hit(&cmp("name", Comparator::Contains, "ador".into()), &r));
        assert!(hit(&cmp("tags", Comparator::Equals, "b".into()), &r));
        assert!(!hit(&cmp("missing", Comparator::NotEqual, Value::Int(1)), &r));
        assert!(hit(&cmp("tags", Comparator::NotEqual, "a".into()), &r), "an element differs");
        assert!(!hit(&cmp("tags", Comparator::NotEqual, "a".into()), &record(r#"{"tags":["a"]}"#)));
        assert!(hit(&cmp("age", Comparator::Contains, "5".into()), &record(r#"{"age":15}"#)));
        assert!(hit(&cmp("age", Comparator::EndsWith, Value::Int(5)), &record(r#"{"age":15}"#)));
        assert!(!hit(&cmp("age", Comparator::StartsWith, "1".into()), &record(r#"{"age":15}"#)));
        assert!(hit(&cmp("ok", Comparator::Contains, "ru".into()), &record(r#"{"ok":true}"#)));
        assert!(hit(&cmp("age", Comparator::GreaterThan, Value::Int(5)), &record(r#"{"age":"abc"}"#)));
        let null_age = record(r#"{"age":null}"#);
        assert!(!hit(&cmp("age", Comparator::LessThan, Value::Int(5)), &null_age), "a null is below no value");
        assert!(!hit(&cmp("age", Comparator::LessThanEqual, Value::Int(5)), &null_age));
        assert!(!hit(&cmp("age", Comparator::NotEqual, Value::Int(5)), &null_age), "nor unequal to one");
        assert!(!hit(&cmp("age", Comparator::NotEqual, Value::Null), &null_age));
        assert!(hit(&cmp("age", Comparator::LessThanEqual, Value::Null), &null_age));
        assert!(hit(&cmp("age", Comparator::NotEqual, Value::Null), &record(r#"{"age":false}"#)));
        assert!(hit(&cmp("age", Comparator::LessThan, Value::Int(5)), &record(r#"{"age":false}"#)));
        assert!(hit(&cmp("tags", Comparator::LessThan, "b".into()), &record(r#"{"tags":[null,"a"]}"#)));
        assert!(!hit(&cmp("tags", Comparator::NotEqual, "b".into()), &record(r#"{"tags":[null,"b"]}"#)));
        assert!(!hit(&cmp("missing", Comparator::Equals, Value::Null), &r));
        assert!(hit(&cmp("age", Comparator::Between, vec![Value::Int(5), Value::Int(8)].into()), &r));
        assert!(!hit(&cmp("age", Comparator::Between, vec![Value::Int(6), Value::Int(8)].into()), &r));
        let either = Condition::Group {
            operator: Operator::Or,
            conditions: vec![
                cmp("age", Comparator::LessThan, Value::Int(0)),
                cmp("name", Comparator::StartsWith, "Lab".into()),
            ],
        };
        assert!(hit(&either, &r));
    }

    /// Scalars of every type Harper orders: null, booleans, numbers (integral and
    /// not), strings.
    fn scalar() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            (-1_000i64..1_000).prop_map(Value::Int),
            (-1_000.0f64..1_000.0).prop_map(Value::Float),
            "[a-c5 ]{0,4}".prop_map(Value::String),
        ]
    }

    proptest::proptest! {
        /// A comparison across types agrees with the order of the index keys (so an
        /// index range and the filter that re-checks it agree), and that order is
        /// Harper's: null < booleans < numbers < strings.
        #[test]
        fn comparisons_follow_the_index_key_order_across_types(a in scalar(), b in scalar()) {
            let key = |v: &Value| lyre_store::encode_key(v.as_key().unwrap()).unwrap().0;
            let by_keys = key(&a).cmp(&key(&b));
            proptest::prop_assert_eq!(a.cmp_scalar(&b), Some(by_keys), "{:?} vs {:?}", a, b);
            let rank = |v: &Value| match v {
                Value::Null => 0,
                Value::Bool(_) => 1,
                Value::Int(_) | Value::Float(_) => 2,
                _ => 3,
            };
            if rank(&a) != rank(&b) {
                proptest::prop_assert_eq!(by_keys, rank(&a).cmp(&rank(&b)));
            }
            let record = Object::from_iter([("x".to_string(), a.clone())]);
            proptest::prop_assert_eq!(hit(&cmp("x", Comparator::GreaterThan, b.clone()), &record), by_keys.is_gt());
            // Except that a null is below or unequal to no value but null.
            let null_below = a == Value::Null && b != Value::Null;
            proptest::prop_assert_eq!(
                hit(&cmp("x", Comparator::LessThanEqual, b.clone()), &record),
                by_keys.is_le() && !null_below
            );
        }
    }

    #[test]
    fn missing_values_sort_first_as_null() {
        assert_eq!(cmp_sort_values(None, Some(&Value::Int(1))), Ordering::Less);
        assert_eq!(cmp_sort_values(None, Some(&Value::Bool(false))), Ordering::Less);
        assert_eq!(cmp_sort_values(None, Some(&Value::Null)), Ordering::Equal);
        assert_eq!(cmp_sort_values(Some(&Value::Null), Some(&Value::Int(1))), Ordering::Less);
        assert_eq!(cmp_sort_values(Some(&Value::Int(2)), Some(&Value::Float(1.5))), Ordering::Greater);
    }
}
