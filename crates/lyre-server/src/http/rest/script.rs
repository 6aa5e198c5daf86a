//! REST requests for the resources components' scripts export (`script/`): the
//! request made a [`ScriptRequest`], the script's answer made a response in the
//! format the client asked for; and the parts of REST's grammar scripts use
//! ([`Grammar`], given to the script host when the server starts).

use std::sync::Arc;

use axum::body::Body;
use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use lyre_core::access::User;
use lyre_core::query::Query;
use lyre_core::{Code, Context, Engine, Object, Table, Value};

use crate::app::AppState;
use crate::components::Exports;
use crate::http::body::{Bodies, DecodedBody, read_and_decode};
use crate::http::error::ApiError;
use crate::http::format::Format;
use crate::http::negotiate::response_format;
use crate::http::rest::query::decode_path;
use crate::http::rest::url::{RestPath, Target};
use crate::script::{ReplyBody, RestGrammar, ScriptError, ScriptExport, ScriptReply, ScriptRequest};

/// REST's query grammar and table description, for scripts' table calls.
pub struct Grammar {
    engine: Arc<Engine>,
}

impl Grammar {
    /// The grammar over `engine`'s tables (relationships lead to other tables).
    pub fn new(engine: Arc<Engine>) -> Self {
        Self { engine }
    }
}

fn parts(err: ApiError) -> (Code, String) {
    (err.code(), err.message().to_string())
}

impl RestGrammar for Grammar {
    fn query_string(&self, table: &Table, raw: &str) -> Result<Query, (Code, String)> {
        super::search_query(&self.engine, table.schema(), raw).map_err(parts)
    }

    fn query_object(&self, table: &Table, mut object: Object) -> Result<Query, (Code, String)> {
        // A request's target: its query string, under what the script's code set on
        // the target (Harper's code edits the target its query string was parsed into).
        let parsed = match object.shift_remove("search") {
            Some(Value::String(raw)) => Some(self.query_string(table, &raw)?),
            _ => None,
        };
        // `select: 'name'`: each record's value of that one attribute, as Harper's.
        let single = match object.get("select") {
            Some(Value::String(name)) => Some(name.clone()),
            _ => None,
        };
        if single.is_some() {
            object.shift_remove("select");
        }
        let set = |key: &str| object.contains_key(key);
        let (conditions, operator, limit, offset, select, sort) =
            (set("conditions"), set("operator"), set("limit"), set("offset"), set("select"), set("sort"));
        let mut params = crate::http::ops::Params::from_object(object);
        let given = crate::http::ops::search::query_object(&mut params).map_err(parts)?;
        let mut query = match parsed {
            None => given,
            Some(mut query) => {
                if conditions {
                    query.conditions = given.conditions;
                }
                if conditions || operator {
                    query.operator = given.operator;
                }
                if limit {
                    query.limit = given.limit;
                }
                if offset {
                    query.offset = given.offset;
                }
                if select {
                    query.select = given.select;
                }
                if sort {
                    (query.sort, query.vector) = (given.sort, given.vector);
                }
                query
            }
        };
        if let Some(name) = single {
            let field = lyre_core::query::Field { name, nested: None };
            query.select =
                lyre_core::query::Select::Fields { fields: vec![field], shape: lyre_core::query::Shaped::Value };
        }
        Ok(query)
    }

    fn describe(&self, table: &Table, ctx: &Context) -> Result<Value, (Code, String)> {
        super::describe(table.schema(), table, ctx).map_err(parts)
    }
}

/// The script resource `path` addresses (a nested export's longest prefix first,
/// then the first segment), with the path split as REST splits a table's.
pub fn find(exports: &Exports, path: &str) -> Option<(RestPath, Arc<ScriptExport>)> {
    if !exports.has_scripts() {
        return None;
    }
    if let Some((export, rest)) = exports.nested_script(path) {
        let mut split = super::url::split(&format!("/_{rest}"))?;
        split.export.clone_from(&export.path);
        return Some((split, export.clone()));
    }
    let split = super::url::split(path)?;
    let export = exports.script(&split.export)?.clone();
    Some((split, export))
}

