//! The REST interface (port 9926): exported tables at `/<name>/...`, Harper's URL
//! grammar, methods and status codes.
//!
//! `url.rs` parses the path, `query.rs` the query string (`http/etag.rs` makes ETags),
//! `statics.rs` serves the components' static files ahead of the tables; this
//! file dispatches by method. Errors are answered as Harper 4.7 does: a JSON string
//! `"ClientError: <message>"` with the status (plain text for 404 on unknown paths).

mod blob;
mod content_types;
pub(crate) mod middleware;
mod openapi;
pub mod query;
pub(crate) mod script;
mod statics;
pub(crate) mod url;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{ConnectInfo, Request};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use lyre_core::access::Action;
use lyre_core::catalog::TableSchema;
use lyre_core::query::{Query, Select};
use lyre_core::{Code, Context, ForUser, Object, RecordBody, RecordVersion, Table, Value, WriteMode, WriteOptions};

use crate::app::AppState;
use crate::cache::control::Directives;
use crate::cache::{CachedRead, Forwarded, Source, Sourced, WrittenThrough};
use crate::http::auth::authenticate;
use crate::http::blocking::blocking;
use crate::http::body::{Bodies, DecodedBody, Held, read_and_decode};
use crate::http::cors;
use crate::http::error::ApiError;
use crate::http::etag;
use crate::http::format::Format;
use crate::http::negotiate::response_format;
use crate::http::stream::{Framing, answer_bounded, stream_search};
use url::Target;

use crate::script::Phase;

/// The peer of a request that came without one.
const UNKNOWN_PEER: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), 0);

/// Methods every table answers, for `OPTIONS` and `405`.
const ALLOW: &str = "GET, HEAD, POST, PUT, DELETE, PATCH, OPTIONS, TRACE, QUERY, COPY, MOVE";

