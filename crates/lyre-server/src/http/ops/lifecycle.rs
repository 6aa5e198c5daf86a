//! get_backup, restore_backup, cleanup_orphan_blobs, and Lyre's
//! get_lifecycle_status.

use std::io::Read;
use std::os::fd::OwnedFd;
use std::sync::Arc;

use axum::body::Body;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use lyre_core::db::backup::BackupFormat;
use lyre_core::{Code, Context, Object, Value};
use tokio::sync::{mpsc, oneshot};

use crate::app::AppState;
use crate::http::error::ApiError;
use crate::http::format::Format;
use crate::http::ops::{Params, message, reply};

/// Bytes read from the copy per chunk sent to the socket.
const CHUNK: usize = 256 * 1024;

/// `get_backup`: streams a compacted, consistent copy of the database while writes
/// continue: its LMDB data file (`<db>.mdb`), or, once it has blobs, a tar of the
/// data file and the blob files (`<db>.tar`). The copy holds a lease on the
/// database, so a drop waits for it (or answers 409 naming it).
pub async fn get_backup(state: &Arc<AppState>, ctx: &Context, mut params: Params) -> Result<Response, ApiError> {
    let name = params.database()?;
    lyre_core::access::require_super_user(ctx)?;
    let db = state.engine.database(&name)?;
    let probed = db.clone();
    let backup_format = crate::http::blocking::blocking("a backup", move || probed.backup_format()).await?;
    let lease = db.lease(format!("a backup of '{name}' for {}", ctx.username()));
    let (reader, writer) =
        std::io::pipe().map_err(|e| ApiError::new(Code::Internal, format!("starting the backup failed: {e}")))?;
    let (done_tx, done_rx) = oneshot::channel();
    let copy_ctx = ctx.clone();
    tokio::task::spawn_blocking(move || {
        let mut file = std::fs::File::from(OwnedFd::from(writer));
        let copied = lease.db().backup_to(&copy_ctx, backup_format, &mut file);
        drop(file); // end of stream for the reader
        drop(lease);
        let _ = done_tx.send(copied);
    });
    let (chunk_tx, mut chunk_rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(4);
    tokio::task::spawn_blocking(move || forward(reader, chunk_tx, done_rx));
    let body = Body::from_stream(futures_util::stream::poll_fn(move |cx| chunk_rx.poll_recv(cx)));
    let disposition = format!("attachment; filename=\"{name}.{}\"", backup_format.extension());
    let content_type = match backup_format {
        BackupFormat::Tar => "application/x-tar",
        BackupFormat::Mdb => "application/octet-stream",
    };
    Ok(([(header::CONTENT_TYPE, content_type.to_string()), (header::CONTENT_DISPOSITION, disposition)], body)
        .into_response())
}

/// Reads the copy from the pipe into the response; a copy that failed midway cuts
/// the response with an error instead of ending it as if complete.
fn forward(
    mut reader: std::io::PipeReader,
    chunks: mpsc::Sender<Result<Bytes, std::io::Error>>,
    done: oneshot::Receiver<lyre_core::Result<()>>,
) {
    loop {
        let mut buf = vec![0u8; CHUNK];
        match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                buf.truncate(n);
                if chunks.blocking_send(Ok(Bytes::from(buf))).is_err() {
                    return; // the client left; dropping the reader stops the copy
                }
            }
            Err(err) => {
                let _ = chunks.blocking_send(Err(err));
                return;
            }
        }
    }
    match done.blocking_recv() {
        Ok(Ok(())) => {}
        Ok(Err(err)) => {
            tracing::error!(error = %err, "a backup failed midway");
            let _ = chunks.blocking_send(Err(std::io::Error::other(err.to_string())));
        }
        Err(_) => {
            let _ = chunks.blocking_send(Err(std::io::Error::other("the backup stopped unexpectedly")));
        }
    }
}

/// `restore_backup`: replaces a database with a backup file on the server
/// (`backup_file`, from `get_backup` or `lyre backup`), through the crash-safe
/// lifecycle protocol; 409 naming the holders when the database stays in use.
pub async fn restore_backup(
    state: &Arc<AppState>,
    ctx: &Context,
    mut params: Params,
    format: Format,
) -> Result<Response, ApiError> {
    let name = params.database()?;
    let file = params.required_string(&["backup_file"])?;
    let (engine, ctx, database) = (state.engine.clone(), ctx.clone(), name.clone());
    let backup = std::path::PathBuf::from(&file);
    detached(async move { engine.restore_database(&ctx, &database, &backup).await }).await?;
    message(format, format!("database '{name}' restored from {file}"))
}

/// `cleanup_orphan_blobs`: starts a job removing the database's blob files that no
/// record references (a crash between writing a blob and committing its record
/// leaves them). Answers at once, with Harper's message and the job's id; the job's
/// result says how many files went.
pub async fn cleanup_orphan_blobs(
    state: &Arc<AppState>,
    ctx: &Context,
    mut params: Params,
    format: Format,
) -> Result<Response, ApiError> {
    let Some(name) = params.string(&["database", "schema"])? else {
        return Err(ApiError::bad_request("Must provide \"database\" name for search for orphaned blobs"));
    };
    let db = state.engine.database(&name)?;
    lyre_core::access::require_super_user(ctx)?;
    let mut body = Object::default();
    body.insert("operation".into(), "cleanup_orphan_blobs".into());
    body.insert("database".into(), name.into());
    let job_ctx = ctx.clone();
    let id = state
        .services
        .jobs()
        .start(ctx.username(), "cleanup_orphan_blobs", Value::Object(body), async move {
            match db.cleanup_orphan_blobs(&job_ctx).await {
                Ok(removed) => Ok(format!("Orphaned blobs cleanup finished: removed {removed} orphaned blob files")),
                Err(err) => Err(err.to_string()),
            }
        })
        .await?;
    let mut out = Object::default();
    out.insert("message".into(), "Orphaned blobs cleanup started, check logs for progress".into());
    out.insert("job_id".into(), id.into());
    reply(format, &Value::Object(out))
}

/// Runs a drop or restore as a task of its own. A request handler is dropped when
/// its client disconnects; cancelling a lifecycle operation between its marker and
/// its end would leave the database refusing every request until a restart finished
/// the operation the client never saw succeed.
pub(super) async fn detached<T: Send + 'static>(
    operation: impl Future<Output = lyre_core::Result<T>> + Send + 'static,
) -> Result<T, ApiError> {
    match tokio::spawn(operation).await {
        Ok(result) => result.map_err(ApiError::from),
        Err(err) => Err(ApiError::new(Code::Internal, format!("the operation stopped unexpectedly: {err}"))),
    }
}

/// `get_lifecycle_status` (Lyre's own): per open database its storage handles and
/// named leases (what a drop waits for), and the databases start-up refused to load.
pub async fn get_lifecycle_status(state: &Arc<AppState>, ctx: &Context, format: Format) -> Result<Response, ApiError> {
    lyre_core::access::require_super_user(ctx)?;
    let mut databases = Object::default();
    for (name, handles, leases) in state.engine.handles() {
        let mut entry = Object::default();
        entry.insert("open_handles".into(), Value::Int(handles as i64));
        entry.insert("leases".into(), Value::Array(leases.into_iter().map(Value::String).collect()));
        databases.insert(name, Value::Object(entry));
    }
    let blocked =
        state.engine.blocked_databases().into_iter().map(|(name, reason)| (name, Value::String(reason))).collect();
    let mut out = Object::default();
    out.insert("databases".into(), Value::Object(databases));
    out.insert("blocked".into(), Value::Object(blocked));
    reply(format, &Value::Object(out))
}
