//! JavaScript applications: a component's `resources.js` (Harper's `jsResource`)
//! run on QuickJS-NG, with Harper's Resource API.
//!
//! The host ([`Scripts`]) keeps a *generation*: worker threads, each with its own
//! JavaScript runtime and module state (as Harper's workers each have theirs), that
//! loaded every component's scripts. Loading a component builds a new generation
//! and swaps it in; the old one finishes the requests it holds and ends. A request
//! for a JavaScript resource goes to the next free worker, which runs it alone (so
//! the request's user is the one every table call it makes is checked as), within a
//! time budget (an interrupt stops runaway code) and the runtime's memory limit; a
//! worker whose script ran out of either is rebuilt before it serves again.
//!
//! `prelude.js` is the API scripts see (`Resource`, `tables`, `databases`,
//! `logger`, …) and `native.rs` what it calls in Lyre; `web.js` the web-standard
//! globals (`fetch`, `URL`, `TextEncoder`, timers, …) and `web.rs` their native
//! side; `worker.rs` one runtime; `modules.rs` where imports lead; `convert.rs`
//! values crossing over; `record.rs` stored records as frozen objects and
//! `record_cache.rs` the ones a worker keeps; `computed.rs` the `@computed` attributes core asks the
//! server for. Besides requests, the host runs the scripts' HTTP middleware
//! (`server.http`), content types (`contentTypes`) and computed attributes'
//! functions; a request a middleware's `next` passed on has its jobs run by the
//! worker waiting for it (`crate::passed_on`).

mod computed;
mod convert;
mod modules;
mod native;
mod record;
mod record_cache;
mod target;
mod web;
mod worker;

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use lyre_core::access::User;
use lyre_core::query::Query;
use lyre_core::{Code, Engine, Object, Table, Value};
use parking_lot::RwLock;
use tokio::sync::{mpsc, oneshot};

use crate::cache::source::{CodeAnswer, RecordSource, SourceFailure};

pub use computed::ScriptComputer;

/// Requests waiting for a worker, per generation; past it a request is refused (503).
const QUEUE_DEPTH: usize = 1024;

/// The parts of Harper's REST grammar scripts reach through table calls; the HTTP
/// layer provides them (`http/rest/script.rs`), so this module does not depend on it.
pub trait RestGrammar: Send + Sync {
    /// A query string (`name=x&select(a)&limit(5)`, without `?`) as a query on `table`.
    fn query_string(&self, table: &Table, raw: &str) -> Result<Query, (Code, String)>;
    /// A query object (`{conditions, operator, select, sort, limit, offset}`) as a query.
    fn query_object(&self, table: &Table, object: Object) -> Result<Query, (Code, String)>;
    /// Harper's description of a table (`GET /T`).
    fn describe(&self, table: &Table, ctx: &lyre_core::Context) -> Result<Value, (Code, String)>;
}

/// Where a script's HTTP middleware (`server.http`) runs in the server's handling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// `runFirst: true`: before anything of Lyre's (static files, REST,
    /// authentication); its `next` runs all of that.
    First,
    /// The default: for requests Lyre's own handling found nothing for (after
    /// authentication); its `next` answers 404.
    Last,
}

/// A request as a middleware's `next` passes it on.
#[derive(Debug)]
pub struct NextRequest {
    /// The HTTP method.
    pub method: String,
    /// The path and query.
    pub url: String,
    /// The headers.
    pub headers: Vec<(String, String)>,
    /// The body, when it has one.
    pub body: Option<Vec<u8>>,
    /// What the server knew of the connection (its peer, its client certificate).
    pub extensions: axum::http::Extensions,
}

/// What the rest of the server answered a middleware's `next`.
#[derive(Debug)]
pub struct NextResponse {
    /// The HTTP status.
    pub status: u16,
    /// The headers.
    pub headers: Vec<(String, String)>,
    /// The body, whole.
    pub body: Vec<u8>,
    /// Nothing of the server's answered it (a 404 the last-phase middleware may
    /// answer instead).
    pub unmatched: bool,
    /// For an unmatched request: the user it was authenticated as.
    pub user: Option<Arc<User>>,
}

/// The server's own handling past a middleware, which the HTTP layer provides
/// (`http/rest/middleware.rs`), so this module does not depend on it.
pub trait HttpNext: Send + Sync {
    /// Handles `request` as the server would past the middleware of `phase`.
    fn next(&self, phase: Phase, request: NextRequest) -> futures_util::future::BoxFuture<'static, NextResponse>;
}

