//! A CSV document fetched over HTTP or HTTPS for `csv_url_load`, read as it arrives.
//!
//! [`open`] sends the request and checks the answer (status, content type); the
//! returned [`Download`] pumps the body into a [`Chunks`] reader that the CSV parser
//! reads on its blocking thread. At most [`CHUNKS_IN_FLIGHT`] chunks wait between
//! the two, so a large document never sits whole in memory; the pump runs inside
//! the job that loads it (no task of its own), and stops when the reader goes away.

use std::io::Read;
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt as _;

/// Chunks of the body held between the network and the parser.
const CHUNKS_IN_FLIGHT: usize = 8;
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

/// The reading end: the body's bytes, in order, for the parser's blocking thread.
pub struct Chunks {
    receiver: tokio::sync::mpsc::Receiver<std::io::Result<Bytes>>,
    current: Bytes,
}

/// Requests `url`; fails with Harper's wording when it cannot be reached, answers
/// anything but a success, or answers a content type that is not CSV.
pub async fn open(url: &reqwest::Url) -> Result<Download, String> {
    let failed = |reason: String| format!("CSV Load failed from URL: {url}, {reason}");
    let client = reqwest::Client::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .read_timeout(READ_TIMEOUT)
        .redirect(reqwest::redirect::Policy::limited(5))
        .user_agent(concat!("lyre/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|err| failed(err.to_string()))?;
    let response = client.get(url.clone()).send().await.map_err(|err| failed(describe(&err)))?;
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
        let (sender, receiver) = tokio::sync::mpsc::channel(CHUNKS_IN_FLIGHT);
        let pump = async move {
            let mut body = self.response.bytes_stream();
            while let Some(chunk) = body.next().await {
                let chunk = chunk.map_err(|err| std::io::Error::other(describe(&err)));
                let failed = chunk.is_err();
                if sender.send(chunk).await.is_err() || failed {
                    return; // the reader is gone, or told of the failure
                }
            }
        };
        (Chunks { receiver, current: Bytes::new() }, pump)
    }
}

impl Read for Chunks {
    /// Blocks until bytes arrive: call it from a blocking thread only.
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.current.is_empty() {
            match self.receiver.blocking_recv() {
                Some(chunk) => self.current = chunk?,
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.current.len());
        buf[..n].copy_from_slice(&self.current.split_to(n));
        Ok(n)
    }
}

/// A transfer error with its cause (reqwest's own text stops at "error sending
/// request").
fn describe(err: &reqwest::Error) -> String {
    let mut text = if err.is_timeout() { "timed out".to_string() } else { err.to_string() };
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        text.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    text
}
