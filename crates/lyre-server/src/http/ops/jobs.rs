//! The job operations: `get_job`, `search_jobs_by_start_date`, and
//! `delete_records_before` (alias `delete_files_before`), which runs as one; and the
//! answer every operation that starts a job gives.

use std::sync::Arc;

use axum::response::Response;
use lyre_core::{Context, Object, Value};

use crate::app::AppState;
use crate::http::error::ApiError;
use crate::http::format::Format;
use crate::http::ops::{Params, reply};

/// Harper's answer to an operation that started job `id`:
/// `{message: "Starting job with id <id>", job_id}`.
pub fn started(format: Format, id: String) -> Result<Response, ApiError> {
    let mut out = Object::default();
    out.insert("message".into(), format!("Starting job with id {id}").into());
    out.insert("job_id".into(), id.into());
    reply(format, &Value::Object(out))
}

/// `get_job`: a job's record; another user's jobs are for super users only.
pub async fn get_job(
    state: &Arc<AppState>,
    ctx: &Context,
    mut params: Params,
    format: Format,
) -> Result<Response, ApiError> {
    let id = params.required_string(&["id"])?;
    let job = state.services.jobs().get(&id)?;
    let owner = job_owner(&job);
    if !ctx.user.is_super_user() && owner.is_some_and(|o| o != ctx.username()) {
        return Err(lyre_core::Error::refused("Only a super user may read another user's job").into());
    }
    reply(format, &job)
}

/// Who started a job (its record's `user`, in the first element when the answer is
/// a list).
fn job_owner(job: &Value) -> Option<&str> {
    match job {
        Value::Object(record) => record.get("user").and_then(Value::as_str),
        Value::Array(records) => records.first().and_then(job_owner),
        _ => None,
    }
}

/// `search_jobs_by_start_date`: the jobs started strictly between `from_date` and
/// `to_date` (ISO 8601), oldest first (10,000 at most); a user who is not a super
/// user sees their own.
pub async fn search_jobs_by_start_date(
    state: &Arc<AppState>,
    ctx: &Context,
    mut params: Params,
    format: Format,
) -> Result<Response, ApiError> {
    let from = date(&mut params, "from_date", "from")?;
    let to = date(&mut params, "to_date", "to")?;
    let jobs = state.services.jobs().started_between(from, to, ctx.username(), ctx.user.is_super_user()).await?;
    reply(format, &jobs)
}

/// A required ISO 8601 date parameter, in Harper's words when it is not one.
fn date(params: &mut Params, key: &str, label: &str) -> Result<f64, ApiError> {
    let text = params.string(&[key])?.unwrap_or_default();
    lyre_core::parse_iso8601(&text).ok_or_else(|| {
        ApiError::bad_request(format!("Invalid '{label}' date '{text}', must be in ISO-8601 format (YYYY-MM-DD)"))
    })
}

/// `delete_records_before` / `delete_files_before`: a job deleting the table's
/// records created before `date` (by `__createdtime__` or the `@createdTime`
/// attribute), 10,000 per transaction; its message is Harper's `<n> of <m> records
/// successfully deleted`.
pub async fn delete_records_before(
    state: &Arc<AppState>,
    ctx: &Context,
    operation: &str,
    mut params: Params,
    format: Format,
) -> Result<Response, ApiError> {
    lyre_core::access::require_super_user(ctx)?;
    let database = params.database()?;
    let table_name = params.string(&["table"])?;
    let date_text = match params.value(&["date"]) {
        None | Some(Value::Null) => None,
        Some(Value::String(text)) => Some(text),
        Some(_) => return Err(ApiError::bad_request("'date' must be a valid date")),
    };
    let missing: Vec<&str> =
        [("'table' is required", table_name.is_none()), ("'date' is required", date_text.is_none())]
            .into_iter()
            .filter_map(|(message, missing)| missing.then_some(message))
            .collect();
    let (Some(table_name), Some(date_text)) = (table_name, date_text) else {
        return Err(ApiError::bad_request(missing.join(". ")));
    };
    let before = lyre_core::parse_iso8601(&date_text)
        .ok_or_else(|| ApiError::bad_request("'date' must be in ISO 8601 date format"))?;
    // An unknown table is told now rather than through a failed job.
    state.engine.database(&database)?.table(&table_name)?;
    let mut body = Object::default();
    body.insert("operation".into(), operation.into());
    body.insert("database".into(), database.clone().into());
    body.insert("table".into(), table_name.clone().into());
    body.insert("date".into(), date_text.into());
    let (engine, job_ctx) = (state.engine.clone(), ctx.clone());
    let holder = format!("a {operation} job for {}", ctx.username());
    let id = state
        .services
        .jobs()
        .start(ctx.username(), operation, Value::Object(body), async move {
            let db = engine.database(&database).map_err(|err| err.to_string())?;
            let table = db.table(&table_name).map_err(|err| err.to_string())?;
            let _lease = db.lease(holder);
            match table.delete_created_before(&job_ctx, before).await {
                Ok((_, 0)) => Ok("No records found to delete".to_string()),
                Ok((deleted, matched)) => {
                    let noun = if matched == 1 { "record" } else { "records" };
                    Ok(format!("{deleted} of {matched} {noun} successfully deleted"))
                }
                Err(err) => Err(err.to_string()),
            }
        })
        .await?;
    started(format, id)
}
