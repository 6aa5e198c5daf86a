//! Blob bodies on REST: `GET /T/<id>.<attr>` sends a `Blob` attribute's bytes
//! with its content type, streamed from its file (with single byte ranges; several
//! get the whole blob), and
//! `PUT /T/<id>.<attr>` streams a request body into a new blob, never holding it
//! whole in memory, refusing (413) one past `storage.maxBlobSize` with nothing
//! stored.

use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::BytesMut;
use lyre_core::blobs::{BlobStore, BlobWriter, PendingBlob};
use lyre_core::{BlobRef, Code, Value};
use std::sync::Arc;
use tower::ServiceExt as _;

use crate::http::blocking::blocking;
use crate::http::error::ApiError;

/// Bytes gathered from the request before each write to the file: one hand-off to
/// the blocking pool per MiB, and at most this much of an upload in memory.
const WRITE_CHUNK: usize = 1 << 20;

/// Sends `blob` (of the record whose ETag is `etag`, if unique) for a `GET` with
/// `headers`: its content type, its length, one byte range when asked.
pub async fn send(
    store: &BlobStore,
    blob: &BlobRef,
    headers: &HeaderMap,
    etag: Option<HeaderValue>,
) -> Result<Response, ApiError> {
    let path = store.path(blob)?;
    let mut request = axum::http::Request::new(Body::empty());
    // The record's ETag answers the conditional requests (checked by the caller);
    // the file's own dates do not.
    for name in [header::RANGE, header::IF_RANGE] {
        if let Some(value) = headers.get(&name) {
            request.headers_mut().insert(name, value.clone());
        }
    }
    // Several ranges get the whole blob (a multipart answer is not made), as
    // Harper, which has no ranges, answers any range request.
    let Ok(response) =
        tower_http::services::ServeFile::new(&path).ignore_multi_range_requests(true).oneshot(request).await;
    let mut response = response.map(Body::new);
    if response.status() == StatusCode::NOT_FOUND {
        // Freed by a write that replaced the record since it was read.
        return Err(ApiError::new(Code::NotFound, "the blob was replaced or removed"));
    }
    let headers = response.headers_mut();
    headers.remove(header::LAST_MODIFIED);
    headers.remove(header::ETAG);
    let content_type = HeaderValue::from_str(&blob.content_type)
        .unwrap_or(HeaderValue::from_static(lyre_core::blobs::DEFAULT_CONTENT_TYPE));
    headers.insert(header::CONTENT_TYPE, content_type);
    if let Some(etag) = etag {
        headers.insert(header::ETAG, etag);
    }
    Ok(response)
}

/// Sends a small blob kept in its record (text or bytes under the inline limit) as
/// a stored one is sent: its bytes, as `application/octet-stream` (what Harper 5
/// answers for them). `None` for any other value.
pub fn send_inline(value: &Value, etag: Option<HeaderValue>) -> Option<Response> {
    let bytes = match value {
        Value::String(text) => bytes::Bytes::copy_from_slice(text.as_bytes()),
        Value::Bytes(bytes) => bytes::Bytes::copy_from_slice(bytes),
        _ => return None,
    };
    let mut response = (StatusCode::OK, bytes).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(lyre_core::blobs::DEFAULT_CONTENT_TYPE));
    if let Some(etag) = etag {
        headers.insert(header::ETAG, etag);
    }
    Some(response)
}

/// Streams `body` into a new blob of `store` whose content type is the request's,
/// at most `limit` bytes (413 before reading when the declared length is over it;
/// as soon as it is passed otherwise). Each piece must arrive within `idle` of the
/// last (408), so a stalled upload does not hold its file forever.
pub async fn receive(
    store: &Arc<BlobStore>,
    headers: &HeaderMap,
    body: Body,
    limit: u64,
    idle: Duration,
) -> Result<PendingBlob, ApiError> {
    use http_body_util::BodyExt;
    let too_large = || {
        ApiError::new(
            Code::PayloadTooLarge,
            format!("the blob is larger than the {limit} bytes allowed (storage.maxBlobSize)"),
        )
    };
    let declared =
        headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|length| length > limit) {
        return Err(too_large());
    }
    let content_type = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
    let (store, kind) = (store.clone(), content_type);
    let mut writer = blocking("starting a blob", move || store.create(&kind, limit)).await?;
    let mut body = body;
    let mut buffer = BytesMut::with_capacity(WRITE_CHUNK);
    loop {
        let frame = match tokio::time::timeout(idle, body.frame()).await {
            Err(_) => {
                return Err(ApiError::new(
                    Code::RequestTimeout,
                    format!("the upload stalled: nothing arrived within {} ms (http.timeout)", idle.as_millis()),
                ));
            }
            Ok(None) => break,
            Ok(Some(frame)) => {
                frame.map_err(|err| ApiError::bad_request(format!("could not read the upload: {err}")))?
            }
        };
        let Ok(data) = frame.into_data() else { continue };
        if writer.size() + (buffer.len() + data.len()) as u64 > limit {
            return Err(too_large());
        }
        buffer.extend_from_slice(&data);
        if buffer.len() >= WRITE_CHUNK {
            writer = write(writer, buffer.split().freeze()).await?;
        }
    }
    if !buffer.is_empty() {
        writer = write(writer, buffer.freeze()).await?;
    }
    blocking("finishing a blob", move || writer.finish()).await
}

/// Appends `bytes` to the blob on the blocking pool and hands the writer back.
async fn write(mut writer: BlobWriter, bytes: bytes::Bytes) -> Result<BlobWriter, ApiError> {
    blocking("writing a blob", move || writer.write(&bytes).map(|()| writer)).await
}

/// A `204 No Content`, what a stored upload answers.
pub fn stored() -> Response {
    StatusCode::NO_CONTENT.into_response()
}
