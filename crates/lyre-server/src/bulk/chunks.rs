//! A byte stream arriving asynchronously (an HTTP body, an S3 object, a search's
//! encoded results), read as a blocking [`Read`] by a parser or writer on a
//! blocking thread.
//!
//! [`pipe`] returns the reader and the pump that feeds it; the pump runs inside the
//! job that reads (no task of its own), holds at most [`CHUNKS_IN_FLIGHT`] chunks
//! ahead of the reader, and stops when the reader goes away. The pump marks the
//! stream's end explicitly, so a pump that is dropped part-way (its job cancelled)
//! is a read error for the reader, never a short document taken for a whole one.

use std::io::Read;

use bytes::Bytes;
use futures_util::{Stream, StreamExt as _};

/// Chunks of the stream held between the network and the parser.
const CHUNKS_IN_FLIGHT: usize = 8;

/// What the pump sends.
enum Piece {
    /// Bytes of the stream.
    Bytes(Bytes),
    /// The stream failed with this reason.
    Failed(String),
    /// The stream ended, whole.
    End,
}

/// The reading end: the stream's bytes, in order, for a blocking thread.
pub struct Chunks {
    receiver: tokio::sync::mpsc::Receiver<Piece>,
    current: Bytes,
    ended: bool,
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
            let (piece, failed) = match chunk {
                Ok(bytes) => (Piece::Bytes(bytes), false),
                Err(reason) => (Piece::Failed(reason), true),
            };
            if sender.send(piece).await.is_err() || failed {
                return; // the reader is gone, or told of the failure
            }
        }
        let _ = sender.send(Piece::End).await;
    };
    (Chunks { receiver, current: Bytes::new(), ended: false }, pump)
}

impl Read for Chunks {
    /// Blocks until bytes arrive: call it from a blocking thread only.
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.current.is_empty() {
            if self.ended {
                return Ok(0);
            }
            match self.receiver.blocking_recv() {
                Some(Piece::Bytes(bytes)) => self.current = bytes,
                Some(Piece::Failed(reason)) => return Err(std::io::Error::other(reason)),
                Some(Piece::End) => self.ended = true,
                None => return Err(std::io::Error::other("the stream was cut short")),
            }
        }
        let n = buf.len().min(self.current.len());
        buf[..n].copy_from_slice(&self.current.split_to(n));
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_whole_stream_reads_to_its_end_and_a_dropped_pump_is_an_error() {
        let parts = vec![Ok(Bytes::from_static(b"ab")), Ok(Bytes::from_static(b"cd"))];
        let (mut reader, pump) = pipe(futures_util::stream::iter(parts));
        let read = tokio::task::spawn_blocking(move || {
            let mut out = String::new();
            reader.read_to_string(&mut out).map(|_| out)
        });
        pump.await;
        assert_eq!(read.await.unwrap().unwrap(), "abcd");

        // A pump dropped before the end: the reader is told, not given a short read.
        let endless =
            futures_util::stream::iter(vec![Ok(Bytes::from_static(b"ab"))]).chain(futures_util::stream::pending());
        let (mut reader, pump) = pipe(endless);
        let read = tokio::task::spawn_blocking(move || {
            let mut out = String::new();
            reader.read_to_string(&mut out).map(|_| out)
        });
        let _ = tokio::time::timeout(std::time::Duration::from_millis(50), pump).await;
        let err = read.await.unwrap().unwrap_err();
        assert_eq!(err.to_string(), "the stream was cut short");
    }
}
