//! What scripts call in Lyre: the table operations behind `tables.X.get`, `put`,
//! `search`, … and the log. `prelude.js` receives these functions once, when a
//! runtime starts, and keeps them out of the scripts' reach.
//!
//! Every table call names whom it runs as: a request's handle (its user, checked
//! as every protocol checks users) or `0`, the script's own access, which is not
//! checked (as Harper runs a script's direct table calls). A handle stays valid
//! after its request is answered, for the work the request left running, until
//! [`RECENT_REQUESTS`] newer requests have come.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use lyre_core::access::{Action, User};
use lyre_core::{Code, Context, Engine, Object, Table, TransactionWrite, Value, WriteOptions};
use rquickjs::function::Async;
use rquickjs::{Array, Ctx, Exception, Function, Object as JsObject, TypedArray};

use super::convert::{from_js, to_js};
use super::record::record_to_js;
use super::record_cache::{RecordCache, RecordKey};
use super::{HttpNext, NextRequest, Phase, RestGrammar};

/// The most records one search from a script returns; past it the script is told
/// to page (a limit), so a runaway query cannot hold the whole table in memory.
pub const MAX_SEARCH_RESULTS: usize = 100_000;

/// The handle of the script's own, unchecked access.
pub const UNCHECKED: u32 = 0;

/// How many requests' handles a runtime keeps: the work a request leaves running
/// (a promise nobody awaited) still runs as its user, for this long.
pub const RECENT_REQUESTS: usize = 1024;

/// What a request's handle stands for.
struct Requested {
    /// Its user's context, or `None` for a request without credentials.
    ctx: Option<Context>,
    /// Its headers, until it is answered.
    headers: axum::http::HeaderMap,
    /// For a middleware's request: what the server knew of its connection, for
    /// `next` to hand on.
    extensions: Option<axum::http::Extensions>,
    /// Whom it came from.
    client: super::Client,
    /// The resource it was made to (a table's class parses its query with the table's types).
    export: Option<Arc<super::ScriptExport>>,
}

/// What the native functions share within one runtime.
pub struct Bridge {
    engine: Arc<Engine>,
    grammar: Arc<dyn RestGrammar>,
    /// The server's handling past a middleware (`next`).
    next: Arc<std::sync::OnceLock<Arc<dyn HttpNext>>>,
    /// The last [`RECENT_REQUESTS`] requests on this runtime, each in the slot of
    /// its handle modulo their number (a new handle ends the one before it in its
    /// slot, the oldest), with its handle.
    requests: RefCell<Vec<Option<(u32, Requested)>>>,
    next_handle: std::cell::Cell<u32>,
    /// The script's own access: a super user that is not the server itself (it
    /// cannot change the `system` database).
    unchecked: Context,
    /// The component each log line is attributed to.
    component_of: RefCell<String>,
    /// The last record a table's `get` read for a handler (see [`Bridge::take_read`]).
    last_read: RefCell<Option<ReadRecord>>,
    /// The flat records this worker built lately, given again while unchanged.
    records: RecordCache,
}

/// What `native.get` read: the record decoded (computed attributes in, or attributes
/// the role may not read left out), or its body as the table gives it.
enum Read {
    Decoded(Object),
    Body(lyre_core::RecordBody),
}

/// A record a table's `get` gave a handler, frozen, with its stored bytes: a
/// handler that answers with this very object is answered from the bytes, as a
/// whole-record REST read is, without converting the object back.
pub struct ReadRecord {
    /// The object the handler got (held, so no other object can be it).
    pub object: rquickjs::Persistent<JsObject<'static>>,
    /// The record as stored.
    pub body: lyre_core::RecordBody,
}

