//! read_audit_log, read_transaction_log, delete_audit_logs_before,
//! delete_transaction_logs_before, and Lyre's check_consistency.

use std::sync::Arc;

use axum::response::Response;
use lyre_core::services;
use lyre_core::{AuditEntry, AuditSearch, Context, Object, Table, Value};

use crate::app::AppState;
use crate::http::error::ApiError;
use crate::http::format::Format;
use crate::http::ops::{Params, reply};

/// `read_audit_log`: by time (the default), user or primary key.
pub async fn read_audit_log(
    state: &Arc<AppState>,
    ctx: &Context,
    mut params: Params,
    format: Format,
) -> Result<Response, ApiError> {
    let table = params.table(&state.engine)?;
    let search_type = params.string(&["search_type"])?;
    let values = params.array(&["search_values"])?.unwrap_or_default();
    let limit = params.count(&["limit"])?;
    let search = match search_type.as_deref() {
        None | Some("timestamp") => {
            let bound = |i: usize| {
                values
                    .get(i)
                    .map(|v| v.as_f64().ok_or_else(|| ApiError::bad_request("'search_values' must be timestamps (ms)")))
                    .transpose()
            };
            AuditSearch::Time { from: bound(0)?, to: bound(1)? }
        }
        Some("username") => AuditSearch::Users(
            values
                .iter()
                .map(|v| match v {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                })
                .collect(),
        ),
        Some("hash_value") => AuditSearch::Ids(values.clone()),
        Some(other) => return Err(ApiError::bad_request(format!("Invalid searchType '{other}'"))),
    };
    let entries = read_entries(table, ctx, search.clone(), limit).await?;
    let body = match search {
        AuditSearch::Time { .. } => Value::Array(entries.iter().map(entry_value).collect()),
        AuditSearch::Users(users) => {
            grouped(users.into_iter().map(Value::String), &entries, |user, e| Value::String(e.user.clone()) == *user)
        }
        AuditSearch::Ids(ids) => grouped(ids.into_iter(), &entries, |id, e| e.hash_values.contains(id)),
    };
    reply(format, &body)
}

/// `read_transaction_log`: entries in `[from, to]`, oldest first.
pub async fn read_transaction_log(
    state: &Arc<AppState>,
    ctx: &Context,
    mut params: Params,
    format: Format,
) -> Result<Response, ApiError> {
    let table = params.table(&state.engine)?;
    let from = timestamp(&mut params, "from")?;
    let to = timestamp(&mut params, "to")?;
    let limit = params.count(&["limit"])?;
    let entries = read_entries(table, ctx, AuditSearch::Time { from, to }, limit).await?;
    reply(format, &Value::Array(entries.iter().map(entry_value).collect()))
}

/// Reads the table's log entries matching `search` on a blocking thread (a log walk
/// can be long).
async fn read_entries(
    table: Table,
    ctx: &Context,
    search: AuditSearch,
    limit: Option<usize>,
) -> Result<Vec<AuditEntry>, ApiError> {
    let ctx = ctx.clone();
    crate::http::blocking::blocking("reading the log", move || services::read_audit_log(&table, &ctx, &search, limit))
        .await
}

/// `delete_audit_logs_before` / `delete_transaction_logs_before`: a job pruning the
/// table's log entries older than `timestamp`.
pub async fn delete_logs_before(
    state: &Arc<AppState>,
    ctx: &Context,
    operation: &str,
    mut params: Params,
    format: Format,
) -> Result<Response, ApiError> {
    let database = params.database()?;
    let table_name = params.required_string(&["table"])?;
    let table = state.engine.database(&database)?.table(&table_name)?;
    let before =
        timestamp(&mut params, "timestamp")?.ok_or_else(|| ApiError::bad_request("'timestamp' is required"))?;
    lyre_core::access::require_super_user(ctx)?;
    let mut body = Object::default();
    body.insert("operation".into(), operation.into());
    body.insert("database".into(), database.into());
    body.insert("table".into(), table_name.into());
    body.insert("timestamp".into(), Value::Float(before));
    let job_ctx = ctx.clone();
    let id = state
        .services
        .jobs()
        .start(ctx.username(), operation, Value::Object(body), async move {
            match table.delete_audit_log_before(&job_ctx, before).await {
                Ok(removed) => Ok(format!("Successfully completed job: removed {removed} log records")),
                Err(err) => Err(err.to_string()),
            }
        })
        .await?;
    super::jobs::started(format, id)
}

