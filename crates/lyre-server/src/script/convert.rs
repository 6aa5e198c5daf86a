//! Values crossing between JavaScript and Lyre: core [`Value`]s made into JavaScript
//! values for scripts, and what scripts return read back into `Value`s.
//!
//! Objects cross as their own enumerable string-keyed properties (after `toJSON`,
//! as `JSON.stringify` would); functions, symbols and `undefined` properties are left
//! out, as JSON leaves them; `Uint8Array`s cross as bytes. Depth is bounded, so a
//! cyclic object is an error, not a stack overflow, and so is the number of parts
//! ([`MAX_PARTS`]): an object reached many times over (`x = {a: x, b: x}` forty
//! times) would otherwise expand without bound on the way out.

use lyre_core::{Object, Value};
use rquickjs::object::Filter;
use rquickjs::{Array, Ctx, Function, IntoJs, Type, TypedArray};

/// How deep a value may nest when crossing either way.
pub const MAX_DEPTH: usize = 64;
/// How many values (each object, array, string, number …) one value leaving
/// JavaScript may hold.
pub const MAX_PARTS: usize = 4_000_000;

/// Makes `value` a JavaScript value in `ctx`.
pub fn to_js<'js>(ctx: &Ctx<'js>, value: &Value) -> rquickjs::Result<rquickjs::Value<'js>> {
    to_js_at(ctx, value, 0)
}

fn to_js_at<'js>(ctx: &Ctx<'js>, value: &Value, depth: usize) -> rquickjs::Result<rquickjs::Value<'js>> {
    if depth > MAX_DEPTH {
        return Err(rquickjs::Exception::throw_range(ctx, "a value nests too deeply to cross into JavaScript"));
    }
    Ok(match value {
        Value::Null => rquickjs::Value::new_null(ctx.clone()),
        Value::Bool(b) => rquickjs::Value::new_bool(ctx.clone(), *b),
        Value::Int(i) => match i32::try_from(*i) {
            Ok(small) => rquickjs::Value::new_int(ctx.clone(), small),
            Err(_) => rquickjs::Value::new_number(ctx.clone(), *i as f64),
        },
        Value::Float(f) => rquickjs::Value::new_number(ctx.clone(), *f),
        Value::String(s) => s.as_str().into_js(ctx)?,
        Value::Bytes(bytes) => TypedArray::<u8>::new_copy(ctx.clone(), bytes)?.into_value(),
        Value::Array(items) => {
            let array = Array::new(ctx.clone())?;
            for (i, item) in items.iter().enumerate() {
                array.set(i, to_js_at(ctx, item, depth + 1)?)?;
            }
            array.into_value()
        }
        Value::Object(fields) => {
            let object = rquickjs::Object::new(ctx.clone())?;
            for (name, field) in fields {
                object.set(name.as_str(), to_js_at(ctx, field, depth + 1)?)?;
            }
            object.into_value()
        }
        // A blob is described, as every format renders it; its bytes stay in its file.
        Value::Blob(blob) => to_js_at(ctx, &blob.placeholder(), depth)?,
    })
}

/// Reads a JavaScript value back; `None` for `undefined` (and functions and
/// symbols, which JSON leaves out too).
pub fn from_js<'js>(ctx: &Ctx<'js>, value: rquickjs::Value<'js>) -> rquickjs::Result<Option<Value>> {
    let mut parts = MAX_PARTS;
    from_js_at(ctx, value, 0, &mut parts)
}

fn from_js_at<'js>(
    ctx: &Ctx<'js>,
    value: rquickjs::Value<'js>,
    depth: usize,
    parts: &mut usize,
) -> rquickjs::Result<Option<Value>> {
    if depth > MAX_DEPTH {
        return Err(rquickjs::Exception::throw_range(
            ctx,
            "a value nests too deeply (or refers to itself) to leave JavaScript",
        ));
    }
    *parts = parts.checked_sub(1).ok_or_else(|| {
        rquickjs::Exception::throw_range(
            ctx,
            &format!("a value of more than {MAX_PARTS} parts cannot leave JavaScript"),
        )
    })?;
    Ok(Some(match value.type_of() {
        Type::Uninitialized | Type::Undefined | Type::Function | Type::Constructor | Type::Symbol => return Ok(None),
        Type::Null => Value::Null,
        Type::Bool => Value::Bool(value.as_bool().unwrap_or(false)),
        Type::Int => Value::Int(i64::from(value.as_int().unwrap_or(0))),
        Type::Float => number(value.as_float().unwrap_or(f64::NAN)),
        Type::BigInt => {
            // Read as its decimal text: the engine's own conversion wraps a BigInt
            // past 64 bits (2n ** 64n + 5n would be stored as 5).
            let text = value.get::<rquickjs::convert::Coerced<String>>()?.0;
            let Ok(int) = text.parse::<i64>() else {
                return Err(rquickjs::Exception::throw_range(
                    ctx,
                    &format!("the BigInt {text} is outside the 64-bit integer range a value may have"),
                ));
            };
            Value::Int(int)
        }
        Type::String => Value::String(value.get::<String>()?),
        Type::Array => {
            let array: Array = value.get()?;
            let mut items = Vec::with_capacity(array.len());
            for item in array.iter::<rquickjs::Value>() {
                items.push(from_js_at(ctx, item?, depth + 1, parts)?.unwrap_or(Value::Null));
            }
            Value::Array(items)
        }
        _ => {
            let Some(object) = value.as_object() else { return Ok(None) };
            if let Ok(bytes) = TypedArray::<u8>::from_object(object.clone()) {
                return Ok(Some(Value::Bytes(copy_bytes(&bytes))));
            }
            if let Ok(to_json) = object.get::<_, Function>(rquickjs::atom::PredefinedAtom::ToJSON) {
                let json: rquickjs::Value = to_json.call((rquickjs::function::This(object.clone()),))?;
                // A `toJSON` returning the object itself would loop: read its fields.
                if !json.as_object().is_some_and(|o| o == object) {
                    return from_js_at(ctx, json, depth + 1, parts);
                }
            }
            let mut fields = Object::default();
            for prop in object.own_props::<String, rquickjs::Value>(Filter::new().string().enum_only()) {
                let (name, field) = prop?;
                if let Some(field) = from_js_at(ctx, field, depth + 1, parts)? {
                    fields.insert(name, field);
                }
            }
            Value::Object(fields)
        }
    }))
}

/// A JavaScript number as Lyre keeps it: whole numbers in range as integers.
fn number(n: f64) -> Value {
    if n.fract() == 0.0 && n.abs() < 9_007_199_254_740_992.0 { Value::Int(n as i64) } else { Value::Float(n) }
}

/// The bytes of a `Uint8Array`, copied out of the engine.
pub fn copy_bytes(array: &TypedArray<'_, u8>) -> Vec<u8> {
    // SAFETY: no JavaScript runs while the slice is copied.
    unsafe { array.as_bytes() }.map(<[u8]>::to_vec).unwrap_or_default()
}
