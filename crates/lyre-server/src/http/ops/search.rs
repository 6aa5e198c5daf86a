//! search_by_id, search_by_value, search_by_conditions, and Harper 5's `search`
//! (the same query object, conditions optional), including vector sorts
//! (`sort: {attribute, target, ef, filterExpansion}`), whose answers carry Harper's
//! `Harper-Index-Coverage` header.

use std::sync::Arc;

use axum::http::HeaderValue;
use axum::response::Response;
use lyre_core::query::{Comparator, Condition, Operator, Query, Select, SortKey, VectorSort};
use lyre_core::{Code, Context, Engine, Value};

use crate::http::error::ApiError;
use crate::http::format::Format;
use crate::http::ops::{Params, reply};
use crate::http::rest::query::MAX_PATH_DEPTH;
use crate::http::stream::{Framing, stream_search};

/// Id lists longer than this are read on a blocking thread.
const INLINE_IDS: usize = 64;

/// The search operations another operation may run (an export's
/// `search_operation`).
/// (Harper's exports name these four; the `search` operation runs here too.)
pub const SEARCHES: [&str; 4] = ["search_by_value", "search_by_hash", "search_by_id", "search_by_conditions"];

/// Harper's header stating how current a vector query's index was.
pub const COVERAGE_HEADER: &str = "harper-index-coverage";

/// Runs the search operation `operation` (one of [`SEARCHES`]), answering as the
/// operation itself would.
pub async fn run(
    engine: &Arc<Engine>,
    ctx: &Context,
    operation: &str,
    params: Params,
    format: Format,
) -> Result<Response, ApiError> {
    match operation {
        "search_by_id" | "search_by_hash" => by_id(engine, ctx, params, format).await,
        "search_by_value" => by_value(engine, ctx, params, format).await,
        "search_by_conditions" => by_conditions(engine, ctx, params, format, true).await,
        "search" => by_conditions(engine, ctx, params, format, false).await,
        other => Err(ApiError::bad_request(format!(
            "'search_operation.operation' must be one of {}, not '{other}'",
            SEARCHES.join(", ")
        ))),
    }
}

async fn by_id(engine: &Arc<Engine>, ctx: &Context, mut params: Params, format: Format) -> Result<Response, ApiError> {
    let table = params.table(engine)?;
    let ids = params.required_array(&["ids", "hash_values"])?;
    let select = select(&mut params)?;
    let records = if ids.len() > INLINE_IDS {
        let ctx = ctx.clone();
        crate::http::blocking::blocking("a search", move || table.get_many(&ctx, &ids, &select)).await?
    } else {
        table.get_many(ctx, &ids, &select)?
    };
    reply(format, &records)
}

async fn by_value(
    engine: &Arc<Engine>,
    ctx: &Context,
    mut params: Params,
    format: Format,
) -> Result<Response, ApiError> {
    let table = params.table(engine)?;
    let attribute = params.required_string(&["attribute", "search_attribute"])?;
    let value =
        params.value_or_null(&["value", "search_value"]).ok_or_else(|| ApiError::bad_request("'value' is required"))?;
    let conditions = match wildcard(&value) {
        Some(None) => Vec::new(),
        Some(Some((comparator, text))) => {
            vec![Condition::Compare { attribute, comparator, value: Value::String(text) }]
        }
        None => vec![Condition::Compare { attribute: attribute.clone(), comparator: Comparator::Equals, value }],
    };
    let mut query = Query { conditions, ..Default::default() };
    paging(&mut params, &mut query)?;
    let ctx = ctx.clone();
    stream_search(format, Framing::Array, move || table.search(&ctx, query)).await
}

/// Harper's wildcards in `search_by_value`: `*` alone matches everything, `x*`,
/// `*x` and `*x*` are starts-with, ends-with and contains. `None`: no wildcard.
fn wildcard(value: &Value) -> Option<Option<(Comparator, String)>> {
    let Value::String(s) = value else { return None };
    if s == "*" || s == "%" {
        return Some(None);
    }
    let (starts, ends) = (s.starts_with('*'), s.ends_with('*'));
    let inner = s.trim_start_matches('*').trim_end_matches('*').to_string();
    match (starts, ends) {
        (true, true) => Some(Some((Comparator::Contains, inner))),
        (false, true) => Some(Some((Comparator::StartsWith, inner))),
        (true, false) => Some(Some((Comparator::EndsWith, inner))),
        (false, false) => None,
    }
}

