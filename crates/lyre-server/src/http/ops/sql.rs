//! The `sql` operation: one statement run by `lyre-sql`, answered in Harper's shapes
//! (rows as an array of objects; writes with their message and keys; EXPLAIN as
//! the plan's lines).

use std::sync::Arc;

use axum::response::Response;
use lyre_core::{Context, Engine, Object, Value};
use lyre_sql::{Outcome, SqlError};

use crate::http::error::ApiError;
use crate::http::format::Format;
use crate::http::ops::{Params, reply};

/// Runs the statement in `sql` as `ctx`, with `budget` bytes for its intermediate
/// results.
pub async fn sql(
    engine: &Arc<Engine>,
    ctx: &Context,
    mut params: Params,
    format: Format,
    budget: usize,
) -> Result<Response, ApiError> {
    let text = match params.string(&["sql"]) {
        Ok(Some(text)) if !text.trim().is_empty() => text,
        Ok(_) => return Err(ApiError::bad_request("The 'sql' parameter is missing from the request body")),
        Err(_) => return Err(ApiError::bad_request("'sql' must be a string holding one SQL statement")),
    };
    match lyre_sql::execute(engine.clone(), ctx.clone(), &text, budget).await {
        Ok(Outcome::Rows(rows)) => reply(format, &rows),
        Ok(Outcome::Plan(lines)) => reply(format, &lines),
        Ok(Outcome::Written(written)) => {
            let mut body = Object::default();
            body.insert("message".into(), Value::String(written.message));
            body.insert(written.keys_field.into(), Value::Array(written.keys));
            body.insert("skipped_hashes".into(), Value::Array(written.skipped));
            reply(format, &body)
        }
        Err(SqlError::Core(err)) => Err(err.into()),
        Err(err) => Err(ApiError::new(err.code(), err.to_string())),
    }
}
