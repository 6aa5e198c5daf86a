//! A stored record made into a JavaScript object straight from what serializes it
//! (`RecordBody`: its stored MessagePack, walked once), with no `Value` tree in
//! between: the record a table's `get` gives a script (`native.get`).
//!
//! The object is frozen as `Object.freeze` leaves one, but built so: each attribute
//! is defined enumerable, not writable, not configurable, then extensions are
//! stopped (`Object.freeze` would walk every property again). Nested objects and
//! arrays are ordinary (`Object.freeze` is shallow too); whether there were any is
//! reported, as a record holding one cannot be answered from its stored bytes (a
//! handler may have changed it inside).
//!
//! The values are what [`to_js`](super::convert::to_js) makes of the decoded
//! record: numbers as numbers, bytes as a `Uint8Array`, a blob as its placeholder.

use std::fmt;

use rquickjs::object::Property;
use rquickjs::{Array, Ctx, IntoJs, Object, TypedArray};
use serde::Serialize;
use serde::ser::{self, Impossible};

use super::convert::MAX_DEPTH;

/// A record as a frozen JavaScript object, and whether any attribute held an
/// object, an array or bytes (so the record is not flat).
pub fn record_to_js<'js, T: Serialize + ?Sized>(ctx: &Ctx<'js>, record: &T) -> rquickjs::Result<(Object<'js>, bool)> {
    let mut nested = false;
    let value = record.serialize(Builder { ctx, depth: 0, nested: &mut nested }).map_err(|e| e.into_js(ctx))?;
    let Some(object) = value.into_object() else {
        return Err(rquickjs::Exception::throw_type(ctx, "a stored record is not an object"));
    };
    // SAFETY: `ctx` and `object` are live values of the same runtime, held for the
    // call; stopping an ordinary object's extensions runs no script.
    unsafe { rquickjs::qjs::JS_PreventExtensions(ctx.as_raw().as_ptr(), object.as_raw()) };
    Ok((object, nested))
}

/// Why a value could not be built.
#[derive(Debug)]
enum BuildError {
    /// The engine failed (out of memory, most likely).
    Engine(rquickjs::Error),
    /// The value cannot be a JavaScript value (too deep, a key that is not text, …).
    Refused(String),
}

impl BuildError {
    fn into_js(self, ctx: &Ctx<'_>) -> rquickjs::Error {
        match self {
            BuildError::Engine(err) => err,
            BuildError::Refused(message) => rquickjs::Exception::throw_range(ctx, &message),
        }
    }
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BuildError::Engine(err) => write!(f, "{err}"),
            BuildError::Refused(message) => f.write_str(message),
        }
    }
}

impl std::error::Error for BuildError {}

impl ser::Error for BuildError {
    fn custom<M: fmt::Display>(message: M) -> Self {
        BuildError::Refused(message.to_string())
    }
}

impl From<rquickjs::Error> for BuildError {
    fn from(err: rquickjs::Error) -> Self {
        BuildError::Engine(err)
    }
}

type Built<'js> = Result<rquickjs::Value<'js>, BuildError>;

/// Builds one value at `depth` (0: the record itself).
struct Builder<'a, 'js> {
    ctx: &'a Ctx<'js>,
    depth: usize,
    nested: &'a mut bool,
}

impl<'a, 'js> Builder<'a, 'js> {
    /// The builder of a part of this value, one level down.
    fn inner(&mut self) -> Builder<'_, 'js> {
        Builder { ctx: self.ctx, depth: self.depth + 1, nested: self.nested }
    }

    /// Notes a container (or bytes) inside the record, refusing one past the depth limit.
    fn enter(&mut self) -> Result<(), BuildError> {
        if self.depth > 0 {
            *self.nested = true;
        }
        if self.depth > MAX_DEPTH {
            return Err(BuildError::Refused("a value nests too deeply to cross into JavaScript".to_string()));
        }
        Ok(())
    }

