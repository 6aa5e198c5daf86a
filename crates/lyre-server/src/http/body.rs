//! Request bodies: read within a size limit and a deadline, and decoded within the
//! memory the server grants them.
//!
//! Every body is held in memory twice over its life: as the bytes that arrived, and
//! as the `Value` they decode to, which can be many times larger (`{"id":1}` is 8
//! bytes on the wire and about 300 decoded). Both are paid for from one
//! [`BodyMemory`] shared by every request on every port: the bytes before they are
//! read (or as they arrive, without a declared length), the decoded value, measured
//! by walking the body once without keeping anything ([`lyre_core::Footprint`]),
//! before it is built (a small JSON body is decoded first and measured after, see
//! [`MEASURED_AFTER_LIMIT`]). A request that alone would need more than
//! `http.maxRequestMemory` is refused with 413 before anything is built from it
//! (a small JSON body: before it is kept; a form, content or text REST body is
//! granted a bound on what it takes before it is built); one that
//! cannot be granted its memory while others hold it waits, in arrival order, for
//! `http.requestQueueLimit` (never past its body's deadline, `http.timeout`) and is
//! then refused with Harper's 503, to retry. So concurrent large
//! requests queue instead of together running the process out of memory.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, header};
use bytes::{Bytes, BytesMut};
use lyre_core::{Code, Footprint, Value};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use crate::app::AppState;
use crate::http::error::ApiError;
use crate::http::format::Format;
use crate::http::negotiate::{LooseBody, RestBody, body_format, decode, form_record, rest_body};

/// Memory is granted in units of this many bytes.
const UNIT: usize = 1024;

/// Bodies larger than this are walked and decoded on a blocking thread.
const INLINE_DECODE_LIMIT: usize = 64 * 1024;

/// JSON bodies up to this size are decoded first and measured after, in one pass over
/// their text instead of two (the walk that measures costs about what decoding
/// does). Decoding runs on the request thread without a pause, so each thread holds
/// at most one such value before it is granted memory; a JSON document's decoded
/// value takes at most [`lyre_core::Footprint::MOST_PER_JSON_BYTE`] times its length
/// (held by `lyre-core/tests/footprint.rs`), 1 MiB here. The value is kept
/// only if the memory it needs is free at once (waiting requests are served first);
/// otherwise it is dropped and the body takes the general path.
const MEASURED_AFTER_LIMIT: usize = 8 * 1024;

/// A body without a declared length is granted memory in steps of at least this.
const GROWTH_STEP: usize = 1 << 20;

/// Memory a request holds while it runs, in halves of its decoded body: the decoded
/// value, the records prepared for the writer beside it, their encoded forms, the
/// write transaction's pages and the reply. Measured peaks were 1.8 (2M small
/// records) and 2.1 (150,000 records of 600 bytes) times the decoded estimate
/// (`bench/results/2026-12-02-request-memory.md`), which is itself above the
/// decoder's own peak (`lyre-core/tests/footprint.rs`).
const HALVES_HELD: usize = 5;

/// The memory request bodies may hold, across every request on every port.
#[derive(Debug, Clone)]
pub struct BodyMemory {
    units: Arc<Semaphore>,
    total: usize,
    per_request: usize,
    wait: Duration,
}

impl BodyMemory {
    /// A budget of `total` bytes, at most `per_request` of them to one request (no
    /// more than `total`), waited for at most `wait`.
    pub fn new(total: usize, per_request: usize, wait: Duration) -> BodyMemory {
        let total = total.max(UNIT);
        let units = (total / UNIT).min(Semaphore::MAX_PERMITS);
        BodyMemory { units: Arc::new(Semaphore::new(units)), total, per_request: per_request.min(total), wait }
    }

