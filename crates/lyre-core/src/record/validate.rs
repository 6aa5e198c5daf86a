//! Checks a record against its table before it is queued for the writer, so a bad
//! record rejects its whole batch without touching storage.

use lyre_store::{MAX_KEY_STRING_BYTES, encode_key};

use crate::catalog::{Shape, TableSchema, validate_attribute_name};
use crate::error::{Error, Result};
use crate::record::merge::{Op, crdt_op};
use crate::value::{Object, Value};

/// Largest encoded primary key (an index entry holds a value and a key, and LMDB keys
/// are at most 511 bytes).
pub(crate) const MAX_PRIMARY_KEY_BYTES: usize = MAX_KEY_STRING_BYTES;

/// Fails unless `value` of the table's `@expiresAt` attribute `name` is a time in ms
/// since the epoch (a finite number) or null (no time of its own).
fn validate_expiry_time(name: &str, value: &Value) -> Result<()> {
    match value {
        Value::Null | Value::Int(_) => Ok(()),
        Value::Float(ms) if ms.is_finite() => Ok(()),
        other => Err(Error::invalid(format!(
            "Value {} in property {name} must be a time in milliseconds since the epoch (it is the table's @expiresAt)",
            shown(other)
        ))),
    }
}

/// Validates one record: attribute names, relationships (never written), declared
/// types and shapes, `@expiresAt` times, sealed tables, and (for writes that replace
/// the whole record) required attributes.
pub(crate) fn validate_record(table: &TableSchema, record: &Object, whole: bool) -> Result<()> {
    for (name, value) in record {
        validate_attribute_name(name)?;
        if table.relationships.iter().any(|r| &r.name == name) {
            // A relationship is computed from the related records, never stored.
            return Err(Error::invalid(format!("Computed property {name} may not be directly assigned a value")));
        }
        let attribute = table.attribute(name);
        if attribute.is_some_and(|a| a.shape.computed.is_some()) {
            // Computed from the record when read, never stored (Harper's words).
            return Err(Error::invalid(format!("Computed property {name} may not be directly assigned a value")));
        }
        if attribute.is_none() && table.sealed {
            return Err(Error::invalid(format!("Property {name} is not allowed: table {} is sealed", table.name)));
        }
        let type_name = attribute.and_then(|a| a.type_name.as_deref());
        if let Some(Op::Add(operand)) = crdt_op(name, value)? {
            // An increment: its operand must fit the attribute's numeric type.
            let composite = attribute.is_some_and(|a| a.shape.list || !a.shape.fields.is_empty());
            let stamped = attribute.is_some_and(|a| a.shape.stamp.is_some());
            match type_name.filter(|_| !composite) {
                _ if composite => {
                    return Err(Error::invalid(format!("{name}: cannot add to a list or object attribute")));
                }
                _ if stamped => {
                    return Err(Error::invalid(format!("{name}: cannot add to a time stamp the server sets")));
                }
                None | Some("Int" | "Long" | "BigInt" | "Float" | "Any") => validate_scalar(name, type_name, &operand)?,
                Some(other) => {
                    return Err(Error::invalid(format!(
                        "{name}: cannot add to a {other} attribute; \"add\" needs a number"
                    )));
                }
            }
        } else if let Some(attribute) = attribute {
            validate_value(&attribute.name, type_name, &attribute.shape, value)?;
            if attribute.vector.is_some() && !matches!(value, Value::Null) {
                crate::catalog::read_vector(value)
                    .map_err(|problem| Error::invalid(format!("the vector attribute '{name}' {problem}")))?;
            }
            if table.expires_at.as_ref() == Some(name) {
                validate_expiry_time(name, value)?;
            }
        }
    }
    if whole {
        let missing = table.attributes.iter().find(|a| {
            a.shape.required
                && a.shape.stamp.is_none()
                && a.shape.computed.is_none()
                && !a.is_primary_key
                && matches!(record.get(&a.name), None | Some(Value::Null))
        });
        if let Some(attribute) = missing {
            return Err(Error::invalid(format!("Property {} is required", attribute.name)));
        }
    }
    Ok(())
}