    fn object(mut self) -> Result<Fields<'a, 'js>, BuildError> {
        self.enter()?;
        let object = Object::new(self.ctx.clone())?;
        Ok(Fields { builder: self, object, key: String::new() })
    }

    fn array(mut self) -> Result<Items<'a, 'js>, BuildError> {
        self.enter()?;
        let array = Array::new(self.ctx.clone())?;
        Ok(Items { builder: self, array, len: 0 })
    }

    fn int(self, n: i64) -> Built<'js> {
        Ok(match i32::try_from(n) {
            Ok(small) => rquickjs::Value::new_int(self.ctx.clone(), small),
            Err(_) => rquickjs::Value::new_number(self.ctx.clone(), n as f64),
        })
    }
}

impl<'a, 'js> ser::Serializer for Builder<'a, 'js> {
    type Ok = rquickjs::Value<'js>;
    type Error = BuildError;
    type SerializeSeq = Items<'a, 'js>;
    type SerializeTuple = Items<'a, 'js>;
    type SerializeTupleStruct = Items<'a, 'js>;
    type SerializeTupleVariant = Impossible<rquickjs::Value<'js>, BuildError>;
    type SerializeMap = Fields<'a, 'js>;
    type SerializeStruct = Fields<'a, 'js>;
    type SerializeStructVariant = Impossible<rquickjs::Value<'js>, BuildError>;

    fn serialize_bool(self, v: bool) -> Built<'js> {
        Ok(rquickjs::Value::new_bool(self.ctx.clone(), v))
    }
    fn serialize_i8(self, v: i8) -> Built<'js> {
        self.int(i64::from(v))
    }
    fn serialize_i16(self, v: i16) -> Built<'js> {
        self.int(i64::from(v))
    }
    fn serialize_i32(self, v: i32) -> Built<'js> {
        self.int(i64::from(v))
    }
    fn serialize_i64(self, v: i64) -> Built<'js> {
        self.int(v)
    }
    fn serialize_u8(self, v: u8) -> Built<'js> {
        self.int(i64::from(v))
    }
    fn serialize_u16(self, v: u16) -> Built<'js> {
        self.int(i64::from(v))
    }
    fn serialize_u32(self, v: u32) -> Built<'js> {
        self.int(i64::from(v))
    }
    fn serialize_u64(self, v: u64) -> Built<'js> {
        match i64::try_from(v) {
            Ok(n) => self.int(n),
            Err(_) => Ok(rquickjs::Value::new_number(self.ctx.clone(), v as f64)),
        }
    }
    fn serialize_f32(self, v: f32) -> Built<'js> {
        Ok(rquickjs::Value::new_number(self.ctx.clone(), f64::from(v)))
    }
    fn serialize_f64(self, v: f64) -> Built<'js> {
        Ok(rquickjs::Value::new_number(self.ctx.clone(), v))
    }
    fn serialize_char(self, v: char) -> Built<'js> {
        self.serialize_str(v.encode_utf8(&mut [0; 4]))
    }
    fn serialize_str(self, v: &str) -> Built<'js> {
        Ok(v.into_js(self.ctx)?)
    }
    fn serialize_bytes(mut self, v: &[u8]) -> Built<'js> {
        self.enter()?;
        Ok(TypedArray::<u8>::new_copy(self.ctx.clone(), v)?.into_value())
    }
    fn serialize_none(self) -> Built<'js> {
        Ok(rquickjs::Value::new_null(self.ctx.clone()))
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Built<'js> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Built<'js> {
        Ok(rquickjs::Value::new_null(self.ctx.clone()))
    }
    fn serialize_unit_struct(self, _name: &'static str) -> Built<'js> {
        self.serialize_unit()
    }
    fn serialize_unit_variant(self, _name: &'static str, _index: u32, variant: &'static str) -> Built<'js> {
        self.serialize_str(variant)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(self, _name: &'static str, value: &T) -> Built<'js> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        _value: &T,
    ) -> Built<'js> {
        Err(BuildError::Refused(format!("a record cannot hold the variant {variant}")))
    }
    fn serialize_seq(self, _len: Option<usize>) -> Result<Items<'a, 'js>, BuildError> {
        self.array()
    }
    fn serialize_tuple(self, _len: usize) -> Result<Items<'a, 'js>, BuildError> {
        self.array()
    }
    fn serialize_tuple_struct(self, _name: &'static str, _len: usize) -> Result<Items<'a, 'js>, BuildError> {
        self.array()
    }
    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeTupleVariant, BuildError> {
        Err(BuildError::Refused(format!("a record cannot hold the variant {variant}")))
    }
    fn serialize_map(self, _len: Option<usize>) -> Result<Fields<'a, 'js>, BuildError> {
        self.object()
    }
    fn serialize_struct(self, _name: &'static str, _len: usize) -> Result<Fields<'a, 'js>, BuildError> {
        self.object()
    }
    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeStructVariant, BuildError> {
        Err(BuildError::Refused(format!("a record cannot hold the variant {variant}")))
    }
}