    /// Grants `bytes` more to `held`, waiting for requests holding memory to finish
    /// for `http.requestQueueLimit`, and not past `deadline`; 503 after it.
    async fn grant(&self, held: &mut Held, bytes: usize, deadline: Instant) -> Result<(), ApiError> {
        let units = self.units_for(bytes)?;
        if units == 0 {
            return Ok(());
        }
        let busy = || {
            ApiError::new(
                Code::Overloaded,
                format!(
                    "Service unavailable, exceeded request queue limit: other requests hold the memory \
                     request bodies may take ({} MiB, http.requestMemory) and none was free within {} ms \
                     (http.requestQueueLimit)",
                    self.total >> 20,
                    self.wait.as_millis()
                ),
            )
        };
        // Free memory is granted at once; otherwise in arrival order, as it is given back.
        let waited = tokio::time::timeout_at(
            deadline.min(Instant::now() + self.wait),
            self.units.clone().acquire_many_owned(units),
        );
        let Ok(Ok(permit)) = waited.await else { return Err(busy()) };
        held.add(permit);
        Ok(())
    }

    /// Grants `bytes` more to `held` if they are free now; never waits. Units given
    /// back go to waiting requests first, so this never passes one of them.
    fn try_grant(&self, held: &mut Held, bytes: usize) -> Result<bool, ApiError> {
        let units = self.units_for(bytes)?;
        if units == 0 {
            return Ok(true);
        }
        let Ok(permit) = self.units.clone().try_acquire_many_owned(units) else { return Ok(false) };
        held.add(permit);
        Ok(true)
    }

    /// How many units `bytes` takes (413 past what a semaphore can count).
    fn units_for(&self, bytes: usize) -> Result<u32, ApiError> {
        u32::try_from(bytes.div_ceil(UNIT)).map_err(|_| self.too_large(bytes))
    }

    /// Refuses a request that needs more than one request may hold.
    fn refuse_over_limit(&self, held: &Held, more: usize) -> Result<(), ApiError> {
        match held.bytes().saturating_add(more) {
            needed if needed > self.per_request => Err(self.too_large(needed)),
            _ => Ok(()),
        }
    }

    fn too_large(&self, needed: usize) -> ApiError {
        ApiError::new(
            Code::PayloadTooLarge,
            format!(
                "the request needs about {} MiB of memory to hold and decode its body, more than one request may hold \
                 ({} MiB, http.maxRequestMemory); send its records in smaller batches",
                needed.div_ceil(1 << 20),
                self.per_request >> 20
            ),
        )
    }
}

/// Memory granted to one request, given back when dropped.
#[derive(Debug, Default)]
pub struct Held {
    permit: Option<OwnedSemaphorePermit>,
}

impl Held {
    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.permit.as_ref().map_or(0, |p| p.num_permits() * UNIT)
    }

    /// Adds a grant to what is held.
    fn add(&mut self, permit: OwnedSemaphorePermit) {
        match &mut self.permit {
            Some(existing) => existing.merge(permit),
            slot => *slot = Some(permit),
        }
    }

    /// Gives back `bytes` of what is held (the bytes of a body once decoded).
    fn give_back(&mut self, bytes: usize) {
        if let Some(permit) = &mut self.permit {
            drop(permit.split((bytes / UNIT).min(permit.num_permits())));
        }
    }
}

/// A body that has arrived, with the memory granted to hold it.
#[derive(Debug)]
pub struct ArrivedBody {
    /// The bytes as sent.
    pub bytes: Bytes,
    memory: Held,
    deadline: Instant,
}

/// A decoded body, with the memory granted to it: keep it alive while the request
/// works on the value.
#[derive(Debug)]
pub struct DecodedBody {
    /// The decoded body.
    pub value: Value,
    /// The memory granted to the request; given back when dropped.
    pub memory: Held,
}

/// The length a request declares for its body.
fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok())
}

/// Reads a whole request body out of `slot`, refusing (413) anything over `limit`
/// before reading it when the length is declared, and as soon as it is exceeded
/// otherwise, and (408) one that has not arrived within `http.timeout`. Memory for
/// a declared length is granted before the body is taken from its slot, so a
/// refusal leaves the body for the caller to drain.
pub(crate) async fn read_body(
    state: &AppState,
    headers: &HeaderMap,
    slot: &mut Option<Body>,
    limit: usize,
) -> Result<ArrivedBody, ApiError> {
    let too_large =
        || ApiError::new(Code::PayloadTooLarge, format!("Request body too large, maximum size is {limit} bytes"));
    let within = state.body_timeout;
    let deadline = Instant::now() + within;
    let declared = declared_length(headers);
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(too_large());
    }
    let declared = declared.map(|n| n as usize);
    let memory_budget = &state.body_memory;
    let mut memory = Held::default();
    if let Some(length) = declared {
        memory_budget.refuse_over_limit(&memory, length)?;
        memory_budget.grant(&mut memory, length, deadline).await?;
    }
    let body = slot.take().unwrap_or_default();
    // A body trickled in slowly holds its connection and its buffer: it gets a deadline.
    let timed_out = || {
        ApiError::new(
            Code::RequestTimeout,
            format!("the request body did not arrive within {} ms (http.timeout)", within.as_millis()),
        )
    };
    let read = collect(body, limit, declared, memory_budget, &mut memory, deadline, too_large);
    let bytes = tokio::time::timeout_at(deadline, read).await.map_err(|_| timed_out())??;
    Ok(ArrivedBody { bytes, memory, deadline })
}