impl Bridge {
    /// A bridge to `engine`'s tables, keeping records read for at most
    /// `record_cache` bytes (see [`RecordCache`]).
    pub fn new(
        engine: Arc<Engine>,
        grammar: Arc<dyn RestGrammar>,
        next: Arc<std::sync::OnceLock<Arc<dyn HttpNext>>>,
        record_cache: usize,
    ) -> Self {
        Self {
            engine,
            grammar,
            next,
            requests: RefCell::new((0..RECENT_REQUESTS).map(|_| None).collect()),
            next_handle: std::cell::Cell::new(UNCHECKED),
            unchecked: Context::new(Arc::new(User::system())),
            component_of: RefCell::new(String::new()),
            last_read: RefCell::new(None),
            records: RecordCache::new(record_cache),
        }
    }

    /// Registers a request's user for the calls its script makes; the handle is
    /// given to the script with the request. The oldest handle past
    /// [`RECENT_REQUESTS`] ends.
    pub fn begin(
        &self,
        user: Option<Arc<User>>,
        headers: axum::http::HeaderMap,
        client: super::Client,
        export: Option<Arc<super::ScriptExport>>,
    ) -> u32 {
        // Handles stay small integers, which cross as JavaScript integers exactly.
        let mut handle = self.next_handle.get().wrapping_add(1);
        if handle == UNCHECKED || handle > i32::MAX as u32 {
            handle = 1;
        }
        self.next_handle.set(handle);
        let requested = Requested { ctx: user.map(Context::new), headers, extensions: None, client, export };
        let ended = self.requests.borrow_mut()[slot_of(handle)].replace((handle, requested));
        // Dropped outside the borrow: a context's drop runs no script, but need not be trusted not to.
        drop(ended);
        handle
    }

    /// Keeps what the server knew of a middleware request's connection, for its
    /// `next` to hand on.
    pub fn hand_on(&self, handle: u32, extensions: axum::http::Extensions) {
        self.with_request(handle, |requested| requested.extensions = Some(extensions));
    }

    /// Drops a request's headers (and connection details) once it is answered
    /// (its user stays, for the work it left running).
    pub fn answered(&self, handle: u32) {
        // Taken out and dropped past the borrow.
        let done = self
            .with_request(handle, |requested| (std::mem::take(&mut requested.headers), requested.extensions.take()));
        drop(done);
    }

    /// Names the component whose code runs now (for the log).
    pub fn set_component(&self, name: &str) {
        name.clone_into(&mut self.component_of.borrow_mut());
    }

    fn context(&self, handle: u32) -> Result<Context, (Code, String)> {
        if handle == UNCHECKED {
            return Ok(self.unchecked.clone());
        }
        match self.with_request(handle, |requested| requested.ctx.clone()) {
            Some(Some(ctx)) => Ok(ctx),
            Some(None) => Err((Code::MustLogin, "Must login".to_string())),
            None => Err((Code::BadRequest, "this request was answered long ago; its context has ended".to_string())),
        }
    }

    /// `f` of the request `handle` stands for, while it has not ended. `f` must not
    /// run JavaScript (a script could call back in while the ring is borrowed).
    fn with_request<T>(&self, handle: u32, f: impl FnOnce(&mut Requested) -> T) -> Option<T> {
        let mut requests = self.requests.borrow_mut();
        match requests.get_mut(slot_of(handle))? {
            Some((held, requested)) if *held == handle => Some(f(requested)),
            _ => None,
        }
    }

    /// The record the last remembering `get` read (taken: read once). Taken inside
    /// the runtime, as the object it holds must be let go there.
    pub fn take_read(&self) -> Option<ReadRecord> {
        self.last_read.borrow_mut().take()
    }

    /// Lets go of every JavaScript object the bridge holds: before its runtime ends.
    pub fn let_go(&self) {
        drop(self.take_read());
        self.records.clear();
    }

    fn table(&self, database: &str, table: &str) -> Result<Table, (Code, String)> {
        let db = self.engine.database(database).map_err(core)?;
        db.table(table).map_err(core)
    }
}

/// The slot of [`Bridge::requests`] a handle lives in.
fn slot_of(handle: u32) -> usize {
    handle as usize % RECENT_REQUESTS
}

fn core(err: lyre_core::Error) -> (Code, String) {
    (err.code(), err.to_string())
}

