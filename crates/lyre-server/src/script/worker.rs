//! One JavaScript worker: a thread with its own runtime (QuickJS-NG), which loads
//! every component's scripts and then answers requests one at a time.
//!
//! A request runs with a deadline the runtime's interrupt handler checks (a loop
//! that never yields is stopped there) and under a timer around the whole call (a
//! script waiting forever is stopped there). Whatever the request left running
//! (promises nobody awaited) goes on between requests, as its user, within one
//! more budget; timers' callbacks run between requests too, each within a budget.
//! A runtime that was stopped or ran out of memory is rebuilt, scripts loaded
//! again, before the worker serves another request.

use std::cell::Cell;
use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use lyre_core::{Code, Engine, Object, Value};
use rquickjs::context::EvalOptions;
use rquickjs::function::Args;
use rquickjs::{Array, AsyncContext, AsyncRuntime, CaughtError, Ctx, Function, Module, Promise, TypedArray};
use tokio::sync::{Mutex, mpsc, oneshot};

use super::convert::{from_js, to_js};
use super::modules::ComponentModules;
use super::native::{self, Bridge};
use super::web::{self, Web};
use super::{
    Conversion, Converted, DeclaredSource, HttpCall, HttpNext, LoadReport, Middleware, Phase, ReplyBody, RestGrammar,
    ScriptComponent, ScriptContentType, ScriptError, ScriptExport, ScriptReply, ScriptRequest, ScriptSettings,
    ScriptsLoaded,
};
use crate::cache::source::CodeAnswer;

/// The web-standard globals, evaluated first in every runtime.
const WEB: &str = include_str!("web.js");
/// The Resource API, evaluated next, before the components' modules.
const PRELUDE: &str = include_str!("prelude.js");

/// How the engine's out-of-memory error reads once the dispatcher caught it.
const OUT_OF_MEMORY: &str = "InternalError: out of memory";

/// What a client is told of a script's failure that the script gave no status,
/// unless `expose_errors` is on.
const UNSTATED_FAILURE: &str = "Error: the JavaScript resource failed (the server's log has the error)";

/// The stack each worker thread gets (QuickJS recurses on the native stack; its
/// own limit, below, stops a deep recursion well before this).
const THREAD_STACK: usize = 8 << 20;
/// QuickJS's own stack limit: a deep recursion is a `RangeError`, not a crash.
const JS_STACK: usize = 4 << 20;

/// What every worker of a generation loads.
pub(super) struct Spec {
    pub components: Vec<ScriptComponent>,
    pub engine: Arc<Engine>,
    pub grammar: Arc<dyn RestGrammar>,
    pub settings: ScriptSettings,
    pub next: Arc<std::sync::OnceLock<Arc<dyn HttpNext>>>,
}

/// Work for a worker, and where its answer goes.
pub(super) enum Job {
    /// A REST request for an exported resource.
    Request { request: Box<ScriptRequest>, reply: oneshot::Sender<Result<ScriptReply, ScriptError>> },
    /// A caching table's source asked for one record.
    Source { database: String, table: String, id: Value, reply: oneshot::Sender<Result<CodeAnswer, ScriptError>> },
    /// An HTTP request for the scripts' middleware (`server.http`).
    Http { call: Box<HttpCall>, reply: oneshot::Sender<Result<ScriptReply, ScriptError>> },
    /// A conversion by a content type a script registered.
    Convert { media: String, conversion: Conversion, reply: oneshot::Sender<Result<Converted, ScriptError>> },
}

/// A registered function computing an attribute (`setComputedAttribute`), asked by
/// a thread that waits for the answer (the writer, a request thread). Workers take
/// these from their own queue, even while a request of theirs waits.
pub(super) struct Compute {
    pub database: String,
    pub table: String,
    pub attribute: String,
    pub record: Object,
    pub reply: std::sync::mpsc::SyncSender<Result<Option<Value>, String>>,
}

/// The queues a generation's workers share.
pub(super) struct Queues {
    pub jobs: Mutex<mpsc::Receiver<Job>>,
    /// Jobs a request passed on by a middleware's `next` needs (a worker waiting
    /// for that `next` runs them itself).
    pub nested: Mutex<mpsc::Receiver<Job>>,
    pub computes: Mutex<mpsc::Receiver<Compute>>,
}

/// Starts worker `index`; it reports its load through `loaded`, then serves the
/// queues until they close.
pub(super) fn spawn(
    index: usize,
    spec: Arc<Spec>,
    queues: Arc<Queues>,
    loaded: oneshot::Sender<LoadReport>,
) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name(format!("lyre-js-{index}"))
        .stack_size(THREAD_STACK)
        .spawn(move || run(&spec, queues, loaded))
        .map(|_| ())
}

