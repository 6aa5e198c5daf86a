//! Where each HTTP/1.1 request starts in a connection's bytes, so the few characters
//! of a request target that curl sends raw and the `http` crate refuses can be
//! percent-encoded before hyper parses them.
//!
//! Harper's query grammar has `price<10` and `price>=10`; Node accepts the raw
//! characters, but `http::Uri` rejects `<`, `>` and `"` in a query (and `<`, `>` and a
//! backtick in a path), so hyper would answer a bare 400 before any Lyre code ran.
//! [`Framing`] follows request lines, headers and bodies (by `Content-Length` or
//! chunked encoding) byte by byte and reports the positions of those characters inside
//! request targets only, never in headers or bodies. Anything it does not understand
//! (an upgrade, `CONNECT`, conflicting lengths, a malformed chunk) turns it off for the
//! rest of the connection: bytes then pass untouched and hyper judges them as before.

/// Longest header line start kept for inspection; the headers that matter
/// (`Content-Length`, `Transfer-Encoding`, `Upgrade`) fit well within it.
const LINE_KEPT: usize = 256;

/// Whether byte `b` of a request target must be percent-encoded for `http::Uri`.
pub(crate) const fn needs_escape(b: u8) -> bool {
    matches!(b, b'<' | b'>' | b'"' | b'`')
}

/// What a byte does inside a request target: each byte is looked up once, as a
/// request's target is read byte by byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TargetByte {
    /// Part of the target, passed as it is.
    Plain,
    /// The space that ends the target.
    End,
    /// A line break: no version follows.
    LineBreak,
    /// A character to percent-encode ([`needs_escape`]).
    Escape,
}

/// [`TargetByte`] of every byte value.
static TARGET_BYTES: [TargetByte; 256] = {
    let mut table = [TargetByte::Plain; 256];
    let mut b = 0;
    while b < 256 {
        table[b] = match b as u8 {
            b' ' => TargetByte::End,
            b'\r' | b'\n' => TargetByte::LineBreak,
            byte if needs_escape(byte) => TargetByte::Escape,
            _ => TargetByte::Plain,
        };
        b += 1;
    }
    table
};

/// Where the parser is in the connection's byte stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Before a request line (blank lines allowed) or inside its method.
    Method,
    /// Inside the request target.
    Target,
    /// After the target, up to the end of the request line.
    Version,
    /// Header lines, up to the empty line.
    Headers,
    /// A body of known length: bytes still to come.
    Body(u64),
    /// A chunk-size line of a chunked body.
    ChunkSize,
    /// Chunk data: bytes still to come.
    ChunkData(u64),
    /// The line break after chunk data.
    ChunkEnd,
    /// Trailer lines after the last chunk, up to the empty line.
    Trailers,
    /// Framing not understood: nothing more is reported.
    Off,
}

/// Follows one connection's request framing; see the module documentation.
#[derive(Debug)]
pub(crate) struct Framing {
    state: State,
    /// The start of the current header, trailer or chunk-size line.
    line: Vec<u8>,
    /// Whether the current line is longer than what `line` kept.
    line_truncated: bool,
    /// The method of the current request.
    method: Vec<u8>,
    content_length: Option<u64>,
    chunked: bool,
    upgrade: bool,
}

impl Default for Framing {
    fn default() -> Self {
        Framing {
            state: State::Method,
            line: Vec::new(),
            line_truncated: false,
            method: Vec::new(),
            content_length: None,
            chunked: false,
            upgrade: false,
        }
    }
}

impl Framing {
    /// Whether the parser has given up on this connection.
    pub(crate) fn is_off(&self) -> bool {
        self.state == State::Off
    }

    /// Advances over `bytes` (the next bytes the client sent) and appends to `escape`
    /// the positions in `bytes` of request-target characters to percent-encode.
    pub(crate) fn scan(&mut self, bytes: &[u8], escape: &mut Vec<usize>) {
        let mut at = 0;
        while at < bytes.len() {
            let rest = &bytes[at..];
            at += match self.state {
                State::Off => return,
                State::Method => self.method(rest),
                State::Target => self.target(rest, at, escape),
                State::Version => match memchr::memchr(b'\n', rest) {
                    Some(end) => {
                        self.start_headers();
                        end + 1
                    }
                    None => rest.len(),
                },
                State::Headers | State::ChunkSize | State::ChunkEnd | State::Trailers => self.line_bytes(rest),
                State::Body(left) | State::ChunkData(left) => {
                    let taken = left.min(rest.len() as u64);
                    let left = left - taken;
                    match (self.state, left) {
                        (State::Body(_), 0) => self.next_request(),
                        (State::Body(_), _) => self.state = State::Body(left),
                        (_, 0) => self.state = State::ChunkEnd,
                        _ => self.state = State::ChunkData(left),
                    }
                    taken as usize
                }
            };
        }
    }

