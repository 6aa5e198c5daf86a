//! `@computed` attributes, computed for the core ([`AttributeComputer`]).
//!
//! An expression (`@computed(from: "price * taxRate")`) runs in a small JavaScript
//! runtime of the calling thread's own (the writer's, a request thread's), compiled
//! once per thread: as Harper does, the record's attributes are its names. A
//! function an application registers (`tables.T.setComputedAttribute(name, fn)`)
//! lives in the workers' runtimes, so the call goes to the next free worker and the
//! calling thread waits; a worker answers such calls even while its own request
//! waits for a write, so a script's write cannot wait on itself. On a worker's own
//! thread (a script's table read) such a value is left out here: the script's side
//! defines it as a getter on the record instead (`prelude.js`).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use lyre_core::catalog::{Attribute, Computed};
use lyre_core::{AttributeComputer, Object, Value};
use rquickjs::context::EvalOptions;
use rquickjs::{Context, Ctx, Function, Persistent, Runtime};

use super::Scripts;
use super::convert::{from_js, to_js};

/// How long one expression may run before it is stopped.
const EXPRESSION_BUDGET: Duration = Duration::from_secs(1);
/// Bytes one thread's expression runtime may allocate.
const EXPRESSION_MEMORY: usize = 16 << 20;

thread_local! {
    /// Set on a JavaScript worker's thread (see the module's notes).
    static ON_WORKER: Cell<bool> = const { Cell::new(false) };
    /// This thread's expression runtime, made on first use.
    static EXPRESSIONS: RefCell<Option<Expressions>> = const { RefCell::new(None) };
}

/// Marks the calling thread as a JavaScript worker's.
pub(super) fn mark_worker_thread() {
    ON_WORKER.with(|on| on.set(true));
}

/// The server's [`AttributeComputer`]: expressions on the calling thread, registered
/// functions on the script workers.
pub struct ScriptComputer {
    scripts: Weak<Scripts>,
}

impl ScriptComputer {
    /// A computer whose registered functions run on `scripts`' workers.
    pub fn new(scripts: &Arc<Scripts>) -> Self {
        Self { scripts: Arc::downgrade(scripts) }
    }
}

impl AttributeComputer for ScriptComputer {
    fn compute(
        &self,
        database: &str,
        table: &str,
        attribute: &Attribute,
        computed: &Computed,
        record: &Object,
    ) -> Result<Option<Value>, String> {
        let scripts = self.scripts.upgrade();
        let function = scripts.as_ref().is_some_and(|s| s.computes_with_function(database, table, &attribute.name));
        if let (Some(expression), false) = (&computed.from, function) {
            return EXPRESSIONS.with(|cell| {
                let mut slot = cell.borrow_mut();
                if slot.is_none() {
                    *slot = Some(Expressions::new()?);
                }
                match slot.as_mut() {
                    Some(expressions) => expressions.evaluate(expression, record),
                    None => Err("the expression runtime could not start".to_string()),
                }
            });
        }
        if ON_WORKER.with(Cell::get) {
            return Ok(None);
        }
        let Some(scripts) = scripts else { return Ok(None) };
        scripts.compute_blocking(database, table, &attribute.name, record)
    }
}

/// One thread's runtime for `@computed(from:)` expressions, each compiled once.
struct Expressions {
    context: Context,
    /// When the expression running now must stop.
    deadline: Rc<Cell<Option<Instant>>>,
    compiled: HashMap<String, Persistent<Function<'static>>>,
    /// Kept alive with the context.
    _runtime: Runtime,
}

impl Expressions {
    fn new() -> Result<Self, String> {
        let runtime = Runtime::new().map_err(|e| format!("the expression runtime could not start: {e}"))?;
        runtime.set_memory_limit(EXPRESSION_MEMORY);
        let deadline: Rc<Cell<Option<Instant>>> = Rc::new(Cell::new(None));
        let watched = deadline.clone();
        runtime.set_interrupt_handler(Some(Box::new(move || watched.get().is_some_and(|at| Instant::now() >= at))));
        let context = Context::full(&runtime).map_err(|e| format!("the expression runtime could not start: {e}"))?;
        Ok(Self { context, deadline, compiled: HashMap::new(), _runtime: runtime })
    }

