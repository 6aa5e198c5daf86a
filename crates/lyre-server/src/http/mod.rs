//! HTTP: the Operations API router and what every handler shares.

mod auth;
pub(crate) mod blocking;
pub mod body;
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
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use tower_http::catch_panic::CatchPanicLayer;

use crate::app::AppState;

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