/// One HTTP request for the scripts' middleware.
#[derive(Debug)]
pub struct HttpCall {
    /// Which middleware runs.
    pub phase: Phase,
    /// The HTTP method.
    pub method: String,
    /// The path and query.
    pub url: String,
    /// The headers.
    pub headers: axum::http::HeaderMap,
    /// The body, when it had one.
    pub body: Option<Vec<u8>>,
    /// The client's address.
    pub ip: String,
    /// The authenticated user (the last phase runs after authentication).
    pub user: Option<Arc<User>>,
    /// What the server knew of the connection, handed on to `next`.
    pub extensions: axum::http::Extensions,
}

impl HttpCall {
    /// Whom the request came from.
    fn client(&self) -> Client {
        Client { ip: self.ip.parse().ok(), secure: self.extensions.get::<crate::tls::OverTls>().is_some() }
    }
}

/// The client a request came from, as a script's context shows it (`ip`, `protocol`).
/// (An address, not its text: made text only when a script reads it.)
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Client {
    /// The client's address, when the connection has one.
    pub ip: Option<std::net::IpAddr>,
    /// Whether the request came over TLS.
    pub secure: bool,
}

impl Client {
    /// The client of a request with `extensions` (the connection's address and
    /// whether it is TLS, as the HTTP server marked them).
    pub fn of(extensions: &axum::http::Extensions) -> Client {
        let ip = extensions
            .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
            .map(|axum::extract::ConnectInfo(peer)| peer.ip());
        Client { ip, secure: extensions.get::<crate::tls::OverTls>().is_some() }
    }
}

/// A content type a script registered (`contentTypes.set(type, handler)`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScriptContentType {
    /// The media type (`text/yaml`), lower case.
    pub media: String,
    /// Its handler serializes responses.
    pub serialize: bool,
    /// Its handler deserializes request bodies.
    pub deserialize: bool,
}

/// A conversion a script's content type makes.
#[derive(Debug)]
pub enum Conversion {
    /// A response's value into the type's bytes.
    Serialize(Value),
    /// A request body in the type into a value.
    Deserialize(Vec<u8>),
}

/// What a conversion gave.
#[derive(Debug)]
pub enum Converted {
    /// A serialized response body.
    Bytes(Vec<u8>),
    /// A deserialized request body.
    Value(Value),
}

/// Which middleware the loaded scripts registered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Middleware {
    /// Some run first (`runFirst: true`).
    pub first: bool,
    /// Some run for what nothing else answered.
    pub last: bool,
}

/// Limits of the JavaScript runtimes (`javascript.*` in the configuration).
#[derive(Debug, Clone)]
pub struct ScriptSettings {
    /// Worker threads, each with its own runtime.
    pub workers: usize,
    /// Bytes one runtime may allocate.
    pub memory_limit: usize,
    /// The most the records one runtime keeps for reading again may cost, in
    /// bytes (`record_cache.rs`); 0 keeps none (`storage.caching: false`).
    pub record_cache: usize,
    /// How long one request (or one component's load) may run.
    pub timeout: Duration,
    /// Whether a failing request's message is sent to the client even when the
    /// script gave it no status (development); otherwise only the log has it.
    pub expose_errors: bool,
}

/// A component with scripts to load.
#[derive(Debug, Clone, PartialEq)]
pub struct ScriptComponent {
    /// The component's name.
    pub name: String,
    /// Its directory.
    pub dir: PathBuf,
    /// Its `jsResource` files, relative to `dir`, in load order.
    pub files: Vec<PathBuf>,
}

/// A resource a script exports, served over REST at its path.
#[derive(Debug, Clone, PartialEq)]
pub struct ScriptExport {
    /// The URL path (`Greeting`, `api/v1/Dog`).
    pub path: String,
    /// The component that exports it.
    pub component: String,
    /// The table it extends (database, table), when it is a table's class.
    pub table: Option<(String, String)>,
    /// For a table's class: the HTTP methods' handlers (`get`, `put`, `patch`,
    /// `post`, `delete`) the script defines itself (or their permission hooks); the
    /// others are the table's own and are served without JavaScript.
    pub overrides: Vec<String>,
}

