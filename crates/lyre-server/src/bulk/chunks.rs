//! A byte stream arriving asynchronously (an HTTP body, an S3 object), read as a
//! blocking [`Read`] by a parser on a blocking thread.
//!
//! [`pipe`] returns the reader and the pump that feeds it; the pump runs inside the
//! job that reads (no task of its own), holds at most [`CHUNKS_IN_FLIGHT`] chunks
//! ahead of the reader, and stops when the reader goes away.

use std::io::Read;

use bytes::Bytes;
use futures_util::{Stream, StreamExt as _};

/// Chunks of the stream held between the network and the parser.
const CHUNKS_IN_FLIGHT: usize = 8;

/// The reading end: the stream's bytes, in order, for a blocking thread.
pub struct Chunks {
    receiver: tokio::sync::mpsc::Receiver<std::io::Result<Bytes>>,
    current: Bytes,
}

/// The reader of `stream`, and the pump that must be driven (awaited beside the
/// reader's consumer) for bytes to arrive. A stream error reaches the reader as a
/// read error carrying its text.
pub fn pipe<S>(stream: S) -> (Chunks, impl Future<Output = ()>)
where
    S: Stream<Item = Result<Bytes, String>>,
{
    let (sender, receiver) = tokio::sync::mpsc::channel(CHUNKS_IN_FLIGHT);
    let pump = async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(std::io::Error::other);
            let failed = chunk.is_err();
            if sender.send(chunk).await.is_err() || failed {
                return; // the reader is gone, or told of the failure
            }
        }
    };
    (Chunks { receiver, current: Bytes::new() }, pump)
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