/// Handles every REST request (answering CORS when configured).
pub async fn handle(state: Arc<AppState>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    // The accept loop names every request's peer; a request without one is treated
    // as from nowhere (never as local).
    let peer = parts.extensions.get::<ConnectInfo<SocketAddr>>().map_or(UNKNOWN_PEER, |info| info.0);
    let origin = cors::origin(&parts.headers, state.cors);
    let mut body = Some(body);
    let budget = crate::http::body::drain_budget(&parts.headers);
    let (started, method, uri) = (std::time::Instant::now(), parts.method.clone(), parts.uri.clone());
    let mut response = if cors::is_preflight(origin.as_ref(), &parts.method, &parts.headers) {
        cors::preflight()
    } else if state.components.scripts().middleware().first
        && !crate::http::realtime::is_websocket(&parts.headers)
        && !crate::http::realtime::is_event_stream(&parts.headers)
    {
        // Scripts' `runFirst` middleware sees the request before anything of Lyre's.
        await_boxed!(middleware::run(&state, Phase::First, peer, parts, &mut body, None))
    } else {
        answer(&state, peer, parts, &mut body).await
    };
    state.metrics.record(
        crate::metrics::Request {
            interface: crate::metrics::Interface::Rest,
            path: first_segment(uri.path()),
            method: method.as_str(),
            status: response.status().as_u16(),
            elapsed: started.elapsed(),
            bytes_out: crate::metrics::body_size(&response),
        },
        &|resource| state.components.exports().get(resource).is_some(),
    );
    // A body nobody read (a GET's, or one an error answered before reading) is read
    // and dropped: unread bytes make the kernel reset the connection when it closes,
    // cutting off the response the client is still reading.
    if let Some(unread) = body
        && !crate::http::body::drain(unread, budget).await
    {
        response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    if let Some(origin) = origin {
        cors::allow(&mut response, origin);
    }
    response
}

/// The first segment of a REST path: the exported resource it addresses, when it
/// names one (metrics ask the exports only about a segment they have not seen).
fn first_segment(path: &str) -> &str {
    let trimmed = path.trim_start_matches('/');
    // A byte search: every request asks, and `split` builds a searcher to find one slash.
    memchr::memchr(b'/', trimmed.as_bytes()).map_or(trimmed, |end| &trimmed[..end])
}

/// Lyre's own answer to a request (past any `runFirst` middleware): its routing,
/// with the content types scripts registered where they apply.
async fn answer(
    state: &Arc<AppState>,
    peer: SocketAddr,
    parts: axum::http::request::Parts,
    body: &mut Option<Body>,
) -> Response {
    match state.components.scripts().content_types() {
        None => route(state, peer, parts, body).await,
        Some(types) => await_boxed!(content_types::adapt(state, &types, peer, parts, body)),
    }
}

/// Answers one request; takes `body` out of its slot only to read it.
async fn route(
    state: &Arc<AppState>,
    peer: SocketAddr,
    parts: axum::http::request::Parts,
    body: &mut Option<Body>,
) -> Response {
    let state = state.clone();
    let exports = state.components.exports();
    // Static files come first, as Harper's static plugin runs before everything.
    if let Some(response) = statics::serve(&exports, &parts).await {
        return response;
    }
    if parts.uri.path() == "/openapi" && exports.get("openapi").is_none() {
        if !matches!(parts.method, Method::GET | Method::HEAD) {
            let message = format!("/openapi answers GET and HEAD, not {}", parts.method);
            let mut response = ApiError::new(Code::MethodNotAllowed, message).render_rest(Format::Json);
            response.headers_mut().insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
            return response;
        }
        let client = parts.extensions.get::<crate::tls::ClientCertificate>();
        return await_boxed!(openapi_response(&state, &parts.headers, peer, client));
    }
    // Subscriptions authenticate and resolve the path themselves: a WebSocket is
    // upgraded before either, as Harper does, and reports failures as close codes.
    if crate::http::realtime::is_websocket(&parts.headers) {
        return crate::http::realtime::ws::upgrade(&state, peer, parts);
    }
    if parts.method == Method::GET && crate::http::realtime::is_event_stream(&parts.headers) {
        return await_boxed!(crate::http::realtime::sse::stream(&state, peer, parts));
    }
    // A script's resource answers the methods it handles itself, and decides who
    // may (Harper's `allowRead`, …): a request without credentials reaches it.
    // A nested export (`api/v1/Dog`) a script's class of a table serves is found by
    // its whole path, also for the table's own methods.
    let (scripted, nested) = match script::find(&exports, parts.uri.path()) {
        Some((path, export)) if export.handles(parts.method.as_str()) => (Some((path, export)), None),
        Some((path, _)) => (None, Some(path)),
        None => (None, None),
    };
    // Credentials first: a client that is not logged in learns nothing, not even
    // which tables exist.
    let client = parts.extensions.get::<crate::tls::ClientCertificate>();
    let user = match authenticate(&state, &parts.headers, peer, client).await {
        Ok(user) => Some(user),
        Err(err) if scripted.is_some() && err.code() == Code::MustLogin => None,
        // A path no export serves is the scripts' last middleware's, if they registered any.
        Err(err)
            if err.code() == Code::MustLogin
                && state.components.scripts().middleware().last
                && !names_export(&exports, &parts, nested.is_some()) =>
        {
            return await_boxed!(unanswered(&state, peer, parts, body, None));
        }
        Err(err)
            if err.code() == Code::MustLogin
                && crate::http::graphql::is_endpoint(parts.uri.path())
                && exports.graphql() =>
        {
            return crate::http::graphql::refused(err, &parts);
        }
        Err(err) => return err.render_rest(response_format(&parts.headers).unwrap_or(Format::Json)),
    };
    if let Some((path, export)) = scripted {
        // Harper answers OPTIONS itself, for a script's resource too (CORS asks it).
        if parts.method == Method::OPTIONS {
            return options();
        }
        return await_boxed!(script::serve(&state, &export, user, parts, body, path));
    }
    let graphql = crate::http::graphql::is_endpoint(parts.uri.path()) && exports.graphql();
    let Some(user) = user else {
        let refused = ApiError::new(Code::MustLogin, "Must login");
        if graphql {
            return crate::http::graphql::refused(refused, &parts);
        }
        return refused.render_rest(Format::Json);
    };
    if graphql {
        return await_boxed!(crate::http::graphql::handle(&state, &exports, Context::new(user), &parts, body));
    }
    let Some(path) = nested.or_else(|| url::split(parts.uri.path())) else {
        return await_boxed!(unanswered(&state, peer, parts, body, Some(user)));
    };
    let Some(export) = exports.get(&path.export) else {
        return await_boxed!(unanswered(&state, peer, parts, body, Some(user)));
    };
    let format = match path.format.map(Ok).unwrap_or_else(|| response_format(&parts.headers)) {
        Ok(format) => format,
        Err(err) => return err.render_rest(Format::Json),
    };
    let result = async {
        let ctx = Context::new(user);
        let db = state.engine.database(&export.database)?;
        // Names this request to a drop that has to wait for it.
        let call = RestCall(parts.method.clone(), parts.uri.clone());
        let _lease = db.lease(ForUser { what: call, user: ctx.user.clone() });
        let table = db.table(&export.table)?;
        let target = url::target(path.rest.as_deref(), table.schema())?;
        let request = RestRequest {
            state: &state,
            ctx,
            table,
            target,
            format,
            headers: &parts.headers,
            query: parts.uri.query().unwrap_or(""),
            last_modified: export.last_modified,
            source: export.source.clone(),
        };
        request.dispatch(&parts.method, body).await
    }
    .await;
    match result {
        Ok(response) => response,
        Err(err) => err.render_rest(format),
    }
}

/// A `GET` of any table by its database and name, answered as REST answers an
/// exported table's (`rest` the path after the table, `query` REST's grammar): the
/// web console's view of tables no component exports (`http/console.rs`).
pub(crate) async fn read_table(
    state: &AppState,
    ctx: Context,
    (database, table): (&str, &str),
    rest: Option<&str>,
    headers: &HeaderMap,
    query: &str,
) -> Response {
    let format = match response_format(headers) {
        Ok(format) => format,
        Err(err) => return err.render_rest(Format::Json),
    };
    let result = async {
        let db = state.engine.database(database).map_err(|e| ApiError::from(e).hidden_from(&ctx))?;
        let _lease = db.lease(ForUser { what: format!("console GET {database}/{table}"), user: ctx.user.clone() });
        let table = db.table(table).map_err(|e| ApiError::from(e).hidden_from(&ctx))?;
        let target = url::target(rest, table.schema())?;
        let request =
            RestRequest { state, ctx, table, target, format, headers, query, last_modified: false, source: None };
        request.get().await
    }
    .await;
    result.unwrap_or_else(|err| err.render_rest(format))
}

/// The record with primary key `id` as `ctx` may read it: its stored bytes when
/// `whole` allows (see [`lyre_core::Table::get_body`]), else decoded.
fn read_record(
    table: &Table,
    ctx: &Context,
    id: &Value,
    whole: bool,
) -> lyre_core::Result<Option<(RecordBody, RecordVersion)>> {
    match whole {
        true => table.get_body(ctx, id),
        false => Ok(table.get(ctx, id)?.map(|(record, version)| (RecordBody::Decoded(record), version))),
    }
}

/// "<method> <path>", as a lease holder.
struct RestCall(Method, axum::http::Uri);

impl std::fmt::Display for RestCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.0, self.1.path())
    }
}

