//! Serving the `static` plugin's files (`components/statics.rs` decides which) on
//! the REST port, ahead of the tables, as Harper's static middleware runs first:
//! `GET` and `HEAD` only, no authentication (a site's files are public), and the
//! file sent as `send` does, by tower-http's `ServeFile`: content type from the
//! extension, `ETag` and `Last-Modified` with their conditional requests (304, 412),
//! single byte ranges (206, 416; several ranges get the whole file), streamed from
//! disk.

use std::path::Path;

use axum::body::Body;
use axum::http::request::Parts;
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use tower::ServiceExt as _;

use crate::components::{Exports, Found};

/// Answers `parts` from the first site that has something for its path, or `None`
/// when none does (the request goes on to REST; so does a WebSocket upgrade).
pub async fn serve(exports: &Exports, parts: &Parts) -> Option<Response> {
    if exports.sites().is_empty()
        || !matches!(parts.method, Method::GET | Method::HEAD)
        || crate::http::realtime::is_websocket(&parts.headers)
    {
        return None;
    }
    let path = percent_encoding::percent_decode_str(parts.uri.path()).decode_utf8().ok()?;
    for site in exports.sites() {
        match site.find(&path) {
            Found::Pass => continue,
            Found::File(file, status) => return Some(await_boxed!(send(file, status, parts))),
            Found::Redirect(location) => {
                let location = HeaderValue::from_str(&location).ok()?;
                return Some((StatusCode::MOVED_PERMANENTLY, [(header::LOCATION, location)]).into_response());
            }
            Found::Missing => return Some((StatusCode::NOT_FOUND, "File not found").into_response()),
        }
    }
    None
}

/// Sends `file` with `status`: a 200 honours conditional and range requests; any
/// other status (a `notFound` page) sends the whole file with that status.
async fn send(file: &Path, status: u16, parts: &Parts) -> Response {
    let mut request = axum::http::Request::new(Body::empty());
    *request.method_mut() = parts.method.clone();
    *request.headers_mut() = parts.headers.clone();
    if status != 200 {
        for name in [
            header::RANGE,
            header::IF_MATCH,
            header::IF_NONE_MATCH,
            header::IF_MODIFIED_SINCE,
            header::IF_UNMODIFIED_SINCE,
        ] {
            request.headers_mut().remove(name);
        }
    }
    let served = tower_http::services::ServeFile::new(file).ignore_multi_range_requests(true).oneshot(request).await;
    let Ok(response) = served;
    let mut response = response.map(Body::new);
    if response.status() == StatusCode::NOT_FOUND {
        // Removed since the site was built: as if it had never been there.
        return (StatusCode::NOT_FOUND, "File not found").into_response();
    }
    if status != 200 && response.status() == StatusCode::OK {
        *response.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::NOT_FOUND);
    }
    response.headers_mut().entry(header::CACHE_CONTROL).or_insert(HeaderValue::from_static("public, max-age=0"));
    response
}