fn run(spec: &Spec, queues: Arc<Queues>, loaded: oneshot::Sender<LoadReport>) {
    super::computed::mark_worker_thread();
    // Woken at once, a worker answered each request alone and the two threads
    // switched twice per request on a shared core: `GET` of a small JSON answer,
    // one request thread and one worker on one core, 21,000 → 47,000 requests/s.
    lyre_core::task::yield_to_request_threads("a JavaScript worker");
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(err) => {
            tracing::error!(error = %err, "a JavaScript worker could not start its event loop");
            return;
        }
    };
    // Timers and the runtime's driver are tasks of this thread's own set.
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime, async move {
        let mut js = match Js::start(spec, &queues).await {
            Ok((js, report)) => {
                let _ = loaded.send(report);
                js
            }
            Err(message) => {
                let report = spec.components.iter().map(|c| (c.name.clone(), Err(message.clone()))).collect();
                let _ = loaded.send(report);
                return;
            }
        };
        loop {
            let healthy = tokio::select! {
                job = async { queues.jobs.lock().await.recv().await } => match job {
                    None => break,
                    Some(job) => js.run_job(job).await,
                },
                Some(job) = async { queues.nested.lock().await.recv().await } => js.run_job(job).await,
                Some(id) = async { js.due.lock().await.recv().await } => js.fire_timer(id).await,
                Some(job) = async { queues.computes.lock().await.recv().await } => js.compute(job).await,
            };
            if !healthy {
                drop(js);
                js = match Js::start(spec, &queues).await {
                    Ok((fresh, _)) => fresh,
                    Err(message) => {
                        tracing::error!(error = %message, "a JavaScript worker could not rebuild its runtime");
                        return;
                    }
                };
            }
        }
    });
}

/// One runtime with the components' scripts loaded.
struct Js {
    /// The context (it holds its runtime).
    context: AsyncContext,
    /// When the code running now must stop; checked by the interrupt handler.
    deadline: Rc<Cell<Option<Instant>>>,
    bridge: Rc<Bridge>,
    web: Rc<Web>,
    /// Timers that are due, by id.
    due: Mutex<mpsc::UnboundedReceiver<u32>>,
    /// Runs the promises' host work between requests.
    driver: tokio::task::JoinHandle<()>,
    /// The generation's queues (computes are answered while a promise is waited on).
    queues: Arc<Queues>,
    /// Set while the components' scripts load: a promise waited on then answers no
    /// other job (the runtime is not whole yet).
    loading: Cell<bool>,
    settings: ScriptSettings,
    /// The prelude's request entry points, once it is evaluated.
    entries: std::cell::OnceCell<Entries>,
}

/// The prelude's functions every request calls, held rather than looked up among
/// the globals per request.
struct Entries {
    /// `__lyre_dispatch`: answers a REST request.
    dispatch: rquickjs::Persistent<Function<'static>>,
    /// `__lyre_settled`: answers a request whose handler's promise settled.
    settled: rquickjs::Persistent<Function<'static>>,
}

impl Entries {
    fn of(ctx: &Ctx<'_>) -> rquickjs::Result<Self> {
        let globals = ctx.globals();
        let held = |name: &str| globals.get::<_, Function>(name).map(|f| rquickjs::Persistent::save(ctx, f));
        Ok(Self { dispatch: held("__lyre_dispatch")?, settled: held("__lyre_settled")? })
    }
}

impl Drop for Js {
    fn drop(&mut self) {
        // The objects it holds are let go while their runtime still lives.
        self.bridge.let_go();
        drop(self.entries.take());
        self.web.cancel_all();
        self.driver.abort();
    }
}

impl Js {
    /// A fresh runtime with the prelude and every component's scripts loaded.
    async fn start(spec: &Spec, queues: &Arc<Queues>) -> Result<(Js, LoadReport), String> {
        let runtime = AsyncRuntime::new().map_err(|e| format!("the JavaScript runtime could not start: {e}"))?;
        runtime.set_memory_limit(spec.settings.memory_limit).await;
        runtime.set_max_stack_size(JS_STACK).await;
        let deadline: Rc<Cell<Option<Instant>>> = Rc::new(Cell::new(None));
        let watched = deadline.clone();
        runtime
            .set_interrupt_handler(Some(Box::new(move || watched.get().is_some_and(|at| Instant::now() >= at))))
            .await;
        let modules = ComponentModules::new(spec.components.iter().map(|c| c.dir.clone()));
        runtime.set_loader(modules.clone(), modules.clone()).await;
        let context =
            AsyncContext::full(&runtime).await.map_err(|e| format!("the JavaScript context could not start: {e}"))?;
        let bridge = Rc::new(Bridge::new(
            spec.engine.clone(),
            spec.grammar.clone(),
            spec.next.clone(),
            spec.settings.record_cache,
        ));
        let (timers, due) = mpsc::unbounded_channel();
        let web = Rc::new(Web::new(timers, spec.settings.timeout, spec.settings.memory_limit));
        let driver = tokio::task::spawn_local(runtime.drive());
        let due = Mutex::new(due);
        let queues = queues.clone();
        let loading = Cell::new(true);
        let js = Js {
            context,
            deadline,
            bridge,
            web,
            due,
            driver,
            queues,
            loading,
            settings: spec.settings.clone(),
            entries: std::cell::OnceCell::new(),
        };
        let report = js.load(&spec.components, &modules).await?;
        let entries = js.context.with(|ctx| Entries::of(&ctx).map_err(|e| describe(&ctx, e, Place::Full))).await;
        let _ = js.entries.set(entries.map_err(|e| format!("Lyre's JavaScript API failed to start: {e}"))?);
        js.loading.set(false);
        Ok((js, report))
    }