/// Checks `value` against a declared type and shape; `path` names it in errors.
fn validate_value(path: &str, type_name: Option<&str>, shape: &Shape, value: &Value) -> Result<()> {
    if matches!(value, Value::Null) {
        return if shape.required { Err(Error::invalid(format!("Property {path} is required"))) } else { Ok(()) };
    }
    if shape.list {
        let Value::Array(items) = value else {
            return Err(Error::invalid(format!("Value {} in property {path} must be an array", shown(value))));
        };
        let element = Shape { list: false, required: false, ..shape.clone() };
        for (i, item) in items.iter().enumerate() {
            validate_value(&format!("{path}[{i}]"), type_name, &element, item)?;
        }
        return Ok(());
    }
    if !shape.fields.is_empty() {
        let Value::Object(object) = value else {
            return Err(Error::invalid(format!("Value {} in property {path} must be an object", shown(value))));
        };
        for field in &shape.fields {
            let inner = format!("{path}.{}", field.name);
            match object.get(&field.name) {
                Some(v) => validate_value(&inner, Some(&field.type_name), &field.shape, v)?,
                None if field.shape.required => {
                    return Err(Error::invalid(format!("Property {inner} is required")));
                }
                None => {}
            }
        }
        return Ok(());
    }
    validate_scalar(path, type_name, value)
}

fn shown(value: &Value) -> String {
    match value {
        Value::String(s) => format!("\"{s}\""),
        other => other.to_string(),
    }
}

/// Validates a client-supplied primary key and returns its encoded key.
pub(crate) fn encode_primary_key(value: &Value) -> Result<Vec<u8>> {
    if !is_primary_key_value(value) {
        return Err(Error::invalid(format!("Invalid primary key type: {}", value.type_name())));
    }
    let encoded = match value {
        // A composite key (Harper's array primary key), ordered element by element.
        Value::Array(parts) => {
            let parts = parts.iter().map(Value::as_key).collect::<Option<Vec<_>>>();
            lyre_store::encode_composite_key(&parts.ok_or_else(|| Error::invalid("Invalid primary key"))?)?
        }
        _ => encode_key(value.as_key().ok_or_else(|| Error::invalid("Invalid primary key"))?)?,
    };
    match encoded {
        (encoded, false) if encoded.len() <= MAX_PRIMARY_KEY_BYTES => Ok(encoded),
        _ => Err(Error::invalid(format!("Primary key size is too large: {}", value.to_string().len()))),
    }
}

pub(crate) fn validate_scalar(path: &str, type_name: Option<&str>, value: &Value) -> Result<()> {
    let Some(type_name) = type_name else {
        return Ok(());
    };
    let ok = match type_name {
        "String" | "ID" => matches!(value, Value::String(_)) || (type_name == "ID" && matches!(value, Value::Int(_))),
        "Int" => integral(value).is_some_and(|i| i32::try_from(i).is_ok()),
        "Long" => integral(value).is_some_and(|i| i.unsigned_abs() < (1 << 53)),
        "BigInt" => integral(value).is_some(),
        "Float" => matches!(value, Value::Int(_) | Value::Float(_)),
        "Boolean" => matches!(value, Value::Bool(_)),
        "Date" => matches!(value, Value::Int(_) | Value::Float(_) | Value::String(_)),
        "Bytes" => matches!(value, Value::Bytes(_)),
        "Blob" => matches!(value, Value::String(_) | Value::Bytes(_) | Value::Blob(_)),
        _ => true,
    };
    if ok {
        return Ok(());
    }
    let expected = match type_name {
        "String" | "ID" => "must be a string".to_string(),
        "Int" => "must be an integer (from -2147483648 to 2147483647)".to_string(),
        "Long" => "must be an integer (from -9007199254740992 to 9007199254740992)".to_string(),
        "BigInt" => "must be an integer".to_string(),
        "Float" => "must be a number".to_string(),
        "Boolean" => "must be a boolean".to_string(),
        "Date" => "must be a date".to_string(),
        "Bytes" => "must be binary data".to_string(),
        "Blob" => "must be a blob (text or binary data)".to_string(),
        other => format!("must be of type {other}"),
    };
    Err(Error::invalid(format!("Value {} in property {path} {expected}", shown(value))))
}

/// The integer `value` holds: an integer, or a float with no fraction (`5.0`, `-0.0`)
/// that a double holds exactly (below 2^53), which JavaScript, and so Harper, does not
/// tell from an integer. Such a float needs no conversion: it compares and indexes as
/// the integer, and every response format writes it as one (`Value`'s `Serialize`).
fn integral(value: &Value) -> Option<i64> {
    match value {
        Value::Int(i) => Some(*i),
        Value::Float(f) if f.fract() == 0.0 && f.abs() < 9_007_199_254_740_992.0 => Some(*f as i64),
        _ => None,
    }
}