/// `GET /openapi`, for super users.
async fn openapi_response(
    state: &AppState,
    headers: &HeaderMap,
    peer: SocketAddr,
    client: Option<&crate::tls::ClientCertificate>,
) -> Response {
    let user = match authenticate(state, headers, peer, client).await {
        Ok(user) => user,
        Err(err) => return err.render_rest(Format::Json),
    };
    if let Err(err) = lyre_core::access::require_super_user(&Context::new(user)) {
        return ApiError::from(err).render_rest(Format::Json);
    }
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("localhost");
    let document = openapi::document(&state.engine, &state.components.exports(), host);
    match Format::Json.encode(&document) {
        Ok(bytes) => ([(header::CONTENT_TYPE, "application/json")], bytes).into_response(),
        Err(err) => ApiError::from(err).render_rest(Format::Json),
    }
}

/// Whether the request's path names something Lyre serves (an export, a script's
/// nested export, the GraphQL endpoint).
fn names_export(exports: &crate::components::Exports, parts: &axum::http::request::Parts, nested: bool) -> bool {
    nested
        || (crate::http::graphql::is_endpoint(parts.uri.path()) && exports.graphql())
        || url::split(parts.uri.path()).is_some_and(|path| exports.get(&path.export).is_some())
}

/// A request nothing of Lyre's answers: the scripts' last-phase middleware's, when
/// they registered any (reported back when a first-phase one passed it on); else 404.
/// A request without credentials comes here only when there is such middleware.
async fn unanswered(
    state: &Arc<AppState>,
    peer: SocketAddr,
    parts: axum::http::request::Parts,
    body: &mut Option<Body>,
    user: Option<Arc<lyre_core::access::User>>,
) -> Response {
    let last = state.components.scripts().middleware().last;
    if last && parts.extensions.get::<middleware::PassedOn>().is_some() {
        let mut response = not_found();
        response.extensions_mut().insert(middleware::Unmatched(user));
        return response;
    }
    if last {
        return middleware::run(state, Phase::Last, peer, parts, body, user).await;
    }
    not_found()
}

fn not_found() -> Response {
    (StatusCode::NOT_FOUND, "Not found\n").into_response()
}

struct RestRequest<'a> {
    state: &'a AppState,
    ctx: Context,
    table: Table,
    target: Target,
    format: Format,
    headers: &'a HeaderMap,
    query: &'a str,
    /// Send `Last-Modified` with records (the component's `rest.lastModified`).
    last_modified: bool,
    /// The table's source, when it is a caching table.
    source: Option<Arc<Source>>,
}