/// An array being filled.
struct Items<'a, 'js> {
    builder: Builder<'a, 'js>,
    array: Array<'js>,
    len: usize,
}

impl<'js> Items<'_, 'js> {
    fn push<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), BuildError> {
        let item = value.serialize(self.builder.inner())?;
        self.array.set(self.len, item)?;
        self.len += 1;
        Ok(())
    }
}

/// The three sequence kinds serde has, each filling the array alike.
macro_rules! fill_items {
    ($($kind:ident :: $method:ident),*) => {$(
        impl<'js> ser::$kind for Items<'_, 'js> {
            type Ok = rquickjs::Value<'js>;
            type Error = BuildError;
            fn $method<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), BuildError> {
                self.push(value)
            }
            fn end(self) -> Built<'js> {
                Ok(self.array.into_value())
            }
        }
    )*};
}

fill_items!(SerializeSeq::serialize_element, SerializeTuple::serialize_element, SerializeTupleStruct::serialize_field);

/// An object being filled; the record's own attributes (depth 0) are defined
/// frozen, a nested object's as ordinary properties.
struct Fields<'a, 'js> {
    builder: Builder<'a, 'js>,
    object: Object<'js>,
    /// The key of the entry being built (one buffer for all of them).
    key: String,
}

impl<'js> Fields<'_, 'js> {
    fn define(&mut self, value: rquickjs::Value<'js>) -> Result<(), BuildError> {
        let key = self.key.as_str();
        if self.builder.depth == 0 {
            self.object.prop(key, Property::from(value).enumerable())?;
        } else {
            self.object.set(key, value)?;
        }
        Ok(())
    }
}

impl<'js> ser::SerializeMap for Fields<'_, 'js> {
    type Ok = rquickjs::Value<'js>;
    type Error = BuildError;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), BuildError> {
        self.key.clear();
        key.serialize(KeyText(&mut self.key))
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), BuildError> {
        let value = value.serialize(self.builder.inner())?;
        self.define(value)
    }
    fn end(self) -> Built<'js> {
        Ok(self.object.into_value())
    }
}

impl<'js> ser::SerializeStruct for Fields<'_, 'js> {
    type Ok = rquickjs::Value<'js>;
    type Error = BuildError;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, key: &'static str, value: &T) -> Result<(), BuildError> {
        self.key.clear();
        self.key.push_str(key);
        let value = value.serialize(self.builder.inner())?;
        self.define(value)
    }
    fn end(self) -> Built<'js> {
        Ok(self.object.into_value())
    }
}

/// Writes a map key's text into a buffer: text as it is, numbers and booleans as
/// their text (as JSON objects and `Value`'s decoder take them).
struct KeyText<'a>(&'a mut String);

