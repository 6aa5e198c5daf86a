//! Blocking work (file-system steps, long storage scans, password hashing) run on
//! the blocking pool, off the async workers, from any layer.

use crate::error::{Error, Result};

/// Runs `work` on the blocking pool and answers its result; a panic there is
/// `Error::Stopped`.
pub(crate) async fn blocking<T: Send + 'static>(work: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(work).await.map_err(|e| Error::Stopped(e.to_string()))?
}
