//! Calling a caching table's source for one record: an HTTP origin (a GET with
//! the source's headers, revalidated with `If-None-Match` when the copy held has
//! the origin's ETag, bounded in time and size), another table, or code.

use std::time::Duration;

use futures_util::StreamExt as _;
use lyre_core::{Code, Context, Engine, Object, Value};

use super::control::{Directives, OriginHeaders};
use super::source::{CodeAnswer, HttpOrigin, Source, SourceFailure};

/// The largest answer an origin may give for one record.
pub const MAX_BODY: usize = 16 << 20;
/// At most this much of an origin's error answer is quoted back.
const QUOTED: usize = 200;

/// What the source answered.
#[derive(Debug, Clone)]
pub enum Fetched {
    /// The record, and what the origin said of its caching.
    Record(Object, OriginHeaders),
    /// The copy held is still the origin's (304), fresh as these headers say.
    NotModified(OriginHeaders),
    /// The source has no such record (404 or 410).
    Gone,
}

/// Why the source gave no answer: told to the client as 502, 504 for a timeout,
/// or the status a source's code stated.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum OriginError {
    /// No answer within the source's timeout.
    #[error("the origin did not answer within {0} s")]
    Timeout(f64),
    /// It could not be reached (refused, reset, not resolved).
    #[error("the origin could not be reached: {0}")]
    Unreachable(String),
    /// It answered with an error status.
    #[error("the origin answered {status}: {message}")]
    Status {
        /// Its status code.
        status: u16,
        /// The start of its answer.
        message: String,
    },
    /// Its answer cannot be a record.
    #[error("the origin's answer cannot be stored as a record: {0}")]
    Invalid(String),
    /// The source table could not be read.
    #[error("the source table could not be read: {0}")]
    Table(String),
    /// The source's code failed.
    #[error("the source failed: {0}")]
    Code(SourceFailure),
}

impl OriginError {
    /// What the client is answered: 504 for a timeout, else 502; a status the
    /// source's code stated is answered as [`OriginError::stated_status`] says.
    pub fn code(&self) -> Code {
        match self {
            OriginError::Timeout(_) | OriginError::Code(SourceFailure::TimedOut(_)) => Code::GatewayTimeout,
            OriginError::Code(SourceFailure::Stated { status, .. }) if *status < 500 => Code::BadRequest,
            OriginError::Code(SourceFailure::Stated { .. }) => Code::Internal,
            _ => Code::BadGateway,
        }
    }

    /// The status the source's code stated with its error (a `ClientError`'s 400,
    /// an error whose `statusCode` is 403): the client is answered it, in place of
    /// [`OriginError::code`]'s, which only classes it.
    pub fn stated_status(&self) -> Option<u16> {
        match self {
            OriginError::Code(SourceFailure::Stated { status, .. }) => Some(*status),
            _ => None,
        }
    }

    /// Whether a stale copy may stand in for the answer without the client
    /// asking (`stale-if-error`): the origin could not be reached at all, as
    /// Harper serves stale on a refused or reset connection.
    pub fn is_unreachable(&self) -> bool {
        matches!(self, OriginError::Unreachable(_))
    }
}