/// `check_consistency` (Lyre's own): walks every index of a table, or of every table
/// of a database, against the records.
pub async fn check_consistency(
    state: &Arc<AppState>,
    ctx: &Context,
    mut params: Params,
    format: Format,
) -> Result<Response, ApiError> {
    let db = state.engine.database(&params.database()?)?;
    let tables = match params.string(&["table"])? {
        Some(name) => vec![db.table(&name)?],
        None => db.schema().tables.keys().map(|name| db.table(name)).collect::<Result<_, _>>()?,
    };
    let ctx = ctx.clone();
    let reports = crate::http::blocking::blocking("the consistency check", move || {
        tables.iter().map(|t| services::check_consistency(t, &ctx)).collect::<Result<Vec<_>, _>>()
    })
    .await?;
    let listed = |problems: &[(String, Value)]| {
        Value::Array(
            problems
                .iter()
                .map(|(attribute, id)| {
                    let mut o = Object::default();
                    o.insert("attribute".into(), attribute.clone().into());
                    o.insert("id".into(), id.clone());
                    Value::Object(o)
                })
                .collect(),
        )
    };
    let mut out = Object::default();
    out.insert("consistent".into(), Value::Bool(reports.iter().all(|r| r.is_consistent())));
    let tables = reports.iter().map(|r| {
        let mut o = Object::default();
        o.insert("table".into(), r.table.clone().into());
        o.insert("consistent".into(), Value::Bool(r.is_consistent()));
        o.insert("records".into(), Value::Int(r.records as i64));
        o.insert("index_entries".into(), Value::Int(r.index_entries as i64));
        o.insert("missing_count".into(), Value::Int(r.missing_count as i64));
        o.insert("phantom_count".into(), Value::Int(r.phantom_count as i64));
        o.insert("missing".into(), listed(&r.missing));
        o.insert("phantom".into(), listed(&r.phantom));
        Value::Object(o)
    });
    out.insert("tables".into(), Value::Array(tables.collect()));
    reply(format, &Value::Object(out))
}

/// An optional timestamp parameter (ms), `'<name>' is invalid` when not a number.
fn timestamp(params: &mut Params, name: &str) -> Result<Option<f64>, ApiError> {
    match params.value(&[name]) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v.as_f64().map(Some).ok_or_else(|| ApiError::bad_request(format!("'{name}' is invalid"))),
    }
}

/// Harper's shape of one entry.
fn entry_value(entry: &AuditEntry) -> Value {
    let mut out = Object::default();
    out.insert("operation".into(), entry.operation.clone().into());
    out.insert("user_name".into(), entry.user.clone().into());
    out.insert("timestamp".into(), Value::Float(entry.timestamp));
    out.insert("hash_values".into(), Value::Array(entry.hash_values.clone()));
    let records = entry.records.iter().map(|r| r.clone().map_or(Value::Null, Value::Object)).collect();
    out.insert("records".into(), Value::Array(records));
    Value::Object(out)
}

/// `{key: [entries matching key]}` for every key asked (Harper keys by the text form).
fn grouped(
    keys: impl Iterator<Item = Value>,
    entries: &[AuditEntry],
    matches: impl Fn(&Value, &AuditEntry) -> bool,
) -> Value {
    let mut out = Object::default();
    for key in keys {
        let list = entries.iter().filter(|e| matches(&key, e)).map(entry_value).collect();
        let name = match &key {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        out.insert(name, Value::Array(list));
    }
    Value::Object(out)
}