async fn by_conditions(
    engine: &Arc<Engine>,
    ctx: &Context,
    mut params: Params,
    format: Format,
    conditions_required: bool,
) -> Result<Response, ApiError> {
    let table = params.table(engine)?;
    if conditions_required && !params.has("conditions") {
        params.required_array(&["conditions"])?;
    }
    let query = query_object(&mut params)?;
    if conditions_required && query.conditions.is_empty() {
        return Err(ApiError::bad_request("'conditions' must contain at least 1 items"));
    }
    search_answer(table, ctx, query, format).await
}

/// A query object as Harper 5's `search` and REST's `QUERY` take it: `conditions`
/// (optional), `operator`, `sort` (a vector sort with `target`), `limit`,
/// `offset`, `select`, `maxIndexLagMilliseconds`, `waitForIndexMilliseconds`.
pub fn query_object(params: &mut Params) -> Result<Query, ApiError> {
    let operator = operator(params.value(&["operator"]))?;
    let conditions = params.array(&["conditions"])?.unwrap_or_default();
    let conditions = conditions.into_iter().map(condition).collect::<Result<Vec<_>, _>>()?;
    let mut query = Query { operator, conditions, ..Default::default() };
    paging(params, &mut query)?;
    Ok(query)
}

/// Whether `query` is answered without streaming: a vector query without
/// conditions (a walk bounded by its breadth; conditions may make it walk the
/// whole graph) and a limit of at most [`INLINE_NEAREST`] records.
fn answers_inline(query: &Query) -> bool {
    query.vector.is_some()
        && query.conditions.is_empty()
        && query.limit.is_some_and(|l| l + query.offset <= INLINE_NEAREST)
}

/// The most results a vector query answered without streaming returns.
const INLINE_NEAREST: usize = 1_000;

/// Runs `query` on `table` and streams the answer; a vector query first waits
/// for its index as the query allows, and its answer says how current it was.
pub async fn search_answer(
    table: lyre_core::Table,
    ctx: &Context,
    query: Query,
    format: Format,
) -> Result<Response, ApiError> {
    let coverage = table.index_coverage(&query).await?;
    let mut response = if answers_inline(&query) {
        // A bounded walk of the graph: cheaper here than the hand-off to a
        // blocking thread a streamed search takes (a quarter of its CPU).
        let mut found = Vec::new();
        table.search(ctx, query)?.run(&mut |value| {
            found.push(value);
            std::ops::ControlFlow::Continue(())
        })?;
        reply(format, &Value::Array(found))?
    } else {
        let ctx = ctx.clone();
        stream_search(format, Framing::Array, move || table.search(&ctx, query)).await?
    };
    if let Some(coverage) = coverage
        && let Ok(value) = HeaderValue::from_str(&coverage.header())
    {
        response.headers_mut().insert(COVERAGE_HEADER, value);
    }
    Ok(response)
}

/// `limit`, `offset`, `desc`/`reverse`, `sort`, `get_attributes`.
fn paging(params: &mut Params, query: &mut Query) -> Result<(), ApiError> {
    query.limit = params.count(&["limit"])?;
    query.offset = params.count(&["offset"])?.unwrap_or(0);
    query.descending = params.bool(&["desc", "reverse"])?.unwrap_or(false);
    if let Some(sort) = params.value(&["sort"]) {
        (query.sort, query.vector) = sort_keys(sort)?;
    }
    if let Some(tolerance) = params.count(&["maxIndexLagMilliseconds"])? {
        query.index_wait.tolerance_ms = tolerance as u64;
    }
    if let Some(wait) = params.count(&["waitForIndexMilliseconds"])? {
        query.index_wait.wait = std::time::Duration::from_millis(wait as u64);
    }
    query.select = select(params)?;
    Ok(())
}

pub(super) fn select(params: &mut Params) -> Result<Select, ApiError> {
    let Some(attributes) = params.array(&["get_attributes", "select"])? else {
        return Ok(Select::Raw);
    };
    if attributes.is_empty() {
        return Err(ApiError::bad_request("'get_attributes' must contain at least 1 item"));
    }
    if attributes.iter().all(|a| matches!(a, Value::String(_))) {
        let names: Vec<String> = attributes.into_iter().filter_map(|a| a.as_str().map(str::to_string)).collect();
        return Ok(if names.iter().any(|n| n == "*") { Select::All } else { Select::Attributes(names) });
    }
    Ok(Select::Fields { fields: selected_fields(attributes, 0)?, shape: lyre_core::query::Shaped::Filled })
}