/// Asks `source` for the record with key `id` of a table whose primary key is
/// `primary_key`; `etag` is the origin's ETag of the copy held, if any.
pub async fn fetch(
    engine: &Engine,
    client: &reqwest::Client,
    (source, database, primary_key): (&Source, &str, &str),
    id: &Value,
    etag: Option<&str>,
) -> Result<Fetched, OriginError> {
    match source {
        Source::Http(origin) => fetch_http(client, origin, primary_key, id, etag).await,
        Source::Table(table) => {
            let read = || -> lyre_core::Result<Option<Object>> {
                let table = engine.database(database)?.table(table)?;
                Ok(table.get(&Context::system(), id)?.map(|(record, _)| record))
            };
            match read() {
                Ok(Some(mut record)) => {
                    record.insert(primary_key.to_string(), id.clone());
                    Ok(Fetched::Record(record, OriginHeaders::default()))
                }
                Ok(None) => Ok(Fetched::Gone),
                Err(err) => Err(OriginError::Table(err.to_string())),
            }
        }
        Source::Code(code) => match code.0.get(id).await {
            Ok(CodeAnswer { record: Some(mut record), fresh_for }) => {
                record.insert(primary_key.to_string(), id.clone());
                let directives = Directives { max_age: fresh_for, ..Directives::default() };
                Ok(Fetched::Record(record, OriginHeaders { directives, ..OriginHeaders::default() }))
            }
            Ok(CodeAnswer { record: None, .. }) => Ok(Fetched::Gone),
            Err(failure) => Err(OriginError::Code(failure)),
        },
    }
}

async fn fetch_http(
    client: &reqwest::Client,
    origin: &HttpOrigin,
    primary_key: &str,
    id: &Value,
    etag: Option<&str>,
) -> Result<Fetched, OriginError> {
    let timeout = origin.timeout;
    let work = async {
        let mut request = client.get(origin.url_of(&key_text(id))).headers(origin.headers.clone());
        if let Some(etag) = etag {
            request = request.header(reqwest::header::IF_NONE_MATCH, etag);
        }
        let response = request.send().await.map_err(|err| unreachable(&err))?;
        let status = response.status();
        let headers = OriginHeaders::of(response.headers());
        match status.as_u16() {
            304 => return Ok(Fetched::NotModified(headers)),
            404 | 410 => return Ok(Fetched::Gone),
            _ => {}
        }
        let content_type = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("application/octet-stream")
            .to_string();
        let body = read_body(response).await?;
        if !status.is_success() {
            return Err(refused(status, &body));
        }
        let mut record = record_of(&content_type, body)?;
        record.insert(primary_key.to_string(), id.clone());
        Ok(Fetched::Record(record, headers))
    };
    match tokio::time::timeout(timeout, work).await {
        Ok(result) => result,
        Err(_) => Err(OriginError::Timeout(seconds(timeout))),
    }
}