/// A JavaScript `Error` with Harper's `statusCode`, thrown; marked (a hidden
/// `__lyre`) as Lyre's own, so its answer is named as Harper names its refusals.
pub fn throw(ctx: &Ctx<'_>, (code, message): (Code, String)) -> rquickjs::Error {
    let made = Exception::from_message(ctx.clone(), &message).and_then(|error| {
        error.as_object().set("statusCode", code.status())?;
        error.as_object().prop("__lyre", rquickjs::object::Property::from(true))?;
        Ok(error)
    });
    match made {
        Ok(error) => ctx.throw(error.into_value()),
        Err(err) => err,
    }
}

/// A value from a script that must be present (an id, a record).
fn required<'js>(ctx: &Ctx<'js>, value: rquickjs::Value<'js>, what: &str) -> rquickjs::Result<Value> {
    from_js(ctx, value)?.ok_or_else(|| throw(ctx, (Code::BadRequest, format!("{what} is required"))))
}

fn record<'js>(ctx: &Ctx<'js>, value: rquickjs::Value<'js>) -> rquickjs::Result<Object> {
    match required(ctx, value, "a record")? {
        Value::Object(record) => Ok(record),
        other => Err(throw(ctx, (Code::BadRequest, format!("a record must be an object, not {}", other.type_name())))),
    }
}

