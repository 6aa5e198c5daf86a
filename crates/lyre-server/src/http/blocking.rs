//! The one way handlers run blocking work (storage walks, large decodes, file work)
//! on the blocking pool, with a panic there answered as a 500.

use lyre_core::Code;

use crate::http::error::ApiError;

/// Runs `work` (a storage walk, a large decode, file work) on the blocking pool, off
/// the async workers, and answers its result; if it panics, 500 saying `what`
/// stopped.
pub(crate) async fn blocking<T, E>(
    what: &str,
    work: impl FnOnce() -> Result<T, E> + Send + 'static,
) -> Result<T, ApiError>
where
    T: Send + 'static,
    E: Into<ApiError> + Send + 'static,
{
    match tokio::task::spawn_blocking(work).await {
        Ok(result) => result.map_err(Into::into),
        Err(err) => Err(ApiError::new(Code::Internal, format!("{what} stopped unexpectedly: {err}"))),
    }
}