    /// Evaluates the prelude, then each component's files in order.
    async fn load(&self, components: &[ScriptComponent], modules: &ComponentModules) -> Result<LoadReport, String> {
        let (bridge, web, deadline, timeout) = (&self.bridge, &self.web, &self.deadline, self.settings.timeout);
        self.context
            .async_with(async |ctx| -> Result<LoadReport, String> {
                deadline.set(Some(Instant::now() + timeout));
                let prelude = (|| -> rquickjs::Result<()> {
                    evaluate(&ctx, "web.js", WEB, web::install(&ctx, web)?)?;
                    let native = native::install(&ctx, bridge)?;
                    super::modules::install(&ctx, &native, modules)?;
                    evaluate(&ctx, "prelude.js", PRELUDE, native)
                })();
                prelude.map_err(|e| {
                    format!("Lyre's JavaScript API failed to start: {}", describe(&ctx, e, Place::Full))
                })?;
                let mut report = LoadReport::new();
                for component in components {
                    deadline.set(Some(Instant::now() + timeout));
                    bridge.set_component(&component.name);
                    let loading = load_component(&ctx, component, self);
                    let outcome = match tokio::time::timeout(timeout, loading).await {
                        Ok(outcome) => outcome,
                        Err(_) => Err(format!("its scripts did not finish loading within {timeout:?}")),
                    };
                    report.insert(component.name.clone(), outcome.map_err(|e| format!("{}: {e}", component.name)));
                }
                deadline.set(None);
                Ok(report)
            })
            .await
    }

    /// Runs one job from a queue and answers it; `false` when the runtime must be
    /// rebuilt afterwards.
    async fn run_job(&self, job: Job) -> bool {
        match job {
            Job::Request { request, reply } => {
                let (outcome, healthy) = self.serve(*request).await;
                let _ = reply.send(outcome);
                healthy
            }
            Job::Source { database, table, id, reply } => {
                let (outcome, healthy) = self.source_get(&database, &table, &id).await;
                let _ = reply.send(outcome);
                healthy
            }
            Job::Http { call, reply } => {
                let (outcome, healthy) = self.serve_http(*call).await;
                let _ = reply.send(outcome);
                healthy
            }
            Job::Convert { media, conversion, reply } => {
                let (outcome, healthy) = self.convert(&media, conversion).await;
                let _ = reply.send(outcome);
                healthy
            }
        }
    }

