//! Caching tables: a table with a source (`sources` in its component's
//! `config.yaml`, see `source.rs`) answers a record read from storage while the
//! copy is fresh, and otherwise from its source, keeping what it fetched.
//!
//! * `source.rs`: the declared sources (an HTTP origin, or another table).
//! * `origin.rs`: one call to a source, bounded in time and size.
//! * `control.rs`: `Cache-Control` of requests and of origin answers.
//! * `flight.rs`: one call per record at a time, shared by every waiter; and
//!   one write through per record at a time.
//!
//! A copy is fresh until the origin's `Cache-Control`/`Expires` say (kept in
//! memory beside the record's version, and in the record's `@expiresAt`
//! attribute when the table has one, which survives restarts), else until the
//! table's own rule (`@table(expiration:)`, `@expiresAt`), else forever. A
//! local write to the record makes what the origin said of the old copy moot.
//! A stale copy is answered at once, while a call refreshes it, within the
//! origin's (or the request's) `stale-while-revalidate` window; and in place of
//! a failed call when the request allows `stale-if-error`, or the origin could
//! not be reached at all and nothing asks to revalidate.

pub mod control;
pub mod flight;
pub mod origin;
pub mod source;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lyre_core::{Code, Context, Engine, Expect, HeldRecord, Object, RecordVersion, Table, Value, WriteOptions, now_ms};
use parking_lot::Mutex;

use self::control::{Directives, OriginHeaders};
use self::flight::{Flights, Turn, Turns};
pub use self::origin::Forwarded;
use self::origin::{Fetched, OriginError};
pub use self::source::{Source, SourceConfig};

/// Most records whose origin caching headers are kept in memory; past it the
/// notes start over (a record without one is fresh by the table's rule only).
const MAX_NOTES: usize = 100_000;

/// The origin's word on one stored copy.
#[derive(Debug, Clone)]
struct Note {
    /// The version of the copy it is about (a later write makes it moot).
    version: f64,
    /// Fresh until (ms since the epoch); `None`: as the table's rule says.
    fresh_until: Option<f64>,
    /// When it was fetched or last revalidated (ms).
    fetched_at: f64,
    /// The origin's ETag, to revalidate with.
    etag: Option<String>,
    /// The origin's `stale-while-revalidate`.
    stale_while_revalidate: Option<Duration>,
    /// The origin's `stale-if-error` (`Some(None)`: without a bound).
    stale_if_error: Option<Option<Duration>>,
    /// The origin's `must-revalidate`.
    must_revalidate: bool,
}

/// A record, table and key, as the calls and notes name them.
type RecordKey = (String, String, String);

/// What one call to a source did, shared by its waiters.
#[derive(Debug, Clone)]
enum Refreshed {
    /// A copy was stored (read it back as each waiter may see it).
    Stored,
    /// A copy was fetched but not kept (`no-store`): here it is.
    Unstored(Arc<Object>),
    /// The copy held is still the origin's.
    NotModified,
    /// The source has no such record (a copy held was removed).
    Gone,
    /// A client wrote or removed the record (or it was invalidated) while the
    /// source was asked: what the table holds now is newer than the answer, which
    /// was not kept (read the table back as each waiter may see it).
    Superseded,
}

/// What a reader found of a record, that a call to its source is about.
struct Found<'a> {
    /// The origin's word on the copy held.
    note: Option<&'a Note>,
    /// The condition that keeps the answer from overwriting a newer write.
    seen: Option<Expect>,
}

/// A call's outcome and how long the source took (ms).
type CallOutcome = Result<(Refreshed, f64), OriginError>;

/// The caches of every caching table: the HTTP client origins share, the calls
/// under way, and the origins' notes on stored copies.
pub struct Cache {
    client: reqwest::Client,
    flights: Flights<RecordKey, CallOutcome>,
    notes: Mutex<HashMap<RecordKey, Note>>,
    writes_through: Turns<RecordKey>,
}