impl RestRequest<'_> {
    /// Takes the body out of `body` only in the answers that read it; the rest leave
    /// it for [`handle`] to drain. Reads are answered here; writes in [`RestRequest::write`],
    /// behind a box, so a read's future (moved whole through every layer) stays small.
    async fn dispatch(self, method: &Method, body: &mut Option<Body>) -> Result<Response, ApiError> {
        match (method.as_str(), &self.target) {
            ("GET" | "HEAD", _) => {
                let response = self.get().await?;
                Ok(if method == Method::HEAD { strip_body(response) } else { response })
            }
            ("PUT", Target::Record(_) | Target::Collection)
            | ("PATCH" | "DELETE", Target::Record(_))
            | ("POST" | "DELETE", Target::Collection) => await_boxed!(self.write(method, body)),
            ("QUERY", Target::Collection | Target::Table) => await_boxed!(self.query_body(body)),
            ("PUT", Target::Property(..)) => await_boxed!(self.put_property(body)),
            ("OPTIONS", _) => Ok(options()),
            ("TRACE", _) => self.reply(&Value::from("HarperDB is the terminating server")),
            ("PURGE", Target::Record(id)) if self.source.is_some() => {
                // Dropping the cached copy is a delete of it: the same permission.
                self.table.access(&self.ctx, &[Action::Delete])?;
                await_boxed!(self.state.cache.invalidate(&self.table, vec![id.clone()]))?;
                self.reply(&Value::Bool(true))
            }
            ("PUT" | "PATCH" | "POST" | "DELETE" | "COPY" | "MOVE" | "QUERY", _) => {
                let verb = method.as_str().to_ascii_lowercase();
                let message = format!(
                    "The {} does not have a {verb} method implemented to handle HTTP method {method}",
                    self.table.schema().name
                );
                let mut response = ApiError::new(Code::MethodNotAllowed, message).render_rest(self.format);
                response.headers_mut().insert(header::ALLOW, HeaderValue::from_static(ALLOW));
                Ok(response)
            }
            ("BREW", _) => Err(ApiError::new(Code::Teapot, "HarperDB is short and stout and can't brew coffee")),
            (other, _) => Err(ApiError::new(Code::NotImplemented, format!("Method {other} is not recognized"))),
        }
    }

    /// `QUERY` on the collection: the body is a query object (as the `search`
    /// operation takes it, vector sorts included), answered as a JSON array.
    async fn query_body(self, body: &mut Option<Body>) -> Result<Response, ApiError> {
        let (object, _memory) = self.object_body(body).await?;
        let query = crate::http::ops::search::query_object(&mut crate::http::ops::Params::from_object(object))?;
        // As for a query string (and as Harper's `search` answers both): 404.
        let defined = |name: &str| self.table.schema().attribute(name).is_some();
        if let Some(name) = query.conditions.iter().find_map(|c| c.undefined_attribute(&defined)) {
            return Err(ApiError::new(Code::NotFound, format!("{name} is not a defined attribute")));
        }
        let mut response =
            crate::http::ops::search::search_answer(self.table.clone(), &self.ctx, query, self.format).await?;
        self.content_type(&mut response);
        Ok(response)
    }

    /// The writes: `PUT`, `PATCH`, `POST` and `DELETE` on a record or the collection.
    async fn write(self, method: &Method, body: &mut Option<Body>) -> Result<Response, ApiError> {
        match (method.as_str(), &self.target) {
            ("PUT", Target::Record(id)) => {
                let (mut record, _memory) = self.object_body(body).await?;
                let through = self.write_through(id, Forwarded::Put(&record)).await?;
                if through.is_some() {
                    lyre_core::failpoint::hit_async("write-through-local").await?;
                }
                // A caching table's record written with `Cache-Control: max-age=N`
                // stays fresh N seconds (in `@expiresAt`, when the table has one).
                let max_age = self.source.as_ref().and_then(|_| Directives::of(self.headers).max_age);
                let fresh_until = max_age.map(|age| lyre_core::now_ms() + age.as_millis() as f64);
                if let (Some(attribute), Some(at)) = (&self.table.schema().expires_at, fresh_until) {
                    record.insert(attribute.clone(), Value::Int(at as i64));
                }
                let written = self.table.put(&self.ctx, id.clone(), record, self.conditions()).await;
                let summary = self.unless_refused_here(through, id, written).await?;
                if let Some(at) = fresh_until {
                    self.state.cache.written(&self.table, id, summary.txn_time, at);
                }
                Ok(StatusCode::NO_CONTENT.into_response())
            }
            ("PUT", Target::Collection) => {
                let DecodedBody { value, memory: _memory } = self.body(body).await?;
                let records = match value {
                    Value::Array(items) => items,
                    _ => return Err(ApiError::bad_request("PUT on a collection takes an array of records")),
                };
                let primary_key = &self.table.schema().primary_key;
                let records = records
                    .into_iter()
                    .map(|item| match item {
                        Value::Object(record) if record.get(primary_key).is_some_and(|id| *id != Value::Null) => {
                            Ok(record)
                        }
                        Value::Object(_) => {
                            Err(ApiError::bad_request(format!("each record needs its '{primary_key}'")))
                        }
                        _ => Err(ApiError::bad_request("each record must be an object")),
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                // One transaction: a bad record anywhere leaves every record as it was.
                self.table.write_with(&self.ctx, WriteMode::Replace, records, WriteOptions::default()).await?;
                Ok(StatusCode::NO_CONTENT.into_response())
            }
            ("PATCH", Target::Record(id)) => {
                let (record, _memory) = self.object_body(body).await?;
                if let Some(through) = self.write_through(id, Forwarded::Patch(&record)).await? {
                    // The origin merged it: the next read fetches the whole record
                    // (a copy patched here could be partial, or differ from its merge).
                    await_boxed!(self.state.cache.invalidate(&self.table, vec![id.clone()]))?;
                    through.settled();
                    return Ok(StatusCode::NO_CONTENT.into_response());
                }
                self.table.patch(&self.ctx, id.clone(), record, self.conditions()).await?;
                Ok(StatusCode::NO_CONTENT.into_response())
            }
            ("POST", Target::Collection) => {
                let (record, _memory) = self.object_body(body).await?;
                let id = self.table.create(&self.ctx, record).await?;
                let location = match &id {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                let mut response = (StatusCode::CREATED, self.encode(&id)?).into_response();
                self.content_type(&mut response);
                if let Ok(value) = HeaderValue::from_str(&location) {
                    response.headers_mut().insert(header::LOCATION, value);
                }
                Ok(response)
            }
            ("DELETE", Target::Record(id)) => {
                let through = self.write_through(id, Forwarded::Delete).await?;
                let deleted = self.table.delete_with(&self.ctx, vec![id.clone()], self.conditions()).await;
                self.unless_refused_here(through, id, deleted).await?;
                self.reply(&Value::Bool(true))
            }
            ("DELETE", Target::Collection) => {
                let query = self.search_query()?;
                let ids = self.matching_ids(query).await?;
                if !ids.is_empty() {
                    self.table.delete(&self.ctx, ids).await?;
                }
                self.reply(&Value::Bool(true))
            }
            _ => Err(ApiError::new(Code::Internal, format!("{method} is not a write"))),
        }
    }

    /// `PUT /T/<id>.<attr>`: a `Blob` attribute takes the body's bytes as they
    /// arrive (its `Content-Type` becomes the blob's); any other declared attribute
    /// takes the decoded body as its value. The record is created if absent.
    async fn put_property(self, slot: &mut Option<Body>) -> Result<Response, ApiError> {
        let Target::Property(id, name) = &self.target else {
            return Err(ApiError::new(Code::Internal, "a property write without a property"));
        };
        if self.source.is_some() {
            return Err(ApiError::bad_request("a caching table's properties are written through their record"));
        }
        let declared = self.table.schema().attribute(name).and_then(|a| a.type_name.as_deref());
        if declared == Some(lyre_core::blobs::BLOB_TYPE) {
            // Refused before a byte is stored when the role may not write it.
            self.table.check_blob_write(&self.ctx, name)?;
            let body = slot.take().unwrap_or_default();
            let store = self.table.blobs().clone();
            let pending =
                blob::receive(&store, self.headers, body, self.state.max_blob_size, self.state.body_timeout).await?;
            self.table.put_blob(&self.ctx, id.clone(), name, pending, self.conditions()).await?;
            return Ok(blob::stored());
        }
        if self.table.schema().relationships.iter().any(|r| &r.name == name) {
            return Err(ApiError::bad_request(format!("{name} is a relationship; write the related records instead")));
        }
        let DecodedBody { value, memory: _memory } = self.body(slot).await?;
        let mut record = Object::default();
        record.insert(name.clone(), value);
        self.table.patch(&self.ctx, id.clone(), record, self.conditions()).await?;
        Ok(StatusCode::NO_CONTENT.into_response())
    }

    /// Sends a write of record `id` of a caching table to its origin first, when
    /// the source writes through: after checking the role may make it, so an
    /// origin never takes a write the role may not make; an origin that refuses it
    /// leaves the table as it was (502, or 504 at the timeout). The write the
    /// origin took holds the record's turn until it is settled here (so concurrent
    /// writes of the record reach the origin and the table in one order).
    async fn write_through(&self, id: &Value, write: Forwarded<'_>) -> Result<Option<WrittenThrough>, ApiError> {
        let Some(source) = &self.source else { return Ok(None) };
        if !source.writes_through() {
            return Ok(None);
        }
        let actions: &[Action] = match write {
            Forwarded::Put(_) | Forwarded::Patch(_) => &[Action::Insert, Action::Update],
            Forwarded::Delete => &[Action::Delete],
        };
        let access = self.table.access(&self.ctx, actions)?;
        if let Forwarded::Put(record) | Forwarded::Patch(record) = write
            && access.restricts_attributes()
        {
            let names = record.keys().map(String::as_str);
            access.require_attributes(names, actions, &self.table.schema().primary_key)?;
        }
        let sourced = Sourced { table: &self.table, source };
        Ok(await_boxed!(self.state.cache.write_through(sourced, id, write))?)
    }

    /// `written`, the local half of a write the origin already took (`through`):
    /// when it failed here (a precondition, the schema), the copy held is dropped,
    /// so reads fetch what the origin now has rather than what it had. The write is
    /// settled (its turn passes on) once the table has it or the copy is dropped;
    /// otherwise it drops the copy as it goes.
    async fn unless_refused_here<T>(
        &self,
        through: Option<WrittenThrough>,
        id: &Value,
        written: lyre_core::Result<T>,
    ) -> Result<T, ApiError> {
        let Some(through) = through else { return Ok(written?) };
        // Unsettled (the copy could not be dropped here), it tries again as it goes.
        let settled =
            written.is_ok() || await_boxed!(self.state.cache.invalidate(&self.table, vec![id.clone()])).is_ok();
        if settled {
            through.settled();
        }
        Ok(written?)
    }

    async fn get(&self) -> Result<Response, ApiError> {
        match &self.target {
            Target::Table if self.query.is_empty() => {
                self.reply(&describe(self.table.schema(), &self.table, &self.ctx)?)
            }
            Target::Table | Target::Collection => {
                let query = self.search_query()?;
                let framing = Framing::Sequence;
                // A table with computed attributes reads on the blocking pool: the
                // code computing them may wait for a JavaScript worker.
                let mut response = if self.table.answers_one_record(&query) && !self.table.schema().has_computed() {
                    answer_bounded(self.format, framing, self.table.search(&self.ctx, query))?
                } else {
                    let (table, ctx) = (self.table.clone(), self.ctx.clone());
                    await_boxed!(stream_search(self.format, framing, move || table.search(&ctx, query)))?
                };
                self.content_type(&mut response);
                Ok(response)
            }
            Target::Prefix(_) => {
                // Only multi-part (array) keys have prefixes; Lyre's keys are scalars.
                self.reply(&Value::Array(Vec::new()))
            }
            Target::Record(id) => {
                let query =
                    query::parse(self.query, self.table.schema(), &|table, name| self.related_schema(table, name))?;
                if let Some(source) = &self.source {
                    return await_boxed!(self.get_cached(id, source, query.select));
                }
                // The whole record is served from its stored bytes; a projection
                // needs it decoded. A table with computed attributes reads on the
                // blocking pool: the code computing them may wait for a worker.
                let computes = self.table.schema().has_computed();
                let whole = query.select.is_none();
                let found = if computes {
                    let (table, ctx, id) = (self.table.clone(), self.ctx.clone(), id.clone());
                    blocking("a read of computed attributes", move || read_record(&table, &ctx, &id, whole)).await?
                } else {
                    read_record(&self.table, &self.ctx, id, whole)?
                };
                let Some((record, version)) = found else {
                    return Ok(empty(StatusCode::NOT_FOUND));
                };
                if let Some(response) = self.not_modified(&version) {
                    return Ok(response);
                }
                let mut response = match query.select {
                    Some(select) if computes => {
                        let (table, ctx, record) = (self.table.clone(), self.ctx.clone(), record.into_object()?);
                        let projected = blocking("a projection of computed attributes", move || {
                            table.project(&ctx, record, &select)
                        })
                        .await?;
                        self.reply(&projected)?
                    }
                    Some(select) => self.reply(&self.table.project(&self.ctx, record.into_object()?, &select)?)?,
                    None => self.reply_record(&record).await?,
                };
                if version.unique {
                    response.headers_mut().insert(header::ETAG, header_value(&etag::etag(version.time)));
                }
                self.mark_modified(&mut response, version.time);
                Ok(response)
            }
            Target::Property(id, name) => {
                let select = Select::Fields {
                    fields: vec![lyre_core::query::Field { name: name.clone(), nested: None }],
                    shape: lyre_core::query::Shaped::Value,
                };
                let read = |table: &Table, ctx: &Context, id: &Value, select: &Select| {
                    let Some((record, version)) = table.get(ctx, id)? else { return Ok(None) };
                    Ok::<_, lyre_core::Error>(Some((table.project(ctx, record, select)?, version)))
                };
                // A computed attribute's code may wait for a worker: off the request thread.
                let found = if self.table.schema().has_computed() {
                    let (table, ctx, id) = (self.table.clone(), self.ctx.clone(), id.clone());
                    blocking("a read of a computed attribute", move || read(&table, &ctx, &id, &select)).await?
                } else {
                    read(&self.table, &self.ctx, id, &select)?
                };
                let Some((value, version)) = found else {
                    return Ok(empty(StatusCode::NOT_FOUND));
                };
                let etag = version.unique.then(|| header_value(&etag::etag(version.time)));
                if let Value::Blob(blob) = &value {
                    if let Some(response) = self.not_modified(&version) {
                        return Ok(response);
                    }
                    return await_boxed!(blob::send(self.table.blobs(), blob, self.headers, etag));
                }
                let declared = self.table.schema().attribute(name).and_then(|a| a.type_name.as_deref());
                if declared == Some(lyre_core::blobs::BLOB_TYPE)
                    && let Some(response) = blob::send_inline(&value, etag)
                {
                    return Ok(self.not_modified(&version).unwrap_or(response));
                }
                if value == Value::Null {
                    let mut response = self.reply(&Value::Null)?;
                    *response.status_mut() = StatusCode::NOT_FOUND;
                    return Ok(response);
                }
                // A stored property carries its record's ETag and is unchanged while the
                // record is; a relationship's value is other records, which that ETag
                // does not cover.
                if self.table.schema().relationships.iter().any(|r| &r.name == name) {
                    return self.reply(&value);
                }
                if let Some(response) = self.not_modified(&version) {
                    return Ok(response);
                }
                let mut response = self.reply(&value)?;
                if version.unique {
                    response.headers_mut().insert(header::ETAG, header_value(&etag::etag(version.time)));
                }
                self.mark_modified(&mut response, version.time);
                Ok(response)
            }
        }
    }

    /// A record of a caching table: from storage while fresh, else from its
    /// source (see `cache/`), with `Age` on a hit and `Server-Timing` saying how
    /// long the source took on a miss (as Harper: `cache-resolve;dur=…, hdb;dur=…,
    /// miss`).
    async fn get_cached(&self, id: &Value, source: &Arc<Source>, select: Option<Select>) -> Result<Response, ApiError> {
        let started = std::time::Instant::now();
        let sourced = Sourced { table: &self.table, source };
        let directives = Directives::of(self.headers);
        let read = self.state.cache.read(&self.state.engine, sourced, &self.ctx, id, directives).await?;
        let mut response = match read.as_ref() {
            None => empty(StatusCode::NOT_FOUND),
            Some(read) => match self.not_modified(&read.version) {
                Some(response) => response,
                None => {
                    let mut response = match &select {
                        Some(select) => self.reply(&self.table.project(&self.ctx, read.record.clone(), select)?)?,
                        None => match RecordBody::content_of(&read.record) {
                            Some(content) => await_boxed!(self.reply_content(content, Confined::AsTheOriginSent))?,
                            None => {
                                self.reply_bytes(self.format.encode_record(&RecordBody::Decoded(read.record.clone()))?)
                            }
                        },
                    };
                    if read.version.unique {
                        response.headers_mut().insert(header::ETAG, header_value(&etag::etag(read.version.time)));
                    }
                    self.mark_modified(&mut response, read.version.time);
                    response
                }
            },
        };
        let total = started.elapsed().as_secs_f64() * 1000.0;
        let (timing, age) = match &read {
            Some(CachedRead { hit: true, age_s, .. }) => (format!("hdb;dur={total:.2}"), *age_s),
            Some(CachedRead { resolve_ms: Some(resolve), .. }) => {
                (format!("cache-resolve;dur={resolve:.2}, hdb;dur={total:.2}, miss"), None)
            }
            _ => (format!("hdb;dur={total:.2}, miss"), None),
        };
        response.headers_mut().insert(HeaderName::from_static("server-timing"), header_value(&timing));
        if let Some(age) = age {
            response.headers_mut().insert(header::AGE, HeaderValue::from(age));
        }
        Ok(response)
    }

    /// A 304 when the request's `If-None-Match` names the record's current ETag
    /// (never for a record whose version is not unique: its ETag could mislead).
    fn not_modified(&self, version: &RecordVersion) -> Option<Response> {
        let if_none_match = self.headers.get(header::IF_NONE_MATCH).and_then(|v| v.to_str().ok())?;
        let tag = etag::etag(version.time);
        if !version.unique || !etag::matches(if_none_match, &tag) {
            return None;
        }
        let mut response = empty(StatusCode::NOT_MODIFIED);
        response.headers_mut().insert(header::ETAG, header_value(&tag));
        self.mark_modified(&mut response, version.time);
        Some(response)
    }

    /// Adds `Last-Modified` (the version `time`, ms, as an HTTP date) when the
    /// component asked for it.
    fn mark_modified(&self, response: &mut Response, time: f64) {
        if !self.last_modified || !time.is_finite() || time < 0.0 {
            return;
        }
        let when = std::time::UNIX_EPOCH + std::time::Duration::from_millis(time as u64);
        if let Ok(value) = HeaderValue::from_str(&httpdate::fmt_http_date(when)) {
            response.headers_mut().insert(header::LAST_MODIFIED, value);
        }
    }

    /// The write condition of a single-record write: its `If-Match` header, if any.
    fn conditions(&self) -> WriteOptions {
        let expect = self.headers.get(header::IF_MATCH).and_then(|v| v.to_str().ok()).map(etag::if_match);
        WriteOptions { expect: vec![expect], at: None }
    }

    /// The query string as a search.
    fn search_query(&self) -> Result<Query, ApiError> {
        search_query(&self.state.engine, self.table.schema(), self.query)
    }

    fn related_schema(&self, table: &TableSchema, name: &str) -> Option<Arc<TableSchema>> {
        related_schema(&self.state.engine, table, name)
    }

    /// The primary keys of the records a query matches.
    async fn matching_ids(&self, mut query: Query) -> Result<Vec<Value>, ApiError> {
        let pk = self.table.schema().primary_key.clone();
        query.select = Select::Attributes(vec![pk.clone()]);
        let (table, ctx) = (self.table.clone(), self.ctx.clone());
        let ids = crate::http::blocking::blocking("a search", move || -> lyre_core::Result<Vec<Value>> {
            let mut ids = Vec::new();
            table.search(&ctx, query)?.run(&mut |record| {
                if let Value::Object(mut record) = record
                    && let Some(id) = record.shift_remove(&pk)
                {
                    ids.push(id);
                }
                std::ops::ControlFlow::Continue(())
            })?;
            Ok(ids)
        })
        .await?;
        Ok(ids)
    }

    /// The request's body, taken out of its slot, decoded; keep its memory grant
    /// alive while working on it.
    async fn body(&self, slot: &mut Option<Body>) -> Result<DecodedBody, ApiError> {
        read_and_decode(self.state, self.headers, slot, self.state.rest_body_limit, Bodies::Rest).await
    }

    /// The request's body, which must be one record.
    async fn object_body(&self, slot: &mut Option<Body>) -> Result<(Object, Held), ApiError> {
        let DecodedBody { value, memory } = self.body(slot).await?;
        match value {
            Value::Object(record) => Ok((record, memory)),
            other => {
                Err(ApiError::bad_request(format!("the request body must be an object, not {}", other.type_name())))
            }
        }
    }

    fn encode(&self, value: &Value) -> Result<Vec<u8>, ApiError> {
        Ok(self.format.encode(value)?)
    }

    fn reply(&self, value: &Value) -> Result<Response, ApiError> {
        Ok(self.reply_bytes(self.encode(value)?))
    }

    /// A content record's data as it is, with its media type (as Harper answers a
    /// record holding `contentType` and `data`, whatever the request's `Accept`),
    /// never sniffed as another type, and as `confined` says.
    async fn reply_content(
        &self,
        (content_type, data): (String, Value),
        confined: Confined,
    ) -> Result<Response, ApiError> {
        let mut response = match data {
            Value::Blob(blob) => blob::send(self.table.blobs(), &blob, self.headers, None).await?,
            Value::String(text) => Response::new(Body::from(text)),
            Value::Bytes(bytes) => Response::new(Body::from(bytes)),
            _ => return Err(ApiError::new(Code::Internal, "a content record's data is not text, bytes or a blob")),
        };
        let headers = response.headers_mut();
        let media = HeaderValue::from_str(&content_type)
            .unwrap_or(HeaderValue::from_static(lyre_core::blobs::DEFAULT_CONTENT_TYPE));
        headers.insert(header::CONTENT_TYPE, media);
        headers.insert(header::VARY, HeaderValue::from_static("Accept-Encoding"));
        headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
        if confined == Confined::Sandboxed {
            headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static("sandbox"));
        }
        Ok(response)
    }

    /// A whole record's answer: a content record's data as it is, else the record in
    /// the request's format. In JSON, the pass that writes the record finds out
    /// which it is; the other formats ask first.
    async fn reply_record(&self, record: &RecordBody) -> Result<Response, ApiError> {
        let content = if self.format == Format::Json {
            let mut json = Vec::with_capacity(record.size_hint());
            match record.write_json_or_content(&mut json)? {
                None => return Ok(self.reply_bytes(json)),
                Some(content) => content,
            }
        } else {
            match record.content()? {
                None => return Ok(self.reply_bytes(self.format.encode_record(record)?)),
                Some(content) => content,
            }
        };
        await_boxed!(self.reply_content(content, Confined::Sandboxed))
    }

    /// A response of `body`, already encoded in the request's format.
    fn reply_bytes(&self, body: Vec<u8>) -> Response {
        // Not `into_response`, whose content type would only be replaced.
        let mut response = Response::new(Body::from(body));
        self.content_type(&mut response);
        response
    }

    fn content_type(&self, response: &mut Response) {
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(self.format.content_type()));
        headers.insert(header::VARY, HeaderValue::from_static("Accept, Accept-Encoding"));
        if self.format == Format::Csv {
            headers.insert(header::CONTENT_DISPOSITION, HeaderValue::from_static("attachment; filename=\"data.csv\""));
        }
    }
}

