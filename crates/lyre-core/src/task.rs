//! Blocking work (file-system steps, long storage scans, password hashing) run on
//! the blocking pool, off the async workers, from any layer; and the scheduling
//! policy of threads that work for request threads (the writer, JavaScript workers).

use crate::error::{Error, Result};

/// Runs `work` on the blocking pool and answers its result; a panic there is
/// `Error::Stopped`.
pub(crate) async fn blocking<T: Send + 'static>(work: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(work).await.map_err(|e| Error::Stopped(e.to_string()))?
}

/// Makes the calling thread a batch thread (`SCHED_BATCH`, Linux): waking it never
/// preempts the request threads, which go on queueing its work, so it takes its
/// queue in larger batches (`what` names it in the log when the change is refused).
/// Used by the database writers and the JavaScript workers.
pub use lyre_store::yield_to_request_threads;
