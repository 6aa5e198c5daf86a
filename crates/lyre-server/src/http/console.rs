//! The web console on the Operations API port: `GET /` is its page, `/console/<file>`
//! its scripts and styles (compiled into the binary from `crates/lyre-server/console/`,
//! so it works offline with nothing else installed), and two reads the Operations
//! API has no operation for, both as the signed-in user:
//!
//! - `GET /console/data/<database>/<table>/...?<query>`: any table read as REST reads
//!   an exported one (records, one record, REST's query grammar), for the records page;
//! - `GET /console/changes/<database>/<table>/`: the table's changes as an event
//!   stream, for the live view.
//!
//! Everything else the console does is an ordinary operation (`POST /`), signed in
//! with `login`'s session cookie.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, Path, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use lyre_core::Context;

use crate::app::AppState;
use crate::http::auth::authenticate;
use crate::http::error::ApiError;
use crate::http::format::Format;
use crate::http::realtime::{self, TablePlace, sse};
use crate::tls::ClientCertificate;

/// The console's files: name, content type, contents.
macro_rules! assets {
    ($($name:literal => $kind:literal),* $(,)?) => {
        &[$(($name, $kind, include_str!(concat!("../../console/", $name)))),*]
    };
}

/// Every file the console is made of.
const ASSETS: &[(&str, &str, &str)] = assets![
    "index.html" => "text/html; charset=utf-8",
    "console.css" => "text/css; charset=utf-8",
    "app.js" => "text/javascript; charset=utf-8",
    "api.js" => "text/javascript; charset=utf-8",
    "session.js" => "text/javascript; charset=utf-8",
    "ui.js" => "text/javascript; charset=utf-8",
    "chart.js" => "text/javascript; charset=utf-8",
    "pages/databases.js" => "text/javascript; charset=utf-8",
    "pages/records.js" => "text/javascript; charset=utf-8",
    "pages/query.js" => "text/javascript; charset=utf-8",
    "pages/users.js" => "text/javascript; charset=utf-8",
    "pages/components.js" => "text/javascript; charset=utf-8",
    "pages/jobs.js" => "text/javascript; charset=utf-8",
    "pages/logs.js" => "text/javascript; charset=utf-8",
    "pages/metrics.js" => "text/javascript; charset=utf-8",
    "pages/config.js" => "text/javascript; charset=utf-8",
    "pages/live.js" => "text/javascript; charset=utf-8",
];

/// What the console's page may load and reach: only this server (no CDN, no
/// inline script), so a value shown in a page cannot bring in code.
const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; img-src 'self' data:; style-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'";

/// `GET /`: the console's page (Harper serves its Studio here too).
pub async fn page() -> Response {
    asset_response("index.html")
}

/// `GET /console/<file>`: one of the console's files, or 404.
pub async fn asset(Path(name): Path<String>) -> Response {
    asset_response(&name)
}

fn asset_response(name: &str) -> Response {
    let Some((_, kind, text)) = ASSETS.iter().find(|(file, _, _)| *file == name) else {
        return (StatusCode::NOT_FOUND, format!("The console has no file '{name}'\n")).into_response();
    };
    let mut response = ([(header::CONTENT_TYPE, *kind)], *text).into_response();
    let headers = response.headers_mut();
    // Always revalidated: a new binary's console replaces the old one at once.
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CONTENT_SECURITY_POLICY));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    response
}

/// `GET /console/data/<database>/<table>[/<id or nothing>]?<query>`: see the module
/// documentation.
pub async fn data(
    State(state): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    client: Option<axum::Extension<ClientCertificate>>,
    Path(path): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    let ctx = match signed_in(&state, &headers, peer, client).await {
        Ok(ctx) => ctx,
        Err(err) => return err.render_rest(Format::Json),
    };
    let Some(place) = table_place(&path) else {
        return ApiError::bad_request("the path names no table: /console/data/<database>/<table>/")
            .render_rest(Format::Json);
    };
    let table = (place.database, place.table);
    crate::http::rest::read_table(&state, ctx, table, place.rest, &headers, query.as_deref().unwrap_or("")).await
}

