//! Cross-origin requests, answered as Harper answers them on both ports: a preflight
//! gets 200 with the allowed methods and headers, and every response to a request
//! with an `Origin` echoes it with credentials allowed (`http.cors` and
//! `operationsApi.network.cors`, both on by default).

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::app::AppState;

/// The request's `Origin`, when cross-origin requests are answered (`enabled`).
pub(crate) fn origin(headers: &HeaderMap, enabled: bool) -> Option<HeaderValue> {
    headers.get(header::ORIGIN).filter(|_| enabled).cloned()
}

/// Whether a request from `origin` is a CORS preflight (an `OPTIONS` naming the
/// method it asks for); a plain `OPTIONS` is the handler's to answer.
pub(crate) fn is_preflight(origin: Option<&HeaderValue>, method: &Method, headers: &HeaderMap) -> bool {
    origin.is_some() && method == Method::OPTIONS && headers.contains_key(header::ACCESS_CONTROL_REQUEST_METHOD)
}

/// A preflight answer: 200 with an empty body, Harper's allowed methods and headers.
pub(crate) fn preflight() -> Response {
    let mut response = (StatusCode::OK, Body::empty()).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static("POST, GET, PUT, DELETE, PATCH, OPTIONS"),
    );
    headers
        .insert(header::ACCESS_CONTROL_ALLOW_HEADERS, HeaderValue::from_static("Accept, Content-Type, Authorization"));
    response
}

/// Lets the page at `origin` read `response` (and tells caches the answer depends on
/// the origin).
pub(crate) fn allow(response: &mut Response, origin: HeaderValue) {
    let headers = response.headers_mut();
    headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
    headers.insert(header::ACCESS_CONTROL_ALLOW_CREDENTIALS, HeaderValue::from_static("true"));
    headers.append(header::VARY, HeaderValue::from_static("Origin"));
}

/// The Operations API's CORS, around every route (errors, panics and `/health`
/// included): preflights answered here, every other answer readable by the origin.
pub(crate) async fn operations(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    let origin = origin(request.headers(), state.ops_cors);
    let mut response = if is_preflight(origin.as_ref(), request.method(), request.headers()) {
        preflight()
    } else {
        next.run(request).await
    };
    if let Some(origin) = origin {
        allow(&mut response, origin);
    }
    response
}