/// Answers a request for `export` with its script (the request's headers move into
/// the script's request, not copied).
pub async fn serve(
    state: &AppState,
    export: &Arc<ScriptExport>,
    user: Option<Arc<User>>,
    parts: axum::http::request::Parts,
    body: &mut Option<Body>,
    path: RestPath,
) -> Response {
    let format = match path.format.map(Ok).unwrap_or_else(|| response_format(&parts.headers)) {
        Ok(format) => format,
        Err(err) => return err.render_rest(Format::Json),
    };
    let answered = async {
        let (id, collection) = target(state, export, path.rest.as_deref())?;
        // The body's memory stays granted until the script has answered.
        let (body, _memory) = if carries_body(&parts.headers) {
            let DecodedBody { value, memory } =
                read_and_decode(state, &parts.headers, body, state.rest_body_limit, Bodies::Script).await?;
            (Some(value), Some(memory))
        } else {
            (None, None)
        };
        let request = ScriptRequest {
            export: export.clone(),
            method: parts.method,
            id,
            collection,
            uri: parts.uri,
            user,
            client: crate::script::Client::of(&parts.extensions),
            headers: parts.headers,
            body,
        };
        let reply = state.components.scripts().call(request).await.map_err(refusal)?;
        respond(reply, format)
    };
    match answered.await {
        Ok(response) => response,
        Err(err) => err.render_rest(format),
    }
}

/// The id the rest of the path names (typed by the table's key for a table's
/// class), and whether it names the collection.
fn target(state: &AppState, export: &ScriptExport, rest: Option<&str>) -> Result<(Option<Value>, bool), ApiError> {
    let Some(rest) = rest else { return Ok((None, false)) };
    if rest.is_empty() {
        return Ok((None, true));
    }
    let Some((database, table)) = &export.table else {
        return Ok((Some(Value::String(decode_path(rest).into_owned())), false));
    };
    let table = state.engine.database(database)?.table(table)?;
    Ok(match super::url::target(Some(rest), table.schema())? {
        Target::Table => (None, false),
        Target::Collection => (None, true),
        Target::Record(id) | Target::Property(id, _) => (Some(id), false),
        Target::Prefix(prefix) => (Some(Value::String(prefix)), false),
    })
}

/// Whether the request declares a body.
pub(super) fn carries_body(headers: &axum::http::HeaderMap) -> bool {
    headers.contains_key(header::TRANSFER_ENCODING)
        || headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .is_some_and(|n| n > 0)
}

/// An encoded value as a response in `format`.
fn encoded(status: StatusCode, bytes: Vec<u8>, format: Format) -> Response {
    let mut response = (status, bytes).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(format.content_type()));
    headers.insert(header::VARY, HeaderValue::from_static("Accept, Accept-Encoding"));
    response
}

/// A script host's refusal as the error it is answered with.
pub(super) fn refusal(err: ScriptError) -> ApiError {
    let code = match err.status() {
        404 => Code::NotFound,
        503 => Code::Overloaded,
        _ => Code::Internal,
    };
    ApiError::new(code, err.to_string())
}

/// The script's reply as a response: a value in the client's format, raw bytes as
/// given, or nothing.
pub(super) fn respond(reply: ScriptReply, format: Format) -> Result<Response, ApiError> {
    let status = StatusCode::from_u16(reply.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = match reply.body {
        ReplyBody::Empty => status.into_response(),
        ReplyBody::Value(value) => encoded(status, format.encode(&value)?, format),
        ReplyBody::Record(record) => encoded(status, format.encode_record(&record)?, format),
        ReplyBody::Raw(bytes) => (status, bytes).into_response(),
    };
    // A script's header replaces the default of its name, and a later one of the
    // same name the earlier; but each `Set-Cookie` is a header of its own.
    let mut cookies_set = false;
    for (name, value) in reply.headers {
        let (Ok(name), Ok(value)) = (HeaderName::try_from(name.as_str()), HeaderValue::try_from(value.as_str())) else {
            tracing::warn!(header = %name, "a script set a header that is not valid HTTP; it was left out");
            continue;
        };
        if name == header::SET_COOKIE && cookies_set {
            response.headers_mut().append(name, value);
        } else {
            cookies_set |= name == header::SET_COOKIE;
            response.headers_mut().insert(name, value);
        }
    }
    Ok(response)
}