impl ScriptExport {
    /// Whether JavaScript answers `method` (an HTTP method) for this export.
    pub fn handles(&self, method: &str) -> bool {
        if self.table.is_none() {
            return true;
        }
        let handler = match method {
            "GET" | "HEAD" => "get",
            "PUT" => "put",
            "PATCH" => "patch",
            "POST" => "post",
            "DELETE" => "delete",
            _ => return false,
        };
        self.overrides.iter().any(|o| o == handler)
    }
}

/// One REST request for a script's resource.
#[derive(Debug, Clone)]
pub struct ScriptRequest {
    /// The export (its path; its component, to which its log lines are attributed).
    pub export: Arc<ScriptExport>,
    /// The HTTP method.
    pub method: axum::http::Method,
    /// The record id the URL names (typed by the table's key, for a table's class),
    /// `None` for the collection or the resource itself.
    pub id: Option<Value>,
    /// Whether the URL names the collection (`/Name/` or `/Name/?query`).
    pub collection: bool,
    /// The request's URL (its path and query string).
    pub uri: axum::http::Uri,
    /// The authenticated user; `None` for a request without credentials.
    pub user: Option<Arc<User>>,
    /// The request's headers (made JavaScript strings only when a script reads them).
    pub headers: axum::http::HeaderMap,
    /// The decoded body, when it had one.
    pub body: Option<Value>,
    /// Whom it came from.
    pub client: Client,
}

/// What a script answered.
#[derive(Debug, Clone, PartialEq)]
pub struct ScriptReply {
    /// The HTTP status.
    pub status: u16,
    /// Headers the script set.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: ReplyBody,
}

/// A reply's body.
#[derive(Debug, Clone, PartialEq)]
pub enum ReplyBody {
    /// No body.
    Empty,
    /// A value, encoded in the format the client asked for.
    Value(Value),
    /// Bytes sent as they are (a `{status, headers, body}` response's body).
    Raw(Vec<u8>),
    /// A record as a table's `get` read it, answered as a whole-record REST read is
    /// (the handler returned the very record it was given).
    Record(lyre_core::RecordBody),
}

/// Why a script's request has no reply of its own.
#[derive(Debug, thiserror::Error)]
pub enum ScriptError {
    /// Every worker is busy and the queue is full.
    #[error("every JavaScript worker is busy; try again shortly")]
    Busy,
    /// No loaded component exports this path.
    #[error("no JavaScript resource is exported at '{0}'")]
    NotExported(String),
    /// The request ran past the time budget and was stopped.
    #[error("the JavaScript resource ran past its {0:?} time budget and was stopped")]
    Timeout(Duration),
    /// The runtime ran out of memory; it is rebuilt.
    #[error("the JavaScript resource ran out of memory ({0} bytes per runtime) and was stopped")]
    OutOfMemory(usize),
    /// The worker ended (the server is stopping, or its runtime could not be rebuilt).
    #[error("the JavaScript worker stopped before answering")]
    Stopped,
    /// The engine failed outside the script (a conversion, an engine error).
    #[error("{0}")]
    Engine(String),
    /// The script's code threw an error stating an HTTP error status (Harper's
    /// `statusCode`) where Lyre, not the script, answers the client: a source's
    /// `get`.
    #[error("{message}")]
    Stated {
        /// The status, 400 to 599.
        status: u16,
        /// The error's message.
        message: String,
    },
}

impl ScriptError {
    /// The HTTP status this error is answered with.
    pub fn status(&self) -> u16 {
        match self {
            ScriptError::Busy | ScriptError::Stopped => 503,
            ScriptError::NotExported(_) => 404,
            ScriptError::Timeout(_) | ScriptError::OutOfMemory(_) | ScriptError::Engine(_) => 500,
            ScriptError::Stated { status, .. } => *status,
        }
    }
}

/// What one component's scripts published.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ScriptsLoaded {
    /// The resources they export.
    pub exports: Vec<ScriptExport>,
    /// The tables they gave a source (`tables.T.sourcedFrom(Source)`).
    pub sources: Vec<DeclaredSource>,
    /// The HTTP middleware they registered (`server.http`).
    pub middleware: Middleware,
    /// The content types they registered.
    pub content_types: Vec<ScriptContentType>,
    /// The computed attributes they gave a function (`setComputedAttribute`):
    /// `(database, table, attribute)`.
    pub computed: Vec<(String, String, String)>,
}