    /// Runs a job that a request this worker is answering waits for (one its
    /// middleware's `next` passed on), inside that request's call and budget: no
    /// other worker may be free to take it.
    fn run_inline<'a, 'js: 'a>(&'a self, ctx: &'a Ctx<'js>, job: Job) -> Pin<Box<dyn Future<Output = ()> + 'a>> {
        Box::pin(async move {
            match job {
                Job::Request { mut request, reply } => {
                    let handle = self.bridge.begin(
                        request.user.clone(),
                        std::mem::take(&mut request.headers),
                        request.client,
                        Some(request.export.clone()),
                    );
                    self.bridge.set_component(&request.export.component);
                    let outcome = self.serve_in(ctx, &request, handle).await.map_err(|e| self.engine_failure(e));
                    self.bridge.answered(handle);
                    let _ = reply.send(outcome);
                }
                Job::Source { database, table, id, reply } => {
                    let outcome = self.source_in(ctx, &database, &table, &id).await;
                    let _ = reply.send(outcome.map_err(|e| self.engine_failure(e)).and_then(|answer| answer));
                }
                Job::Http { mut call, reply } => {
                    let handle =
                        self.bridge.begin(call.user.clone(), std::mem::take(&mut call.headers), call.client(), None);
                    self.bridge.hand_on(handle, std::mem::take(&mut call.extensions));
                    let outcome = self.http_in(ctx, &call, handle).await.map_err(|e| self.engine_failure(e));
                    self.bridge.answered(handle);
                    let _ = reply.send(outcome);
                }
                Job::Convert { media, conversion, reply } => {
                    let outcome = self.convert_in(ctx, &media, &conversion).await.map_err(ScriptError::Engine);
                    let _ = reply.send(outcome);
                }
            }
        })
    }

    /// Computes an attribute with a registered function, between requests; `false`
    /// when the runtime must be rebuilt afterwards.
    async fn compute(&self, job: Compute) -> bool {
        let call = self.context.async_with(async |ctx| compute(&ctx, &job));
        let (outcome, healthy) =
            self.judge(self.within_budget(call).await, format_args!("a computed attribute's function"));
        let _ = job.reply.send(outcome.map_err(|e| e.to_string()));
        healthy
    }

    /// Answers one request; `false` when the runtime must be rebuilt afterwards.
    async fn serve(&self, mut request: ScriptRequest) -> (Result<ScriptReply, ScriptError>, bool) {
        let handle = self.bridge.begin(
            request.user.clone(),
            std::mem::take(&mut request.headers),
            request.client,
            Some(request.export.clone()),
        );
        self.bridge.set_component(&request.export.component);
        let request = &request;
        let call = self.context.async_with(async |ctx| self.serve_in(&ctx, request, handle).await);
        let outcome = self.within_budget(call).await;
        self.bridge.answered(handle);
        let outcome = match outcome {
            Ok(reply) if is_out_of_memory(&reply) => Err(ScriptError::OutOfMemory(self.settings.memory_limit)),
            other => other,
        };
        self.client_facing(self.judge(outcome, format_args!("a JavaScript request for {}", request.export.path)))
    }

    /// The prelude's entry point `held` picks (held once [`Js::start`] evaluated the
    /// prelude, before any request).
    fn entry<'js>(
        &self,
        ctx: &Ctx<'js>,
        held: fn(&Entries) -> &rquickjs::Persistent<Function<'static>>,
    ) -> rquickjs::Result<Function<'js>> {
        let entries = self
            .entries
            .get()
            .ok_or_else(|| rquickjs::Exception::throw_internal(ctx, "Lyre's JavaScript API is not loaded yet"))?;
        held(entries).clone().restore(ctx)
    }

    /// A request's answer, computed in `ctx`.
    async fn serve_in<'js>(&self, ctx: &Ctx<'js>, request: &ScriptRequest, handle: u32) -> Result<ScriptReply, String> {
        let run = async || -> rquickjs::Result<ScriptReply> {
            let dispatch = self.entry(ctx, |e| &e.dispatch)?;
            let answer: rquickjs::Value = dispatch.call_arg(dispatch_args(ctx, request, handle)?)?;
            let reply = match answer.as_promise() {
                Some(promise) => {
                    // The microtasks the call queued run before its outcome is read, as
                    // they would before an `await` of it resumed (one may set a header):
                    // a few here, more through the runtime's driver.
                    let mut inline = INLINE_JOBS;
                    while inline > 0 && ctx.execute_pending_job() {
                        inline -= 1;
                    }
                    if inline == 0 {
                        run_queued_jobs().await;
                    }
                    let outcome = match promise.result::<rquickjs::Value>() {
                        // Settled within its call or by the microtasks it queued.
                        Some(outcome) => outcome,
                        None => settle(ctx, promise.clone(), self).await,
                    };
                    let (value, failed) = match outcome {
                        Ok(value) => (value, false),
                        Err(rquickjs::Error::Exception) => (ctx.catch(), true),
                        Err(other) => return Err(other),
                    };
                    let settled = self.entry(ctx, |e| &e.settled)?;
                    let answer: rquickjs::Value = settled.call((handle, value, failed))?;
                    match answer.as_promise().cloned() {
                        // The answer waits for writes the handler left unawaited.
                        Some(later) => match later.result::<Array>() {
                            Some(answer) => answer?,
                            None => settle(ctx, later, self).await?,
                        },
                        None => Array::from_value(answer)?,
                    }
                }
                // A synchronous handler's answer: nothing to wait for.
                None => Array::from_value(answer)?,
            };
            let read = self.bridge.take_read();
            read_reply(ctx, &reply, self.settings.expose_errors, (&request.export.path, request.method.as_str()), read)
        };
        run().await.map_err(|e| describe(ctx, e, Place::Full))
    }

    /// Runs the middleware of `call.phase` on one HTTP request; `false` when the
    /// runtime must be rebuilt afterwards.
    async fn serve_http(&self, mut call: HttpCall) -> (Result<ScriptReply, ScriptError>, bool) {
        let handle = self.bridge.begin(call.user.clone(), std::mem::take(&mut call.headers), call.client(), None);
        self.bridge.hand_on(handle, std::mem::take(&mut call.extensions));
        self.bridge.set_component("middleware");
        let call = &call;
        let run = self.context.async_with(async |ctx| self.http_in(&ctx, call, handle).await);
        let outcome = self.within_budget(run).await;
        self.bridge.answered(handle);
        self.client_facing(self.judge(outcome, format_args!("the HTTP middleware for {} {}", call.method, call.url)))
    }

    /// The middleware's answer to `call`, computed in `ctx`.
    async fn http_in<'js>(&self, ctx: &Ctx<'js>, call: &HttpCall, handle: u32) -> Result<ScriptReply, String> {
        let phase = match call.phase {
            Phase::First => "first",
            Phase::Last => "last",
        };
        let run = async || -> rquickjs::Result<ScriptReply> {
            let http: Function = ctx.globals().get("__lyre_http")?;
            let body = match &call.body {
                Some(bytes) => TypedArray::<u8>::new(ctx.clone(), bytes.as_slice())?.into_value(),
                None => rquickjs::Value::new_null(ctx.clone()),
            };
            let answer: rquickjs::Value =
                http.call((phase, call.method.as_str(), call.url.as_str(), body, call.ip.as_str(), handle))?;
            let reply = match answer.as_promise() {
                Some(promise) => settle(ctx, promise.clone(), self).await?,
                None => Array::from_value(answer)?,
            };
            read_reply(ctx, &reply, self.settings.expose_errors, ("middleware", &call.method), None)
        };
        run().await.map_err(|e| describe(ctx, e, Place::Full))
    }

    /// Converts with the content type a script registered for `media`; `false`
    /// when the runtime must be rebuilt afterwards.
    async fn convert(&self, media: &str, conversion: Conversion) -> (Result<Converted, ScriptError>, bool) {
        let conversion = &conversion;
        let call = self.context.async_with(async |ctx| self.convert_in(&ctx, media, conversion).await);
        let outcome = self.within_budget(call).await;
        self.judge(outcome, format_args!("the content type {media}"))
    }

    /// A content type's conversion, computed in `ctx`.
    async fn convert_in<'js>(&self, ctx: &Ctx<'js>, media: &str, conversion: &Conversion) -> Result<Converted, String> {
        let run = async || -> rquickjs::Result<Converted> {
            let convert: Function = ctx.globals().get("__lyre_content")?;
            let (kind, payload) = match conversion {
                Conversion::Serialize(value) => ("serialize", to_js(ctx, value)?),
                Conversion::Deserialize(bytes) => {
                    ("deserialize", TypedArray::<u8>::new(ctx.clone(), bytes.as_slice())?.into_value())
                }
            };
            let mut answer: rquickjs::Value = convert.call((kind, media, payload))?;
            if let Some(promise) = answer.as_promise() {
                answer = settle(ctx, promise.clone(), self).await?;
            }
            Ok(match conversion {
                Conversion::Deserialize(_) => Converted::Value(from_js(ctx, answer)?.unwrap_or(Value::Null)),
                Conversion::Serialize(_) => {
                    if let Some(text) = answer.as_string() {
                        Converted::Bytes(text.to_string()?.into_bytes())
                    } else if let Some(bytes) =
                        answer.as_object().and_then(|o| TypedArray::<u8>::from_object(o.clone()).ok())
                    {
                        Converted::Bytes(super::convert::copy_bytes(&bytes))
                    } else {
                        return Err(rquickjs::Error::new_from_js_message(
                            "value",
                            "bytes",
                            format!("the serialize of content type {media} must answer a string or bytes"),
                        ));
                    }
                }
            })
        };
        run().await.map_err(|e| describe(ctx, e, Place::Hidden))
    }

    /// Runs timer `id`'s callback (between requests, as nobody's request); `false`
    /// when the runtime must be rebuilt afterwards.
    async fn fire_timer(&self, id: u32) -> bool {
        self.web.fired(id);
        let fire = self.context.async_with(async |ctx| {
            let run = || -> rquickjs::Result<()> {
                let fire: Function = ctx.globals().get("__lyre_timer")?;
                fire.call::<_, ()>((id,))
            };
            run().map_err(|e| describe(&ctx, e, Place::Full))
        });
        let outcome = self.within_budget(fire).await;
        self.judge(outcome, format_args!("a JavaScript timer's callback")).1
    }

    /// Asks the source a script gave `database.table` for record `id`; `false`
    /// when the runtime must be rebuilt afterwards.
    async fn source_get(&self, database: &str, table: &str, id: &Value) -> (Result<CodeAnswer, ScriptError>, bool) {
        let call = self.context.async_with(async |ctx| self.source_in(&ctx, database, table, id).await);
        let outcome = self.within_budget(call).await.and_then(|answer| answer);
        self.client_facing(self.judge(outcome, format_args!("the source of {database}.{table}")))
    }

    /// A source's answer for record `id`, computed in `ctx`: its record, or the
    /// error status its code stated ([`ScriptError::Stated`]).
    async fn source_in<'js>(
        &self,
        ctx: &Ctx<'js>,
        database: &str,
        table: &str,
        id: &Value,
    ) -> Result<Result<CodeAnswer, ScriptError>, String> {
        let run = async || -> rquickjs::Result<Result<CodeAnswer, ScriptError>> {
            let source: Function = ctx.globals().get("__lyre_source")?;
            let promise: Promise = source.call((database, table, to_js(ctx, id)?))?;
            let answer: rquickjs::Object = settle(ctx, promise, self).await?;
            if let Some(status) = answer.get::<_, Option<u16>>("failed")? {
                return Ok(Err(ScriptError::Stated { status, message: answer.get("message")? }));
            }
            let record = match from_js(ctx, answer.get("record")?)? {
                Some(Value::Object(record)) => Some(record),
                _ => None,
            };
            let fresh_for = seconds(answer.get("expiration")?);
            Ok(Ok(CodeAnswer { record, fresh_for }))
        };
        run().await.map_err(|e| describe(ctx, e, Place::Full))
    }

    /// Runs `work` (one call into the runtime) within the time budget: the
    /// interrupt handler's deadline and a timer around it. What it left running goes
    /// on between requests, within one more budget.
    async fn within_budget<T>(&self, work: impl Future<Output = Result<T, String>>) -> Result<T, ScriptError> {
        let timeout = self.settings.timeout;
        self.deadline.set(Some(Instant::now() + timeout));
        let outcome = tokio::time::timeout(timeout, work).await;
        let overran = self.deadline.get().is_some_and(|at| Instant::now() >= at);
        self.deadline.set(Some(Instant::now() + timeout));
        match outcome {
            Ok(Ok(value)) if !overran => Ok(value),
            Ok(Ok(_)) | Err(_) => Err(ScriptError::Timeout(timeout)),
            Ok(Err(_)) if overran => Err(ScriptError::Timeout(timeout)),
            Ok(Err(message)) if message.contains("out of memory") => {
                Err(ScriptError::OutOfMemory(self.settings.memory_limit))
            }
            Ok(Err(message)) => Err(ScriptError::Engine(message)),
        }
    }

    /// A judged outcome of a job a client waits for, its error as the client is to
    /// see it ([`Js::shown`]).
    fn client_facing<T>(&self, (outcome, healthy): (Result<T, ScriptError>, bool)) -> (Result<T, ScriptError>, bool) {
        (outcome.map_err(|err| self.shown(err)), healthy)
    }

    /// An engine failure on a request's own path (inline: a job the request's
    /// middleware passed on), logged and then [`Js::shown`].
    fn engine_failure(&self, message: String) -> ScriptError {
        tracing::error!(error = %message, "a JavaScript resource failed");
        self.shown(ScriptError::Engine(message))
    }

    /// What a client is told of `err`. An engine failure outside the script's own
    /// replies (a getter or `toJSON` that throws while the reply is read, a value
    /// that cannot leave JavaScript, a source that throws) names the script's file
    /// and its message: with `expose_errors` off, the client is told only that the
    /// resource failed, as for a script's unstated errors (`read_reply`); the log
    /// has it whole.
    fn shown(&self, err: ScriptError) -> ScriptError {
        match err {
            ScriptError::Engine(_) if !self.settings.expose_errors => ScriptError::Engine(UNSTATED_FAILURE.to_string()),
            other => other,
        }
    }

    /// An outcome, logged (as `what`, written only then), and whether the runtime
    /// may serve on: one that was stopped or ran out of memory is rebuilt.
    fn judge<T>(
        &self,
        outcome: Result<T, ScriptError>,
        what: std::fmt::Arguments<'_>,
    ) -> (Result<T, ScriptError>, bool) {
        let healthy = match &outcome {
            Ok(_) => true,
            Err(ScriptError::Timeout(budget)) => {
                tracing::warn!("{what} ran past its {budget:?} budget and was stopped");
                false
            }
            Err(ScriptError::OutOfMemory(_)) => {
                tracing::warn!("{what} ran out of memory");
                false
            }
            Err(err) => {
                tracing::error!(error = %err, "{what} failed");
                true
            }
        };
        (outcome, healthy)
    }
}