/// A client's write of one record, as a write-through sends it to the origin.
#[derive(Debug, Clone, Copy)]
pub enum Forwarded<'a> {
    /// `PUT` of the whole record.
    Put(&'a Object),
    /// `PATCH` with the attributes changed.
    Patch(&'a Object),
    /// `DELETE` (an origin that has no such record took it too: 404 or 410).
    Delete,
}

/// Sends `write` of the record with key `id` to `origin`, within its timeout:
/// `Ok` when the origin answered 2xx (or, for a delete, 404/410).
pub async fn forward(
    client: &reqwest::Client,
    origin: &HttpOrigin,
    id: &Value,
    write: Forwarded<'_>,
) -> Result<(), OriginError> {
    let url = origin.url_of(&key_text(id));
    let (method, body) = match write {
        Forwarded::Put(record) => (reqwest::Method::PUT, Some(record)),
        Forwarded::Patch(changes) => (reqwest::Method::PATCH, Some(changes)),
        Forwarded::Delete => (reqwest::Method::DELETE, None),
    };
    let work = async {
        let mut request = client.request(method, url).headers(origin.headers.clone());
        if let Some(body) = body {
            let json = serde_json::to_vec(body).map_err(|e| OriginError::Invalid(e.to_string()))?;
            request = request.header(reqwest::header::CONTENT_TYPE, "application/json").body(json);
        }
        let response = request.send().await.map_err(|err| unreachable(&err))?;
        let status = response.status();
        if status.is_success() || (matches!(write, Forwarded::Delete) && matches!(status.as_u16(), 404 | 410)) {
            return Ok(());
        }
        Err(refused(status, &read_body(response).await?))
    };
    match tokio::time::timeout(origin.timeout, work).await {
        Ok(result) => result,
        Err(_) => Err(OriginError::Timeout(seconds(origin.timeout))),
    }
}

/// The body, refused past [`MAX_BODY`] (read no further).
async fn read_body(response: reqwest::Response) -> Result<Vec<u8>, OriginError> {
    if response.content_length().is_some_and(|n| n > MAX_BODY as u64) {
        return Err(OriginError::Invalid(format!("it is larger than {MAX_BODY} bytes")));
    }
    let mut body = Vec::new();
    let mut stream = response.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|err| unreachable(&err))?;
        if body.len() + chunk.len() > MAX_BODY {
            return Err(OriginError::Invalid(format!("it is larger than {MAX_BODY} bytes")));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// An origin's answer as a record: a JSON object as it is; any other content as
/// `{contentType, data}` (text as a string, other bytes as bytes).
fn record_of(content_type: &str, body: Vec<u8>) -> Result<Object, OriginError> {
    let essence = content_type.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    if essence == "application/json" || essence.ends_with("+json") {
        return match serde_json::from_slice::<Value>(&body) {
            Ok(Value::Object(record)) => Ok(record),
            Ok(_) => Err(OriginError::Invalid("the JSON is not an object".into())),
            Err(err) => Err(OriginError::Invalid(format!("the JSON does not parse: {err}"))),
        };
    }
    Ok(lyre_core::content_record(content_type, body))
}

/// A primary key as text: as the origin's URL takes it, and as the cache names it.
pub(crate) fn key_text(id: &Value) -> String {
    match id {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// An error answer, quoting its start.
fn refused(status: reqwest::StatusCode, body: &[u8]) -> OriginError {
    let message = String::from_utf8_lossy(&body[..body.len().min(QUOTED)]).into_owned();
    OriginError::Status { status: status.as_u16(), message }
}

fn unreachable(err: &reqwest::Error) -> OriginError {
    OriginError::Unreachable(crate::outbound::describe(err))
}

fn seconds(d: Duration) -> f64 {
    (d.as_secs_f64() * 1000.0).round() / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_become_records() {
        let json = record_of("application/json; charset=utf-8", br#"{"name":"x"}"#.to_vec()).unwrap();
        assert_eq!(json.get("name"), Some(&Value::from("x")));
        assert!(matches!(record_of("application/json", b"[1]".to_vec()), Err(OriginError::Invalid(_))));
        assert!(matches!(record_of("application/json", b"{".to_vec()), Err(OriginError::Invalid(_))));
        let text = record_of("text/plain", b"hello".to_vec()).unwrap();
        assert_eq!(text.get("data"), Some(&Value::from("hello")));
        assert_eq!(text.get("contentType"), Some(&Value::from("text/plain")));
        let bytes = record_of("image/png", vec![0x89, 0x50]).unwrap();
        assert_eq!(bytes.get("data"), Some(&Value::Bytes(vec![0x89, 0x50])));
    }

    #[test]
    fn a_timeout_is_504_and_the_rest_502() {
        assert_eq!(OriginError::Timeout(1.0).code().status(), 504);
        assert_eq!(OriginError::Unreachable("refused".into()).code().status(), 502);
        let status = OriginError::Status { status: 500, message: "boom".into() };
        assert_eq!(status.code().status(), 502);
        assert_eq!(status.to_string(), "the origin answered 500: boom");
        let stopped = OriginError::Code(SourceFailure::TimedOut("ran past its budget".into()));
        assert_eq!((stopped.code().status(), stopped.stated_status()), (504, None));
        let failed = OriginError::Code(SourceFailure::Failed("threw".into()));
        assert_eq!((failed.code().status(), failed.stated_status()), (502, None));
        let stated = OriginError::Code(SourceFailure::Stated { status: 403, message: "not yours".into() });
        assert_eq!((stated.code().status(), stated.stated_status()), (400, Some(403)));
        assert_eq!(stated.to_string(), "the source failed: not yours");
    }
}
