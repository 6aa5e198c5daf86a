//! Streaming search results to the socket without holding them whole in memory.
//!
//! A search runs on a blocking thread (it holds an LMDB snapshot and walks it),
//! encoding records into chunks sent through a small bounded channel, so a slow
//! client slows the walk instead of growing a buffer. A result that fits in the first
//! chunk is answered with a `Content-Length`; a planning error (unknown attribute,
//! ...) is answered with its status because nothing has been sent yet. A search
//! bounded to one record is answered where it stands ([`answer_bounded`]).

use std::ops::ControlFlow;

use axum::body::Body;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::StreamExt;
use lyre_core::query::Search;
use lyre_core::{Code, Value};
use tokio::sync::{mpsc, oneshot};

use crate::http::error::ApiError;
use crate::http::format::{CsvWriter, Format};

/// Size at which a chunk is handed to the socket.
const CHUNK: usize = 64 * 1024;
/// Chunks that may wait for the socket before the search pauses.
const CHUNKS_IN_FLIGHT: usize = 4;
/// How often a search paused by a slow client checks whether its database is going
/// away.
const GOING_AWAY_CHECK: std::time::Duration = std::time::Duration::from_millis(50);

enum Start {
    Complete(Vec<u8>),
    Streaming(Vec<u8>),
    Failed(lyre_core::Error),
}

/// How a collection of MessagePack values is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// One array (the Operations API); MessagePack answers are then buffered, since an
    /// array needs its length first.
    Array,
    /// MessagePack values one after another (REST, as Harper streams them).
    Sequence,
}