/// `GET /console/changes/<database>/<table>/`: see the module documentation. The
/// query string says where to start, as on the REST port (`previousCount=10`).
pub async fn changes(
    State(state): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    client: Option<axum::Extension<ClientCertificate>>,
    Path(path): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    let opened = async {
        let ctx = signed_in(&state, &headers, peer, client).await?;
        let place = table_place(&path)
            .ok_or_else(|| ApiError::bad_request("the path names no table: /console/changes/<database>/<table>/"))?;
        let start = realtime::start_from_query(query.as_deref().unwrap_or(""))?;
        realtime::open_table(&state, &ctx, place, start, Format::Json).await
    };
    match opened.await {
        Ok(opened) => sse::send(&state, opened),
        Err(err) => sse::refusal(&err),
    }
}

/// Leaves `WWW-Authenticate` off the Operations API's answers to a page's scripts
/// (`Sec-Fetch-Dest: empty`: `fetch`, `XMLHttpRequest`, `EventSource`): with it, a
/// browser pops its own password prompt over the console's sign-in when a session
/// ends. Clients that are not browsers send no `Sec-Fetch-Dest` and keep it.
pub async fn no_browser_prompt(request: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let scripted = request.headers().get("sec-fetch-dest").is_some_and(|dest| dest.as_bytes() == b"empty");
    let mut response = next.run(request).await;
    if scripted {
        response.headers_mut().remove(header::WWW_AUTHENTICATE);
    }
    response
}

/// The caller, as any operation authenticates it (the console's session cookie).
async fn signed_in(
    state: &AppState,
    headers: &HeaderMap,
    peer: SocketAddr,
    client: Option<axum::Extension<ClientCertificate>>,
) -> Result<Context, ApiError> {
    let client = client.map(|axum::Extension(c)| c);
    Ok(Context::new(authenticate(state, headers, peer, client.as_ref()).await?))
}

/// `<database>/<table>[/<rest>]` split: the rest is what REST reads after a table's
/// name (`""` for the collection, an id, nothing for the table itself).
fn table_place(path: &str) -> Option<TablePlace<'_>> {
    let (database, after) = path.split_once('/')?;
    let (table, rest) = match after.split_once('/') {
        Some((table, rest)) => (table, Some(rest)),
        None => (after, None),
    };
    (!database.is_empty() && !table.is_empty()).then_some(TablePlace { database, table, rest })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_name_a_database_a_table_and_what_follows() {
        let place = table_place("data/dog/").unwrap();
        assert_eq!((place.database, place.table, place.rest), ("data", "dog", Some("")));
        let place = table_place("data/dog/7").unwrap();
        assert_eq!((place.database, place.table, place.rest), ("data", "dog", Some("7")));
        let place = table_place("data/dog").unwrap();
        assert_eq!((place.database, place.table, place.rest), ("data", "dog", None));
        assert!(table_place("data").is_none());
        assert!(table_place("/dog/").is_none());
        assert!(table_place("data//").is_none());
    }

    #[test]
    fn every_file_of_the_console_is_served_with_its_type() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("console");
        let mut on_disk = Vec::new();
        let mut pending = vec![dir.clone()];
        while let Some(next) = pending.pop() {
            for entry in std::fs::read_dir(&next).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    pending.push(path);
                } else {
                    on_disk.push(path.strip_prefix(&dir).unwrap().to_string_lossy().replace('\\', "/"));
                }
            }
        }
        on_disk.sort();
        let mut served: Vec<String> = ASSETS.iter().map(|(name, _, _)| name.to_string()).collect();
        served.sort();
        assert_eq!(on_disk, served, "a file in console/ that ASSETS does not list would answer 404");
        for (name, kind, _) in ASSETS {
            let expected = match name.rsplit('.').next() {
                Some("html") => "text/html",
                Some("css") => "text/css",
                Some("js") => "text/javascript",
                other => panic!("{name}: no content type for {other:?}"),
            };
            assert!(kind.starts_with(expected), "{name} is served as {kind}");
        }
    }
}
