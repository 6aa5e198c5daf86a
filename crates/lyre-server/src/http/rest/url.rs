//! The REST URL path: which exported table, and which part of it.
//!
//! `/T` the table's description · `/T/` the collection (a query string searches it)
//! · `/T/<id>` one record · `/T/<id>.<attr>` one property (declared attributes and
//! relationships only) · `/T/<id>/` the records whose (multi-part) key starts with
//! `<id>` · `/T/a/b` the key `a/b` · a trailing `.json`, `.cbor`, `.msgpack` or
//! `.csv` chooses the response format.

use std::borrow::Cow;

use lyre_core::Value;
use lyre_core::catalog::TableSchema;

use crate::http::error::ApiError;
use crate::http::format::Format;
use crate::http::rest::query::decode_path;

/// The part of a table a URL addresses.
#[derive(Debug, Clone, PartialEq)]
pub enum Target {
    /// `/T`: the table's description.
    Table,
    /// `/T/`: every record (or a search).
    Collection,
    /// `/T/<id>/`: records whose key is a multi-part key starting with `<id>`.
    Prefix(String),
    /// `/T/<id>`: one record.
    Record(Value),
    /// `/T/<id>.<attr>`: one property of one record.
    Property(Value, String),
}

/// A parsed path: the export name, the target and a format forced by extension.
#[derive(Debug, Clone, PartialEq)]
pub struct RestPath {
    /// The export's URL name (first segment, decoded).
    pub export: String,
    /// The rest of the path, still raw.
    pub rest: Option<String>,
    /// A response format chosen by a file extension.
    pub format: Option<Format>,
}

/// Splits `path` into the export name and the rest (with any format extension cut
/// off). `None` for `/`.
pub fn split(path: &str) -> Option<RestPath> {
    let trimmed = path.strip_prefix('/')?;
    if trimmed.is_empty() {
        return None;
    }
    let (first, rest) = match trimmed.split_once('/') {
        Some((first, rest)) => (first, Some(rest)),
        None => (trimmed, None),
    };
    let (first, mut format) = cut_extension(first);
    let rest = match rest {
        Some(rest) if format.is_none() => {
            let (cut, f) = cut_extension(rest);
            format = f;
            Some(cut)
        }
        other => other,
    };
    Some(RestPath { export: decode_path(first).into_owned(), rest: rest.map(str::to_owned), format })
}

fn cut_extension(segment: &str) -> (&str, Option<Format>) {
    for (ext, format) in
        [(".json", Format::Json), (".cbor", Format::Cbor), (".msgpack", Format::MessagePack), (".csv", Format::Csv)]
    {
        if let Some(stripped) = segment.strip_suffix(ext) {
            return (stripped, Some(format));
        }
    }
    (segment, None)
}

/// Resolves the rest of the path against the table's schema.
pub fn target(rest: Option<&str>, table: &TableSchema) -> Result<Target, ApiError> {
    let Some(rest) = rest else { return Ok(Target::Table) };
    if rest.is_empty() {
        return Ok(Target::Collection);
    }
    if let Some(prefix) = rest.strip_suffix('/') {
        return Ok(Target::Prefix(decode_path(prefix).into_owned()));
    }
    if let Some((id, attr)) = rest.rsplit_once('.') {
        let attr = decode_path(attr).into_owned();
        let declared = table.attribute(&attr).is_some_and(|a| a.type_name.is_some())
            || table.relationships.iter().any(|r| r.name == attr);
        if declared && !id.is_empty() {
            return Ok(Target::Property(typed_key_of(table, decode_path(id))?, attr));
        }
    }
    Ok(Target::Record(typed_key_of(table, decode_path(rest))?))
}

/// [`key_as`], refusing (400, as Harper) an id that is not a number where the primary
/// key is declared numeric: no record could have it.
pub(crate) fn typed_key(table: &TableSchema, text: &str) -> Result<Value, ApiError> {
    typed_key_of(table, Cow::Borrowed(text))
}

/// [`typed_key`] of text that may be owned already (a decoded id), which the key
/// then keeps rather than copies.
fn typed_key_of(table: &TableSchema, text: Cow<'_, str>) -> Result<Value, ApiError> {
    let declared = declared_key_type(table);
    match (declared, key_as(declared, text)) {
        (Some(numeric @ ("Int" | "Long" | "BigInt" | "Float")), Value::String(text)) => Err(ApiError::bad_request(
            format!("Invalid value for attribute {}: \"{text}\", expecting {numeric}", table.primary_key),
        )),
        (_, id) => Ok(id),
    }
}

/// The type the table declares for its primary key, if any.
fn declared_key_type(table: &TableSchema) -> Option<&str> {
    table.primary_key_attribute().and_then(|a| a.type_name.as_deref())
}

/// A key from URL text for a primary key declared `declared`: numbers for numeric
/// keys, text otherwise.
fn key_as(declared: Option<&str>, text: Cow<'_, str>) -> Value {
    let number = || {
        text.parse::<i64>()
            .map(Value::Int)
            .ok()
            .or_else(|| text.parse::<f64>().ok().filter(|f| f.is_finite() && declared.is_some()).map(Value::Float))
    };
    match declared {
        Some("Int" | "Long" | "BigInt" | "Float" | "Any") | None => match number() {
            Some(number) => number,
            None => Value::String(text.into_owned()),
        },
        _ => Value::String(text.into_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_split_into_export_rest_and_format() {
        assert_eq!(split("/"), None);
        assert_eq!(split("/products"), Some(RestPath { export: "products".into(), rest: None, format: None }));
        assert_eq!(
            split("/products/"),
            Some(RestPath { export: "products".into(), rest: Some(String::new()), format: None })
        );
        assert_eq!(
            split("/products/p1.cbor"),
            Some(RestPath { export: "products".into(), rest: Some("p1".into()), format: Some(Format::Cbor) })
        );
        assert_eq!(
            split("/products.csv"),
            Some(RestPath { export: "products".into(), rest: None, format: Some(Format::Csv) })
        );
        assert_eq!(split("/products/a%2Fb").unwrap().rest.as_deref(), Some("a%2Fb"));
    }
}
