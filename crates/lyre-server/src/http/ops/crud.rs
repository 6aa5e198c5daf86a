//! insert, update, upsert, delete.

use std::sync::Arc;

use axum::response::Response;
use lyre_core::{Context, Engine, Object, Value, WriteSummary};

use crate::http::error::ApiError;
use crate::http::negotiate::Format;
use crate::http::ops::{Params, reply};

pub async fn insert(
    engine: &Arc<Engine>,
    ctx: &Context,
    mut params: Params,
    format: Format,
) -> Result<Response, ApiError> {
    let table = engine.database(&params.database()?)?.table(&params.required_string(&["table"])?)?;
    let records = params.records()?;
    let total = records.len();
    let summary = table.insert(ctx, records).await?;
    let message = format!("inserted {} of {total} records", summary.written.len());
    reply(format, &written(message, summary, "inserted_hashes", true))
}

pub async fn update(
    engine: &Arc<Engine>,
    ctx: &Context,
    mut params: Params,
    format: Format,
) -> Result<Response, ApiError> {
    let table = engine.database(&params.database()?)?.table(&params.required_string(&["table"])?)?;
    let records = params.records()?;
    let total = records.len();
    let summary = table.update(ctx, records).await?;
    let message = format!("updated {} of {total} records", summary.written.len());
    reply(format, &written(message, summary, "update_hashes", true))
}

pub async fn upsert(
    engine: &Arc<Engine>,
    ctx: &Context,
    mut params: Params,
    format: Format,
) -> Result<Response, ApiError> {
    let table = engine.database(&params.database()?)?.table(&params.required_string(&["table"])?)?;
    let records = params.records()?;
    let total = records.len();
    let summary = table.upsert(ctx, records).await?;
    let message = format!("upserted {} of {total} records", summary.written.len());
    reply(format, &written(message, summary, "upserted_hashes", false))
}

/// Harper's write response: message, new attributes, txn time, keys.
fn written(message: String, summary: WriteSummary, keys_field: &str, with_skipped: bool) -> Value {
    let mut out = Object::new();
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
    let table = engine.database(&params.database()?)?.table(&params.required_string(&["table"])?)?;
    let ids = params.required_array(&["ids", "hash_values"])?;
    let total = ids.len();
    let summary = table.delete(ctx, ids).await?;
    let noun = if total == 1 { "record" } else { "records" };
    let mut out = Object::new();
    out.insert("message".into(), format!("{} of {total} {noun} successfully deleted", summary.deleted.len()).into());
    out.insert("deleted_hashes".into(), Value::Array(summary.deleted));
    out.insert("skipped_hashes".into(), Value::Array(summary.skipped));
    out.insert("txn_time".into(), Value::Float(summary.txn_time));
    reply(format, &Value::Object(out))
}
