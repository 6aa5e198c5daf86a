//! csv_data_load, csv_file_load, csv_url_load, import_from_s3: CSV (or, from S3, a
//! JSON array) loaded into a table as a job (`crate::bulk`).

use std::sync::Arc;

use axum::response::Response;
use lyre_core::access::Action;
use lyre_core::{Context, Object, Value, WriteMode};

use crate::app::AppState;
use crate::bulk::{Document, download, load, s3};
use crate::http::error::ApiError;
use crate::http::format::Format;
use crate::http::ops::Params;

/// Where a load's CSV comes from.
enum Source {
    /// The request's `data`.
    Data(String),
    /// A file on the server (`file_path`).
    File(std::path::PathBuf),
    /// A document on an HTTP or HTTPS server (`csv_url`), asked for with these
    /// headers (`passthrough_headers`).
    Url(reqwest::Url, reqwest::header::HeaderMap),
    /// An S3 object, CSV or JSON by its key's extension.
    S3(s3::Object, Document),
}

/// `csv_data_load`: the CSV in the request's `data`.
pub async fn csv_data_load(
    state: &Arc<AppState>,
    ctx: &Context,
    mut params: Params,
    format: Format,
) -> Result<Response, ApiError> {
    let data = params.required_string(&["data"])?;
    start(state, ctx, "csv_data_load", params, Source::Data(data), format).await
}

/// `csv_file_load`: the CSV in a file on the server (`file_path`).
pub async fn csv_file_load(
    state: &Arc<AppState>,
    ctx: &Context,
    mut params: Params,
    format: Format,
) -> Result<Response, ApiError> {
    let path = std::path::PathBuf::from(params.required_string(&["file_path"])?);
    // Told at once, as Harper does, rather than through a failed job.
    match std::fs::metadata(&path) {
        Ok(meta) if meta.is_file() => {}
        Ok(_) => return Err(ApiError::bad_request(format!("'{}' is not a file", path.display()))),
        Err(err) => return Err(ApiError::bad_request(format!("cannot read '{}': {err}", path.display()))),
    }
    start(state, ctx, "csv_file_load", params, Source::File(path), format).await
}

/// `csv_url_load`: the CSV at `csv_url` (HTTP or HTTPS), read as it arrives.
pub async fn csv_url_load(
    state: &Arc<AppState>,
    ctx: &Context,
    mut params: Params,
    format: Format,
) -> Result<Response, ApiError> {
    let text = params.required_string(&["csv_url"])?;
    let url = reqwest::Url::parse(&text)
        .ok()
        .filter(|url| matches!(url.scheme(), "http" | "https"))
        .ok_or_else(|| ApiError::bad_request(format!("'csv_url' must be a valid http or https url, not '{text}'")))?;
    let headers = passthrough_headers(params.value(&["passthrough_headers"]))?;
    start(state, ctx, "csv_url_load", params, Source::Url(url, headers), format).await
}

/// `passthrough_headers`: an object of header names and values sent with the
/// request for the document (never kept in the job's record: they may hold
/// credentials).
fn passthrough_headers(value: Option<Value>) -> Result<reqwest::header::HeaderMap, ApiError> {
    let mut headers = reqwest::header::HeaderMap::new();
    let fields = match value {
        None | Some(Value::Null) => return Ok(headers),
        Some(Value::Object(fields)) => fields,
        Some(_) => {
            return Err(ApiError::bad_request("'passthrough_headers' must be an object of header names and values"));
        }
    };
    for (name, value) in fields {
        let text = match value {
            Value::String(text) => text,
            Value::Int(_) | Value::Float(_) | Value::Bool(_) => value.to_string(),
            _ => return Err(ApiError::bad_request(format!("passthrough header '{name}' must be a string"))),
        };
        let header = reqwest::header::HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| ApiError::bad_request(format!("'{name}' is not a valid header name")))?;
        let value = reqwest::header::HeaderValue::from_str(&text).map_err(|_| {
            ApiError::bad_request(format!("the value of passthrough header '{name}' is not a valid header value"))
        })?;
        headers.insert(header, value);
    }
    Ok(headers)
}

/// `import_from_s3`: the object `s3.key` (`.csv`, or `.json` holding an array of
/// records) read from S3 as it arrives.
pub async fn import_from_s3(
    state: &Arc<AppState>,
    ctx: &Context,
    mut params: Params,
    format: Format,
) -> Result<Response, ApiError> {
    let object = s3::Object::from_param(params.value(&["s3"])).map_err(ApiError::bad_request)?;
    let document = if object.key.ends_with(".csv") {
        Document::Csv
    } else if object.key.ends_with(".json") {
        Document::Json
    } else {
        return Err(ApiError::bad_request(
            "S3 key must include one of the following valid file extensions - '.csv', '.json'",
        ));
    };
    start(state, ctx, "import_from_s3", params, Source::S3(object, document), format).await
}