    /// `expression`'s value for `record`; `None` for `undefined`.
    fn evaluate(&mut self, expression: &str, record: &Object) -> Result<Option<Value>, String> {
        let Self { context, deadline, compiled, .. } = self;
        deadline.set(Some(Instant::now() + EXPRESSION_BUDGET));
        let outcome = context.with(|ctx| -> Result<Option<Value>, String> {
            let function = match compiled.get(expression) {
                Some(saved) => saved.clone().restore(&ctx).map_err(|e| explain(&ctx, e))?,
                None => {
                    let function = compile(&ctx, expression)?;
                    compiled.insert(expression.to_string(), Persistent::save(&ctx, function.clone()));
                    function
                }
            };
            let record = to_js(&ctx, &Value::Object(record.clone())).map_err(|e| explain(&ctx, e))?;
            let value: rquickjs::Value = function.call((record,)).map_err(|e| explain(&ctx, e))?;
            from_js(&ctx, value).map_err(|e| explain(&ctx, e))
        });
        let overran = deadline.get().is_some_and(|at| Instant::now() >= at);
        deadline.set(None);
        match outcome {
            Err(_) if overran => Err(format!("the expression '{expression}' ran past {EXPRESSION_BUDGET:?}")),
            other => other,
        }
    }
}

/// `expression` as a function of a record whose attributes are its names (an
/// attribute the record lacks is `undefined`, not a `ReferenceError`, through the
/// outer scope of every name it mentions).
fn compile<'js>(ctx: &Ctx<'js>, expression: &str) -> Result<Function<'js>, String> {
    let source = format!(
        "(function (__record) {{ with (new Proxy({{}}, {{ has: (t, k) => typeof k === 'string' && k !== '__record' && !(k in globalThis) }})) \
         {{ with (__record) {{ return ({expression}\n); }} }} }})"
    );
    // Sloppy mode: `with` is what makes the attributes names.
    let mut options = EvalOptions::default();
    options.strict = false;
    ctx.eval_with_options::<Function, _>(source, options)
        .map_err(|e| format!("the @computed expression '{expression}' does not compile: {}", explain(ctx, e)))
}

/// A JavaScript error's message (the thrown value's, for an exception).
fn explain(ctx: &Ctx<'_>, error: rquickjs::Error) -> String {
    if matches!(error, rquickjs::Error::Exception) {
        let thrown = ctx.catch();
        if let Some(message) = thrown.as_object().and_then(|o| o.get::<_, String>("message").ok()) {
            return message;
        }
        if let Ok(text) = thrown.get::<rquickjs::Coerced<String>>() {
            return text.0;
        }
    }
    error.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(json: serde_json::Value) -> Object {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn an_expression_reads_the_records_attributes_by_name() {
        let mut expressions = Expressions::new().unwrap();
        let product = record(serde_json::json!({"price": 10, "taxRate": 0.5}));
        assert_eq!(expressions.evaluate("price + price * taxRate", &product).unwrap(), Some(Value::Int(15)));
        assert_eq!(expressions.evaluate("price * taxRate + 0.25", &product).unwrap(), Some(Value::Float(5.25)));
        // An attribute the record lacks is undefined, not an error.
        assert_eq!(expressions.evaluate("discount ?? 'none'", &product).unwrap(), Some(Value::String("none".into())));
        // Globals still resolve.
        assert_eq!(expressions.evaluate("Math.max(price, 3)", &product).unwrap(), Some(Value::Int(10)));
    }

    #[test]
    fn a_failing_or_runaway_expression_is_an_error() {
        let mut expressions = Expressions::new().unwrap();
        let product = record(serde_json::json!({"price": 10}));
        let thrown = expressions.evaluate("price.no.such", &product).unwrap_err();
        assert!(thrown.contains("undefined"), "{thrown}");
        let syntax = expressions.evaluate("price +", &product).unwrap_err();
        assert!(syntax.contains("does not compile"), "{syntax}");
        let runaway = expressions.evaluate("(() => { while (true) {} })()", &product).unwrap_err();
        assert!(runaway.contains("ran past"), "{runaway}");
        // The runtime serves on.
        assert_eq!(expressions.evaluate("price * 2", &product).unwrap(), Some(Value::Int(20)));
    }
}