/// A caching table's answer to a read.
#[derive(Debug)]
pub struct CachedRead {
    /// The record, as the reader may see it.
    pub record: Object,
    /// Its version (what ETags show).
    pub version: RecordVersion,
    /// Answered from storage without calling the source.
    pub hit: bool,
    /// Seconds since the copy was fetched or revalidated (a hit's `Age`).
    pub age_s: Option<u64>,
    /// How long the source took, when it was called (ms).
    pub resolve_ms: Option<f64>,
}

/// Why a caching table could not answer a read.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    /// Reading or writing the table failed (a permission, a missing table).
    #[error(transparent)]
    Core(#[from] lyre_core::Error),
    /// `only-if-cached` and no copy is held.
    #[error("record {id} of '{table}' is not cached (the request said only-if-cached)")]
    NotCached {
        /// The record's key.
        id: String,
        /// The table.
        table: String,
    },
    /// Other writes of the record to its origin kept it past the wait (503).
    #[error("record {id} of '{table}' is being written through to its origin by other requests; retry later")]
    Busy {
        /// The record's key.
        id: String,
        /// The table.
        table: String,
    },
    /// The source failed and no stale copy may stand in.
    #[error("{error} (record {id} of '{table}')")]
    Origin {
        /// What failed.
        error: OriginError,
        /// The record's key.
        id: String,
        /// The table.
        table: String,
    },
}

impl CacheError {
    /// What the client is answered.
    pub fn code(&self) -> Code {
        match self {
            CacheError::Core(err) => err.code(),
            CacheError::NotCached { .. } => Code::GatewayTimeout,
            CacheError::Busy { .. } => Code::Overloaded,
            CacheError::Origin { error, .. } => error.code(),
        }
    }
}

/// A write the origin took, holding the record's turn until it is written here
/// too ([`WrittenThrough::settled`]). Dropped unsettled (the request went away,
/// failed or panicked in between), it drops the copy held, so reads fetch what the
/// origin has rather than what the table had.
pub struct WrittenThrough {
    turn: Option<Turn<RecordKey>>,
    cache: Arc<Cache>,
    table: Table,
    id: Value,
    settled: bool,
}

impl WrittenThrough {
    /// The table has the write too (or its copy was dropped): the turn passes on.
    pub fn settled(mut self) {
        self.settled = true;
    }
}

impl Drop for WrittenThrough {
    fn drop(&mut self) {
        if self.settled {
            return;
        }
        let (cache, table, id) = (self.cache.clone(), self.table.clone(), self.id.clone());
        // The turn passes on once the copy is dropped, not before.
        let turn = self.turn.take();
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn(async move {
                if let Err(err) = cache.invalidate(&table, vec![id]).await {
                    tracing::warn!(error = %err, "a copy the origin no longer matches was not dropped");
                }
                drop(turn);
            })),
            Err(_) => {
                tracing::warn!(table = %table.schema().name, "a copy the origin no longer matches was not dropped: no runtime")
            }
        }
    }
}

/// One table's source and where the table is.
pub struct Sourced<'a> {
    /// The caching table.
    pub table: &'a Table,
    /// Its source.
    pub source: &'a Arc<Source>,
}

impl Cache {
    /// The caches, with the HTTP client their origins share (fails only when
    /// TLS cannot be set up).
    pub fn new() -> Result<Cache, reqwest::Error> {
        let client = crate::outbound::client(Duration::from_secs(10)).build()?;
        Ok(Cache {
            client,
            flights: Flights::default(),
            notes: Mutex::new(HashMap::new()),
            writes_through: Turns::default(),
        })
    }