/// Collects `body`'s frames, within `limit` bytes, growing the memory granted to a
/// body of undeclared length as it arrives.
async fn collect(
    mut body: Body,
    limit: usize,
    declared: Option<usize>,
    budget: &BodyMemory,
    memory: &mut Held,
    deadline: Instant,
    too_large: impl Fn() -> ApiError,
) -> Result<Bytes, ApiError> {
    use http_body_util::BodyExt;
    let mut buffer = BytesMut::with_capacity(declared.unwrap_or(0).min(limit));
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|err| ApiError::bad_request(format!("could not read the request body: {err}")))?;
        let Ok(data) = frame.into_data() else { continue };
        let length = buffer.len() + data.len();
        if length > limit {
            return Err(too_large());
        }
        if length > memory.bytes() {
            let needed = length - memory.bytes();
            budget.refuse_over_limit(memory, needed)?;
            // Granted a step at a time, never past the limits the need was checked against.
            let room = limit.min(budget.per_request).saturating_sub(memory.bytes());
            budget.grant(memory, needed.max(GROWTH_STEP.min(room)), deadline).await?;
        }
        buffer.extend_from_slice(&data);
    }
    Ok(buffer.freeze())
}

/// Decodes an arrived body by its `Content-Type`, once the memory its value and the
/// work on it will take is granted (413 if one request may not hold that much, 503
/// if it is not free before the body's deadline). The body's bytes are given back
/// once decoded.
pub(crate) async fn decode_body(
    state: &AppState,
    headers: &HeaderMap,
    body: ArrivedBody,
    bodies: Bodies,
) -> Result<DecodedBody, ApiError> {
    let ArrivedBody { bytes, mut memory, deadline } = body;
    let arrived = bytes.len();
    let budget = &state.body_memory;
    let format = match bodies {
        Bodies::Structured => body_format(headers, &bytes)?,
        Bodies::Rest | Bodies::Script => match rest_body(headers, &bytes, bodies == Bodies::Script)? {
            RestBody::Structured(format) => format,
            RestBody::Loose(loose) => return decode_loose(budget, memory, deadline, bytes, loose).await,
        },
    };
    let measured_after = matches!(format, Format::Json | Format::Text) && arrived <= MEASURED_AFTER_LIMIT;
    let needed = match measured_after {
        true => {
            let value = decode::<Value>(format, &bytes)?;
            let needed = held_for(Footprint::of(&value));
            budget.refuse_over_limit(&memory, needed)?;
            if budget.try_grant(&mut memory, needed)? {
                memory.give_back(arrived);
                return Ok(DecodedBody { value, memory });
            }
            // Not free now: the value goes, and the body waits for its memory below.
            needed
        }
        false => {
            let footprint = match arrived <= INLINE_DECODE_LIMIT {
                true => decode(format, &bytes)?,
                false => {
                    let bytes = bytes.clone();
                    crate::http::blocking::blocking("measuring the body", move || decode::<Footprint>(format, &bytes))
                        .await?
                }
            };
            held_for(footprint)
        }
    };
    budget.refuse_over_limit(&memory, needed)?;
    budget.grant(&mut memory, needed, deadline).await?;
    let inline = arrived <= INLINE_DECODE_LIMIT;
    let value = match inline {
        true => decode(format, &bytes)?,
        false => crate::http::blocking::blocking("decoding the body", move || decode::<Value>(format, &bytes)).await?,
    };
    memory.give_back(arrived);
    Ok(DecodedBody { value, memory })
}

