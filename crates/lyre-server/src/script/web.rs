//! The native side of `web.js`: UTF-8, URL parsing, digests and random bytes,
//! `fetch` through Lyre's outbound HTTP client, and timers.
//!
//! A timer is a task on the worker's event loop that, when due, tells the worker
//! (over the channel [`Web::new`] is given) to run the callback `web.js` keeps for
//! it; the callback runs between requests (as nobody's request) or while a request
//! waits, within the time budget. A `fetch` is bounded by the request budget and
//! [`MAX_FETCH_BYTES`], and the bodies a runtime's fetches are reading at once by
//! its memory limit: they are held outside the runtime's heap until they are whole,
//! so a script starting many fetches must not hold more there than it may in it.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::time::Duration;

use futures_util::StreamExt as _;
use rquickjs::function::{Async, Opt};
use rquickjs::{Array, Ctx, Exception, Function, Object as JsObject, TypedArray};
use tokio::sync::mpsc;

use super::convert::copy_bytes;

/// The largest response body `fetch` reads; a larger one fails the fetch.
pub const MAX_FETCH_BYTES: usize = 32 << 20;
/// The most timers a runtime may have pending at once.
pub const MAX_TIMERS: usize = 10_000;

/// Timers and the HTTP client of one runtime.
pub struct Web {
    due: mpsc::UnboundedSender<u32>,
    timers: RefCell<HashMap<u32, tokio::task::AbortHandle>>,
    http: RefCell<Option<reqwest::Client>>,
    /// How long a `fetch` may take (the request budget).
    fetch_timeout: Duration,
    /// Bytes of response bodies the runtime's fetches hold now, not yet handed to
    /// the script.
    buffered: Cell<usize>,
    /// The most `buffered` may reach (the runtime's memory limit).
    buffer_limit: usize,
}

impl Web {
    /// Timers that report through `due` when they fire; fetches that together
    /// hold at most `buffer_limit` bytes of bodies not yet read by the script (0:
    /// no limit, as for the runtime's own memory limit).
    pub fn new(due: mpsc::UnboundedSender<u32>, fetch_timeout: Duration, buffer_limit: usize) -> Self {
        let buffer_limit = if buffer_limit == 0 { usize::MAX } else { buffer_limit };
        Self {
            due,
            timers: RefCell::new(HashMap::new()),
            http: RefCell::new(None),
            fetch_timeout,
            buffered: Cell::new(0),
            buffer_limit,
        }
    }

    /// Cancels every pending timer (the runtime is going away).
    pub fn cancel_all(&self) {
        for (_, timer) in self.timers.borrow_mut().drain() {
            timer.abort();
        }
    }

    /// Forgets a timer that fired (its task has ended).
    pub fn fired(&self, id: u32) {
        self.timers.borrow_mut().remove(&id);
    }

    fn client(&self) -> Result<reqwest::Client, String> {
        if let Some(client) = self.http.borrow().as_ref() {
            return Ok(client.clone());
        }
        let client = crate::outbound::client(Duration::from_secs(10)).build().map_err(|e| e.to_string())?;
        *self.http.borrow_mut() = Some(client.clone());
        Ok(client)
    }
}

/// The body bytes one `fetch` holds, counted in its runtime's [`Web::buffered`] by
/// the memory they take (the buffer's capacity) until the fetch is done with them
/// (answered, failed or abandoned).
struct Buffer {
    web: Rc<Web>,
    bytes: Vec<u8>,
}

impl Buffer {
    fn new(web: Rc<Web>) -> Self {
        Self { web, bytes: Vec::new() }
    }

    /// Appends `chunk`, refused when this body would pass [`MAX_FETCH_BYTES`] or
    /// the memory the runtime's fetches hold together its memory limit.
    fn extend(&mut self, chunk: &[u8]) -> Result<(), String> {
        let needed = self.bytes.len() + chunk.len();
        if needed > MAX_FETCH_BYTES {
            return Err(format!("its body is larger than {MAX_FETCH_BYTES} bytes"));
        }
        let capacity = self.bytes.capacity();
        if needed > capacity {
            // Grown as a vector grows (doubling, up to the cap), and counted as grown.
            let grown = needed.max(capacity.saturating_mul(2).min(MAX_FETCH_BYTES));
            if self.web.buffered.get() + (grown - capacity) > self.web.buffer_limit {
                return Err(format!(
                    "the response bodies this runtime's fetches are reading would pass its memory limit ({} bytes)",
                    self.web.buffer_limit
                ));
            }
            self.bytes.reserve_exact(grown - self.bytes.len());
            self.web.buffered.set(self.web.buffered.get() + (self.bytes.capacity() - capacity));
        }
        self.bytes.extend_from_slice(chunk);
        Ok(())
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        let held = self.web.buffered.get();
        debug_assert!(held >= self.bytes.capacity(), "a fetch's buffer was not counted whole");
        self.web.buffered.set(held.saturating_sub(self.bytes.capacity()));
    }
}

