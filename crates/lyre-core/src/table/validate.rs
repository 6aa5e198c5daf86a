//! Checks a record against its table before it is queued for the writer, so a bad
//! record rejects its whole batch without touching storage.

use lyre_store::{MAX_KEY_STRING_BYTES, encode_key};

use crate::catalog::{Attribute, TableSchema, validate_attribute_name};
use crate::error::{Error, Result};
use crate::table::is_primary_key_value;
use crate::value::{Object, Value};

/// Largest encoded primary key (an index entry holds a value and a key, and LMDB keys
/// are at most 511 bytes).
pub(crate) const MAX_PRIMARY_KEY_BYTES: usize = MAX_KEY_STRING_BYTES;

/// Validates one record's attribute names and declared types.
pub(crate) fn validate_record(table: &TableSchema, record: &Object) -> Result<()> {
    for (name, value) in record {
        validate_attribute_name(name)?;
        if let Some(attribute) = table.attribute(name) {
            validate_type(attribute, value)?;
        }
    }
    Ok(())
}

/// Validates a client-supplied primary key and returns its encoded key.
pub(crate) fn encode_primary_key(value: &Value) -> Result<Vec<u8>> {
    if !is_primary_key_value(value) {
        return Err(Error::invalid(format!(
            "Invalid primary key type: {}",
            value.type_name()
        )));
    }
    let key = value
        .as_key()
        .ok_or_else(|| Error::invalid("Invalid primary key"))?;
    match encode_key(key)? {
        (encoded, false) if encoded.len() <= MAX_PRIMARY_KEY_BYTES => Ok(encoded),
        _ => Err(Error::invalid(format!(
            "Primary key size is too large: {}",
            value.to_string().len()
        ))),
    }
}

fn validate_type(attribute: &Attribute, value: &Value) -> Result<()> {
    let Some(type_name) = attribute.type_name.as_deref() else {
        return Ok(());
    };
    if matches!(value, Value::Null) {
        return Ok(());
    }
    let ok = match type_name {
        "String" | "ID" => {
            matches!(value, Value::String(_))
                || (type_name == "ID" && matches!(value, Value::Int(_)))
        }
        "Int" => matches!(value, Value::Int(i) if i32::try_from(*i).is_ok()),
        "Long" => matches!(value, Value::Int(i) if i.unsigned_abs() < (1 << 53)),
        "BigInt" => matches!(value, Value::Int(_)),
        "Float" => matches!(value, Value::Int(_) | Value::Float(_)),
        "Boolean" => matches!(value, Value::Bool(_)),
        "Date" => matches!(value, Value::Int(_) | Value::Float(_) | Value::String(_)),
        "Bytes" => matches!(value, Value::Bytes(_)),
        _ => true,
    };
    if ok {
        return Ok(());
    }
    let shown = match value {
        Value::String(s) => format!("\"{s}\""),
        other => other.to_string(),
    };
    let expected = match type_name {
        "String" | "ID" => "must be a string".to_string(),
        "Int" => "must be an integer (from -2147483648 to 2147483647)".to_string(),
        "Long" => "must be an integer (from -9007199254740992 to 9007199254740992)".to_string(),
        "BigInt" => "must be an integer".to_string(),
        "Float" => "must be a number".to_string(),
        "Boolean" => "must be a boolean".to_string(),
        "Date" => "must be a date".to_string(),
        "Bytes" => "must be binary data".to_string(),
        other => format!("must be of type {other}"),
    };
    Err(Error::invalid(format!(
        "Value {shown} in property {} {expected}",
        attribute.name
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(type_name: &str) -> Attribute {
        Attribute {
            name: "x".into(),
            id: 1,
            type_name: Some(type_name.into()),
            indexed: false,
            is_primary_key: false,
            multi_valued: false,
        }
    }

    #[test]
    fn declared_types_are_enforced_with_harpers_messages() {
        assert!(validate_type(&attr("Int"), &Value::Int(5)).is_ok());
        assert_eq!(
            validate_type(&attr("Int"), &Value::String("abc".into()))
                .unwrap_err()
                .to_string(),
            "Value \"abc\" in property x must be an integer (from -2147483648 to 2147483647)"
        );
        assert!(validate_type(&attr("Int"), &Value::Int(1 << 40)).is_err());
        assert_eq!(
            validate_type(&attr("String"), &Value::Int(12345))
                .unwrap_err()
                .to_string(),
            "Value 12345 in property x must be a string"
        );
        assert!(validate_type(&attr("Any"), &Value::Bool(true)).is_ok());
        assert!(validate_type(&attr("Float"), &Value::Null).is_ok());
    }

    #[test]
    fn primary_keys_must_be_short_strings_or_numbers() {
        assert!(encode_primary_key(&Value::Int(1)).is_ok());
        assert!(encode_primary_key(&Value::String("a".into())).is_ok());
        assert_eq!(
            encode_primary_key(&Value::Bool(true))
                .unwrap_err()
                .to_string(),
            "Invalid primary key type: boolean"
        );
        assert!(
            encode_primary_key(&Value::String("x".repeat(2000)))
                .unwrap_err()
                .to_string()
                .contains("too large")
        );
        assert!(encode_primary_key(&Value::Float(f64::NAN)).is_err());
    }
}