/// A REST body that is not a structured format ([`LooseBody`]): a form's fields,
/// content, or text. Its memory is granted before it is built, from a bound on what
/// it takes (a form: each field a map entry and a string, at most one per byte); a
/// large form is built on the blocking pool, as a large JSON body is decoded.
async fn decode_loose(
    budget: &BodyMemory,
    mut memory: Held,
    deadline: Instant,
    bytes: Bytes,
    loose: LooseBody,
) -> Result<DecodedBody, ApiError> {
    const FORM_FIELD: usize = 160;
    let arrived = bytes.len();
    let fields = if loose == LooseBody::Form { bytes.iter().filter(|b| **b == b'&').count() + 1 } else { 0 };
    let needed = held_for(Footprint(arrived.saturating_add(64).saturating_add(fields.saturating_mul(FORM_FIELD))));
    budget.refuse_over_limit(&memory, needed)?;
    budget.grant(&mut memory, needed, deadline).await?;
    let value = match loose {
        LooseBody::Form if arrived > INLINE_DECODE_LIMIT => {
            crate::http::blocking::blocking("reading a form", move || Ok::<_, ApiError>(form_record(&bytes))).await?
        }
        LooseBody::Form => form_record(&bytes),
        LooseBody::Content(media) => Value::Object(lyre_core::content_record(&media, bytes.to_vec())),
        LooseBody::Text => match String::from_utf8(bytes.to_vec()) {
            Ok(text) => Value::String(text),
            Err(err) => {
                let at = err.utf8_error().valid_up_to();
                return Err(ApiError::bad_request(format!("a text/plain body is not UTF-8 (at byte {at})")));
            }
        },
    };
    memory.give_back(arrived);
    Ok(DecodedBody { value, memory })
}

/// The memory a request holds for a body whose decoded value takes `footprint`.
fn held_for(Footprint(decoded): Footprint) -> usize {
    decoded.saturating_mul(HALVES_HELD) / 2
}

/// Which bodies a request reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Bodies {
    /// The structured formats only (the Operations API, GraphQL).
    Structured,
    /// Those, forms, and content of any other media type, as Harper's REST reads
    /// them ([`rest_body`]).
    Rest,
    /// As [`Bodies::Rest`], but `text/plain` is the text itself: what a script's
    /// resource is given, as Harper gives it.
    Script,
}

/// Reads and decodes a request body (see [`read_body`] and [`decode_body`]).
pub(crate) async fn read_and_decode(
    state: &AppState,
    headers: &HeaderMap,
    slot: &mut Option<Body>,
    limit: usize,
    bodies: Bodies,
) -> Result<DecodedBody, ApiError> {
    let arrived = read_body(state, headers, slot, limit).await?;
    decode_body(state, headers, arrived, bodies).await
}

/// The most of an unread request body drained before answering; beyond it the
/// connection is closed instead (reading it all could take as long as the client likes).
const DRAIN_LIMIT: usize = 1 << 20;

/// How much of an unread body to drain before answering, or `None` when it should
/// not be read at all and the connection closed instead: the client waits for `100
/// Continue` (reading would invite the upload), or declares more than [`DRAIN_LIMIT`].
pub(crate) fn drain_budget(headers: &HeaderMap) -> Option<usize> {
    let expects_continue =
        headers.get(header::EXPECT).is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    (!expects_continue && declared_length(headers).is_none_or(|n| n <= DRAIN_LIMIT as u64)).then_some(DRAIN_LIMIT)
}

/// Reads and drops a request body, at most `budget` bytes (`None`: none at all);
/// returns whether it ended, so the connection can serve the next request.
pub(crate) async fn drain(mut body: Body, budget: Option<usize>) -> bool {
    use http_body_util::BodyExt;
    use hyper::body::Body as _;
    if body.is_end_stream() {
        return true;
    }
    let Some(limit) = budget else { return false };
    let mut seen = 0;
    while let Some(frame) = body.frame().await {
        let Ok(frame) = frame else { return false };
        seen += frame.data_ref().map_or(0, |data| data.len());
        if seen > limit {
            return false;
        }
    }
    true
}
