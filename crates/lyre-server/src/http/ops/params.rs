//! Reading an operation's parameters, with Harper's messages for wrong shapes.

use lyre_core::{Engine, Object, Table, Value};

use crate::http::error::ApiError;

/// The parameters of one operation request: the body object minus `operation`.
pub struct Params {
    map: Object,
}

impl Params {
    /// The table the request names (`database`, default `data`, and `table`).
    pub fn table(&mut self, engine: &Engine) -> Result<Table, ApiError> {
        let database = self.database()?;
        let table = self.required_string(&["table"])?;
        Ok(engine.database(&database)?.table(&table)?)
    }
    /// Splits a request body into its operation name and parameters.
    pub fn from_body(body: Value) -> Result<(String, Params), ApiError> {
        let missing = || ApiError::bad_request("Request body must include an 'operation' property.");
        let Value::Object(mut map) = body else {
            return Err(missing());
        };
        let operation = match map.shift_remove("operation") {
            Some(Value::String(op)) => op,
            None | Some(Value::Null) => return Err(missing()),
            Some(_) => return Err(ApiError::bad_request("'operation' must be a string")),
        };
        Ok((operation, Params { map }))
    }

    /// Every parameter left, in request order (an operation whose parameters are
    /// free-form: `set_configuration`).
    pub fn into_entries(self) -> impl Iterator<Item = (String, Value)> {
        self.map.into_iter()
    }

    /// Parameters read from a nested object (a search condition).
    pub fn from_object(map: Object) -> Params {
        Params { map }
    }

    /// Takes the first present key among `keys` (a name and its legacy aliases).
    fn take(&mut self, keys: &[&str]) -> Option<(String, Value)> {
        keys.iter().find_map(|k| self.map.shift_remove(*k).filter(|v| *v != Value::Null).map(|v| (k.to_string(), v)))
    }

    /// An optional string.
    pub fn string(&mut self, keys: &[&str]) -> Result<Option<String>, ApiError> {
        match self.take(keys) {
            None => Ok(None),
            Some((_, Value::String(s))) => Ok(Some(s)),
            Some((key, _)) => Err(ApiError::bad_request(format!("'{key}' must be a string"))),
        }
    }

    /// A required string.
    pub fn required_string(&mut self, keys: &[&str]) -> Result<String, ApiError> {
        self.string(keys)?.ok_or_else(|| ApiError::bad_request(format!("'{}' is required", keys[0])))
    }

    /// The database a request about data addresses, without consuming anything:
    /// the one named (`database` or legacy `schema`), else `data` when it names a
    /// table; `None` for requests about no database (users, components, jobs).
    pub fn peek_database(&self) -> Option<&str> {
        let named = ["database", "schema"].iter().find_map(|k| match self.map.get(*k) {
            Some(Value::String(name)) => Some(name.as_str()),
            _ => None,
        });
        named.or_else(|| self.map.contains_key("table").then_some("data"))
    }

    /// The database named by `database` or legacy `schema`, `data` by default.
    pub fn database(&mut self) -> Result<String, ApiError> {
        Ok(self.string(&["database", "schema"])?.unwrap_or_else(|| "data".to_string()))
    }

    /// An optional boolean.
    pub fn bool(&mut self, keys: &[&str]) -> Result<Option<bool>, ApiError> {
        match self.take(keys) {
            None => Ok(None),
            Some((_, Value::Bool(b))) => Ok(Some(b)),
            Some((key, _)) => Err(ApiError::bad_request(format!("'{key}' must be a boolean"))),
        }
    }

    /// An optional non-negative integer; written as text too (`"2"`), which Harper's
    /// JavaScript takes as the number.
    pub fn count(&mut self, keys: &[&str]) -> Result<Option<usize>, ApiError> {
        match self.take(keys) {
            None => Ok(None),
            Some((_, Value::Int(i))) if i >= 0 => Ok(Some(usize::try_from(i).unwrap_or(usize::MAX))),
            // JSON `1.0` is the integer 1 to Harper's JavaScript.
            Some((_, Value::Float(f))) if f >= 0.0 && f.fract() == 0.0 && f < 2f64.powi(53) => Ok(Some(f as usize)),
            Some((_, Value::String(text))) if let Ok(n) = text.trim().parse::<u64>() => {
                Ok(Some(usize::try_from(n).unwrap_or(usize::MAX)))
            }
            Some((key, _)) => Err(ApiError::bad_request(format!("'{key}' must be a non-negative integer"))),
        }
    }

    /// An optional array.
    pub fn array(&mut self, keys: &[&str]) -> Result<Option<Vec<Value>>, ApiError> {
        match self.take(keys) {
            None => Ok(None),
            Some((_, Value::Array(items))) => Ok(Some(items)),
            Some((key, _)) => Err(ApiError::bad_request(format!("'{key}' must be an array"))),
        }
    }

    /// A required array; an explicit `null` is a wrong type, not a missing key.
    pub fn required_array(&mut self, keys: &[&str]) -> Result<Vec<Value>, ApiError> {
        if let Some(key) = keys.iter().find(|k| self.map.get(**k) == Some(&Value::Null)) {
            return Err(ApiError::bad_request(format!("'{key}' must be an array")));
        }
        self.array(keys)?.ok_or_else(|| ApiError::bad_request(format!("'{}' is required", keys[0])))
    }

    /// Whether `key` is given (and not `null`), leaving it in place.
    pub fn has(&self, key: &str) -> bool {
        self.map.get(key).is_some_and(|v| *v != Value::Null)
    }

    /// Any value.
    pub fn value(&mut self, keys: &[&str]) -> Option<Value> {
        self.take(keys).map(|(_, v)| v)
    }

    /// A required value (`null` counts as missing).
    pub fn required_value(&mut self, keys: &[&str]) -> Result<Value, ApiError> {
        self.value(keys).ok_or_else(|| ApiError::bad_request(format!("'{}' is required", keys[0])))
    }

    /// Any value, `null` included (a search for null is a search).
    pub fn value_or_null(&mut self, keys: &[&str]) -> Option<Value> {
        keys.iter().find_map(|k| self.map.shift_remove(*k))
    }

    /// `records`: an array of objects.
    pub fn records(&mut self) -> Result<Vec<Object>, ApiError> {
        self.required_array(&["records"])?
            .into_iter()
            .enumerate()
            .map(|(i, record)| match record {
                Value::Object(o) => Ok(o),
                _ => Err(ApiError::bad_request(format!("'records[{i}]' must be of type object"))),
            })
            .collect()
    }
}
