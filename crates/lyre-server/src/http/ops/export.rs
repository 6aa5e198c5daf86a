//! `export_local` and `export_to_s3`: a search's results written as JSON or CSV to a
//! file on the server or to an S3 object, as a job.
//!
//! The search (`search_operation`, a search operation's own body) is planned when
//! the request arrives, so a bad one is answered 400 at once; its results then
//! stream from one snapshot through the same encoder the Operations API answers
//! with (`http/stream.rs`), into the file or the upload, never whole in memory. A
//! local file is written whole or not at all (`files.rs`): an export that fails or
//! is cut short leaves no partial file.

use std::path::PathBuf;
use std::sync::Arc;

use axum::response::Response;
use futures_util::{Stream, StreamExt as _};
use lyre_core::{Context, Object, Value};

use crate::app::AppState;
use crate::bulk::s3;
use crate::http::error::ApiError;
use crate::http::format::Format;
use crate::http::ops::jobs::started;
use crate::http::ops::{Params, search};

/// `export_local`: the results written to `<path>/<filename>.<format>` on the server
/// (`filename` defaults to the time in ms); the job's result is Harper's
/// `{message: "Successfully exported JSON locally.", path}`.
pub async fn export_local(
    state: &Arc<AppState>,
    ctx: &Context,
    mut params: Params,
    format: Format,
) -> Result<Response, ApiError> {
    let (wire, name) = export_format(&mut params)?;
    let dir = match params.string(&["path"])? {
        None => return Err(ApiError::bad_request("path is missing.")),
        Some(path) if path.is_empty() => return Err(ApiError::bad_request("Invalid path: ")),
        Some(path) => PathBuf::from(path),
    };
    match std::fs::metadata(&dir) {
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => {
            return Err(ApiError::bad_request(format!(
                "path '{}' is not a directory, please supply a valid folder path",
                dir.display()
            )));
        }
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            return Err(ApiError::bad_request(format!("path '{}' does not exist", dir.display())));
        }
        Err(err) => return Err(ApiError::bad_request(format!("cannot use path '{}': {err}", dir.display()))),
    }
    let filename = match params.string(&["filename"])? {
        Some(name) if name.is_empty() || name.contains(['/', '\\']) || name == "." || name == ".." => {
            return Err(ApiError::bad_request(format!("'filename' must be a file name, not '{name}'")));
        }
        Some(name) => name,
        None => {
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis()).to_string()
        }
    };
    let target = dir.join(format!("{filename}.{name}"));
    let search = search_body(&mut params)?;
    let kind = search.0.clone();
    let results = run_search(state, ctx, search, wire).await?;
    let mut job = Object::default();
    job.insert("operation".into(), "export_local".into());
    job.insert("format".into(), name.into());
    job.insert("path".into(), target.display().to_string().into());
    job.insert("search_operation".into(), kind.into());
    let id = state
        .services
        .jobs()
        .start(ctx.username(), "export_local", Value::Object(job), async move {
            write_file(results, target.clone()).await?;
            let mut result = Object::default();
            result.insert("message".into(), format!("Successfully exported {} locally.", name.to_uppercase()).into());
            result.insert("path".into(), target.display().to_string().into());
            Ok::<_, String>(lyre_core::services::JobEnd::Result(Value::Object(result)))
        })
        .await?;
    started(format, id)
}

/// `export_to_s3`: the results written to the S3 object `s3.key` + `.json`/`.csv`;
/// the job's result names the object and its `ETag` (and `VersionId` where the
/// bucket keeps versions).
pub async fn export_to_s3(
    state: &Arc<AppState>,
    ctx: &Context,
    mut params: Params,
    format: Format,
) -> Result<Response, ApiError> {
    let object = s3::Object::from_param(params.value(&["s3"])).map_err(ApiError::bad_request)?;
    let (wire, name) = export_format(&mut params)?;
    let object = object.with_suffix(&format!(".{name}"));
    let search = search_body(&mut params)?;
    let kind = search.0.clone();
    let results = run_search(state, ctx, search, wire).await?;
    let mut job = Object::default();
    job.insert("operation".into(), "export_to_s3".into());
    job.insert("format".into(), name.into());
    job.insert("key".into(), object.key.clone().into());
    job.insert("search_operation".into(), kind.into());
    let id = state
        .services
        .jobs()
        .start(ctx.username(), "export_to_s3", Value::Object(job), async move {
            let uploaded = upload(results, &object).await?;
            let mut result = Object::default();
            result.insert("message".into(), format!("Successfully exported {} to S3.", name.to_uppercase()).into());
            result.insert("Key".into(), object.key.clone().into());
            result.insert("ETag".into(), uploaded.e_tag.map_or(Value::Null, Value::from));
            result.insert("VersionId".into(), uploaded.version.map_or(Value::Null, Value::from));
            Ok::<_, String>(lyre_core::services::JobEnd::Result(Value::Object(result)))
        })
        .await?;
    started(format, id)
}