/// A table a script gave a source.
#[derive(Debug, Clone, PartialEq)]
pub struct DeclaredSource {
    /// The table's database.
    pub database: String,
    /// The table.
    pub table: String,
    /// The source class's name.
    pub name: String,
    /// How long what it answers stays fresh (`{expiration: seconds}`).
    pub expiration: Option<Duration>,
}

/// What loading each component's scripts gave: what they publish, or why they
/// failed (file, line and message).
pub type LoadReport = BTreeMap<String, Result<ScriptsLoaded, String>>;

/// One set of workers that loaded the same scripts.
struct Generation {
    jobs: mpsc::Sender<worker::Job>,
    /// Jobs of requests a middleware's `next` passed on.
    nested: mpsc::Sender<worker::Job>,
    /// Computed attributes' registered functions to run.
    computes: mpsc::Sender<worker::Compute>,
    /// The middleware its scripts registered.
    middleware: Middleware,
    /// The content types its scripts registered.
    content_types: Arc<[ScriptContentType]>,
    /// The computed attributes its scripts gave a function.
    computed: HashSet<(String, String, String)>,
    /// The paths its scripts export.
    exports: BTreeMap<String, ScriptExport>,
}

/// Queues `job` for the generation's workers; refused when the queue is full.
fn submit(generation: &Generation, job: worker::Job) -> Result<(), ScriptError> {
    // What a request a middleware passed on needs is run by the worker waiting for it.
    let queue = if crate::passed_on::is_marked() { &generation.nested } else { &generation.jobs };
    queue.try_send(job).map_err(|err| match err {
        mpsc::error::TrySendError::Full(_) => ScriptError::Busy,
        mpsc::error::TrySendError::Closed(_) => ScriptError::Stopped,
    })
}

/// A caching table's source that is a script's class, as the cache calls it.
pub struct ScriptSource {
    scripts: std::sync::Weak<Scripts>,
    declared: DeclaredSource,
}

impl ScriptSource {
    /// The source `declared`, answered by `scripts`' workers.
    pub fn new(scripts: &Arc<Scripts>, declared: DeclaredSource) -> Self {
        Self { scripts: Arc::downgrade(scripts), declared }
    }
}

impl RecordSource for ScriptSource {
    fn get(&self, id: &Value) -> futures_util::future::BoxFuture<'static, Result<CodeAnswer, SourceFailure>> {
        let (scripts, id) = (self.scripts.clone(), id.clone());
        let (database, table) = (self.declared.database.clone(), self.declared.table.clone());
        Box::pin(async move {
            let scripts =
                scripts.upgrade().ok_or_else(|| SourceFailure::Failed("the server is stopping".to_string()))?;
            scripts.source_get(&database, &table, &id).await.map_err(|err| match err {
                ScriptError::Stated { status, message } => SourceFailure::Stated { status, message },
                ScriptError::Timeout(_) => SourceFailure::TimedOut(err.to_string()),
                other => SourceFailure::Failed(other.to_string()),
            })
        })
    }

    fn describe(&self) -> String {
        format!("{} of {}.{}", self.declared.name, self.declared.database, self.declared.table)
    }
}

/// The JavaScript host: the current generation of workers.
pub struct Scripts {
    engine: Arc<Engine>,
    grammar: Arc<dyn RestGrammar>,
    settings: ScriptSettings,
    current: RwLock<Option<Arc<Generation>>>,
    /// The server's handling past a middleware, once the HTTP layer has started.
    next: Arc<std::sync::OnceLock<Arc<dyn HttpNext>>>,
}

impl Scripts {
    /// A host with no scripts loaded yet.
    pub fn new(engine: Arc<Engine>, grammar: Arc<dyn RestGrammar>, settings: ScriptSettings) -> Self {
        Self { engine, grammar, settings, current: RwLock::new(None), next: Default::default() }
    }

    /// Gives the middleware's `next` the server's own handling (set once, when the
    /// HTTP layer starts; scripts may load before).
    pub fn set_http_next(&self, next: Arc<dyn HttpNext>) {
        let _ = self.next.set(next);
    }

    /// Which middleware the loaded scripts registered.
    pub fn middleware(&self) -> Middleware {
        self.current.read().as_ref().map(|g| g.middleware).unwrap_or_default()
    }

