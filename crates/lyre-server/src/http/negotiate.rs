//! Content negotiation: request bodies in JSON, CBOR, MessagePack or YAML (and, for
//! REST writes, forms and content of any other media type, [`rest_body`]); responses
//! in the format the `Accept` header prefers.

use axum::http::{HeaderMap, header};
use lyre_core::Code;
use serde::de::DeserializeOwned;

use crate::http::error::ApiError;
use crate::http::format::Format;

const SUPPORTED: &str = "application/json, application/cbor, application/x-msgpack, text/csv, text/plain, text/yaml";

/// The response format the client accepts best; 406 when it accepts none of ours.
pub fn response_format(headers: &HeaderMap) -> Result<Format, ApiError> {
    let Some(accept) = headers.get(header::ACCEPT) else {
        return Ok(Format::Json);
    };
    let accept = accept.to_str().map_err(|_| not_acceptable())?;
    if accept.trim().is_empty() {
        return Ok(Format::Json);
    }
    accepted(accept).iter().find_map(|media| Format::from_media_type(media)).ok_or_else(not_acceptable)
}

/// The media types an `Accept` value names (lower case), the client's preferred
/// first (by `q`, then by position); those it refuses (`q=0`) left out.
pub fn accepted(accept: &str) -> Vec<String> {
    let mut choices: Vec<(f32, usize, &str)> = accept
        .split(',')
        .enumerate()
        .map(|(position, part)| {
            let mut pieces = part.split(';');
            let media = pieces.next().unwrap_or("").trim();
            let q = pieces
                .filter_map(|p| p.trim().strip_prefix("q="))
                .find_map(|q| q.trim().parse::<f32>().ok())
                .unwrap_or(1.0);
            (q, position, media)
        })
        .filter(|(q, _, _)| *q > 0.0)
        .collect();
    choices.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    choices.into_iter().map(|(_, _, media)| media.to_ascii_lowercase()).collect()
}

fn not_acceptable() -> ApiError {
    ApiError::new(
        Code::NotAcceptable,
        format!("No supported content types found in Accept header, supported types include: {SUPPORTED}"),
    )
}

/// The format a request body is in, by its `Content-Type` (JSON when absent); an
/// empty body is refused.
pub fn body_format(headers: &HeaderMap, body: &[u8]) -> Result<Format, ApiError> {
    let content_type = media_type(headers)?;
    let media = content_type.as_str();
    let format = match media {
        // curl's `-d` sends JSON labelled as a form; Harper's own examples are sent so.
        "" | "text/plain" | "application/x-www-form-urlencoded"
            if body.first().is_some_and(|b| matches!(b, b'{' | b'[' | b' ' | b'\n')) =>
        {
            Format::Json
        }
        "" | "text/plain" => Format::Json,
        "application/json" => Format::Json,
        other => Format::from_media_type(other).filter(|f| *f != Format::Json).ok_or_else(|| unsupported(other))?,
    };
    if body.is_empty() {
        return Err(ApiError::bad_request(format!(
            "Body cannot be empty when content-type is set to '{}'",
            format.content_type()
        )));
    }
    Ok(format)
}

/// What a REST write's body is, Harper's deserializers taken for the media types
/// that are not one of the structured formats.
#[derive(Debug, Clone, PartialEq)]
pub enum RestBody {
    /// One of the structured formats ([`body_format`]).
    Structured(Format),
    /// Any other.
    Loose(LooseBody),
}

/// A REST write's body in no structured format.
#[derive(Debug, Clone, PartialEq)]
pub enum LooseBody {
    /// `application/x-www-form-urlencoded` fields ([`form_record`]).
    Form,
    /// Any other media type (this one): a content record ([`lyre_core::content_record`]).
    Content(String),
    /// `text/plain` for a script: the text itself, as Harper's deserializer gives it.
    Text,
}