    /// Consumes method bytes from `rest`, up to and including the space after it.
    fn method(&mut self, rest: &[u8]) -> usize {
        for (i, &b) in rest.iter().enumerate() {
            match b {
                b'\r' | b'\n' if self.method.is_empty() => {} // blank lines between requests
                b' ' => {
                    self.state = State::Target;
                    return i + 1;
                }
                b'\r' | b'\n' => {
                    self.state = State::Off; // a request line without a target
                    return i + 1;
                }
                _ if self.method.len() < 16 => self.method.push(b),
                _ => {
                    self.state = State::Off;
                    return i + 1;
                }
            }
        }
        rest.len()
    }

    /// Consumes target bytes from `rest` (which starts at `offset` of the scanned
    /// slice), noting those to escape.
    fn target(&mut self, rest: &[u8], offset: usize, escape: &mut Vec<usize>) -> usize {
        for (i, &b) in rest.iter().enumerate() {
            match TARGET_BYTES[usize::from(b)] {
                TargetByte::Plain => {}
                TargetByte::End => {
                    self.state = State::Version;
                    return i + 1;
                }
                TargetByte::LineBreak => {
                    self.state = State::Off; // HTTP/0.9 or garbage: hyper's to judge
                    return i + 1;
                }
                TargetByte::Escape => escape.push(offset + i),
            }
        }
        rest.len()
    }

    fn start_headers(&mut self) {
        self.state = State::Headers;
        self.content_length = None;
        self.chunked = false;
        self.upgrade = false;
        self.line.clear();
        self.line_truncated = false;
    }

    /// Consumes bytes of a line-oriented state up to and including one line break.
    fn line_bytes(&mut self, rest: &[u8]) -> usize {
        let end = memchr::memchr(b'\n', rest);
        if let Some(end) = end
            && self.line.is_empty()
            && !self.line_truncated
        {
            // The usual case: the whole line arrived in this read; nothing is copied.
            // Only its start counts, as when it comes in pieces.
            self.end_line(&rest[..end.min(LINE_KEPT)], end > LINE_KEPT);
            return end + 1;
        }
        let piece = &rest[..end.unwrap_or(rest.len())];
        let room = LINE_KEPT.saturating_sub(self.line.len());
        self.line.extend_from_slice(&piece[..piece.len().min(room)]);
        self.line_truncated |= piece.len() > room;
        let Some(end) = end else { return rest.len() };
        let (line, truncated) = (std::mem::take(&mut self.line), self.line_truncated);
        self.end_line(&line, truncated);
        self.line = line;
        self.line.clear();
        self.line_truncated = false;
        end + 1
    }

