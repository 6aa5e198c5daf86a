//! HTTP: the Operations API router and what every handler shares.

mod auth;
pub(crate) mod blocking;
pub mod body;
pub mod conn;
mod console;
mod cors;
pub(crate) mod error;
mod etag;
mod format;
mod framing;
pub(crate) mod graphql;
mod negotiate;
mod ops;
mod realtime;
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

/// The Operations API: `POST /` with an operation, `GET /health`, and the web
/// console (`GET /` and `/console/...`, `console.rs`).
pub fn operations_router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/", post(ops::handle).options(ops::options).get(console::page))
        .route("/console/data/{*path}", get(console::data))
        .route("/console/changes/{*path}", get(console::changes))
        .route("/console/{*file}", get(console::asset))
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .fallback(not_found)
        .layer(CatchPanicLayer::custom(error::panic_response))
        .layer(axum::middleware::from_fn(console::no_browser_prompt))
        .layer(axum::middleware::from_fn_with_state(state.clone(), cors::operations))
        .with_state(state)
}

/// The REST interface: every path is an exported table's, answered by
/// [`rest::handle`] behind panic catching and compression above
/// `compression_threshold` bytes (0 turns compression off). No router: a router's
/// boxing and cloning cost a record `GET` more than its lookup (`bench/results/2026-12-02-hot-path.md`).
/// CORS is answered by the REST handler itself (`AppState::cors`), because a plain
/// `OPTIONS` must still list the methods.
pub fn rest_service(state: Arc<AppState>, compression_threshold: u16) -> impl serve::Service {
    use futures_util::FutureExt as _;
    let handler = tower::service_fn(move |request: axum::extract::Request| {
        // Boxed once here, so the layers above move a pointer, not the whole state
        // of the request (about 2 KB, copied at each hand-over).
        let answer = std::panic::AssertUnwindSafe(Box::pin(rest::handle(state.clone(), request))).catch_unwind();
        async move { Ok::<_, std::convert::Infallible>(answer.await.unwrap_or_else(error::panic_response)) }
    });
    use tower::Layer as _;
    let predicate = CompressAbove::new(compression_threshold);
    let compressing = tower_http::compression::CompressionLayer::new()
        .br(true)
        .gzip(true)
        .compress_when(predicate)
        .layer(handler.clone());
    // A request that names no encoding skips the compression layer: its response
    // could only be sent as it is, and the layer's body (its encoders' state, over a
    // kilobyte) was moved at every hand-over of every response. What the layer adds
    // to such a response, `Vary: Accept-Encoding` when it was compressible, is added
    // here (the same headers: `tests/it/rest.rs`, compression).
    tower::service_fn(move |request: axum::extract::Request| {
        use tower::ServiceExt as _;
        let negotiates = request.headers().contains_key(axum::http::header::ACCEPT_ENCODING);
        let (compressing, handler) = (compressing.clone(), handler.clone());
        async move {
            if negotiates {
                let Ok(response) = compressing.oneshot(request).await;
                return Ok::<_, std::convert::Infallible>(response.map(axum::body::Body::new));
            }
            let Ok(mut response) = handler.oneshot(request).await;
            let headers = response.headers();
            let compressible = !headers.contains_key(header::CONTENT_ENCODING)
                && !headers.contains_key(header::CONTENT_RANGE)
                && tower_http::compression::Predicate::should_compress(&predicate, &response);
            // Checked only for a compressible response, without allocating: this is
            // every plain GET's path.
            let varies = || {
                response.headers().get_all(header::VARY).iter().any(|value| {
                    value
                        .as_bytes()
                        .windows(b"accept-encoding".len())
                        .any(|w| w.eq_ignore_ascii_case(b"accept-encoding"))
                })
            };
            if compressible && !varies() {
                response.headers_mut().append(header::VARY, axum::http::HeaderValue::from_static("accept-encoding"));
            }
            Ok(response)
        }
    })
}

/// Which REST responses are compressed: those above the threshold (none when it is
/// 0), never an event stream.
#[derive(Clone, Copy)]
struct CompressAbove(Option<u16>);

impl CompressAbove {
    fn new(threshold: u16) -> Self {
        Self((threshold > 0).then_some(threshold))
    }
}

impl tower_http::compression::Predicate for CompressAbove {
    fn should_compress<B: hyper::body::Body>(&self, response: &axum::http::Response<B>) -> bool {
        use tower_http::compression::predicate::{NotForContentType, SizeAbove};
        self.0.is_some_and(|threshold| {
            SizeAbove::new(u64::from(threshold))
                .and(NotForContentType::const_new("text/event-stream"))
                .should_compress(response)
        })
    }
}

/// Harper's health answer, which monitors match on.
async fn health() -> Response {
    ([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], "HarperDB is running.").into_response()
}

/// `GET /metrics`: every metric in Prometheus's text format, for a super user
/// (Basic or token authentication, as any operation; Prometheus's `basic_auth`).
async fn metrics(
    axum::extract::State(state): axum::extract::State<Arc<AppState>>,
    axum::extract::ConnectInfo(peer): axum::extract::ConnectInfo<std::net::SocketAddr>,
    client: Option<axum::Extension<crate::tls::ClientCertificate>>,
    headers: axum::http::HeaderMap,
) -> Response {
    let client = client.map(|axum::Extension(c)| c);
    let allowed = match auth::authenticate(&state, &headers, peer, client.as_ref()).await {
        Ok(user) => lyre_core::access::require_super_user_for(&lyre_core::Context::new(user), "metrics")
            .map_err(error::ApiError::from),
        Err(err) => Err(err),
    };
    if let Err(err) = allowed {
        return err.render(format::Format::Json);
    }
    match state.metrics.render() {
        Ok(text) => ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], text).into_response(),
        Err(_) => error::ApiError::new(lyre_core::Code::Internal, "the metrics could not be written")
            .render(format::Format::Json),
    }
}

async fn not_found() -> Response {
    (StatusCode::NOT_FOUND, "Not found\n").into_response()
}