/// Checks the target and action, records the job and starts it; answers Harper's
/// `{message: "Starting job with id …", job_id}`.
async fn start(
    state: &Arc<AppState>,
    ctx: &Context,
    operation: &str,
    mut params: Params,
    source: Source,
    format: Format,
) -> Result<Response, ApiError> {
    let database = params.database()?;
    let table_name = params.required_string(&["table"])?;
    let db = state.engine.database(&database)?;
    let table = db.table(&table_name)?;
    let (mode, actions): (_, &[Action]) = match params.string(&["action"])?.as_deref() {
        None | Some("insert") => (WriteMode::Insert, &[Action::Insert]),
        Some("update") => (WriteMode::Update, &[Action::Update]),
        Some("upsert") => (WriteMode::Upsert, &[Action::Insert, Action::Update]),
        Some(other) => {
            return Err(ApiError::bad_request(format!("'action' must be insert, update or upsert, not '{other}'")));
        }
    };
    // Refused before a job exists, as Harper does (the writes check again).
    table.access(ctx, actions)?;
    let mut body = Object::default();
    body.insert("operation".into(), operation.into());
    body.insert("database".into(), database.clone().into());
    body.insert("table".into(), table_name.clone().into());
    body.insert("action".into(), mode_name(mode).into());
    match &source {
        Source::Data(_) => {}
        Source::File(path) => _ = body.insert("file_path".into(), path.display().to_string().into()),
        Source::Url(url, _) => {
            // A password in the URL is not kept in the job's record.
            let mut shown = url.clone();
            let _ = shown.set_password(None);
            body.insert("csv_url".into(), shown.as_str().into());
        }
        Source::S3(object, _) => _ = body.insert("s3".into(), format!("{object:?}").into()),
    }
    // The job finds its table again once its turn comes: a waiting job holds
    // nothing a drop would wait for, and sees the table as it is then.
    drop((db, table));
    let (engine, job_ctx) = (state.engine.clone(), ctx.clone());
    let (loads, holder) = (state.loads.clone(), format!("a {operation} job for {}", ctx.username()));
    let id = state
        .services
        .jobs()
        .start_reporting(ctx.username(), operation, Value::Object(body), move |mut progress| async move {
            // A few loads run at once (each holds a blocking thread); the rest wait.
            if loads.available_permits() == 0 {
                progress.report("waiting for other loads to finish").await;
            }
            let Ok(_turn) = loads.acquire_owned().await else { return Err("the server is stopping".to_string()) };
            let db = engine.database(&database).map_err(|err| err.to_string())?;
            let table = db.table(&table_name).map_err(|err| err.to_string())?;
            // Names the load to a drop or restore that has to wait for it.
            let _lease = db.lease(holder);
            let loaded = match source {
                Source::Data(data) => {
                    let data = std::io::Cursor::new(data.into_bytes());
                    load(&db, &table, &job_ctx, mode, (data, Document::Csv), &mut progress).await
                }
                Source::File(path) => match std::fs::File::open(&path) {
                    Ok(file) => load(&db, &table, &job_ctx, mode, (file, Document::Csv), &mut progress).await,
                    Err(err) => return Err(format!("cannot read '{}': {err}", path.display())),
                },
                Source::Url(url, headers) => {
                    let (chunks, pump) = download::open(&url, headers).await?.split();
                    // The pump ends when the body does, or when the parser stops reading.
                    let loading = load(&db, &table, &job_ctx, mode, (chunks, Document::Csv), &mut progress);
                    let (loaded, ()) = tokio::join!(loading, pump);
                    loaded
                }
                Source::S3(object, document) => {
                    let (chunks, pump) = object.open().await?;
                    let loading = load(&db, &table, &job_ctx, mode, (chunks, document), &mut progress);
                    let (loaded, ()) = tokio::join!(loading, pump);
                    loaded
                }
            };
            loaded.map(|report| report.message()).map_err(|err| err.to_string())
        })
        .await?;
    super::jobs::started(format, id)
}

fn mode_name(mode: WriteMode) -> &'static str {
    match mode {
        WriteMode::Insert => "insert",
        WriteMode::Update => "update",
        _ => "upsert",
    }
}