/// `get_attributes` entries as fields: names, and Harper 5's `{name, select: [...]}`
/// for a relationship's (or nested object's) own selection.
fn selected_fields(entries: Vec<Value>, depth: usize) -> Result<Vec<lyre_core::query::Field>, ApiError> {
    const MAX_DEPTH: usize = MAX_PATH_DEPTH;
    let wrong =
        || ApiError::bad_request("'get_attributes' must hold names or {\"name\": ..., \"select\": [...]} objects");
    if depth > MAX_DEPTH {
        return Err(ApiError::bad_request(format!("'get_attributes' nests more than {MAX_DEPTH} levels")));
    }
    entries
        .into_iter()
        .map(|entry| match entry {
            Value::String(name) => Ok(lyre_core::query::Field { name, nested: None }),
            Value::Object(mut object) => {
                let Some(Value::String(name)) = object.shift_remove("name") else { return Err(wrong()) };
                let nested = match object.shift_remove("select") {
                    None | Some(Value::Null) => None,
                    Some(Value::Array(inner)) if !inner.is_empty() => Some(selected_fields(inner, depth + 1)?),
                    Some(_) => return Err(wrong()),
                };
                Ok(lyre_core::query::Field { name, nested })
            }
            _ => Err(wrong()),
        })
        .collect()
}

/// `sort: {attribute, descending, next: {...}}`, flattened into keys; a sort with
/// a `target` (and optionally `ef` and `filterExpansion`) orders by distance to that vector.
pub(super) fn sort_keys(mut sort: Value) -> Result<(Vec<SortKey>, Option<VectorSort>), ApiError> {
    let mut keys = Vec::new();
    loop {
        let Value::Object(mut object) = sort else {
            return Err(ApiError::bad_request("'sort' must be an object with an 'attribute'"));
        };
        let attribute = match object.shift_remove("attribute") {
            Some(Value::String(a)) => a,
            Some(Value::Array(path)) => return Err(not_defined(&path)),
            _ => return Err(ApiError::bad_request("'sort.attribute' must be a string")),
        };
        let descending = matches!(object.shift_remove("descending"), Some(Value::Bool(true)));
        if let Some(target) = object.shift_remove("target") {
            if descending {
                return Err(ApiError::bad_request("a vector sort cannot be descending: nearest come first"));
            }
            let target = lyre_core::catalog::read_vector(&target)
                .map_err(|problem| ApiError::bad_request(format!("'sort.target' {problem}")))?;
            let ef = match object.shift_remove("ef") {
                None | Some(Value::Null) => None,
                Some(Value::Int(n)) if (1..=100_000).contains(&n) => Some(n as usize),
                Some(_) => return Err(ApiError::bad_request("'sort.ef' must be an integer from 1 to 100000")),
            };
            let filter_expansion = match object.shift_remove("filterExpansion") {
                None | Some(Value::Null) => None,
                Some(Value::Int(n)) if (1..=1024).contains(&n) => Some(n as u32),
                Some(_) => {
                    return Err(ApiError::bad_request("'sort.filterExpansion' must be an integer from 1 to 1024"));
                }
            };
            return Ok((keys, Some(VectorSort { attribute, target, ef, filter_expansion })));
        }
        keys.push(SortKey { attribute, descending });
        match object.shift_remove("next") {
            None | Some(Value::Null) => return Ok((keys, None)),
            Some(next) => sort = next,
        }
    }
}

fn operator(value: Option<Value>) -> Result<Operator, ApiError> {
    match value {
        None => Ok(Operator::And),
        Some(Value::String(s)) if s.eq_ignore_ascii_case("and") => Ok(Operator::And),
        Some(Value::String(s)) if s.eq_ignore_ascii_case("or") => Ok(Operator::Or),
        Some(_) => Err(ApiError::bad_request("'operator' must be one of [and, or]")),
    }
}

