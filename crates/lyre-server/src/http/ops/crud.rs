//! insert, update, upsert, delete.

use std::sync::Arc;

use axum::response::Response;
use lyre_core::access::Action;
use lyre_core::{Context, Engine, Expect, Object, RecordVersion, Value, WriteMode, WriteOptions, WriteSummary};

use crate::app::AppState;
use crate::http::error::ApiError;
use crate::http::etag;
use crate::http::format::Format;
use crate::http::ops::{Params, reply};

pub async fn insert(engine: &Arc<Engine>, ctx: &Context, params: Params, format: Format) -> Result<Response, ApiError> {
    write(engine, ctx, params, format, WriteMode::Insert).await
}

pub async fn update(engine: &Arc<Engine>, ctx: &Context, params: Params, format: Format) -> Result<Response, ApiError> {
    write(engine, ctx, params, format, WriteMode::Update).await
}

pub async fn upsert(engine: &Arc<Engine>, ctx: &Context, params: Params, format: Format) -> Result<Response, ApiError> {
    write(engine, ctx, params, format, WriteMode::Upsert).await
}

/// insert, update and upsert: the same request shape, Harper's per-mode reply.
async fn write(
    engine: &Arc<Engine>,
    ctx: &Context,
    mut params: Params,
    format: Format,
    mode: WriteMode,
) -> Result<Response, ApiError> {
    let table = params.table(engine)?;
    let records = params.records()?;
    let total = records.len();
    let options = WriteOptions { expect: if_match(&mut params, total, "records")?, at: None };
    let summary = table.write_with(ctx, mode, records, options).await?;
    let (verb, keys_field, with_skipped) = match mode {
        WriteMode::Insert => ("inserted", "inserted_hashes", true),
        WriteMode::Update => ("updated", "update_hashes", true),
        _ => ("upserted", "upserted_hashes", false),
    };
    let message = format!("{verb} {} of {total} records", summary.written.len());
    reply(format, &written(message, summary, keys_field, with_skipped))
}

/// Lyre's compare-and-set for the Operations API: `if_match`, an array aligned with
/// `records` (or `ids`), each entry `null` (no condition), `"*"` (the record must
/// exist), an ETag as REST sends it, or a record version number (`txn_time` of the
/// write that made it, `__updatedtime__` in dynamic tables). The writer checks every
/// condition at commit; if one fails nothing is written and the reply is 412.
fn if_match(params: &mut Params, count: usize, aligned_with: &str) -> Result<Vec<Option<Expect>>, ApiError> {
    let Some(conditions) = params.array(&["if_match"])? else { return Ok(Vec::new()) };
    if conditions.len() != count {
        return Err(ApiError::bad_request(format!(
            "'if_match' must have one entry per entry of '{aligned_with}' ({count}), not {}",
            conditions.len()
        )));
    }
    conditions
        .into_iter()
        .enumerate()
        .map(|(i, condition)| match condition {
            Value::Null => Ok(None),
            Value::String(tag) => Ok(Some(etag::if_match(&tag))),
            Value::Int(_) | Value::Float(_) => {
                let wanted = condition.as_f64().unwrap_or(f64::NAN);
                Ok(Some(Expect::Version(Arc::new(move |version: RecordVersion| version.time == wanted))))
            }
            _ => {
                Err(ApiError::bad_request(format!("'if_match[{i}]' must be null, \"*\", an ETag or a version number")))
            }
        })
        .collect()
}

/// Harper's write response: message, new attributes, txn time, keys.
pub(super) fn written(message: String, summary: WriteSummary, keys_field: &str, with_skipped: bool) -> Value {
    let mut out = Object::default();
    out.insert("message".into(), message.into());
    out.insert("new_attributes".into(), Value::Array(summary.new_attributes.into_iter().map(Value::String).collect()));
    out.insert("txn_time".into(), Value::Float(summary.txn_time));
    out.insert(keys_field.into(), Value::Array(summary.written));
    if with_skipped {
        out.insert("skipped_hashes".into(), Value::Array(summary.skipped));
    }
    Value::Object(out)
}

pub async fn delete(
    engine: &Arc<Engine>,
    ctx: &Context,
    mut params: Params,
    format: Format,
) -> Result<Response, ApiError> {
    let table = params.table(engine)?;
    let ids = params.required_array(&["ids", "hash_values"])?;
    let total = ids.len();
    let options = WriteOptions { expect: if_match(&mut params, total, "ids")?, at: None };
    let summary = table.delete_with(ctx, ids, options).await?;
    let noun = if total == 1 { "record" } else { "records" };
    let mut out = Object::default();
    out.insert("message".into(), format!("{} of {total} {noun} successfully deleted", summary.deleted.len()).into());
    out.insert("deleted_hashes".into(), Value::Array(summary.deleted));
    out.insert("skipped_hashes".into(), Value::Array(summary.skipped));
    out.insert("txn_time".into(), Value::Float(summary.txn_time));
    reply(format, &Value::Object(out))
}

/// `invalidate` (Lyre's): drops the stored copies of `ids` in a caching table,
/// so the next read of each asks its source; as `delete` does, it needs the
/// delete permission. Answers how many copies were held.
pub async fn invalidate(
    state: &AppState,
    ctx: &Context,
    mut params: Params,
    format: Format,
) -> Result<Response, ApiError> {
    let table = params.table(&state.engine)?;
    let ids = params.required_array(&["ids", "hash_values"])?;
    let sourced = state.components.exports().iter().any(|export| {
        export.source.is_some() && export.database == table.schema().database && export.table == table.schema().name
    });
    if !sourced {
        return Err(ApiError::bad_request(format!(
            "table '{}.{}' is not a caching table (its component declares no source for it)",
            table.schema().database,
            table.schema().name
        )));
    }
    table.access(ctx, &[Action::Delete])?;
    let total = ids.len();
    let dropped = state.cache.invalidate(&table, ids).await?;
    let mut out = Object::default();
    out.insert("message".into(), format!("{dropped} of {total} cached records invalidated").into());
    reply(format, &Value::Object(out))
}