fn type_error(ctx: &Ctx<'_>, message: &str) -> rquickjs::Error {
    Exception::throw_type(ctx, message)
}

/// The native functions `web.js` takes.
pub fn install<'js>(ctx: &Ctx<'js>, web: &Rc<Web>) -> rquickjs::Result<JsObject<'js>> {
    let native = JsObject::new(ctx.clone())?;
    native.set(
        "utf8Encode",
        Function::new(ctx.clone(), |ctx: Ctx<'js>, text: String| TypedArray::<u8>::new_copy(ctx, text.as_bytes()))?,
    )?;
    native.set(
        "utf8Decode",
        Function::new(ctx.clone(), |ctx: Ctx<'js>, data: TypedArray<'js, u8>, fatal: bool| {
            let data = copy_bytes(&data);
            match String::from_utf8(data) {
                Ok(text) => Ok(text),
                Err(_) if fatal => Err(type_error(&ctx, "the data is not valid UTF-8")),
                Err(err) => Ok(String::from_utf8_lossy(err.as_bytes()).into_owned()),
            }
        })?,
    )?;
    native.set(
        "parseUrl",
        Function::new(ctx.clone(), |ctx: Ctx<'js>, input: String, base: Opt<String>| {
            let parsed = match base.0 {
                Some(base) => reqwest::Url::parse(&base).and_then(|base| base.join(&input)),
                None => reqwest::Url::parse(&input),
            };
            let url = parsed.map_err(|e| type_error(&ctx, &format!("Invalid URL '{input}': {e}")))?;
            let parts = JsObject::new(ctx.clone())?;
            let host = url.host_str().unwrap_or("");
            let port = url.port().map(|p| p.to_string()).unwrap_or_default();
            parts.set("href", url.as_str())?;
            parts.set("origin", url.origin().ascii_serialization())?;
            parts.set("protocol", format!("{}:", url.scheme()))?;
            parts.set("username", url.username())?;
            parts.set("password", url.password().unwrap_or(""))?;
            parts.set("host", if port.is_empty() { host.to_string() } else { format!("{host}:{port}") })?;
            parts.set("hostname", host)?;
            parts.set("port", port)?;
            parts.set("pathname", url.path())?;
            parts.set("search", url.query().map(|q| format!("?{q}")).unwrap_or_default())?;
            parts.set("hash", url.fragment().map(|f| format!("#{f}")).unwrap_or_default())?;
            Ok::<_, rquickjs::Error>(parts)
        })?,
    )?;
    native.set(
        "digest",
        Function::new(ctx.clone(), |ctx: Ctx<'js>, algorithm: String, data: TypedArray<'js, u8>| {
            use aws_lc_rs::digest;
            let algorithm = match algorithm.as_str() {
                "sha1" => &digest::SHA1_FOR_LEGACY_USE_ONLY,
                "sha256" => &digest::SHA256,
                "sha384" => &digest::SHA384,
                "sha512" => &digest::SHA512,
                other => return Err(type_error(&ctx, &format!("no digest '{other}'"))),
            };
            TypedArray::<u8>::new_copy(ctx, digest::digest(algorithm, &copy_bytes(&data)).as_ref())
        })?,
    )?;
    native.set(
        "hmac",
        Function::new(
            ctx.clone(),
            |ctx: Ctx<'js>, algorithm: String, key: TypedArray<'js, u8>, data: TypedArray<'js, u8>| {
                use aws_lc_rs::hmac;
                let algorithm = match algorithm.as_str() {
                    "sha1" => hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY,
                    "sha256" => hmac::HMAC_SHA256,
                    "sha384" => hmac::HMAC_SHA384,
                    "sha512" => hmac::HMAC_SHA512,
                    other => return Err(type_error(&ctx, &format!("no HMAC '{other}'"))),
                };
                let key = hmac::Key::new(algorithm, &copy_bytes(&key));
                TypedArray::<u8>::new_copy(ctx, hmac::sign(&key, &copy_bytes(&data)).as_ref())
            },
        )?,
    )?;
    native.set(
        "randomBytes",
        Function::new(ctx.clone(), |ctx: Ctx<'js>, length: usize| {
            let mut filled = vec![0u8; length.min(65_536)];
            rand::Rng::fill(&mut rand::rng(), filled.as_mut_slice());
            TypedArray::<u8>::new_copy(ctx, filled)
        })?,
    )?;
    native.set("randomUUID", Function::new(ctx.clone(), || uuid::Uuid::new_v4().to_string())?)?;

    let timers = web.clone();
    native.set(
        "setTimer",
        Function::new(ctx.clone(), move |ctx: Ctx<'js>, id: u32, milliseconds: f64| {
            let mut pending = timers.timers.borrow_mut();
            if pending.len() >= MAX_TIMERS && !pending.contains_key(&id) {
                return Err(Exception::throw_range(&ctx, &format!("more than {MAX_TIMERS} timers are pending")));
            }
            let due = timers.due.clone();
            let wait = Duration::from_secs_f64(milliseconds.max(0.0) / 1000.0);
            let task = tokio::task::spawn_local(async move {
                tokio::time::sleep(wait).await;
                let _ = due.send(id);
            });
            if let Some(previous) = pending.insert(id, task.abort_handle()) {
                previous.abort();
            }
            Ok(())
        })?,
    )?;
    let timers = web.clone();
    native.set(
        "clearTimer",
        Function::new(ctx.clone(), move |id: u32| {
            if let Some(timer) = timers.timers.borrow_mut().remove(&id) {
                timer.abort();
            }
        })?,
    )?;

    let fetcher = web.clone();
    native.set(
        "fetch",
        Function::new(
            ctx.clone(),
            Async(
                move |ctx: Ctx<'js>,
                      url: String,
                      method: String,
                      headers: Vec<Vec<String>>,
                      body: Opt<TypedArray<'js, u8>>| {
                    let web = fetcher.clone();
                    let body = body.0.as_ref().map(copy_bytes);
                    async move {
                        let failed = |why: String| type_error(&ctx, &format!("fetch {url} failed: {why}"));
                        let client = web.client().map_err(&failed)?;
                        let method =
                            reqwest::Method::from_bytes(method.as_bytes()).map_err(|e| failed(e.to_string()))?;
                        let mut request = client.request(method, url.as_str()).timeout(web.fetch_timeout);
                        for pair in &headers {
                            if let [name, value] = pair.as_slice() {
                                request = request.header(name.as_str(), value.as_str());
                            }
                        }
                        if let Some(body) = body {
                            request = request.body(body);
                        }
                        let response = request.send().await.map_err(|e| failed(crate::outbound::describe(&e)))?;
                        let answer = JsObject::new(ctx.clone())?;
                        answer.set("status", response.status().as_u16())?;
                        answer.set("statusText", response.status().canonical_reason().unwrap_or(""))?;
                        answer.set("url", response.url().as_str())?;
                        let pairs = Array::new(ctx.clone())?;
                        for (i, (name, value)) in response.headers().iter().enumerate() {
                            let pair = Array::new(ctx.clone())?;
                            pair.set(0, name.as_str())?;
                            pair.set(1, String::from_utf8_lossy(value.as_bytes()).into_owned())?;
                            pairs.set(i, pair)?;
                        }
                        answer.set("headers", pairs)?;
                        let mut received = Buffer::new(web.clone());
                        let mut stream = response.bytes_stream();
                        while let Some(chunk) = stream.next().await {
                            let chunk = chunk.map_err(|e| failed(crate::outbound::describe(&e)))?;
                            received.extend(&chunk).map_err(&failed)?;
                        }
                        answer.set("body", TypedArray::<u8>::new_copy(ctx.clone(), &received.bytes)?)?;
                        Ok::<_, rquickjs::Error>(answer)
                    }
                },
            ),
        )?,
    )?;
    Ok(native)
}

#[cfg(test)]
mod tests {
    use std::rc::Rc;
    use std::time::Duration;

    use super::{Buffer, Web};

    fn web(limit: usize) -> Rc<Web> {
        Rc::new(Web::new(tokio::sync::mpsc::unbounded_channel().0, Duration::from_secs(1), limit))
    }

    #[test]
    fn fetch_buffers_share_the_runtime_limit_and_give_it_back() {
        let shared = web(100_000);
        let mut first = Buffer::new(shared.clone());
        first.extend(&[1; 60_000]).unwrap();
        let mut second = Buffer::new(shared.clone());
        let refused = second.extend(&[2; 60_000]).unwrap_err();
        assert!(refused.contains("would pass its memory limit (100000 bytes)"), "{refused}");
        assert_eq!(shared.buffered.get(), first.bytes.capacity());
        drop(first);
        second.extend(&[2; 60_000]).unwrap();
        drop(second);
        assert_eq!(shared.buffered.get(), 0);
    }

    #[test]
    fn a_memory_limit_of_zero_leaves_fetches_unlimited() {
        let mut buffer = Buffer::new(web(0));
        buffer.extend(&vec![0; 1 << 20]).unwrap();
        assert_eq!(buffer.bytes.len(), 1 << 20);
    }
}
