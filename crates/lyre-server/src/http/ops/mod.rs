//! The Operations API: `POST /` with `{"operation": ...}`. This file maps every
//! operation name (and Harper's aliases) to its handler; each family lives in its
//! own file.

mod admin;
mod analytics;
mod audit;
mod components;
mod crud;
mod export;
mod jobs;
mod lifecycle;
mod load;
mod params;
mod schema;
pub mod search;
mod sql;
mod system;
mod tokens;
mod users;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use lyre_core::{Code, Context, ForUser, Lease, Object, Value};

use crate::app::AppState;
use crate::http::auth::authenticate;
use crate::http::body::{DecodedBody, read_and_decode};
use crate::http::error::ApiError;
use crate::http::format::Format;
use crate::http::negotiate::response_format;
use crate::tls::{ClientCertificate, OverTls};

pub use params::Params;

/// The largest body read from a request without a login (one that logs in).
const ANONYMOUS_BODY_LIMIT: usize = 64 * 1024;

/// Handles one Operations API request.
pub async fn handle(
    State(state): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    client: Option<axum::Extension<ClientCertificate>>,
    over_tls: Option<axum::Extension<OverTls>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let mut body = Some(body);
    let client = client.map(|axum::Extension(c)| c);
    let over_tls = over_tls.is_some();
    let mut response = match response_format(&headers) {
        Err(err) => err.render(Format::Json),
        Ok(format) => {
            match handle_request(&state, peer, over_tls, client.as_ref(), &headers, &mut body, format).await {
                Ok(response) => response,
                Err(err) => err.render(format),
            }
        }
    };
    // A body an error answered before reading is read first: unread bytes make the
    // kernel reset the connection when it closes, cutting the answer off.
    if let Some(unread) = body
        && !crate::http::body::drain(unread, crate::http::body::drain_budget(&headers)).await
    {
        response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

/// `OPTIONS /` that is not a CORS preflight (those are answered around the routes,
/// see `http/cors.rs`): the methods `/` takes.
pub async fn options() -> Response {
    ([(header::ALLOW, "GET, POST, OPTIONS")], StatusCode::NO_CONTENT).into_response()
}

/// Answers one request; takes the body out of its slot once the caller is known.
async fn handle_request(
    state: &Arc<AppState>,
    peer: SocketAddr,
    over_tls: bool,
    client: Option<&ClientCertificate>,
    headers: &HeaderMap,
    body: &mut Option<Body>,
    format: Format,
) -> Result<Response, ApiError> {
    // A request without a login may still be one that logs in (`login`,
    // `create_authentication_tokens` with credentials in its body) or that carries a
    // refresh token: its body is read, within a small limit, to see.
    let (user, bearer_refresh) = match authenticate(state, headers, peer, client).await {
        Ok(user) => (Some(user), None),
        Err(err) if err.code() == Code::MustLogin => (None, None),
        Err(err) => match refresh_bearer(state, headers) {
            Some(token) => (None, Some(token)),
            None => return Err(err),
        },
    };
    let limit = if user.is_some() { state.ops_body_limit } else { ANONYMOUS_BODY_LIMIT.min(state.ops_body_limit) };
    // The memory granted to the body is held until the operation has answered.
    let DecodedBody { value, memory: _memory } =
        read_and_decode(state, headers, body, limit, crate::http::body::Bodies::Structured).await?;
    let (operation, params) = Params::from_body(value)?;
    match operation.as_str() {
        "login" => return tokens::login(state, peer, over_tls, headers, params, format).await,
        "logout" => return tokens::logout(state, headers, format).await,
        "create_authentication_tokens" => {
            return tokens::create_authentication_tokens(state, user, peer, params, format).await;
        }
        "refresh_operation_token" => {
            return tokens::refresh_operation_token(state, bearer_refresh, params, format).await;
        }
        _ => {}
    }
    let Some(user) = user else {
        return Err(match bearer_refresh {
            // A refresh token buys operation tokens and nothing else.
            Some(_) => ApiError::new(Code::LoginFailed, "invalid token"),
            None => lyre_core::Error::MustLogin.into(),
        });
    };
    let ctx = Context::new(user);
    check_operation(&ctx, &operation)?;
    let _lease = request_lease(state, &ctx, &operation, &params);
    let started = std::time::Instant::now();
    let answered = dispatch(state, &ctx, &operation, params, format).await.map_err(|err| err.hidden_from(&ctx));
    let (status, bytes_out) = match &answered {
        Ok(response) => (response.status().as_u16(), crate::metrics::body_size(response)),
        Err(err) => (err.code().status(), None),
    };
    // An operation that does not exist is not a name worth keeping.
    let unknown = matches!(&answered, Err(err) if err.is_unknown_operation());
    state.metrics.record(
        crate::metrics::Request {
            interface: crate::metrics::Interface::Operations,
            path: if unknown { crate::metrics::UNKNOWN_PATH } else { &operation },
            method: "POST",
            status,
            elapsed: started.elapsed(),
            bytes_out,
        },
        &|_| true,
    );
    answered
}

/// The `Bearer` token of a request when it is a refresh token (which authenticates
/// only `refresh_operation_token`).
fn refresh_bearer(state: &AppState, headers: &HeaderMap) -> Option<String> {
    match crate::http::auth::credentials(headers) {
        crate::app::Credentials::Token(token)
            if state.tokens.verify(&token, crate::tokens::TokenKind::Refresh).is_ok() =>
        {
            Some(token)
        }
        _ => None,
    }
}

/// A lease naming this request on the database it addresses, held while it runs, so
/// a drop refused because of it says which operation and user hold the database.
/// Drops and restores take none (they are what waits for leases), nor do creations,
/// which wait for the lifecycle lock a drop holds while it waits for leases.
fn request_lease(state: &AppState, ctx: &Context, operation: &str, params: &Params) -> Option<Lease> {
    const NONE: [&str; 6] =
        ["drop_database", "drop_schema", "restore_backup", "create_database", "create_schema", "create_table"];
    if NONE.contains(&operation) {
        return None;
    }
    let db = state.engine.database(params.peek_database()?).ok()?;
    Some(db.lease(ForUser { what: operation.to_string(), user: ctx.user.clone() }))
}

async fn dispatch(
    state: &Arc<AppState>,
    ctx: &Context,
    operation: &str,
    params: Params,
    format: Format,
) -> Result<Response, ApiError> {
    let engine = &state.engine;
    match operation {
        "create_database" | "create_schema" => schema::create_database(engine, ctx, params, format).await,
        "drop_database" | "drop_schema" => schema::drop_database(engine, ctx, params, format).await,
        "create_table" => schema::create_table(engine, ctx, params, format).await,
        "drop_table" => schema::drop_table(engine, ctx, params, format).await,
        "create_attribute" => schema::create_attribute(engine, ctx, params, format).await,
        "drop_attribute" => schema::drop_attribute(engine, ctx, params, format).await,
        "describe_all" => schema::describe_all(engine, ctx, params, format).await,
        "describe_database" | "describe_schema" => schema::describe_database(engine, ctx, params, format).await,
        "describe_table" => schema::describe_table(engine, ctx, params, format).await,
        "insert" => crud::insert(engine, ctx, params, format).await,
        "update" => crud::update(engine, ctx, params, format).await,
        "upsert" => crud::upsert(engine, ctx, params, format).await,
        "delete" => crud::delete(engine, ctx, params, format).await,
        "invalidate" => crud::invalidate(state, ctx, params, format).await,
        "sql" => sql::sql(engine, ctx, params, format, state.control.config.sql.memory_budget).await,
        "search_by_id" | "search_by_hash" | "search_by_value" | "search_by_conditions" | "search" => {
            search::run(engine, ctx, operation, params, format).await
        }
        "read_audit_log" => audit::read_audit_log(state, ctx, params, format).await,
        "read_transaction_log" => audit::read_transaction_log(state, ctx, params, format).await,
        "delete_audit_logs_before" | "delete_transaction_logs_before" => {
            audit::delete_logs_before(state, ctx, operation, params, format).await
        }
        "get_analytics" => analytics::get_analytics(state, params, format).await,
        "list_metrics" => analytics::list_metrics(state, params, format).await,
        "describe_metric" => analytics::describe_metric(state, params, format).await,
        "read_log" => system::read_log(state, params, format).await,
        "system_information" => system::system_information(state, params, format).await,
        "get_configuration" => admin::get_configuration(state, format).await,
        "set_configuration" => admin::set_configuration(state, params, format).await,
        "restart" => admin::restart(state, format).await,
        "restart_service" => admin::restart_service(state, params, format).await,
        "get_status" => admin::get_status(state, params, format).await,
        "set_status" => admin::set_status(state, params, format).await,
        "clear_status" => admin::clear_status(state, params, format).await,
        "get_job" => jobs::get_job(state, ctx, params, format).await,
        "search_jobs_by_start_date" => jobs::search_jobs_by_start_date(state, ctx, params, format).await,
        "delete_records_before" | "delete_files_before" => {
            jobs::delete_records_before(state, ctx, operation, params, format).await
        }
        "export_local" => export::export_local(state, ctx, params, format).await,
        "export_to_s3" => export::export_to_s3(state, ctx, params, format).await,
        "csv_data_load" => load::csv_data_load(state, ctx, params, format).await,
        "csv_file_load" => load::csv_file_load(state, ctx, params, format).await,
        "csv_url_load" => load::csv_url_load(state, ctx, params, format).await,
        "import_from_s3" => load::import_from_s3(state, ctx, params, format).await,
        "check_consistency" => audit::check_consistency(state, ctx, params, format).await,
        "get_backup" => lifecycle::get_backup(state, ctx, params).await,
        "restore_backup" => lifecycle::restore_backup(state, ctx, params, format).await,
        "get_lifecycle_status" => lifecycle::get_lifecycle_status(state, ctx, format).await,
        "cleanup_orphan_blobs" => lifecycle::cleanup_orphan_blobs(state, ctx, params, format).await,
        "add_component"
        | "deploy_component"
        | "package_component"
        | "drop_component"
        | "get_components"
        | "get_component_file"
        | "set_component_file"
        | "custom_functions_status"
        | "get_custom_functions"
        | "get_custom_function"
        | "set_custom_function"
        | "drop_custom_function"
        | "add_custom_function_project"
        | "drop_custom_function_project"
        | "package_custom_function_project"
        | "deploy_custom_function_project" => components::dispatch(state, ctx, operation, params, format).await,
        "add_user" => users::add_user(state, ctx, params, format).await,
        "alter_user" => users::alter_user(state, ctx, params, format).await,
        "drop_user" => users::drop_user(state, ctx, params, format).await,
        "list_users" => users::list_users(state, ctx, format).await,
        "user_info" => users::user_info(state, ctx, format).await,
        "add_role" => users::add_role(state, ctx, params, format).await,
        "alter_role" => users::alter_role(state, ctx, params, format).await,
        "drop_role" => users::drop_role(state, ctx, params, format).await,
        "list_roles" => users::list_roles(state, ctx, format).await,
        other => match NOT_OFFERED.iter().find(|(names, _)| names.contains(&other)) {
            Some((_, why)) => Err(ApiError::bad_request(format!("Lyre does not offer the operation '{other}': {why}"))),
            None => Err(ApiError::unknown_operation(other)),
        },
    }
}

/// Harper operations Lyre will not offer, each with the reason a client is told
/// (a 400 that says so, rather than "not found", which reads as a typo).
const NOT_OFFERED: [(&[&str], &str); 5] = [
    (
        &["install_node_modules"],
        "components run no npm install here; ship a component's node_modules with it \
         (pure-JavaScript packages load from there)",
    ),
    (
        &[
            "registration_info",
            "get_registration_info",
            "get_fingerprint",
            "set_license",
            "install_usage_license",
            "get_usage_licenses",
        ],
        "Lyre has no licences to register or install",
    ),
    (
        &[
            "add_ssh_key",
            "update_ssh_key",
            "delete_ssh_key",
            "get_ssh_key",
            "list_ssh_keys",
            "set_ssh_known_hosts",
            "get_ssh_known_hosts",
        ],
        "components are deployed with deploy_component, not fetched from git over SSH",
    ),
    (
        &["catchup"],
        "it replays another node's transactions during replication, and this server runs alone \
         (replication has not landed)",
    ),
    (
        &[
            "add_node",
            "update_node",
            "remove_node",
            "set_node_replication",
            "cluster_status",
            "cluster_network",
            "cluster_set_routes",
            "cluster_get_routes",
            "cluster_delete_routes",
            "purge_stream",
        ],
        "it manages replication between nodes, and this server runs alone (replication has not landed)",
    ),
];

/// Operations only a super user may run, refused here by name before anything is
/// read (core refuses them too, for callers other than this API).
const SUPER_USER_ONLY: [&str; 52] = [
    // Harper lets any user with insert permission load a server file, and so read
    // any file the server can (each line comes back as a record), or have the
    // server fetch any address it can reach (a metadata service, an internal API).
    "csv_file_load",
    "csv_url_load",
    "add_user",
    "alter_user",
    "drop_user",
    "list_users",
    "add_role",
    "alter_role",
    "drop_role",
    "list_roles",
    "read_audit_log",
    "read_transaction_log",
    "delete_audit_logs_before",
    "delete_transaction_logs_before",
    "delete_records_before",
    "delete_files_before",
    "export_local",
    "export_to_s3",
    "check_consistency",
    "read_log",
    "system_information",
    "get_analytics",
    "list_metrics",
    "describe_metric",
    "get_configuration",
    "set_configuration",
    "restart",
    "restart_service",
    "get_status",
    "set_status",
    "clear_status",
    "get_backup",
    "restore_backup",
    "get_lifecycle_status",
    "cleanup_orphan_blobs",
    "add_component",
    "deploy_component",
    "package_component",
    "drop_component",
    "get_components",
    "get_component_file",
    "set_component_file",
    "custom_functions_status",
    "get_custom_functions",
    "get_custom_function",
    "set_custom_function",
    "drop_custom_function",
    "add_custom_function_project",
    "drop_custom_function_project",
    "package_custom_function_project",
    "deploy_custom_function_project",
    "define_tables",
];

/// The operation-level check: a super-user-only operation from anyone else is
/// refused with Harper's 403 body naming it.
fn check_operation(ctx: &Context, operation: &str) -> Result<(), ApiError> {
    if SUPER_USER_ONLY.contains(&operation) {
        lyre_core::access::require_super_user_for(ctx, operation)?;
    }
    Ok(())
}

/// A whole reply in the negotiated format.
pub fn reply(format: Format, value: &impl serde::Serialize) -> Result<Response, ApiError> {
    let bytes = format.encode(value)?;
    Ok(([(header::CONTENT_TYPE, format.content_type())], bytes).into_response())
}

/// `{"message": text}`.
pub fn message(format: Format, text: impl Into<String>) -> Result<Response, ApiError> {
    let mut body = Object::default();
    body.insert("message".into(), Value::String(text.into()));
    reply(format, &Value::Object(body))
}