/// Runs a registered function computing an attribute (`__lyre_compute`); it must
/// answer at once (an index is kept inside a write).
fn compute(ctx: &Ctx<'_>, job: &Compute) -> Result<Option<Value>, String> {
    let run = || -> rquickjs::Result<Option<Value>> {
        let call: Function = ctx.globals().get("__lyre_compute")?;
        let record = to_js(ctx, &Value::Object(job.record.clone()))?;
        let value: rquickjs::Value =
            call.call((job.database.as_str(), job.table.as_str(), job.attribute.as_str(), record))?;
        if value.is_promise() {
            return Err(rquickjs::Error::new_from_js_message(
                "promise",
                "value",
                "a computed attribute's function must answer at once, not with a promise",
            ));
        }
        from_js(ctx, value)
    };
    run().map_err(|e| describe(ctx, e, Place::Full))
}

/// Returns to `async_with` once, which runs the runtime's pending jobs (the
/// microtasks the call before queued) before it polls again: a promise they settle
/// is then read at once, without `settle`'s waiting (a callback made for the
/// promise, the queues watched).
async fn run_queued_jobs() {
    let mut returned = false;
    std::future::poll_fn(|cx| {
        if returned {
            return std::task::Poll::Ready(());
        }
        returned = true;
        cx.waker().wake_by_ref();
        std::task::Poll::Pending
    })
    .await
}

