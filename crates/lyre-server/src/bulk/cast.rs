//! A CSV cell's value, typed as Harper types it when it loads CSV (`autoCast` for
//! columns without a declared type, `coerceType` for declared ones).

use lyre_core::Value;

/// The value a non-empty cell `text` stands for in a column whose attribute is
/// declared `type_name` (`None`: undeclared, or a dynamic table).
///
/// Declared types take the text as that type: `String` and `ID` keep it as it is
/// (a `"42"` postal code stays text), `Int`, `Long`, `BigInt` and `Float` read a
/// number, `Boolean` reads `true`/`false` in any case. Text that does not read as the
/// type is kept, and the write refuses it by name. Undeclared columns (and `Any`)
/// are typed by their text: see [`auto`].
pub fn cast(type_name: Option<&str>, text: &str) -> Value {
    let kept = || Value::String(text.to_string());
    match type_name {
        Some("String" | "ID") => kept(),
        Some("Int" | "Long" | "BigInt") => integer(text).unwrap_or_else(kept),
        Some("Float") => text.trim().parse::<f64>().ok().filter(|f| f.is_finite()).map_or_else(kept, Value::Float),
        Some("Boolean") => match text.to_ascii_lowercase().as_str() {
            "true" => Value::Bool(true),
            "false" => Value::Bool(false),
            _ => kept(),
        },
        None | Some("Any") => auto(text),
        Some(_) => kept(),
    }
}

/// Harper's `autoCast`: `true`/`TRUE`, `false`/`FALSE`, `null`/`NULL`/`undefined`;
/// a number when the text reads as one, except text with a leading zero (`007`, an
/// id or postal code) or an exponent (`1e5`, a part number), which stay text; a JSON
/// array or object when the text is one. Unlike Harper, an integer beyond 64 bits
/// stays text rather than becoming a float that has lost its last digits.
fn auto(text: &str) -> Value {
    match text {
        "true" | "TRUE" => return Value::Bool(true),
        "false" | "FALSE" => return Value::Bool(false),
        "null" | "NULL" | "undefined" => return Value::Null,
        _ => {}
    }
    if let Some(number) = number(text) {
        return number;
    }
    let json_like = (text.starts_with('[') && text.ends_with(']')) || (text.starts_with('{') && text.ends_with('}'));
    if json_like && let Ok(value) = serde_json::from_str::<Value>(text) {
        return value;
    }
    Value::String(text.to_string())
}

/// `text` as a number under `autoCast`'s rules: surrounding spaces allowed, an
/// optional sign, digits with at most one decimal point (`.5` too); no leading zero
/// unless `0` alone or `0.…`; an exponent only after `0.`.
fn number(text: &str) -> Option<Value> {
    let trimmed = text.trim();
    if trimmed.starts_with('0') && trimmed != "0" && !trimmed.starts_with("0.") {
        return None;
    }
    if trimmed.contains(['e', 'E']) && !trimmed.starts_with("0.") {
        return None;
    }
    let unsigned = trimmed.strip_prefix(['-', '+']).unwrap_or(trimmed);
    let mantissa = unsigned.split(['e', 'E']).next().unwrap_or(unsigned);
    let shaped = !mantissa.is_empty()
        && mantissa.bytes().all(|b| b.is_ascii_digit() || b == b'.')
        && mantissa.bytes().filter(|b| *b == b'.').count() <= 1
        && mantissa.bytes().any(|b| b.is_ascii_digit());
    if !shaped {
        return None;
    }
    if !trimmed.contains(['.', 'e', 'E']) {
        return integer(trimmed);
    }
    trimmed.parse::<f64>().ok().filter(|f| f.is_finite()).map(Value::Float)
}

/// An integer written as `[-+]?[0-9]+` (spaces around allowed), within 64 bits.
fn integer(text: &str) -> Option<Value> {
    let trimmed = text.trim();
    let digits = trimmed.strip_prefix(['-', '+']).unwrap_or(trimmed);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    trimmed.parse::<i64>().ok().map(Value::Int)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn undeclared_columns_are_typed_as_harper_types_them() {
        for (text, value) in [
            ("42", Value::Int(42)),
            ("-7", Value::Int(-7)),
            ("-007", Value::Int(-7)),
            (" 42", Value::Int(42)),
            ("0", Value::Int(0)),
            ("+5", Value::Int(5)),
            ("3.25", Value::Float(3.25)),
            (".5", Value::Float(0.5)),
            ("0.5e3", Value::Float(500.0)),
            ("true", Value::Bool(true)),
            ("TRUE", Value::Bool(true)),
            ("FALSE", Value::Bool(false)),
            ("null", Value::Null),
            ("undefined", Value::Null),
            ("[1,\"a\"]", Value::Array(vec![Value::Int(1), Value::from("a")])),
        ] {
            assert_eq!(cast(None, text), value, "{text:?}");
        }
        let Value::Object(object) = cast(None, "{\"a\":{\"b\":2}}") else { panic!("an object") };
        assert_eq!(object.get("a").map(Value::type_name), Some("object"));
    }

    #[test]
    fn undeclared_text_that_only_looks_typed_stays_text() {
        for text in [
            "007",
            "00",
            "0x1A",
            "1e5",
            "12a",
            "1.2.3",
            "True",
            "NaN",
            "Infinity",
            "[1,",
            "{x}",
            "-",
            ".",
            "2024-01-01",
        ] {
            assert_eq!(cast(None, text), Value::from(text), "{text:?}");
        }
        // Past 64 bits an integer would lose digits as a float: it stays text.
        assert_eq!(cast(None, "123456789012345678901234567890"), Value::from("123456789012345678901234567890"));
    }

    #[test]
    fn declared_columns_take_their_type() {
        assert_eq!(cast(Some("String"), "00042"), Value::from("00042"));
        assert_eq!(cast(Some("String"), "true"), Value::from("true"));
        assert_eq!(cast(Some("ID"), "17"), Value::from("17"));
        assert_eq!(cast(Some("Int"), "-12"), Value::Int(-12));
        assert_eq!(cast(Some("Int"), "1.5"), Value::from("1.5"), "kept for the write to refuse by name");
        assert_eq!(cast(Some("Float"), "2"), Value::Float(2.0));
        assert_eq!(cast(Some("Boolean"), "True"), Value::Bool(true));
        assert_eq!(cast(Some("Boolean"), "yes"), Value::from("yes"));
        assert_eq!(cast(Some("Any"), "5"), Value::Int(5));
    }
}