    /// The content types the loaded scripts registered; `None` when they registered
    /// none (asked on every request: nothing is allocated then).
    pub fn content_types(&self) -> Option<Arc<[ScriptContentType]>> {
        self.current.read().as_ref().filter(|g| !g.content_types.is_empty()).map(|g| g.content_types.clone())
    }

    /// Converts with the handler a script registered for `media`: a value into its
    /// bytes, or bytes into a value.
    pub async fn convert(&self, media: &str, conversion: Conversion) -> Result<Converted, ScriptError> {
        let generation = self.current.read().clone().ok_or(ScriptError::Stopped)?;
        let (reply, answer) = oneshot::channel();
        submit(&generation, worker::Job::Convert { media: media.to_string(), conversion, reply })?;
        answer.await.map_err(|_| ScriptError::Stopped)?
    }

    /// Runs the middleware of `call.phase` on one HTTP request.
    pub async fn http(&self, call: HttpCall) -> Result<ScriptReply, ScriptError> {
        let generation = self.current.read().clone().ok_or(ScriptError::Stopped)?;
        let (reply, answer) = oneshot::channel();
        submit(&generation, worker::Job::Http { call: Box::new(call), reply })?;
        answer.await.map_err(|_| ScriptError::Stopped)?
    }

    /// Loads `components`' scripts into a new generation of workers and serves
    /// from it; the previous generation ends once its requests are answered.
    /// Components whose scripts fail are reported and left out; the rest serve.
    pub async fn load(&self, components: Vec<ScriptComponent>) -> LoadReport {
        let previous = self.current.read().as_ref().map(|g| g.computed.clone()).unwrap_or_default();
        if components.is_empty() {
            *self.current.write() = None;
            self.reindex_computed(&previous).await;
            return LoadReport::new();
        }
        let (jobs, receiver) = mpsc::channel(QUEUE_DEPTH);
        let (computes, computed) = mpsc::channel(QUEUE_DEPTH);
        let (nested, passed) = mpsc::channel(QUEUE_DEPTH);
        let queues = Arc::new(worker::Queues {
            jobs: tokio::sync::Mutex::new(receiver),
            nested: tokio::sync::Mutex::new(passed),
            computes: tokio::sync::Mutex::new(computed),
        });
        let spec = Arc::new(worker::Spec {
            components,
            engine: self.engine.clone(),
            grammar: self.grammar.clone(),
            settings: self.settings.clone(),
            next: self.next.clone(),
        });
        let mut reports = Vec::new();
        for index in 0..self.settings.workers.max(1) {
            let (loaded, report) = oneshot::channel();
            if let Err(err) = worker::spawn(index, spec.clone(), queues.clone(), loaded) {
                tracing::error!(error = %err, "could not start a JavaScript worker thread");
                continue;
            }
            reports.push(report);
        }
        // Every worker loads the same files; a component serves only when every
        // worker loaded it (one that failed in one runtime would fail its requests
        // there), with what the first worker found.
        let mut report: Option<LoadReport> = None;
        for pending in reports {
            let Ok(outcome) = pending.await else { continue };
            match &mut report {
                None => report = Some(outcome),
                Some(merged) => {
                    for (name, result) in outcome {
                        if let (Err(message), Some(Ok(_))) = (result, merged.get(&name)) {
                            merged.insert(name, Err(message));
                        }
                    }
                }
            }
        }
        let report = report.unwrap_or_else(|| {
            spec.components
                .iter()
                .map(|c| (c.name.clone(), Err(format!("{}: no JavaScript worker could start", c.name))))
                .collect()
        });
        let loaded = || report.values().filter_map(|outcome| outcome.as_ref().ok());
        let exports =
            loaded().flat_map(|loaded| &loaded.exports).map(|export| (export.path.clone(), export.clone())).collect();
        let middleware =
            Middleware { first: loaded().any(|l| l.middleware.first), last: loaded().any(|l| l.middleware.last) };
        let mut content_types: Vec<ScriptContentType> = Vec::new();
        for registered in loaded().flat_map(|l| &l.content_types) {
            // A later registration of a type replaces an earlier one, as a Map's `set`.
            content_types.retain(|t| t.media != registered.media);
            content_types.push(registered.clone());
        }
        let content_types = content_types.into();
        let computed = loaded().flat_map(|l| l.computed.iter().cloned()).collect();
        *self.current.write() =
            Some(Arc::new(Generation { jobs, nested, computes, middleware, content_types, computed, exports }));
        self.reindex_computed(&previous).await;
        report
    }