    /// Reads record `id` of a caching table as `ctx` may, calling its source when
    /// the copy held is missing or stale (and the request allows): `None` when
    /// neither has the record.
    pub async fn read(
        self: &Arc<Self>,
        engine: &Arc<Engine>,
        sourced: Sourced<'_>,
        ctx: &Context,
        id: &Value,
        request: Directives,
    ) -> Result<Option<CachedRead>, CacheError> {
        let table = sourced.table;
        let key = record_key(table, id);
        let held = table.get_held(ctx, id)?;
        let now = now_ms();
        let note = held.as_ref().and_then(|h| self.note(&key, h.version.time));
        let fresh_until = held.as_ref().and_then(|h| note.as_ref().and_then(|n| n.fresh_until).or(h.expires_at));
        // A request's `max-age` takes no copy older than it asks.
        let young_enough = |h: &HeldRecord| {
            request.max_age.is_none_or(|max| now - fetched_at(h, note.as_ref()) <= max.as_millis() as f64)
        };
        let fresh = held.as_ref().is_some_and(young_enough) && fresh_until.is_none_or(|at| now < at);
        if request.only_if_cached {
            return match held {
                Some(held) => Ok(Some(answer(held, note.as_ref(), now))),
                None => Err(CacheError::NotCached { id: key.2, table: table.schema().name.clone() }),
            };
        }
        if fresh && !request.no_cache {
            return Ok(held.map(|held| answer(held, note.as_ref(), now)));
        }
        let stale_for = fresh_until.map_or(0.0, |at| (now - at).max(0.0));
        let must_revalidate = request.must_revalidate || note.as_ref().is_some_and(|n| n.must_revalidate);
        let while_revalidating =
            request.stale_while_revalidate.or(note.as_ref().and_then(|n| n.stale_while_revalidate));
        if let Some(held) = &held
            && !request.no_cache
            && !must_revalidate
            && while_revalidating.is_some_and(|window| stale_for <= window.as_millis() as f64)
        {
            drop(self.call(
                engine,
                &sourced,
                id,
                key.clone(),
                Found { note: note.as_ref(), seen: seen(Some(held)) },
                request,
            ));
            return Ok(Some(answer(held.clone(), note.as_ref(), now)));
        }
        let started = Instant::now();
        let found = Found { note: note.as_ref(), seen: seen(held.as_ref()) };
        let outcome = self.call(engine, &sourced, id, key.clone(), found, request).await;
        let waited = started.elapsed().as_secs_f64() * 1000.0;
        match outcome {
            Ok((refreshed, resolve_ms)) => {
                let resolve_ms = Some(resolve_ms.max(waited));
                let read = match refreshed {
                    Refreshed::Gone => None,
                    Refreshed::Unstored(record) => {
                        let mut record = (*record).clone();
                        table.strip_for(ctx, &mut record)?;
                        let version = RecordVersion { time: now, unique: false };
                        Some(CachedRead { record, version, hit: false, age_s: None, resolve_ms })
                    }
                    Refreshed::Stored | Refreshed::NotModified | Refreshed::Superseded => {
                        table.get_held(ctx, id)?.map(|held| CachedRead {
                            record: held.record,
                            version: held.version,
                            hit: false,
                            age_s: None,
                            resolve_ms,
                        })
                    }
                };
                Ok(read)
            }
            Err(err) => {
                let allowed = request.stale_if_error.or(note.as_ref().and_then(|n| n.stale_if_error));
                let stale_ok = match allowed {
                    Some(bound) => bound.is_none_or(|b| stale_for <= b.as_millis() as f64),
                    None => err.is_unreachable() && !must_revalidate,
                };
                match held {
                    Some(held) if stale_ok => {
                        tracing::warn!(table = %table.schema().name, id = %key.2, error = %err, "answered a stale copy: the origin failed");
                        Ok(Some(answer(held, note.as_ref(), now)))
                    }
                    _ => Err(CacheError::Origin { error: err, id: key.2, table: table.schema().name.clone() }),
                }
            }
        }
    }

    /// Notes that a client wrote record `id` (version `version`) and asked with
    /// `max-age` that it stay fresh until `fresh_until` (ms).
    pub fn written(&self, table: &Table, id: &Value, version: f64, fresh_until: f64) {
        let note = Note {
            version,
            fresh_until: Some(fresh_until),
            fetched_at: version,
            etag: None,
            stale_while_revalidate: None,
            stale_if_error: None,
            must_revalidate: false,
        };
        self.remember(record_key(table, id), note);
    }

