//! A CSV document fetched over HTTP or HTTPS for `csv_url_load`, read as it arrives.
//!
//! [`open`] sends the request and checks the answer (status, content type); the
//! returned [`Download`] pumps the body into a [`Chunks`] reader (`chunks.rs`) that
//! the CSV parser reads on its blocking thread, so a large document never sits
//! whole in memory.

use std::time::Duration;

use futures_util::StreamExt as _;

use super::chunks::{Chunks, pipe};
use crate::outbound::describe;
/// Longest wait for the connection (and TLS handshake) to the origin.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest wait for the next bytes of an answer once connected.
pub const READ_TIMEOUT: Duration = Duration::from_secs(30);
/// Content types a CSV document may come as (with any parameters, like `charset`).
const CSV_TYPES: [&str; 6] =
    ["text/csv", "text/plain", "application/csv", "application/octet-stream", "application/vnd.ms-excel", "text/x-csv"];

/// An answered request whose body is still to be read.
pub struct Download {
    response: reqwest::Response,
}

/// Requests `url` with `headers` added (`passthrough_headers`: a token the origin
/// wants, say); fails with Harper's wording when it cannot be reached, answers
/// anything but a success, or answers a content type that is not CSV.
pub async fn open(url: &reqwest::Url, headers: reqwest::header::HeaderMap) -> Result<Download, String> {
    let failed = |reason: String| format!("CSV Load failed from URL: {url}, {reason}");
    let client = crate::outbound::client(CONNECT_TIMEOUT)
        .read_timeout(READ_TIMEOUT)
        .build()
        .map_err(|err| failed(err.to_string()))?;
    let response = client.get(url.clone()).headers(headers).send().await.map_err(|err| failed(describe(&err)))?;
    let status = response.status();
    if !status.is_success() {
        let message = status.canonical_reason().unwrap_or("");
        return Err(failed(format!("status code: {}, message: {message}", status.as_u16())));
    }
    if let Some(content_type) = response.headers().get(reqwest::header::CONTENT_TYPE) {
        let text = content_type.to_str().unwrap_or("");
        let essence = text.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
        if !CSV_TYPES.contains(&essence.as_str()) {
            return Err(failed(format!("unsupported content type: {text}")));
        }
    }
    Ok(Download { response })
}

impl Download {
    /// The reader of the body, and the pump that must be driven (awaited beside the
    /// reader's consumer) for bytes to arrive.
    pub fn split(self) -> (Chunks, impl Future<Output = ()>) {
        pipe(self.response.bytes_stream().map(|chunk| chunk.map_err(|err| describe(&err))))
    }
}