/// A REST query string (`raw`, without `?`) on `schema`'s table as a core query.
pub(crate) fn search_query(engine: &lyre_core::Engine, schema: &TableSchema, raw: &str) -> Result<Query, ApiError> {
    let parsed = query::parse(raw, schema, &|table, name| related_schema(engine, table, name))?;
    Ok(Query {
        operator: parsed.operator,
        conditions: parsed.conditions,
        sort: parsed.sort,
        descending: false,
        offset: parsed.offset,
        limit: parsed.limit,
        select: parsed.select.unwrap_or_default(),
        ..Default::default()
    })
}

/// The schema of the table `table`'s relationship `name` leads to.
fn related_schema(engine: &lyre_core::Engine, table: &TableSchema, name: &str) -> Option<Arc<TableSchema>> {
    let relationship = table.relationships.iter().find(|r| r.name == name)?;
    let db = engine.database(&relationship.database).ok()?;
    db.schema().table(&relationship.table).cloned()
}

/// Harper's table description at `/T`.
pub(crate) fn describe(schema: &TableSchema, table: &Table, ctx: &Context) -> Result<Value, ApiError> {
    let stats = table.stats(ctx)?;
    let mut out = Object::default();
    out.insert("records".into(), "./".into());
    out.insert("name".into(), schema.name.clone().into());
    out.insert("database".into(), schema.database.clone().into());
    out.insert("auditSize".into(), Value::Int(i64::try_from(stats.db_audit_size).unwrap_or(i64::MAX)));
    // Each attribute as Harper's schema describes one: `[T]` as an array of
    // `elements`, `T!` not `nullable`; then the relationships, typed by the table
    // they lead to, with their `from` or `to`.
    let typed = |type_name: Option<&str>, list: bool| {
        let mut attribute = Object::default();
        let named = type_name.map(|t| Value::from(t.to_string()));
        match (list, named) {
            (true, named) => {
                attribute.insert("type".into(), "array".into());
                let mut elements = Object::default();
                if let Some(named) = named {
                    elements.insert("type".into(), named);
                }
                attribute.insert("elements".into(), Value::Object(elements));
            }
            (false, Some(named)) => {
                attribute.insert("type".into(), named);
            }
            (false, None) => {}
        }
        attribute
    };
    let mut attributes: Vec<Value> = schema
        .attributes
        .iter()
        .map(|a| {
            let mut attribute = typed(a.type_name.as_deref(), a.shape.list);
            if a.shape.required {
                attribute.insert("nullable".into(), false.into());
            }
            attribute.insert("name".into(), a.name.clone().into());
            if a.is_primary_key {
                attribute.insert("isPrimaryKey".into(), true.into());
            } else if a.indexed {
                attribute.insert("indexed".into(), Value::Object(Object::default()));
            }
            attribute.insert("attribute".into(), a.name.clone().into());
            Value::Object(attribute)
        })
        .collect();
    attributes.extend(schema.relationships.iter().map(|r| {
        let mut attribute = typed(Some(&r.table), r.list);
        attribute.insert("name".into(), r.name.clone().into());
        let mut relationship = Object::default();
        for (end, attribute) in [("from", &r.from), ("to", &r.to)] {
            if let Some(attribute) = attribute {
                relationship.insert(end.into(), attribute.clone().into());
            }
        }
        attribute.insert("relationship".into(), Value::Object(relationship));
        Value::Object(attribute)
    }));
    out.insert("attributes".into(), Value::Array(attributes));
    out.insert("recordCount".into(), Value::Int(i64::try_from(stats.record_count).unwrap_or(i64::MAX)));
    Ok(Value::Object(out))
}

/// How a content record's page may act in a browser.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Confined {
    /// A record a client wrote: sandboxed (`Content-Security-Policy: sandbox`), so
    /// HTML or SVG anyone who may write the table stored runs no script with the
    /// reader's session.
    Sandboxed,
    /// A caching table's copy of what its configured origin answered: served as
    /// the origin sent it (a page's own scripts run, as through a proxy).
    AsTheOriginSent,
}

/// Harper's answer to `OPTIONS`: 204 with every method REST takes.
fn options() -> Response {
    let mut response = StatusCode::NO_CONTENT.into_response();
    response.headers_mut().insert(header::ALLOW, HeaderValue::from_static(ALLOW));
    response
}

fn empty(status: StatusCode) -> Response {
    (status, Body::empty()).into_response()
}

fn strip_body(response: Response) -> Response {
    let (parts, _) = response.into_parts();
    Response::from_parts(parts, Body::empty())
}

fn header_value(text: &str) -> HeaderValue {
    HeaderValue::from_str(text).unwrap_or_else(|_| HeaderValue::from_static(""))
}