/// Waits for a script's promise while firing the timers that come due meanwhile
/// (the promise may be waiting for one of them), answering computes (a write it
/// waits for may wait on one), and running the jobs its middleware's `next`
/// passed on (the request it waits for may need this very worker).
async fn settle<'js, T: rquickjs::FromJs<'js> + 'js>(
    ctx: &Ctx<'js>,
    promise: Promise<'js>,
    js: &Js,
) -> rquickjs::Result<T> {
    let answer = promise.into_future::<T>();
    tokio::pin!(answer);
    loop {
        // Each queue is locked only while this waits on it, so a job run here may
        // wait on the same queues in turn.
        tokio::select! {
            settled = &mut answer => return settled,
            Some(job) = async { serving(js, &js.queues.computes).await } => {
                let _ = job.reply.send(compute(ctx, &job));
            }
            Some(job) = async { serving(js, &js.queues.nested).await } => js.run_inline(ctx, job).await,
            Some(id) = async { js.due.lock().await.recv().await } => {
                js.web.fired(id);
                let fire: Function = ctx.globals().get("__lyre_timer")?;
                if let Err(err) = fire.call::<_, ()>((id,)) {
                    tracing::error!(error = %describe(ctx, err, Place::Full), "a JavaScript timer's callback failed");
                }
            }
        }
    }
}

/// The next job of `queue`, for a worker whose runtime is whole (never while it
/// loads the components' scripts).
async fn serving<T>(js: &Js, queue: &Mutex<mpsc::Receiver<T>>) -> Option<T> {
    if js.loading.get() {
        return std::future::pending().await;
    }
    queue.lock().await.recv().await
}

/// A script's number of seconds as a duration: `None` when absent, negative, not a
/// number, or past ten years (a script's `Number.MAX_VALUE` must not reach
/// `Duration`, which panics on it).
fn seconds(value: Option<f64>) -> Option<std::time::Duration> {
    const TEN_YEARS: f64 = 10.0 * 365.0 * 86_400.0;
    value.filter(|s| s.is_finite() && (0.0..=TEN_YEARS).contains(s)).map(std::time::Duration::from_secs_f64)
}

/// Whether a script's error reply is the engine's out-of-memory error (the
/// dispatcher caught it, but the runtime should be rebuilt).
fn is_out_of_memory(reply: &ScriptReply) -> bool {
    reply.status == 500
        && matches!(&reply.body, ReplyBody::Value(Value::String(text)) if text.starts_with(OUT_OF_MEMORY))
}

/// Evaluates one of Lyre's own scripts (a function) and calls it with its native functions.
fn evaluate<'js>(ctx: &Ctx<'js>, name: &str, source: &str, native: rquickjs::Object<'js>) -> rquickjs::Result<()> {
    let mut options = EvalOptions::default();
    options.filename = Some(format!("lyre:{name}"));
    let install: Function = ctx.eval_with_options(source, options)?;
    install.call::<_, ()>((native,))
}

