//! HTTP: the Operations API router and what every handler shares.

mod auth;
mod error;
mod negotiate;
mod ops;
mod stream;

use std::sync::Arc;

use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use lyre_core::Engine;
use tower_http::catch_panic::CatchPanicLayer;

/// What every handler can reach.
pub struct AppState {
    /// The open databases and users.
    pub engine: Arc<Engine>,
    /// Whether loopback requests without credentials act as the super user.
    pub authorize_local: bool,
    /// Largest Operations API body, in bytes.
    pub ops_body_limit: usize,
}

/// The Operations API: `POST /` with an operation, `GET /health`.
pub fn operations_router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/", post(ops::handle))
        .route("/health", get(health))
        .fallback(not_found)
        .layer(CatchPanicLayer::custom(error::panic_response))
        .with_state(state)
}

/// Harper's health answer, which monitors match on.
async fn health() -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        "HarperDB is running.",
    )
        .into_response()
}

async fn not_found() -> Response {
    (StatusCode::NOT_FOUND, "Not found\n").into_response()
}