/// How a REST write reads its body: as [`body_format`] does, but a form that is not
/// curl's JSON is its fields, and a body of any other media type (or of none, when
/// it does not look like JSON) is kept as content, where the Operations API refuses
/// them (415). A script (`text_as_text`) is given `text/plain` as the text itself;
/// a table reads it as JSON (curl's `-d` with that type).
pub fn rest_body(headers: &HeaderMap, body: &[u8], text_as_text: bool) -> Result<RestBody, ApiError> {
    let media = media_type(headers)?;
    let looks_like_json = body.first().is_some_and(|b| matches!(b, b'{' | b'[' | b' ' | b'\n'));
    // Without a type, any JSON value (a property's `42`) is still JSON.
    let is_json = || serde_json::from_slice::<serde::de::IgnoredAny>(body).is_ok();
    Ok(match media.as_str() {
        "application/x-www-form-urlencoded" if !looks_like_json => RestBody::Loose(LooseBody::Form),
        "text/plain" if text_as_text => RestBody::Loose(LooseBody::Text),
        "" if !looks_like_json && !body.is_empty() && !is_json() => {
            RestBody::Loose(LooseBody::Content(lyre_core::blobs::DEFAULT_CONTENT_TYPE.into()))
        }
        "" | "text/plain" | "application/json" | "application/x-www-form-urlencoded" => {
            RestBody::Structured(body_format(headers, body)?)
        }
        // CSV is a format Lyre answers in, not one it reads a record from.
        other => match Format::from_media_type(other).filter(|f| !matches!(f, Format::Json | Format::Csv)) {
            Some(_) => RestBody::Structured(body_format(headers, body)?),
            None => RestBody::Loose(LooseBody::Content(other.to_string())),
        },
    })
}

/// A form's fields as a record, each value a string and a field given more than
/// once an array of its values (Harper 5 means to do the same; its code keeps the
/// first value and puts the array under `key`).
pub fn form_record(body: &[u8]) -> lyre_core::Value {
    let mut record = lyre_core::Object::default();
    for (name, value) in form_urlencoded::parse(body) {
        let value = lyre_core::Value::String(value.into_owned());
        match record.get_mut(name.as_ref()) {
            Some(lyre_core::Value::Array(values)) => values.push(value),
            Some(first) => *first = lyre_core::Value::Array(vec![std::mem::take(first), value]),
            None => {
                record.insert(name.into_owned(), value);
            }
        }
    }
    lyre_core::Value::Object(record)
}

/// A request's media type, lower case, without its parameters (empty when it
/// names none).
fn media_type(headers: &HeaderMap) -> Result<String, ApiError> {
    let Some(value) = headers.get(header::CONTENT_TYPE) else { return Ok(String::new()) };
    let value = value.to_str().map_err(|_| unsupported("<invalid header>"))?;
    Ok(value.split(';').next().unwrap_or("").trim().to_ascii_lowercase())
}

/// Decodes a body in `format` as a `T`: a [`lyre_core::Value`], or its [`lyre_core::Footprint`]
/// (what decoding it as a `Value` will take), refused with the same message.
pub fn decode<T: DeserializeOwned>(format: Format, body: &[u8]) -> Result<T, ApiError> {
    match format {
        // A text/plain body is JSON (see above): curl and Harper's examples send it so.
        Format::Json | Format::Text => decode_json(body),
        Format::Cbor => decode_cbor(body),
        Format::MessagePack => decode_msgpack(body),
        Format::Csv => Err(unsupported("text/csv")),
        Format::Yaml => decode_yaml(body),
    }
}

/// A JSON document. Its UTF-8 is checked once over the whole body, where the
/// check runs a word at a time, and the parser then takes it as text and checks no
/// string again (parsing bytes, it checks each string apart: about 3,000
/// instructions of a 1.1 KB record's 15,000). Any body that is not UTF-8 is refused
/// either way, JSON having no bytes outside UTF-8; this names the first bad byte.
fn decode_json<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    let text = std::str::from_utf8(body).map_err(|e| {
        ApiError::bad_request(format!("Invalid JSON: the body is not UTF-8 (at byte {})", e.valid_up_to()))
    })?;
    serde_json::from_str(text).map_err(|e| ApiError::bad_request(format!("Invalid JSON: {e}")))
}