    /// Sends a client's write of record `id` to the table's origin, when its
    /// source writes through (`writeThrough`), before the caller writes it here:
    /// `None` when there is nothing to send, else the write the origin took, which
    /// holds the record's turn (see [`Turns`]) until the caller has written it here
    /// too and settled it. Waiting for the turn is bounded by twice the origin's
    /// timeout (then 503).
    pub async fn write_through(
        self: &Arc<Self>,
        sourced: Sourced<'_>,
        id: &Value,
        write: Forwarded<'_>,
    ) -> Result<Option<WrittenThrough>, CacheError> {
        let Source::Http(origin) = sourced.source.as_ref() else { return Ok(None) };
        if !origin.write_through {
            return Ok(None);
        }
        let key = record_key(sourced.table, id);
        let Some(turn) = self.writes_through.take(key.clone(), 2 * origin.timeout).await else {
            return Err(CacheError::Busy { id: key.2, table: sourced.table.schema().name.clone() });
        };
        origin::forward(&self.client, origin, id, write).await.map_err(|error| CacheError::Origin {
            error,
            id: key.2.clone(),
            table: sourced.table.schema().name.clone(),
        })?;
        Ok(Some(WrittenThrough {
            turn: Some(turn),
            cache: self.clone(),
            table: sourced.table.clone(),
            id: id.clone(),
            settled: false,
        }))
    }

    /// Removes the stored copies of `ids` (the next read calls the source), as
    /// the system: the caller checked the permission.
    pub async fn invalidate(&self, table: &Table, ids: Vec<Value>) -> Result<usize, CacheError> {
        {
            let mut notes = self.notes.lock();
            for id in &ids {
                notes.remove(&record_key(table, id));
            }
        }
        let summary = table.delete(&Context::system(), ids).await?;
        Ok(summary.deleted.len())
    }

    /// The call to the source for `key`: the one under way, or a new one, about
    /// the copy the caller `found`.
    fn call(
        self: &Arc<Self>,
        engine: &Arc<Engine>,
        sourced: &Sourced<'_>,
        id: &Value,
        key: RecordKey,
        Found { note, seen }: Found<'_>,
        request: Directives,
    ) -> futures_util::future::Shared<futures_util::future::BoxFuture<'static, CallOutcome>> {
        let (engine, table, source, id) = (engine.clone(), sourced.table.clone(), sourced.source.clone(), id.clone());
        let cache = self.clone();
        let etag = note.and_then(|n| n.etag.clone());
        let client = self.client.clone();
        let own_key = key.clone();
        self.flights.start(
            key,
            move || async move {
                let started = Instant::now();
                let schema = table.schema().clone();
                let fetched = origin::fetch(
                    &engine,
                    &client,
                    (&source, &schema.database, &schema.primary_key),
                    &id,
                    etag.as_deref(),
                )
                .await;
                let resolve_ms = started.elapsed().as_secs_f64() * 1000.0;
                let refreshed = cache.keep(&table, &id, own_key, fetched?, request, seen).await?;
                Ok((refreshed, resolve_ms))
            },
            |panic| Err(OriginError::Invalid(format!("the call to the source failed: {panic}"))),
        )
    }

    /// Keeps what the source answered: stores a record (with the origin's word
    /// on it), refreshes a copy still current, removes one the source no longer
    /// has; each only if the table still holds what it held when the source was
    /// asked (`seen`), else the newer write stands ([`Refreshed::Superseded`]).
    async fn keep(
        &self,
        table: &Table,
        id: &Value,
        key: RecordKey,
        fetched: Fetched,
        request: Directives,
        seen: Option<Expect>,
    ) -> Result<Refreshed, OriginError> {
        let stored = |err: lyre_core::Error| OriginError::Invalid(format!("the fetched record was not stored: {err}"));
        let now = now_ms();
        let system = Context::system();
        let unless_changed = WriteOptions { expect: vec![seen.clone()], at: None };
        match fetched {
            Fetched::Record(mut record, headers) => {
                if !headers.storable() || request.no_store {
                    return Ok(Refreshed::Unstored(Arc::new(record)));
                }
                let fresh_until = headers.fresh_until(now);
                if let (Some(attribute), Some(at)) = (&table.schema().expires_at, fresh_until) {
                    record.insert(attribute.clone(), Value::Int(at as i64));
                }
                // Kept for the rare answer refused because the copy went meanwhile.
                let summary = match table.put(&system, id.clone(), record.clone(), unless_changed).await {
                    Err(lyre_core::Error::PreconditionFailed(_)) => {
                        // Removed meanwhile (a delete, an invalidation, the expiry sweep):
                        // the waiting readers get the answer, which is not kept.
                        let held = table.get_held(&system, id).map_err(stored)?;
                        return Ok(if held.is_some() {
                            Refreshed::Superseded
                        } else {
                            Refreshed::Unstored(Arc::new(record))
                        });
                    }
                    written => written.map_err(stored)?,
                };
                self.remember(key, Note::of(summary.txn_time, now, fresh_until, headers));
                Ok(Refreshed::Stored)
            }
            Fetched::NotModified(headers) => {
                let Some(held) = table.get_held(&system, id).map_err(stored)? else { return Ok(Refreshed::Gone) };
                // The origin vouched for the copy it was asked about, not a newer write.
                let vouched_for = match &seen {
                    Some(Expect::Unchanged(seen)) => Expect::unchanged_holds(*seen, Some(held.version)),
                    _ => true,
                };
                if !vouched_for {
                    return Ok(Refreshed::Superseded);
                }
                // Fresh again: as the origin now says, else for the table's period.
                let fresh_until = headers
                    .fresh_until(now)
                    .or_else(|| table.schema().expiration.map(|e| now + e.expiration as f64 * 1000.0));
                let etag = headers.etag.clone().or_else(|| self.note(&key, held.version.time).and_then(|n| n.etag));
                let mut note = Note::of(held.version.time, now, fresh_until, headers);
                note.etag = etag;
                self.remember(key, note);
                Ok(Refreshed::NotModified)
            }
            Fetched::Gone => {
                self.notes.lock().remove(&key);
                match table.delete_with(&system, vec![id.clone()], unless_changed).await {
                    Err(lyre_core::Error::PreconditionFailed(_)) => Ok(Refreshed::Superseded),
                    deleted => deleted.map(|_| Refreshed::Gone).map_err(stored),
                }
            }
        }
    }

    /// The origin's word on the copy of `key` at `version`, if it is about it.
    fn note(&self, key: &RecordKey, version: f64) -> Option<Note> {
        self.notes.lock().get(key).filter(|n| n.version == version).cloned()
    }

    fn remember(&self, key: RecordKey, note: Note) {
        let mut notes = self.notes.lock();
        if notes.len() >= MAX_NOTES && !notes.contains_key(&key) {
            notes.clear();
        }
        notes.insert(key, note);
    }
}