/// The native functions, as one object for `prelude.js`.
pub fn install<'js>(ctx: &Ctx<'js>, bridge: &Rc<Bridge>) -> rquickjs::Result<JsObject<'js>> {
    let native = JsObject::new(ctx.clone())?;

    let b = bridge.clone();
    native.set(
        "get",
        Function::new(
            ctx.clone(),
            // `remember`: the record is given frozen (unless the table computes
            // attributes: the caller adds them, then freezes it) and may be handed to a
            // handler as it is (prelude.js `readRecord`), so it is kept with its bytes.
            move |ctx: Ctx<'js>,
                  db: String,
                  table: String,
                  id: rquickjs::Value<'js>,
                  handle: u32,
                  remember: rquickjs::function::Opt<bool>| {
                let id = required(&ctx, id, "an id")?;
                let remember = remember.0.unwrap_or(false);
                let run = || -> Result<Option<Read>, (Code, String)> {
                    let user = b.context(handle)?;
                    let table = b.table(&db, &table)?;
                    // Stored bytes lack computed attributes; such tables read decoded.
                    if !remember || table.schema().computed_attributes().next().is_some() {
                        return Ok(table.get(&user, &id).map_err(core)?.map(|(record, _)| Read::Decoded(record)));
                    }
                    Ok(table.get_body(&user, &id).map_err(core)?.map(|(body, _)| Read::Body(body)))
                };
                match run() {
                    Ok(Some(Read::Decoded(record))) => {
                        *b.last_read.borrow_mut() = None;
                        to_js(&ctx, &Value::Object(record))
                    }
                    Ok(Some(Read::Body(body))) => {
                        // Only a flat record as stored is kept, and answered from its
                        // bytes: freezing leaves nested objects, arrays and bytes
                        // changeable, and a handler answering with a record it changed
                        // inside must be answered with the change.
                        let key = RecordKey { database: &db, table: &table, id: &id };
                        let stored = match &body {
                            lyre_core::RecordBody::Stored(bytes) => Some(bytes.as_slice()),
                            lyre_core::RecordBody::Decoded(_) => None,
                        };
                        let (frozen, flat) = match stored.and_then(|bytes| b.records.get(&ctx, key, bytes)) {
                            Some(kept) => (kept, true),
                            None => {
                                let (frozen, nested) = record_to_js(&ctx, &body)?;
                                if let (false, Some(bytes)) = (nested, stored) {
                                    b.records.keep(&ctx, key, bytes, &frozen);
                                }
                                (frozen, !nested)
                            }
                        };
                        let answerable = flat && stored.is_some();
                        *b.last_read.borrow_mut() = answerable
                            .then(|| ReadRecord { object: rquickjs::Persistent::save(&ctx, frozen.clone()), body });
                        Ok(frozen.into_value())
                    }
                    Ok(None) => Ok(rquickjs::Value::new_undefined(ctx.clone())),
                    Err(err) => Err(throw(&ctx, err)),
                }
            },
        )?,
    )?;

    let b = bridge.clone();
    native.set(
        "search",
        Function::new(
            ctx.clone(),
            move |ctx: Ctx<'js>, db: String, table: String, query: rquickjs::Value<'js>, handle: u32| {
                let query = from_js(&ctx, query)?;
                let found = Array::new(ctx.clone())?;
                // Each record becomes JavaScript as it is found, so the runtime's
                // memory limit bounds what a search holds.
                let mut failed: Option<rquickjs::Error> = None;
                let run = || -> Result<(), (Code, String)> {
                    let user = b.context(handle)?;
                    let table = b.table(&db, &table)?;
                    let query = match query {
                        Some(Value::String(raw)) => b.grammar.query_string(&table, &raw)?,
                        Some(Value::Object(object)) => b.grammar.query_object(&table, object)?,
                        None | Some(Value::Null) => b.grammar.query_string(&table, "")?,
                        Some(other) => {
                            return Err((
                                Code::BadRequest,
                                format!("a search takes a query object or string, not {}", other.type_name()),
                            ));
                        }
                    };
                    let mut count = 0;
                    table
                        .search(&user, query)
                        .map_err(core)?
                        .run(&mut |record| {
                            if count == MAX_SEARCH_RESULTS {
                                failed = Some(throw(
                                    &ctx,
                                    (
                                        Code::BadRequest,
                                        format!(
                                            "a search from JavaScript matched more than {MAX_SEARCH_RESULTS} records; \
                                             give it a limit and page through them"
                                        ),
                                    ),
                                ));
                                return std::ops::ControlFlow::Break(());
                            }
                            match to_js(&ctx, &record).and_then(|record| found.set(count, record)) {
                                Ok(()) => {
                                    count += 1;
                                    std::ops::ControlFlow::Continue(())
                                }
                                Err(err) => {
                                    failed = Some(err);
                                    std::ops::ControlFlow::Break(())
                                }
                            }
                        })
                        .map_err(core)
                };
                match run() {
                    Ok(()) => match failed {
                        Some(err) => Err(err),
                        None => Ok(found),
                    },
                    Err(err) => Err(throw(&ctx, err)),
                }
            },
        )?,
    )?;

    let b = bridge.clone();
    native.set(
        "parseQuery",
        Function::new(ctx.clone(), move |ctx: Ctx<'js>, handle: u32, search: String| {
            // A request's query string as its target shows it (`target.conditions`, …),
            // read with the types of the table whose class it was made to (nothing else).
            let run = || -> Result<Value, (Code, String)> {
                let exported = b.with_request(handle, |requested| requested.export.clone()).flatten();
                let Some((db, table)) = exported.as_ref().and_then(|export| export.table.as_ref()) else {
                    return Ok(Value::Null);
                };
                let table = b.table(db, table)?;
                Ok(super::target::query_object(&b.grammar.query_string(&table, &search)?))
            };
            match run() {
                Ok(query) => to_js(&ctx, &query),
                Err(err) => Err(throw(&ctx, err)),
            }
        })?,
    )?;

    let b = bridge.clone();
    native.set(
        "describe",
        Function::new(ctx.clone(), move |ctx: Ctx<'js>, db: String, table: String, handle: u32| {
            let run = || -> Result<Value, (Code, String)> {
                let user = b.context(handle)?;
                let table = b.table(&db, &table)?;
                b.grammar.describe(&table, &user)
            };
            match run() {
                Ok(description) => to_js(&ctx, &description),
                Err(err) => Err(throw(&ctx, err)),
            }
        })?,
    )?;

    let b = bridge.clone();
    native.set(
        "allowed",
        Function::new(ctx.clone(), move |ctx: Ctx<'js>, db: String, table: String, action: String, handle: i64| {
            let action = match action.as_str() {
                "read" => Action::Read,
                "insert" => Action::Insert,
                "update" => Action::Update,
                "delete" => Action::Delete,
                other => return Err(throw(&ctx, (Code::BadRequest, format!("no such action '{other}'")))),
            };
            let run = || -> Result<bool, (Code, String)> {
                // A negative handle is no request's: nobody to allow.
                let Some(user) = u32::try_from(handle).ok().and_then(|h| b.context(h).ok()) else { return Ok(false) };
                Ok(b.table(&db, &table)?.access(&user, &[action]).is_ok())
            };
            run().map_err(|err| throw(&ctx, err))
        })?,
    )?;

    let b = bridge.clone();
    native.set(
        "tables",
        Function::new(ctx.clone(), move |ctx: Ctx<'js>| -> rquickjs::Result<rquickjs::Value<'js>> {
            let mut list = Vec::new();
            for name in b.engine.database_names() {
                let Ok(db) = b.engine.database(&name) else { continue };
                let schema = db.schema();
                for (table, definition) in &schema.tables {
                    let mut info = Object::default();
                    info.insert("database".into(), Value::String(name.clone()));
                    info.insert("table".into(), Value::String(table.clone()));
                    info.insert("primaryKey".into(), Value::String(definition.primary_key.clone()));
                    let attributes = definition
                        .attributes
                        .iter()
                        .map(|a| {
                            let mut attribute = Object::default();
                            attribute.insert("name".into(), Value::String(a.name.clone()));
                            attribute.insert("type".into(), a.type_name.clone().map_or(Value::Null, Value::String));
                            attribute.insert("indexed".into(), Value::Bool(a.indexed));
                            if let Some(computed) = &a.shape.computed {
                                let mut about = Object::default();
                                about.insert("from".into(), computed.from.clone().map_or(Value::Null, Value::String));
                                about.insert("enumerable".into(), Value::Bool(computed.enumerable));
                                attribute.insert("computed".into(), Value::Object(about));
                            }
                            Value::Object(attribute)
                        })
                        .collect();
                    info.insert("attributes".into(), Value::Array(attributes));
                    list.push(Value::Object(info));
                }
            }
            to_js(&ctx, &Value::Array(list))
        })?,
    )?;

    let b = bridge.clone();
    native.set(
        "log",
        Function::new(ctx.clone(), move |level: String, message: String| {
            let component = b.component_of.borrow();
            match level.as_str() {
                "error" | "fatal" | "notify" => tracing::error!(component = %component, "{message}"),
                "warn" => tracing::warn!(component = %component, "{message}"),
                "debug" => tracing::debug!(component = %component, "{message}"),
                "trace" => tracing::trace!(component = %component, "{message}"),
                _ => tracing::info!(component = %component, "{message}"),
            }
        })?,
    )?;

    let b = bridge.clone();
    native.set(
        "user",
        Function::new(ctx.clone(), move |ctx: Ctx<'js>, handle: u32| {
            let Some(Some(user)) = b.with_request(handle, |requested| requested.ctx.clone()) else {
                return Ok(rquickjs::Value::new_null(ctx.clone()));
            };
            let user = &user.user;
            let mut role = Object::default();
            role.insert("role".into(), Value::String(user.role.name.clone()));
            role.insert("permission".into(), user.role.permission.clone());
            let mut fields = Object::default();
            fields.insert("username".into(), Value::String(user.username.clone()));
            fields.insert("active".into(), Value::Bool(user.active));
            fields.insert("role".into(), Value::Object(role));
            to_js(&ctx, &Value::Object(fields))
        })?,
    )?;
    let b = bridge.clone();
    native.set(
        "client",
        Function::new(ctx.clone(), move |handle: u32| {
            // `[ip, protocol]` of the request, or nothing once it is answered.
            b.with_request(handle, |requested| {
                let protocol = if requested.client.secure { "https" } else { "http" };
                let ip = requested.client.ip.map(|ip| ip.to_string()).unwrap_or_default();
                vec![ip, protocol.to_string()]
            })
        })?,
    )?;
    let b = bridge.clone();
    native.set(
        "headers",
        Function::new(ctx.clone(), move |ctx: Ctx<'js>, handle: u32| {
            let pairs = rquickjs::Array::new(ctx.clone())?;
            // Copied out first: building the arrays may run a script's setter, which
            // may call back into the bridge.
            let headers: Vec<(String, String)> = b
                .with_request(handle, |requested| {
                    requested
                        .headers
                        .iter()
                        .map(|(name, value)| (name.to_string(), String::from_utf8_lossy(value.as_bytes()).into_owned()))
                        .collect()
                })
                .unwrap_or_default();
            for (i, (name, value)) in headers.into_iter().enumerate() {
                let pair = rquickjs::Array::new(ctx.clone())?;
                pair.set(0, name)?;
                pair.set(1, value)?;
                pairs.set(i, pair)?;
            }
            Ok::<_, rquickjs::Error>(pairs)
        })?,
    )?;
    native.set(
        "environment",
        Function::new(ctx.clone(), |ctx: Ctx<'js>| {
            let variables = JsObject::new(ctx)?;
            for (name, value) in std::env::vars() {
                variables.set(name, value)?;
            }
            Ok::<_, rquickjs::Error>(variables)
        })?,
    )?;

    install_writes(ctx, bridge, &native)?;
    install_http_next(ctx, bridge, &native)?;
    Ok(native)
}