    /// Acts on a complete line of the current line-oriented state; `truncated` says
    /// that only its start is in `line`.
    fn end_line(&mut self, line: &[u8], truncated: bool) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        match self.state {
            State::Headers if line.is_empty() => self.end_headers(),
            State::Headers => self.header(line, truncated),
            State::Trailers if line.is_empty() => self.next_request(),
            State::Trailers | State::Off | State::Method | State::Target | State::Version => {}
            State::ChunkEnd if line.is_empty() => self.state = State::ChunkSize,
            State::ChunkEnd => self.state = State::Off,
            State::ChunkSize => {
                let digits = line.split(|&b| b == b';').next().unwrap_or_default();
                let size = std::str::from_utf8(digits).ok().and_then(|s| u64::from_str_radix(s.trim(), 16).ok());
                self.state = match size {
                    _ if truncated => State::Off,
                    Some(0) => State::Trailers,
                    Some(size) => State::ChunkData(size),
                    None => State::Off,
                };
            }
            State::Body(_) | State::ChunkData(_) => {}
        }
    }

    /// Notes what a header line says about the body's framing.
    fn header(&mut self, line: &[u8], truncated: bool) {
        // Only three headers matter; most lines are ruled out by their first letter.
        if !matches!(line.first().map(u8::to_ascii_lowercase), Some(b'c' | b't' | b'u')) {
            return;
        }
        let Some(colon) = memchr::memchr(b':', line) else {
            // A name longer than what was kept may still be one of the three.
            if truncated {
                self.state = State::Off;
            }
            return;
        };
        let (name, value) = (&line[..colon], line[colon + 1..].trim_ascii());
        let framing_header = |h: &[u8]| name.eq_ignore_ascii_case(h);
        if truncated && [&b"content-length"[..], b"transfer-encoding", b"upgrade"].into_iter().any(framing_header) {
            self.state = State::Off; // its value was not read whole
        } else if framing_header(b"content-length") {
            let parsed = std::str::from_utf8(value).ok().and_then(|v| v.parse::<u64>().ok());
            match (parsed, self.content_length) {
                (Some(n), None) => self.content_length = Some(n),
                (Some(n), Some(seen)) if n == seen => {}
                _ => self.state = State::Off, // unreadable or conflicting: hyper refuses it
            }
        } else if framing_header(b"transfer-encoding") {
            let last = value.rsplit(|&b| b == b',').next().unwrap_or_default().trim_ascii();
            if last.eq_ignore_ascii_case(b"chunked") {
                self.chunked = true;
            } else {
                self.state = State::Off;
            }
        } else if framing_header(b"upgrade") {
            self.upgrade = true;
        }
    }

    fn end_headers(&mut self) {
        if self.upgrade || self.method.eq_ignore_ascii_case(b"CONNECT") {
            // The connection may stop being HTTP after this request.
            self.state = State::Off;
            return;
        }
        self.state = match (self.chunked, self.content_length) {
            (true, _) => State::ChunkSize,
            (false, Some(n)) if n > 0 => State::Body(n),
            _ => {
                self.next_request();
                return;
            }
        };
    }

    fn next_request(&mut self) {
        self.state = State::Method;
        self.method.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Scans `input` in pieces of `piece` bytes; returns the escaped characters'
    /// positions in the whole input.
    fn escapes(input: &[u8], piece: usize) -> Vec<usize> {
        let mut framing = Framing::default();
        let mut all = Vec::new();
        for (n, chunk) in input.chunks(piece).enumerate() {
            let mut found = Vec::new();
            framing.scan(chunk, &mut found);
            all.extend(found.into_iter().map(|i| i + n * piece));
        }
        all
    }

    fn positions(input: &str, c: char) -> Vec<usize> {
        input.char_indices().filter(|(_, x)| *x == c).map(|(i, _)| i).collect()
    }

    /// Every split of the input into pieces gives the same answer.
    fn check(input: &str, expected: &[usize]) {
        for piece in 1..=input.len() {
            assert_eq!(escapes(input.as_bytes(), piece), expected, "pieces of {piece} in {input:?}");
        }
    }

    #[test]
    fn only_request_targets_are_escaped() {
        let get = "GET /T/?price<10&name==\"a\" HTTP/1.1\r\nHost: x\r\nX-Note: a<b\r\n\r\n";
        let mut expected = positions(get, '<');
        expected.truncate(1); // the header's `<` stays
        expected.extend(positions(get, '"'));
        expected.sort_unstable();
        check(get, &expected);
        // A body with the same characters, then a second (pipelined) request.
        let post = "POST /T/?a>1 HTTP/1.1\r\ncontent-length: 11\r\n\r\n{\"a\": \" <\"}GET /?b<2 HTTP/1.1\r\n\r\n";
        let all = positions(post, '<').into_iter().chain(positions(post, '>'));
        let body = post.find('{').unwrap()..post.find('}').unwrap();
        let mut expected: Vec<usize> = all.filter(|i| !body.contains(i)).collect();
        expected.sort_unstable();
        check(post, &expected);
    }

    #[test]
    fn chunked_bodies_are_skipped_whole() {
        let input = "PUT /T/1 HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n4;x=y\r\n<<<<\r\n3\r\n>\"`\r\n0\r\nTrailer: <\r\n\r\nGET /x<y HTTP/1.1\r\n\r\n";
        let last = input.rfind('<').unwrap();
        check(input, &[last]);
    }

    #[test]
    fn what_it_does_not_understand_turns_it_off() {
        for input in [
            "GET /ws HTTP/1.1\r\nUpgrade: websocket\r\n\r\nGET /a<b HTTP/1.1\r\n\r\n",
            "POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcGET /a<b HTTP/1.1\r\n\r\n",
            "POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\nGET /a<b HTTP/1.1\r\n\r\n",
            "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nGET /a<b HTTP/1.1\r\n\r\n",
            "CONNECT host:443 HTTP/1.1\r\n\r\nGET /a<b HTTP/1.1\r\n\r\n",
        ] {
            check(input, &[]);
            let mut framing = Framing::default();
            framing.scan(input.as_bytes(), &mut Vec::new());
            assert!(framing.is_off(), "{input}");
        }
    }

    #[test]
    fn long_header_lines_are_followed_across_reads() {
        let long = "v".repeat(1_000);
        let input = format!("GET /a HTTP/1.1\r\nX-Long: {long}\r\nCookie: {long}\r\n\r\nGET /b<c HTTP/1.1\r\n\r\n");
        check(&input, &positions(&input, '<'));
        // A framing header too long to read whole: nothing more is touched.
        let padded =
            format!("POST / HTTP/1.1\r\nContent-Length: {}1\r\n\r\nxGET /b<c HTTP/1.1\r\n\r\n", " ".repeat(300));
        check(&padded, &[]);
    }

    #[test]
    fn many_requests_with_bodies_on_one_connection() {
        let put = "PUT /T/1 HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}";
        let input = format!(
            "{}\r\nGET /a<b HTTP/1.1\r\n\r\nCONNECT h:1 HTTP/1.1\r\n\r\nGET /c<d HTTP/1.1\r\n\r\n",
            put.repeat(6)
        );
        check(&input, &positions(&input, '<')[..1]);
    }

    #[test]
    fn blank_lines_between_requests_are_allowed() {
        let input = "\r\nGET /a<b HTTP/1.1\r\n\r\n\r\nGET /c>d HTTP/1.1\r\n\r\n";
        check(input, &[positions(input, '<')[0], positions(input, '>')[0]]);
    }
}