/// Plans (via `plan`) and runs a search, answering with its results as an array in
/// `format`.
pub async fn stream_search<F>(format: Format, framing: Framing, plan: F) -> Result<Response, ApiError>
where
    F: FnOnce() -> lyre_core::Result<Search> + Send + 'static,
{
    let (start_tx, start_rx) = oneshot::channel();
    let (chunk_tx, mut chunk_rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(CHUNKS_IN_FLIGHT);
    tokio::task::spawn_blocking(move || produce(format, framing, plan, start_tx, chunk_tx));
    let content_type = [(header::CONTENT_TYPE, format.content_type())];
    match start_rx.await {
        Ok(Start::Complete(bytes)) => Ok((content_type, bytes).into_response()),
        Ok(Start::Streaming(first)) => {
            let rest = futures_util::stream::poll_fn(move |cx| chunk_rx.poll_recv(cx));
            let body = futures_util::stream::once(async move { Ok(Bytes::from(first)) }).chain(rest);
            Ok((content_type, Body::from_stream(body)).into_response())
        }
        Ok(Start::Failed(err)) => Err(err.into()),
        Err(_) => Err(ApiError::new(Code::Internal, "the search stopped unexpectedly")),
    }
}

/// Runs a bounded search (one [`Table::answers_one_record`](lyre_core::Table::answers_one_record)
/// accepts) where the request stands and answers it as [`stream_search`] would: the same
/// bytes, with their length. Handing so small a search to a blocking thread cost
/// more than the search itself.
pub fn answer_bounded(
    format: Format,
    framing: Framing,
    search: lyre_core::Result<Search>,
) -> Result<Response, ApiError> {
    let search = search?;
    let mut writer = ArrayWriter::new(format, framing);
    search.run(&mut |record| {
        writer.push(record);
        ControlFlow::Continue(())
    })?;
    Ok(([(header::CONTENT_TYPE, format.content_type())], writer.finish()).into_response())
}

fn produce<F>(
    format: Format,
    framing: Framing,
    plan: F,
    start_tx: oneshot::Sender<Start>,
    chunk_tx: mpsc::Sender<Result<Bytes, std::io::Error>>,
) where
    F: FnOnce() -> lyre_core::Result<Search>,
{
    let search = match plan() {
        Ok(search) => search,
        Err(err) => {
            let _ = start_tx.send(Start::Failed(err));
            return;
        }
    };
    let mut writer = ArrayWriter::new(format, framing);
    let mut start = Some(start_tx);
    let db = search.db();
    let send = |chunk: Vec<u8>, start: &mut Option<oneshot::Sender<Start>>| -> bool {
        match start.take() {
            Some(tx) => tx.send(Start::Streaming(chunk)).is_ok(),
            None => send_chunk(&chunk_tx, Bytes::from(chunk), &|| db.is_closing()),
        }
    };
    let result = search.run(&mut |record| {
        writer.push(record);
        if writer.ready() >= CHUNK && !send(writer.take(), &mut start) {
            // The client went away.
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    });
    match (result, start.take()) {
        (Ok(()), Some(tx)) => {
            let _ = tx.send(Start::Complete(writer.finish()));
        }
        (Ok(()), None) => {
            let _ = chunk_tx.blocking_send(Ok(Bytes::from(writer.finish())));
        }
        (Err(err), Some(tx)) => {
            let _ = tx.send(Start::Failed(err));
        }
        (Err(err), None) => {
            // Headers are sent; all we can do is cut the body short.
            tracing::error!(error = %err, "a streamed search failed midway");
            let _ = chunk_tx.blocking_send(Err(std::io::Error::other(err.to_string())));
        }
    }
}

/// Hands a chunk to the socket, waiting while the client is slow, but giving up
/// (returning false) when the client is gone or the database is going away, so a
/// stalled reader never keeps a database from being dropped.
fn send_chunk(tx: &mpsc::Sender<Result<Bytes, std::io::Error>>, chunk: Bytes, going_away: &dyn Fn() -> bool) -> bool {
    let runtime = tokio::runtime::Handle::current();
    loop {
        match runtime.block_on(tokio::time::timeout(GOING_AWAY_CHECK, tx.reserve())) {
            Ok(Ok(permit)) => {
                permit.send(Ok(chunk));
                return true;
            }
            Ok(Err(_closed)) => return false,
            Err(_slow_client) if going_away() => {
                let _ = tx.try_send(Err(std::io::Error::other("the database is being dropped or restored")));
                return false;
            }
            Err(_slow_client) => {}
        }
    }
}

/// Encodes an array one record at a time: JSON (and plain text) `[a,b]`, CBOR as an
/// indefinite-length array, YAML as one sequence item per record, CSV as rows,
/// MessagePack (whose arrays need their length first) buffered until the end.
struct ArrayWriter {
    format: Format,
    framing: Framing,
    buf: Vec<u8>,
    count: u32,
    csv: CsvWriter,
}

impl ArrayWriter {
    fn new(format: Format, framing: Framing) -> Self {
        let mut buf = Vec::with_capacity(CHUNK + 4096);
        match format {
            // A collection as plain text is its JSON.
            Format::Json | Format::Text => buf.push(b'['),
            Format::Cbor => buf.push(0x9f),
            Format::MessagePack | Format::Csv | Format::Yaml => {}
        }
        Self { format, framing, buf, count: 0, csv: CsvWriter::default() }
    }

    fn push(&mut self, record: Value) {
        let written = match self.format {
            Format::Json | Format::Text => {
                if self.count > 0 {
                    self.buf.push(b',');
                }
                serde_json::to_writer(&mut self.buf, &record).map_err(|e| e.to_string())
            }
            Format::Cbor => ciborium::into_writer(&record, &mut self.buf).map_err(|e| e.to_string()),
            Format::MessagePack => rmp_serde::encode::write(&mut self.buf, &record).map_err(|e| e.to_string()),
            Format::Csv => serde_json::to_value(&record)
                .map(|row| {
                    self.csv.row(&row);
                    self.buf.extend_from_slice(&self.csv.take());
                })
                .map_err(|e| e.to_string()),
            // Each record as a one-element YAML sequence: together, the whole sequence.
            Format::Yaml => serde_saphyr::to_io_writer(&mut self.buf, &[&record]).map_err(|e| e.to_string()),
        };
        match written {
            Ok(()) => self.count += 1,
            // Writing into a Vec only fails on values the format cannot hold.
            Err(err) => {
                tracing::error!(error = %err, "a record could not be encoded and was left out")
            }
        }
    }

    /// Bytes that may be sent now.
    fn ready(&self) -> usize {
        if self.format == Format::MessagePack && self.framing == Framing::Array { 0 } else { self.buf.len() }
    }

    fn take(&mut self) -> Vec<u8> {
        std::mem::replace(&mut self.buf, Vec::with_capacity(CHUNK + 4096))
    }

    fn finish(mut self) -> Vec<u8> {
        match self.format {
            Format::Json | Format::Text => self.buf.push(b']'),
            Format::Cbor => self.buf.push(0xff),
            Format::Csv => {}
            Format::Yaml if self.count == 0 => self.buf.extend_from_slice(b"[]\n"),
            Format::Yaml => {}
            Format::MessagePack if self.framing == Framing::Sequence => {}
            Format::MessagePack => {
                let mut out = Vec::with_capacity(self.buf.len() + 5);
                // Writing a length prefix into a Vec cannot fail.
                let _ = rmp::encode::write_array_len(&mut out, self.count);
                out.extend_from_slice(&self.buf);
                return out;
            }
        }
        self.buf
    }
}