/// The writes, `(database, table, id or record, record or null, handle)`: each
/// returns a promise settled when the write has committed.
/// `httpNext(handle, phase, method, url, headers, body)`: a middleware's `next`,
/// the server's own handling of the request past it; `[status, headers, body]`.
fn install_http_next<'js>(ctx: &Ctx<'js>, bridge: &Rc<Bridge>, native: &JsObject<'js>) -> rquickjs::Result<()> {
    let b = bridge.clone();
    let next = Async(
        move |ctx: Ctx<'js>,
              handle: u32,
              phase: String,
              method: String,
              url: String,
              headers: Vec<Vec<String>>,
              body: rquickjs::Value<'js>| {
            let b = b.clone();
            async move {
                let body = match body.as_object().and_then(|o| TypedArray::<u8>::from_object(o.clone()).ok()) {
                    Some(bytes) => Some(super::convert::copy_bytes(&bytes)),
                    None => body.as_string().map(|text| text.to_string()).transpose()?.map(String::into_bytes),
                };
                let phase = if phase == "first" { Phase::First } else { Phase::Last };
                let headers = headers
                    .into_iter()
                    .filter_map(|pair| match <[String; 2]>::try_from(pair) {
                        Ok([name, value]) => Some((name, value)),
                        Err(_) => None,
                    })
                    .collect();
                let extensions = b.with_request(handle, |requested| requested.extensions.clone()).flatten();
                let (Some(next), Some(extensions)) = (b.next.get().cloned(), extensions) else {
                    return Err(throw(
                        &ctx,
                        (Code::BadRequest, "next() is for a middleware's request, while it is answered".to_string()),
                    ));
                };
                let answer = next.next(phase, NextRequest { method, url, headers, body, extensions }).await;
                // The last-phase middleware that may answer it runs as the user
                // Lyre's handling authenticated.
                if let Some(user) = answer.user.clone() {
                    b.with_request(handle, |requested| {
                        requested.ctx.get_or_insert_with(|| Context::new(user));
                    });
                }
                let out = Array::new(ctx.clone())?;
                out.set(0, answer.status)?;
                let headers: Vec<Vec<String>> =
                    answer.headers.into_iter().map(|(name, value)| vec![name, value]).collect();
                out.set(1, headers)?;
                out.set(2, TypedArray::<u8>::new(ctx.clone(), answer.body)?)?;
                out.set(3, answer.unmatched)?;
                Ok(out)
            }
        },
    );
    native.set("httpNext", Function::new(ctx.clone(), next)?)
}