impl ser::Serializer for KeyText<'_> {
    type Ok = ();
    type Error = BuildError;
    type SerializeSeq = Impossible<(), BuildError>;
    type SerializeTuple = Impossible<(), BuildError>;
    type SerializeTupleStruct = Impossible<(), BuildError>;
    type SerializeTupleVariant = Impossible<(), BuildError>;
    type SerializeMap = Impossible<(), BuildError>;
    type SerializeStruct = Impossible<(), BuildError>;
    type SerializeStructVariant = Impossible<(), BuildError>;

    fn serialize_str(self, v: &str) -> Result<(), BuildError> {
        self.0.push_str(v);
        Ok(())
    }
    fn serialize_bool(self, v: bool) -> Result<(), BuildError> {
        self.serialize_str(if v { "true" } else { "false" })
    }
    fn serialize_i8(self, v: i8) -> Result<(), BuildError> {
        self.serialize_i64(i64::from(v))
    }
    fn serialize_i16(self, v: i16) -> Result<(), BuildError> {
        self.serialize_i64(i64::from(v))
    }
    fn serialize_i32(self, v: i32) -> Result<(), BuildError> {
        self.serialize_i64(i64::from(v))
    }
    fn serialize_i64(self, v: i64) -> Result<(), BuildError> {
        self.serialize_str(&v.to_string())
    }
    fn serialize_u8(self, v: u8) -> Result<(), BuildError> {
        self.serialize_u64(u64::from(v))
    }
    fn serialize_u16(self, v: u16) -> Result<(), BuildError> {
        self.serialize_u64(u64::from(v))
    }
    fn serialize_u32(self, v: u32) -> Result<(), BuildError> {
        self.serialize_u64(u64::from(v))
    }
    fn serialize_u64(self, v: u64) -> Result<(), BuildError> {
        self.serialize_str(&v.to_string())
    }
    fn serialize_f32(self, _v: f32) -> Result<(), BuildError> {
        Err(not_text())
    }
    fn serialize_f64(self, _v: f64) -> Result<(), BuildError> {
        Err(not_text())
    }
    fn serialize_char(self, v: char) -> Result<(), BuildError> {
        self.0.push(v);
        Ok(())
    }
    fn serialize_bytes(self, _v: &[u8]) -> Result<(), BuildError> {
        Err(not_text())
    }
    fn serialize_none(self) -> Result<(), BuildError> {
        Err(not_text())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), BuildError> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<(), BuildError> {
        Err(not_text())
    }
    fn serialize_unit_struct(self, _name: &'static str) -> Result<(), BuildError> {
        Err(not_text())
    }
    fn serialize_unit_variant(self, _name: &'static str, _index: u32, variant: &'static str) -> Result<(), BuildError> {
        self.serialize_str(variant)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(self, _name: &'static str, value: &T) -> Result<(), BuildError> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _value: &T,
    ) -> Result<(), BuildError> {
        Err(not_text())
    }
    fn serialize_seq(self, _len: Option<usize>) -> Result<Self::SerializeSeq, BuildError> {
        Err(not_text())
    }
    fn serialize_tuple(self, _len: usize) -> Result<Self::SerializeTuple, BuildError> {
        Err(not_text())
    }
    fn serialize_tuple_struct(
        self,
        _name: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeTupleStruct, BuildError> {
        Err(not_text())
    }
    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeTupleVariant, BuildError> {
        Err(not_text())
    }
    fn serialize_map(self, _len: Option<usize>) -> Result<Self::SerializeMap, BuildError> {
        Err(not_text())
    }
    fn serialize_struct(self, _name: &'static str, _len: usize) -> Result<Self::SerializeStruct, BuildError> {
        Err(not_text())
    }
    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeStructVariant, BuildError> {
        Err(not_text())
    }
}

fn not_text() -> BuildError {
    BuildError::Refused("a record's attribute name must be text".to_string())
}

#[cfg(test)]
pub(super) mod tests {
    use lyre_core::{Object as Record, RecordBody, Value};
    use proptest::prelude::*;
    use rquickjs::{Context, Ctx, Runtime};

    use super::record_to_js;
    use crate::script::convert::to_js;

    /// Runs `f` in a fresh JavaScript context.
    pub(in crate::script) fn in_js<T>(f: impl FnOnce(&Ctx<'_>) -> T) -> T {
        let runtime = Runtime::new().unwrap();
        let context = Context::full(&runtime).unwrap();
        context.with(|ctx| f(&ctx))
    }

    fn json<'js>(ctx: &Ctx<'js>, value: rquickjs::Value<'js>) -> String {
        ctx.json_stringify(value).unwrap().unwrap().to_string().unwrap()
    }

    fn is_frozen<'js>(ctx: &Ctx<'js>, object: &rquickjs::Object<'js>) -> bool {
        let check: rquickjs::Function = ctx.eval("(o) => Object.isFrozen(o)").unwrap();
        check.call((object.clone(),)).unwrap()
    }

    fn scalar() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::Int),
            any::<i32>().prop_map(|n| Value::Int(i64::from(n))),
            any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(Value::Float),
            "\\PC{0,12}".prop_map(Value::String),
        ]
    }

    fn value() -> impl Strategy<Value = Value> {
        scalar().prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(any::<u8>(), 0..6).prop_map(Value::Bytes),
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::vec(("[a-z]{1,6}", inner), 0..4)
                    .prop_map(|fields| Value::Object(fields.into_iter().collect())),
            ]
        })
    }

    fn record() -> impl Strategy<Value = Record> {
        prop::collection::vec(("[a-zA-Z_][a-zA-Z0-9_]{0,8}", value()), 0..8).prop_map(|f| f.into_iter().collect())
    }

    proptest! {
        /// A record read from its stored bytes (or decoded) is the object `to_js`
        /// makes of the decoded record, frozen, and reported nested exactly when an
        /// attribute holds an object, an array or bytes.
        #[test]
        fn a_stored_record_crosses_as_its_decoded_value_does(record in record()) {
            let nested = record.values().any(|v| matches!(v, Value::Object(_) | Value::Array(_) | Value::Bytes(_)));
            let stored = RecordBody::Stored(Value::Object(record.clone()).to_msgpack());
            let decoded = RecordBody::Decoded(record.clone());
            in_js(|ctx| {
                let expected = json(ctx, to_js(ctx, &Value::Object(record.clone())).unwrap());
                for body in [&stored, &decoded] {
                    let (object, reported) = record_to_js(ctx, body).unwrap();
                    assert_eq!(json(ctx, object.clone().into_value()), expected);
                    assert_eq!(reported, nested);
                    assert!(is_frozen(ctx, &object));
                }
            });
        }
    }

    #[test]
    fn a_frozen_record_refuses_changes_as_object_freeze_makes_it() {
        let mut record = Record::default();
        record.insert("name".into(), Value::String("Rex".into()));
        record.insert("tags".into(), Value::Array(vec![Value::String("good".into())]));
        let body = RecordBody::Stored(Value::Object(record).to_msgpack());
        in_js(|ctx| {
            let (object, nested) = record_to_js(ctx, &body).unwrap();
            assert!(nested);
            let probe: rquickjs::Function = ctx
                .eval(
                    r#"(r) => {
                        'use strict';
                        const refused = (f) => { try { f(); return false; } catch (e) { return e instanceof TypeError; } };
                        return [
                            refused(() => { r.name = 'Max'; }),
                            refused(() => { r.added = 1; }),
                            refused(() => { delete r.name; }),
                            (r.tags.push('kind'), r.tags.length),
                            Object.keys(r).join(),
                        ].join('|');
                    }"#,
                )
                .unwrap();
            let answer: String = probe.call((object,)).unwrap();
            assert_eq!(answer, "true|true|true|2|name,tags");
        });
    }
}
