//! HTTP: the Operations API router and what every handler shares.

mod auth;
pub(crate) mod blocking;
pub mod conn;
mod cors;
pub(crate) mod error;
mod etag;
mod format;
mod framing;
mod negotiate;
mod ops;
pub mod rest;
pub mod serve;
mod stream;

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use lyre_core::Code;
use tower_http::catch_panic::CatchPanicLayer;

use crate::app::AppState;
use crate::http::error::ApiError;

/// The Operations API: `POST /` with an operation, `GET /health`.
pub fn operations_router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/", post(ops::handle).options(ops::options).get(front_page))
        .route("/health", get(health))
        .fallback(not_found)
        .layer(CatchPanicLayer::custom(error::panic_response))
        .layer(axum::middleware::from_fn_with_state(state.clone(), cors::operations))
        .with_state(state)
}

/// The REST interface: exported tables, compressed above `compression_threshold`
/// bytes (0 turns compression off). CORS is answered by the REST handler itself
/// (`AppState::cors`), because a plain `OPTIONS` must still list the methods.
pub fn rest_router(state: Arc<AppState>, compression_threshold: u16) -> Router {
    use tower_http::compression::predicate::{NotForContentType, Predicate, SizeAbove};
    let mut router = Router::new().fallback(rest::handle).layer(CatchPanicLayer::custom(error::panic_response));
    if compression_threshold > 0 {
        let predicate =
            SizeAbove::new(u64::from(compression_threshold)).and(NotForContentType::const_new("text/event-stream"));
        router =
            router.layer(tower_http::compression::CompressionLayer::new().br(true).gzip(true).compress_when(predicate));
    }
    router.with_state(state)
}

/// Reads a whole request body, refusing (413) anything over `limit` before reading it
/// when the length is declared, and as soon as it is exceeded otherwise, and (408)
/// one that has not arrived `within` its deadline.
pub(crate) async fn read_body(
    headers: &HeaderMap,
    body: Body,
    limit: usize,
    within: std::time::Duration,
) -> Result<bytes::Bytes, ApiError> {
    let too_large =
        || ApiError::new(Code::PayloadTooLarge, format!("Request body too large, maximum size is {limit} bytes"));
    let declared =
        headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(too_large());
    }
    // A body trickled in slowly holds its connection and its buffer: it gets a deadline.
    let Ok(read) = tokio::time::timeout(within, axum::body::to_bytes(body, limit)).await else {
        return Err(ApiError::new(
            Code::RequestTimeout,
            format!("the request body did not arrive within {} ms (http.timeout)", within.as_millis()),
        ));
    };
    read.map_err(|err| {
        if std::error::Error::source(&err).is_some_and(|s| s.is::<http_body_util::LengthLimitError>()) {
            too_large()
        } else {
            ApiError::bad_request(format!("could not read the request body: {err}"))
        }
    })
}

/// The most of an unread request body drained before answering; beyond it the
/// connection is closed instead (reading it all could take as long as the client likes).
const DRAIN_LIMIT: usize = 1 << 20;

/// How much of an unread body to drain before answering, or `None` when it should
/// not be read at all and the connection closed instead: the client waits for `100
/// Continue` (reading would invite the upload), or declares more than [`DRAIN_LIMIT`].
pub(crate) fn drain_budget(headers: &HeaderMap) -> Option<usize> {
    let expects_continue =
        headers.get(header::EXPECT).is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    let declared =
        headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    (!expects_continue && declared.is_none_or(|n| n <= DRAIN_LIMIT as u64)).then_some(DRAIN_LIMIT)
}

/// Reads and drops a request body, at most `budget` bytes (`None`: none at all);
/// returns whether it ended, so the connection can serve the next request.
pub(crate) async fn drain(mut body: Body, budget: Option<usize>) -> bool {
    use http_body_util::BodyExt;
    let Some(limit) = budget else { return false };
    let mut seen = 0;
    while let Some(frame) = body.frame().await {
        let Ok(frame) = frame else { return false };
        seen += frame.data_ref().map_or(0, |data| data.len());
        if seen > limit {
            return false;
        }
    }
    true
}

/// Harper's health answer, which monitors match on.
async fn health() -> Response {
    ([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], "HarperDB is running.").into_response()
}

/// `GET /`: Harper serves its Studio here, so browsers and load balancers probing
/// `/` get 200; Lyre has no Studio and says where to go instead.
async fn front_page() -> Response {
    const PAGE: &str = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>Lyre</title></head>\n<body><h1>Lyre is running</h1><p>The Operations API takes <code>POST /</code> with a JSON operation; <code>GET /health</code> answers monitors.</p></body></html>\n";
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], PAGE).into_response()
}

async fn not_found() -> Response {
    (StatusCode::NOT_FOUND, "Not found\n").into_response()
}