fn install_writes<'js>(ctx: &Ctx<'js>, bridge: &Rc<Bridge>, native: &JsObject<'js>) -> rquickjs::Result<()> {
    /// What a write does, once its arguments are read.
    enum Write {
        Put(Value, Object),
        Patch(Value, Object),
        Delete(Value),
        Create(Object),
    }
    let write = |kind: &'static str| {
        let b = bridge.clone();
        Async(
            move |ctx: Ctx<'js>,
                  db: String,
                  table: String,
                  first: rquickjs::Value<'js>,
                  second: rquickjs::Value<'js>,
                  handle: u32| {
                let b = b.clone();
                async move {
                    let write = match kind {
                        "put" => Write::Put(required(&ctx, first, "an id")?, record(&ctx, second)?),
                        "patch" => Write::Patch(required(&ctx, first, "an id")?, record(&ctx, second)?),
                        "delete" => Write::Delete(required(&ctx, first, "an id")?),
                        _ => Write::Create(record(&ctx, first)?),
                    };
                    let done = async {
                        let user = b.context(handle)?;
                        let table = b.table(&db, &table)?;
                        Ok::<Value, (Code, String)>(match write {
                            Write::Put(id, body) => {
                                table.put(&user, id, body, WriteOptions::default()).await.map_err(core)?;
                                Value::Null
                            }
                            Write::Patch(id, body) => {
                                table.patch(&user, id, body, WriteOptions::default()).await.map_err(core)?;
                                Value::Null
                            }
                            Write::Delete(id) => {
                                let summary = table.delete(&user, vec![id]).await.map_err(core)?;
                                Value::Bool(!summary.deleted.is_empty())
                            }
                            Write::Create(body) => table.create(&user, body).await.map_err(core)?,
                        })
                    };
                    match done.await {
                        Ok(Value::Null) => Ok(rquickjs::Value::new_undefined(ctx.clone())),
                        Ok(value) => to_js(&ctx, &value),
                        Err(err) => Err(throw(&ctx, err)),
                    }
                }
            },
        )
    };
    for kind in ["put", "patch", "delete", "create"] {
        native.set(kind, Function::new(ctx.clone(), write(kind))?)?;
    }
    install_transact(ctx, bridge, native)
}