/// Imports a component's files and registers what they export and the sources
/// they declare.
async fn load_component(ctx: &Ctx<'_>, component: &ScriptComponent, js: &Js) -> Result<ScriptsLoaded, String> {
    let register: Function = ctx.globals().get("__lyre_register").map_err(|e| e.to_string())?;
    let mut loaded = ScriptsLoaded::default();
    for file in &component.files {
        let path = component.dir.join(file);
        let path = std::fs::canonicalize(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let imported = async {
            let promise = Module::import(ctx, path.to_string_lossy().as_bytes())?;
            let namespace: rquickjs::Object = settle(ctx, promise, js).await?;
            let found: rquickjs::Object = register.call((component.name.clone(), namespace))?;
            let mut exports = Vec::new();
            for entry in found.get::<_, Array>("exports")?.iter::<rquickjs::Value>() {
                exports.push(read_export(ctx, entry?)?);
            }
            let mut sources = Vec::new();
            for entry in found.get::<_, Array>("sources")?.iter::<rquickjs::Object>() {
                let entry = entry?;
                sources.push(DeclaredSource {
                    database: entry.get("database")?,
                    table: entry.get("table")?,
                    name: entry.get("name")?,
                    expiration: seconds(entry.get("expiration")?),
                });
            }
            let middleware: rquickjs::Object = found.get("middleware")?;
            let middleware = Middleware { first: middleware.get("first")?, last: middleware.get("last")? };
            let mut content_types = Vec::new();
            for entry in found.get::<_, Array>("contentTypes")?.iter::<Array>() {
                let entry = entry?;
                content_types.push(ScriptContentType {
                    media: entry.get::<String>(0)?.to_ascii_lowercase(),
                    serialize: entry.get(1)?,
                    deserialize: entry.get(2)?,
                });
            }
            let mut computed = Vec::new();
            for entry in found.get::<_, Array>("computed")?.iter::<Array>() {
                let entry = entry?;
                computed.push((entry.get::<String>(0)?, entry.get::<String>(1)?, entry.get::<String>(2)?));
            }
            Ok::<_, rquickjs::Error>((exports, sources, middleware, content_types, computed))
        };
        let (exports, sources, middleware, content_types, computed) =
            imported.await.map_err(|e| describe(ctx, e, Place::Under(&component.dir)))?;
        loaded.content_types.extend(content_types);
        loaded.computed.extend(computed);
        loaded.exports.extend(exports);
        loaded.sources.extend(sources);
        loaded.middleware.first |= middleware.first;
        loaded.middleware.last |= middleware.last;
    }
    Ok(loaded)
}

/// One entry of what `__lyre_register` found.
fn read_export<'js>(ctx: &Ctx<'js>, entry: rquickjs::Value<'js>) -> rquickjs::Result<ScriptExport> {
    let Some(Value::Object(mut fields)) = from_js(ctx, entry)? else {
        return Err(native::throw(
            ctx,
            (Code::Internal, "the prelude registered an export that is not an object".into()),
        ));
    };
    let mut text = |name: &str| match fields.shift_remove(name) {
        Some(Value::String(s)) => Some(s),
        _ => None,
    };
    let (path, component) = (text("path").unwrap_or_default(), text("component").unwrap_or_default());
    let table = text("database").zip(text("table"));
    let overrides = match fields.shift_remove("overrides") {
        Some(Value::Array(names)) => {
            names.into_iter().filter_map(|n| if let Value::String(s) = n { Some(s) } else { None }).collect()
        }
        _ => Vec::new(),
    };
    Ok(ScriptExport { path, component, table, overrides })
}

/// How many of the microtasks a request's call queued run at once, inside it, before
/// its promise is read (the rest run through the runtime's driver, between polls,
/// where the time budget's timer can still stop a chain that never ends).
const INLINE_JOBS: usize = 64;

/// The request as the prelude's `dispatch` takes it: arguments `(path, method, id,
/// collection, search, pathname, handle, data)` (positions: no object to build or
/// array to take apart). Its user and headers are fetched by the prelude only when
/// a script asks for them (`native.user`, `native.headers`).
fn dispatch_args<'js>(ctx: &Ctx<'js>, request: &ScriptRequest, handle: u32) -> rquickjs::Result<Args<'js>> {
    let mut args = Args::new(ctx.clone(), 8);
    args.push_arg(request.export.path.as_str())?;
    args.push_arg(request.method.as_str())?;
    match &request.id {
        Some(id) => args.push_arg(to_js(ctx, id)?)?,
        None => args.push_arg(rquickjs::Value::new_undefined(ctx.clone()))?,
    }
    args.push_arg(request.collection)?;
    args.push_arg(request.uri.query().unwrap_or(""))?;
    args.push_arg(request.uri.path())?;
    args.push_arg(handle)?;
    match &request.body {
        Some(body) => args.push_arg(to_js(ctx, body)?)?,
        None => args.push_arg(rquickjs::Value::new_undefined(ctx.clone()))?,
    }
    Ok(args)
}