impl Note {
    fn of(version: f64, now: f64, fresh_until: Option<f64>, headers: OriginHeaders) -> Note {
        Note {
            version,
            fresh_until,
            fetched_at: now,
            etag: headers.etag,
            stale_while_revalidate: headers.directives.stale_while_revalidate,
            stale_if_error: headers.directives.stale_if_error,
            must_revalidate: headers.directives.must_revalidate,
        }
    }
}

/// The condition that keeps a source's answer from overwriting a newer write:
/// the table still stores what the caller found for the record (`held`, expired
/// or not, or nothing). `None` (no condition) for a record whose version is not
/// unique (an out-of-order replicated write), which no version condition can name.
fn seen(held: Option<&HeldRecord>) -> Option<Expect> {
    match held {
        None => Some(Expect::Unchanged(None)),
        Some(held) if held.version.unique => Some(Expect::Unchanged(Some(held.version.time))),
        Some(_) => None,
    }
}

/// When a held copy was fetched or last revalidated (its write, when the origin's
/// word on it is not known).
fn fetched_at(held: &HeldRecord, note: Option<&Note>) -> f64 {
    note.map_or(held.version.time, |n| n.fetched_at)
}

/// A held copy as a hit: its age since it was fetched (or written).
fn answer(held: HeldRecord, note: Option<&Note>, now: f64) -> CachedRead {
    let age_s = Some(((now - fetched_at(&held, note)).max(0.0) / 1000.0).round() as u64);
    CachedRead { record: held.record, version: held.version, hit: true, age_s, resolve_ms: None }
}

/// Names record `id` of `table` in the calls and notes.
fn record_key(table: &Table, id: &Value) -> RecordKey {
    let schema = table.schema();
    (schema.database.clone(), schema.name.clone(), origin::key_text(id))
}