/// Whether `value` may be a primary key: a string or a number, or (a composite key,
/// as Harper allows) a non-empty array of them.
pub(crate) fn is_primary_key_value(value: &Value) -> bool {
    match value {
        Value::Array(parts) => !parts.is_empty() && parts.iter().all(is_scalar_key),
        other => is_scalar_key(other),
    }
}

fn is_scalar_key(value: &Value) -> bool {
    matches!(value, Value::String(_) | Value::Int(_)) || matches!(value, Value::Float(f) if f.is_finite())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn declared_types_are_enforced_with_harpers_messages() {
        assert!(validate_scalar("x", Some("Int"), &Value::Int(5)).is_ok());
        assert_eq!(
            validate_scalar("x", Some("Int"), &Value::String("abc".into())).unwrap_err().to_string(),
            "Value \"abc\" in property x must be an integer (from -2147483648 to 2147483647)"
        );
        assert!(validate_scalar("x", Some("Int"), &Value::Int(1 << 40)).is_err());
        assert!(validate_scalar("x", Some("Int"), &Value::Float(-0.0)).is_ok());
        assert!(validate_scalar("x", Some("Long"), &Value::Float(5.0)).is_ok());
        assert!(validate_scalar("x", Some("Int"), &Value::Float(5.5)).is_err());
        assert!(validate_scalar("x", Some("BigInt"), &Value::Float(12_345_678_901_234_568.0)).is_err(), "past 2^53");
        assert_eq!(
            validate_scalar("x", Some("String"), &Value::Int(12345)).unwrap_err().to_string(),
            "Value 12345 in property x must be a string"
        );
        assert!(validate_scalar("x", Some("Any"), &Value::Bool(true)).is_ok());
        assert!(validate_value("x", Some("Float"), &Shape::default(), &Value::Null).is_ok());
    }

    #[test]
    fn shapes_lists_nested_fields_and_required_are_enforced() {
        use crate::catalog::NestedField;
        let list = Shape { list: true, ..Shape::default() };
        assert!(validate_value("tags", Some("String"), &list, &serde_json::from_str(r#"["a","b"]"#).unwrap()).is_ok());
        assert_eq!(
            validate_value("tags", Some("String"), &list, &serde_json::from_str(r#"["a",5]"#).unwrap())
                .unwrap_err()
                .to_string(),
            "Value 5 in property tags[1] must be a string"
        );
        assert!(validate_value("tags", Some("String"), &list, &Value::from("a")).is_err());
        let nested = Shape {
            fields: vec![NestedField {
                name: "weight".into(),
                type_name: "Float".into(),
                shape: Shape { required: true, ..Shape::default() },
            }],
            ..Shape::default()
        };
        assert!(
            validate_value(
                "details",
                Some("Details"),
                &nested,
                &serde_json::from_str(r#"{"weight": 2.5, "other": 1}"#).unwrap()
            )
            .is_ok()
        );
        assert_eq!(
            validate_value("details", Some("Details"), &nested, &serde_json::from_str(r#"{"weight": "x"}"#).unwrap())
                .unwrap_err()
                .to_string(),
            "Value \"x\" in property details.weight must be a number"
        );
        assert_eq!(
            validate_value("details", Some("Details"), &nested, &serde_json::from_str("{}").unwrap())
                .unwrap_err()
                .to_string(),
            "Property details.weight is required"
        );
        let required = Shape { required: true, ..Shape::default() };
        assert_eq!(
            validate_value("name", Some("String"), &required, &Value::Null).unwrap_err().to_string(),
            "Property name is required"
        );
    }

    #[test]
    fn primary_keys_must_be_short_strings_or_numbers() {
        assert!(encode_primary_key(&Value::Int(1)).is_ok());
        assert!(encode_primary_key(&Value::String("a".into())).is_ok());
        assert_eq!(
            encode_primary_key(&Value::Bool(true)).unwrap_err().to_string(),
            "Invalid primary key type: boolean"
        );
        assert!(encode_primary_key(&Value::String("x".repeat(2000))).unwrap_err().to_string().contains("too large"));
        assert!(encode_primary_key(&Value::Float(f64::NAN)).is_err());
    }
}
