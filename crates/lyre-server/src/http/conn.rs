//! Accepted connections: `TCP_NODELAY`, and request targets made acceptable to hyper.
//!
//! Every connection either port accepts (`serve.rs`) is wrapped in one. It turns
//! Nagle's algorithm off (a streamed response's last small write otherwise waited for
//! the client's delayed acknowledgement: 40 ms on a 3,000-record search), and
//! percent-encodes the raw characters [`framing`](super::framing) finds in request
//! targets, so `GET /T/?price<10` works from curl as it does with Harper.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use super::framing::Framing;

/// A client connection whose request targets are percent-encoded where `http::Uri`
/// would refuse a character; writes pass straight through.
pub struct Connection<S> {
    inner: S,
    framing: Framing,
    /// Rewritten bytes the caller's buffer had no room for, and how many are gone.
    pending: Vec<u8>,
    pending_read: usize,
    /// Positions found by the last scan (kept to reuse the allocation).
    escapes: Vec<usize>,
}

impl<S> Connection<S> {
    /// Wraps a freshly accepted connection.
    pub fn new(inner: S) -> Self {
        Connection { inner, framing: Framing::default(), pending: Vec::new(), pending_read: 0, escapes: Vec::new() }
    }
}

impl Connection<TcpStream> {
    /// Turns Nagle's algorithm off, so a response's last small write leaves at once.
    pub fn disable_nagle(&mut self) {
        if let Err(err) = self.inner.set_nodelay(true) {
            tracing::debug!(error = %err, "could not set TCP_NODELAY");
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Connection<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.pending_read < this.pending.len() {
            let take = buf.remaining().min(this.pending.len() - this.pending_read);
            buf.put_slice(&this.pending[this.pending_read..this.pending_read + take]);
            this.pending_read += take;
            if this.pending_read == this.pending.len() {
                this.pending = Vec::new(); // rare: not worth keeping for the connection's life
            }
            return Poll::Ready(Ok(()));
        }
        let start = buf.filled().len();
        ready!(Pin::new(&mut this.inner).poll_read(cx, buf))?;
        if this.framing.is_off() {
            return Poll::Ready(Ok(()));
        }
        this.escapes.clear();
        this.framing.scan(&buf.filled()[start..], &mut this.escapes);
        if this.escapes.is_empty() {
            return Poll::Ready(Ok(()));
        }
        let rewritten = percent_encode_at(&buf.filled()[start..], &this.escapes);
        buf.set_filled(start);
        let take = buf.remaining().min(rewritten.len());
        buf.put_slice(&rewritten[..take]);
        if take < rewritten.len() {
            this.pending = rewritten;
            this.pending_read = take;
        }
        Poll::Ready(Ok(()))
    }
}

/// `bytes` with the bytes at `positions` (ascending) written as `%XX`.
fn percent_encode_at(bytes: &[u8], positions: &[usize]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len() + 2 * positions.len());
    let mut from = 0;
    for &at in positions {
        out.extend_from_slice(&bytes[from..at]);
        out.extend_from_slice(percent_encoding::percent_encode_byte(bytes[at]).as_bytes());
        from = at + 1;
    }
    out.extend_from_slice(&bytes[from..]);
    out
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Connection<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    #[tokio::test]
    async fn accepted_connections_send_small_writes_at_once() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let _client = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
        let mut conn = Connection::new(listener.accept().await.unwrap().0);
        assert!(!conn.inner.nodelay().unwrap());
        conn.disable_nagle();
        assert!(conn.inner.nodelay().unwrap());
    }

    /// A body as a client frames it.
    #[derive(Debug, Clone)]
    enum TestBody {
        None,
        Length(Vec<u8>),
        Chunked(Vec<Vec<u8>>, bool),
    }

    fn test_request()
    -> impl proptest::strategy::Strategy<Value = (bool, String, String, Vec<(String, String)>, TestBody)> {
        use proptest::prelude::*;
        let body = prop_oneof![
            Just(TestBody::None),
            proptest::collection::vec(any::<u8>(), 0..80).prop_map(TestBody::Length),
            (proptest::collection::vec(proptest::collection::vec(any::<u8>(), 1..30), 0..4), any::<bool>())
                .prop_map(|(chunks, trailer)| TestBody::Chunked(chunks, trailer)),
        ];
        (
            any::<bool>(),
            prop_oneof![Just("GET"), Just("PUT"), Just("POST"), Just("DELETE"), Just("PATCH")].prop_map(String::from),
            "[a-z0-9/?=&<>\"`|%.()*-]{0,24}",
            proptest::collection::vec(("X-[A-Z][a-z]{0,8}", "[ -~]{0,40}"), 0..4),
            body,
        )
    }

    proptest::proptest! {
        /// Whatever requests arrive, however the reads split them: the bytes handed
        /// on are the client's, with exactly the refused characters of each request
        /// target percent-encoded and nothing else changed (headers and bodies, which
        /// may hold the same characters and even text that looks like a request).
        #[test]
        fn only_request_targets_change(
            requests in proptest::collection::vec(test_request(), 1..6),
            cuts in proptest::collection::vec(1usize..48, 1..40),
        ) {
            let (mut raw, mut expected) = (Vec::new(), Vec::new());
            for (blank_line, method, target, headers, body) in &requests {
                let mut head = String::new();
                if *blank_line {
                    head.push_str("\r\n");
                }
                // What the client would have sent had it encoded them itself.
                let fixed: String = target
                    .chars()
                    .map(|c| match c {
                        '<' => "%3C".to_string(),
                        '>' => "%3E".to_string(),
                        '"' => "%22".to_string(),
                        '`' => "%60".to_string(),
                        other => other.to_string(),
                    })
                    .collect();
                let mut tail = String::from(" HTTP/1.1\r\nHost: x\r\n");
                for (name, value) in headers {
                    tail.push_str(&format!("{name}: {value}\r\n"));
                }
                let mut body_bytes = Vec::new();
                match body {
                    TestBody::None => tail.push_str("\r\n"),
                    TestBody::Length(bytes) => {
                        tail.push_str(&format!("Content-Length: {}\r\n\r\n", bytes.len()));
                        body_bytes.extend_from_slice(bytes);
                    }
                    TestBody::Chunked(chunks, trailer) => {
                        tail.push_str("Transfer-Encoding: chunked\r\n\r\n");
                        for chunk in chunks {
                            body_bytes.extend_from_slice(format!("{:x};ext=<1>\r\n", chunk.len()).as_bytes());
                            body_bytes.extend_from_slice(chunk);
                            body_bytes.extend_from_slice(b"\r\n");
                        }
                        body_bytes.extend_from_slice(b"0\r\n");
                        if *trailer {
                            body_bytes.extend_from_slice(b"X-Trailer: GET /a<b HTTP/1.1\r\n");
                        }
                        body_bytes.extend_from_slice(b"\r\n");
                    }
                }
                for (out, target) in [(&mut raw, target.as_str()), (&mut expected, fixed.as_str())] {
                    out.extend_from_slice(format!("{head}{method} /{target}{tail}").as_bytes());
                    out.extend_from_slice(&body_bytes);
                }
            }
            let mut framing = Framing::default();
            let (mut out, mut at, mut escapes) = (Vec::new(), 0, Vec::new());
            for cut in cuts.iter().cycle() {
                if at == raw.len() {
                    break;
                }
                let end = (at + cut).min(raw.len());
                escapes.clear();
                framing.scan(&raw[at..end], &mut escapes);
                out.extend_from_slice(&percent_encode_at(&raw[at..end], &escapes));
                at = end;
            }
            proptest::prop_assert!(!framing.is_off(), "well-formed requests never switch it off");
            proptest::prop_assert_eq!(String::from_utf8_lossy(&out), String::from_utf8_lossy(&expected));
        }
    }

    #[test]
    fn percent_encoding_replaces_only_the_given_bytes() {
        assert_eq!(percent_encode_at(b"/a<b>\"c`", &[2, 4, 5, 7]), b"/a%3Cb%3E%22c%60");
        assert_eq!(percent_encode_at(b"<", &[0]), b"%3C");
    }

    /// Reads through a small caller buffer still yield every rewritten byte, in order.
    #[tokio::test]
    async fn rewritten_bytes_survive_small_reads() {
        let (client, server) = tokio::io::duplex(64);
        let request = b"GET /T/?a<1&b>2 HTTP/1.1\r\nHost: x\r\n\r\n";
        let writer = tokio::spawn(async move {
            let mut client = client;
            client.write_all(request).await.unwrap();
            client.shutdown().await.unwrap();
        });
        let mut conn = Connection::new(server);
        let (mut got, mut small) = (Vec::new(), [0u8; 5]);
        loop {
            let n = conn.read(&mut small).await.unwrap();
            if n == 0 {
                break;
            }
            got.extend_from_slice(&small[..n]);
        }
        writer.await.unwrap();
        assert_eq!(got, b"GET /T/?a%3C1&b%3E2 HTTP/1.1\r\nHost: x\r\n\r\n");
    }
}