/// The prelude's answer, `[status, headers, value, body, error, stated, stack]`
/// (absent parts `undefined`), as a reply; `read` is the record the request's
/// handler last got from a table (`Bridge::take_read`).
fn read_reply<'js>(
    ctx: &Ctx<'js>,
    reply: &Array<'js>,
    expose: bool,
    (export, method): (&str, &str),
    read: Option<native::ReadRecord>,
) -> rquickjs::Result<ScriptReply> {
    let status: f64 = reply.get(0)?;
    let status = if (100.0..600.0).contains(&status) { status as u16 } else { 500 };
    let mut headers = Vec::new();
    if let Ok(pairs) = reply.get::<Array>(1) {
        for pair in pairs.iter::<Array>() {
            let pair = pair?;
            headers.push((pair.get::<String>(0)?, pair.get::<String>(1)?));
        }
    }
    if let Ok(message) = reply.get::<String>(4) {
        let stated: bool = reply.get(5).unwrap_or(false);
        let stack: String = reply.get(6).unwrap_or_default();
        let shown = if status >= 500 {
            tracing::error!(export = %export, method = %method, "{message}\n{stack}");
            // The engine's own out-of-memory error is no secret of the script's, and
            // tells the worker to rebuild its runtime.
            if stated || expose || message.starts_with(OUT_OF_MEMORY) { message } else { UNSTATED_FAILURE.to_string() }
        } else {
            message
        };
        return Ok(ScriptReply { status, headers, body: ReplyBody::Value(Value::String(shown)) });
    }
    let value: rquickjs::Value = reply.get(2)?;
    if !value.is_undefined() {
        // The very record a table's `get` read (frozen then, so unchanged): answered
        // from its stored bytes, as a plain REST read is, nothing converted back.
        if let Some(native::ReadRecord { object, body }) = read
            && object.restore(ctx).is_ok_and(|object| object.as_value() == &value)
        {
            return Ok(ScriptReply { status, headers, body: ReplyBody::Record(body) });
        }
        let body = from_js(ctx, value)?.map_or(ReplyBody::Empty, ReplyBody::Value);
        return Ok(ScriptReply { status, headers, body });
    }
    let body: rquickjs::Value = reply.get(3)?;
    let body = if let Some(text) = body.as_string() {
        ReplyBody::Raw(text.to_string()?.into_bytes())
    } else if let Some(bytes) = body.as_object().and_then(|o| TypedArray::<u8>::from_object(o.clone()).ok()) {
        ReplyBody::Raw(super::convert::copy_bytes(&bytes))
    } else {
        ReplyBody::Empty
    };
    Ok(ScriptReply { status, headers, body })
}

/// Where [`describe`] says an error was thrown.
#[derive(Clone, Copy)]
enum Place<'a> {
    /// The file (its whole path) and line of the first frame.
    Full,
    /// The file relative to this directory, and the line.
    Under(&'a Path),
    /// Nowhere: the message may reach a client (a content type's refusal of a
    /// body), and the server's paths are not the client's to see.
    Hidden,
}

/// An engine error as a message: the thrown error's `Name: message`, with the
/// file and line of its first frame when it has one, as `place` says.
fn describe(ctx: &Ctx<'_>, error: rquickjs::Error, place: Place<'_>) -> String {
    match CaughtError::from_error(ctx, error) {
        CaughtError::Exception(exception) => {
            let message = exception.message().unwrap_or_default();
            let name: String = exception.as_object().get("name").unwrap_or_else(|_| "Error".to_string());
            let stack = exception.stack().unwrap_or_default();
            let shown = |file: &str| -> String {
                let dir = match place {
                    Place::Under(dir) => std::fs::canonicalize(dir).ok(),
                    _ => None,
                };
                dir.and_then(|d| Path::new(file).strip_prefix(d).ok().map(|p| p.display().to_string()))
                    .unwrap_or_else(|| file.to_string())
            };
            match first_frame(&stack) {
                Some((file, line)) if !matches!(place, Place::Hidden) => {
                    format!("{}:{line}: {name}: {message}", shown(&file))
                }
                _ => format!("{name}: {message}"),
            }
        }
        CaughtError::Value(value) => {
            let text = ctx.json_stringify(value).ok().flatten().and_then(|s| s.to_string().ok());
            format!("a script threw {}", text.unwrap_or_else(|| "a value that is not an Error".to_string()))
        }
        CaughtError::Error(error) => error.to_string(),
    }
}

/// The file and line of a stack's first frame in a script (`    at f (/dir/x.js:12:5)`);
/// the prelude's own frames are passed over.
fn first_frame(stack: &str) -> Option<(String, u32)> {
    stack.lines().filter(|l| l.trim_start().starts_with("at ")).find_map(|line| {
        let location = match line.rsplit_once('(') {
            Some((_, rest)) => rest.trim_end().trim_end_matches(')'),
            None => line.trim_start().trim_start_matches("at "),
        };
        let mut parts = location.rsplitn(3, ':');
        let _column = parts.next()?;
        let number = parts.next()?.parse().ok()?;
        let file = parts.next()?;
        (!file.starts_with("lyre:") && !file.starts_with('<')).then(|| (file.to_string(), number))
    })
}

#[cfg(test)]
mod tests {
    use super::first_frame;

    #[test]
    fn the_first_frame_names_file_and_line() {
        let stack = "    at invoke (lyre:prelude.js:150:9)\n    at get (/srv/app/resources.js:12:5)\n    at dispatch (lyre:prelude.js:400:3)";
        assert_eq!(first_frame(stack), Some(("/srv/app/resources.js".to_string(), 12)));
        assert_eq!(first_frame("    at /srv/app/resources.js:3:10\n"), Some(("/srv/app/resources.js".to_string(), 3)));
        assert_eq!(first_frame("    at dispatch (lyre:prelude.js:400:3)"), None);
        assert_eq!(first_frame("no frames"), None);
    }
}