/// A YAML document as Harper reads one: YAML 1.2 booleans only (`no`, `on`, `y`
/// stay strings), and limits that grow with the body, so any document a JSON body of
/// the same size could hold is read while alias expansion stays bounded by it.
fn decode_yaml<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    let mut budget = serde_saphyr::Budget::default();
    budget.max_nodes = budget.max_nodes.max(body.len().saturating_mul(2));
    budget.max_events = budget.max_events.max(body.len().saturating_mul(4));
    budget.max_total_scalar_bytes = budget.max_total_scalar_bytes.max(body.len());
    let mut options = serde_saphyr::Options::default();
    options.strict_booleans = true;
    options.budget = Some(budget);
    serde_saphyr::from_slice_with_options(body, options)
        .map_err(|e| ApiError::bad_request(format!("Invalid YAML: {e}")))
}

/// One CBOR value filling the whole body.
fn decode_cbor<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    use ciborium::de::Error;
    let invalid = |why: String| ApiError::bad_request(format!("Invalid CBOR: {why}"));
    let mut rest = body;
    let value = ciborium::from_reader(&mut rest).map_err(|err| {
        invalid(match err {
            Error::Io(_) => "the body ends in the middle of a value".to_string(),
            Error::Syntax(at) => format!("malformed at byte {at}"),
            Error::Semantic(Some(at), why) => format!("{why} (at byte {at})"),
            Error::Semantic(None, why) => why,
            Error::RecursionLimitExceeded => "nested too deeply".to_string(),
        })
    })?;
    match rest.len() {
        0 => Ok(value),
        extra => Err(invalid(trailing(extra))),
    }
}

/// One MessagePack value filling the whole body.
fn decode_msgpack<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    let mut cursor = std::io::Cursor::new(body);
    let value = T::deserialize(&mut rmp_serde::Deserializer::new(&mut cursor))
        .map_err(|e| ApiError::bad_request(format!("Invalid MessagePack: {e}")))?;
    match body.len().saturating_sub(cursor.position() as usize) {
        0 => Ok(value),
        extra => Err(ApiError::bad_request(format!("Invalid MessagePack: {}", trailing(extra)))),
    }
}

/// "3 bytes follow the value".
fn trailing(extra: usize) -> String {
    match extra {
        1 => "1 byte follows the value".to_string(),
        n => format!("{n} bytes follow the value"),
    }
}

fn unsupported(media: &str) -> ApiError {
    ApiError::new(Code::UnsupportedMediaType, format!("Unsupported Media Type: {media}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn accept(value: &str) -> Result<Format, ApiError> {
        let mut headers = HeaderMap::new();
        headers.insert(header::ACCEPT, HeaderValue::from_str(value).unwrap());
        response_format(&headers)
    }

    #[test]
    fn csv_matches_harpers_layout() {
        let rows: serde_json::Value = serde_json::from_str(
            r#"[{"id":"p1","name":"Fo\"o","price":10,"tags":["x"],"none":null},{"id":"p2","price":2.5}]"#,
        )
        .unwrap();
        let bytes = Format::Csv.encode(&rows).unwrap();
        assert_eq!(
            String::from_utf8(bytes).unwrap(),
            "\"id\",\"name\",\"price\",\"tags\",\"none\"\n\"p1\",\"Fo\"\"o\",10,\"[\"\"x\"\"]\",\n\"p2\",,2.5,,"
        );
    }

    #[test]
    fn accept_headers_pick_the_best_supported_format() {
        assert_eq!(accept("application/cbor").unwrap(), Format::Cbor);
        assert_eq!(accept("text/html, application/x-msgpack;q=0.9, */*;q=0.1").unwrap(), Format::MessagePack);
        assert_eq!(accept("application/json;q=0.5, application/cbor").unwrap(), Format::Cbor);
        assert_eq!(accept("*/*").unwrap(), Format::Json);
        assert!(accept("application/xml").is_err());
        assert_eq!(response_format(&HeaderMap::new()).unwrap(), Format::Json);
    }
}