/// `format`: the wire format the results are written in, and its name.
fn export_format(params: &mut Params) -> Result<(Format, &'static str), ApiError> {
    match params.string(&["format"])?.as_deref() {
        None => Err(ApiError::bad_request("format missing")),
        Some("json") => Ok((Format::Json, "json")),
        Some("csv") => Ok((Format::Csv, "csv")),
        Some(_) => Err(ApiError::bad_request("format invalid. must be one of the following values: json, csv")),
    }
}

/// `search_operation`: its operation's name and the search's parameters.
fn search_body(params: &mut Params) -> Result<(String, Object), ApiError> {
    let Some(Value::Object(mut body)) = params.value(&["search_operation"]) else {
        return Err(ApiError::bad_request("search_operation missing: it must be a search operation's body"));
    };
    let operation = match body.shift_remove("operation") {
        Some(Value::String(operation)) if search::SEARCHES.contains(&operation.as_str()) => operation,
        Some(Value::String(_)) => {
            return Err(ApiError::bad_request(format!(
                "searchOperation.operation must be one of the following values: {}",
                search::SEARCHES.join(", ")
            )));
        }
        _ => return Err(ApiError::bad_request("search_operation.operation missing")),
    };
    Ok((operation, body))
}

/// Plans the search and starts it: its results, encoded in `wire`, as a stream.
/// A CSV export of every attribute lists the table's attributes, so the header
/// has each column even when the first record lacks some (as Harper's does).
async fn run_search(
    state: &Arc<AppState>,
    ctx: &Context,
    (operation, mut body): (String, Object),
    wire: Format,
) -> Result<impl Stream<Item = Result<bytes::Bytes, String>> + Send + 'static, ApiError> {
    let every_attribute = match body.get("get_attributes") {
        None => true,
        Some(Value::Array(names)) => names.iter().any(|name| name.as_str() == Some("*")),
        Some(_) => false,
    };
    if wire == Format::Csv && every_attribute {
        let database = ["database", "schema"].iter().find_map(|k| body.get(*k)?.as_str()).unwrap_or("data");
        if let Some(table) = body.get("table").and_then(Value::as_str)
            && let Ok(table) = state.engine.database(database).and_then(|db| db.table(table))
        {
            let names = table.schema().attributes.iter().map(|a| Value::from(a.name.as_str())).collect();
            body.insert("get_attributes".into(), Value::Array(names));
        }
    }
    let response = search::run(&state.engine, ctx, &operation, Params::from_object(body), wire).await?;
    Ok(response.into_body().into_data_stream().map(|chunk| chunk.map_err(|err| err.to_string())))
}

/// Writes `results` to `target`, whole or not at all (`files::write_atomically`).
async fn write_file<S>(results: S, target: PathBuf) -> Result<(), String>
where
    S: Stream<Item = Result<bytes::Bytes, String>>,
{
    let (mut reader, pump) = crate::bulk::chunks::pipe(results);
    let write = tokio::task::spawn_blocking(move || {
        crate::files::write_atomically(&target, None, |file| std::io::copy(&mut reader, file).map(drop))
            .map_err(|err| format!("writing '{}' failed: {err}", target.display()))
    });
    let (written, ()) = tokio::join!(write, pump);
    written.map_err(|err| format!("the export stopped: {err}"))?
}

/// Uploads `results` to `object`; an upload that fails part-way is abandoned.
async fn upload<S>(results: S, object: &s3::Object) -> Result<s3::Uploaded, String>
where
    S: Stream<Item = Result<bytes::Bytes, String>>,
{
    let mut upload = object.create().await?;
    let mut results = std::pin::pin!(results);
    while let Some(chunk) = results.next().await {
        let written = match chunk {
            Ok(bytes) => upload.write(bytes).await,
            Err(err) => Err(format!("the search failed part-way: {err}")),
        };
        if let Err(err) = written {
            upload.abort().await;
            return Err(err);
        }
    }
    upload.finish().await
}