/// `transact(writes)`: a transaction's writes (`[kind, database, table, first,
/// second, handle]`, as `put`… take them, each checked as its handle's user)
/// committed together; their answers. A transaction writes to one database (Harper
/// commits each database's writes apart, so one across two is not atomic there;
/// Lyre refuses it before anything is written).
fn install_transact<'js>(ctx: &Ctx<'js>, bridge: &Rc<Bridge>, native: &JsObject<'js>) -> rquickjs::Result<()> {
    let b = bridge.clone();
    let transact = Async(move |ctx: Ctx<'js>, writes: Vec<Array<'js>>| {
        let b = b.clone();
        async move {
            let mut parsed = Vec::with_capacity(writes.len());
            for write in writes {
                let (kind, database, table): (String, String, String) = (write.get(0)?, write.get(1)?, write.get(2)?);
                let (first, second): (rquickjs::Value, rquickjs::Value) = (write.get(3)?, write.get(4)?);
                let handle: u32 = write.get(5)?;
                let step = match kind.as_str() {
                    "put" => TransactionWrite::Put(required(&ctx, first, "an id")?, record(&ctx, second)?),
                    "patch" => TransactionWrite::Patch(required(&ctx, first, "an id")?, record(&ctx, second)?),
                    "delete" => TransactionWrite::Delete(required(&ctx, first, "an id")?),
                    _ => TransactionWrite::Create(record(&ctx, first)?),
                };
                parsed.push((handle, database, table, step));
            }
            let done = async {
                let mut writes = Vec::with_capacity(parsed.len());
                for (handle, database, table, step) in parsed {
                    writes.push((b.context(handle)?, b.table(&database, &table)?, step));
                }
                lyre_core::transact(writes).await.map_err(core)
            };
            match done.await {
                Ok(answers) => to_js(&ctx, &Value::Array(answers)),
                Err(err) => Err(throw(&ctx, err)),
            }
        }
    });
    native.set("transact", Function::new(ctx.clone(), transact)?)
}