/// One condition or nested group, in Harper's current or legacy field names.
pub(super) fn condition(value: Value) -> Result<Condition, ApiError> {
    let Value::Object(object) = value else {
        return Err(ApiError::bad_request("each condition must be an object"));
    };
    let mut params = Params::from_object(object);
    if let Some(nested) = params.array(&["conditions"])? {
        let operator = operator(params.value(&["operator"]))?;
        let conditions = nested.into_iter().map(condition).collect::<Result<Vec<_>, _>>()?;
        return Ok(Condition::Group { operator, conditions });
    }
    // An attribute path (`["brand", "name"]`) reaches through relationships, as
    // REST's `brand.name==…` does: the condition applies to the related records.
    let mut path = match params.value(&["attribute", "search_attribute"]) {
        Some(Value::String(a)) => vec![a],
        Some(Value::Array(path)) if path.len() > MAX_PATH_DEPTH + 1 => {
            return Err(ApiError::bad_request(format!(
                "an attribute path reaches through at most {MAX_PATH_DEPTH} relationships"
            )));
        }
        Some(Value::Array(path)) if !path.is_empty() && path.iter().all(|p| matches!(p, Value::String(_))) => {
            path.into_iter().filter_map(|p| p.as_str().map(str::to_string)).collect()
        }
        Some(Value::Array(path)) => return Err(not_defined(&path)),
        _ => {
            return Err(ApiError::bad_request("each condition needs an 'attribute' string"));
        }
    };
    let attribute = path.pop().unwrap_or_default();
    let comparator = match params.value(&["comparator", "search_type"]) {
        None => Comparator::Equals,
        Some(Value::String(name)) => {
            comparator(&name).ok_or_else(|| ApiError::bad_request(format!("Unknown query comparator \"{name}\"")))?
        }
        Some(_) => return Err(ApiError::bad_request("'comparator' must be a string")),
    };
    let value = params
        .value_or_null(&["value", "search_value"])
        .ok_or_else(|| ApiError::bad_request(format!("Search condition for {attribute} must have a value")))?;
    let compare = Condition::Compare { attribute, comparator, value };
    Ok(path
        .into_iter()
        .rev()
        .fold(compare, |inner, relationship| Condition::Related { relationship, condition: Box::new(inner) }))
}

fn not_defined(path: &[Value]) -> ApiError {
    let joined = path.iter().map(Value::to_string).collect::<Vec<_>>().join(",");
    ApiError::new(Code::NotFound, format!("{joined} is not a defined attribute"))
}

/// Harper's comparator names and aliases.
fn comparator(name: &str) -> Option<Comparator> {
    Some(match name {
        "equals" | "eq" | "equal" => Comparator::Equals,
        "not_equal" | "ne" | "notEqual" => Comparator::NotEqual,
        "contains" | "ct" => Comparator::Contains,
        "starts_with" | "sw" | "startsWith" => Comparator::StartsWith,
        "ends_with" | "ew" | "endsWith" => Comparator::EndsWith,
        "greater_than" | "gt" | ">" | "greaterThan" => Comparator::GreaterThan,
        "greater_than_equal" | "ge" | ">=" | "greaterThanEqual" => Comparator::GreaterThanEqual,
        "less_than" | "lt" | "<" | "lessThan" => Comparator::LessThan,
        "less_than_equal" | "le" | "<=" | "lessThanEqual" => Comparator::LessThanEqual,
        "between" | "..." => Comparator::Between,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards_map_to_string_comparators() {
        assert_eq!(wildcard(&"*".into()), Some(None));
        assert_eq!(wildcard(&"Lab*".into()), Some(Some((Comparator::StartsWith, "Lab".into()))));
        assert_eq!(wildcard(&"*Mix".into()), Some(Some((Comparator::EndsWith, "Mix".into()))));
        assert_eq!(wildcard(&"*ab*".into()), Some(Some((Comparator::Contains, "ab".into()))));
        assert_eq!(wildcard(&"Lab".into()), None);
        assert_eq!(wildcard(&Value::Int(5)), None);
    }

    #[test]
    fn every_documented_alias_is_accepted_and_others_are_not() {
        for name in [
            "equals",
            "eq",
            "equal",
            "ne",
            "ct",
            "sw",
            "ew",
            "gt",
            ">",
            "ge",
            ">=",
            "lt",
            "<",
            "le",
            "<=",
            "between",
            "greaterThanEqual",
        ] {
            assert!(comparator(name).is_some(), "{name}");
        }
        for name in ["gte", "lte", "neq", "==", "=", "!=", "EQUALS", "fuzzy"] {
            assert!(comparator(name).is_none(), "{name}");
        }
    }
}