    /// Indexes again every indexed `@computed` attribute whose code may have
    /// changed with the scripts: those without an expression (a function computes
    /// them, or nothing does) and those a function computes now or computed in the
    /// `previous` generation.
    async fn reindex_computed(&self, previous: &HashSet<(String, String, String)>) {
        for name in self.engine.database_names() {
            let Ok(db) = self.engine.database(&name) else { continue };
            let schema = db.schema();
            for table in schema.tables.values() {
                let attributes: Vec<String> = table
                    .computed_attributes()
                    .filter(|(attribute, computed)| {
                        let key = (name.clone(), table.name.clone(), attribute.name.clone());
                        attribute.indexed
                            && (computed.from.is_none()
                                || previous.contains(&key)
                                || self.computes_with_function(&name, &table.name, &attribute.name))
                    })
                    .map(|(attribute, _)| attribute.name.clone())
                    .collect();
                if attributes.is_empty() {
                    continue;
                }
                if let Err(err) = db.reindex_computed(&lyre_core::Context::system(), &table.name, attributes).await {
                    tracing::error!(database = %name, table = %table.name, error = %err, "indexing computed attributes failed");
                }
            }
        }
    }

    /// Answers `request` with the resource its export names.
    pub async fn call(&self, request: ScriptRequest) -> Result<ScriptReply, ScriptError> {
        let generation =
            self.current.read().clone().ok_or_else(|| ScriptError::NotExported(request.export.path.clone()))?;
        if !generation.exports.contains_key(&request.export.path) {
            return Err(ScriptError::NotExported(request.export.path.clone()));
        }
        let (reply, answer) = oneshot::channel();
        submit(&generation, worker::Job::Request { request: Box::new(request), reply })?;
        answer.await.map_err(|_| ScriptError::Stopped)?
    }

    /// Asks the source a script gave `database.table` for the record with key `id`.
    pub async fn source_get(&self, database: &str, table: &str, id: &Value) -> Result<CodeAnswer, ScriptError> {
        let generation = self.current.read().clone().ok_or(ScriptError::Stopped)?;
        let (reply, answer) = oneshot::channel();
        let job =
            worker::Job::Source { database: database.to_string(), table: table.to_string(), id: id.clone(), reply };
        submit(&generation, job)?;
        answer.await.map_err(|_| ScriptError::Stopped)?
    }

    /// Whether a loaded script gave `attribute` of `database.table` a function
    /// (which then computes it, even over its `@computed(from:)` expression, as
    /// Harper's `setComputedAttribute` replaces the expression's resolver).
    pub fn computes_with_function(&self, database: &str, table: &str, attribute: &str) -> bool {
        self.current
            .read()
            .as_ref()
            .is_some_and(|g| g.computed.iter().any(|(d, t, a)| d == database && t == table && a == attribute))
    }

    /// Computes `attribute` of a `database.table` record with the function a script
    /// registered for it (`setComputedAttribute`), waiting (blocking the calling
    /// thread, which must not be a worker's) up to the time budget. `None` when no
    /// scripts are loaded or none registered one.
    pub fn compute_blocking(
        &self,
        database: &str,
        table: &str,
        attribute: &str,
        record: &Object,
    ) -> Result<Option<Value>, String> {
        let Some(generation) = self.current.read().clone() else { return Ok(None) };
        let (reply, answer) = std::sync::mpsc::sync_channel(1);
        let job = worker::Compute {
            database: database.to_string(),
            table: table.to_string(),
            attribute: attribute.to_string(),
            record: record.clone(),
            reply,
        };
        generation.computes.try_send(job).map_err(|err| match err {
            mpsc::error::TrySendError::Full(_) => ScriptError::Busy.to_string(),
            mpsc::error::TrySendError::Closed(_) => ScriptError::Stopped.to_string(),
        })?;
        match answer.recv_timeout(self.settings.timeout) {
            Ok(outcome) => outcome,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                Err(ScriptError::Timeout(self.settings.timeout).to_string())
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => Err(ScriptError::Stopped.to_string()),
        }
    }

    /// Stops serving scripts: the workers end once the requests they hold are answered.
    pub fn stop(&self) {
        *self.current.write() = None;
    }
}
