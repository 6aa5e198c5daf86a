//! Harper's analytics operations over `system.hdb_analytics` (written by
//! `metrics/analytics.rs`): `get_analytics`, `list_metrics`, `describe_metric`.

use std::collections::BTreeSet;
use std::ops::ControlFlow;
use std::sync::Arc;

use axum::response::Response;
use lyre_core::query::{Comparator, Condition, Query, Select, SortKey};
use lyre_core::{Context, Object, Table, Value};

use crate::app::AppState;
use crate::http::blocking::blocking;
use crate::http::error::ApiError;
use crate::http::format::Format;
use crate::http::ops::search::{condition, select};
use crate::http::ops::{Params, reply};
use crate::metrics::analytics::{BUILTIN_METRICS, analytics_table};

/// Most records one `get_analytics` answers (narrow the time window for more).
const MAX_RECORDS: usize = 100_000;

/// `get_analytics`: the aggregates of `metric` from `start_time` (inclusive) to
/// `end_time` (exclusive, ms), narrowed by `conditions` (as `search_by_conditions`
/// takes them), oldest first and at most [`MAX_RECORDS`], each with its `id` as its
/// time (Harper's shape).
pub async fn get_analytics(state: &Arc<AppState>, mut params: Params, format: Format) -> Result<Response, ApiError> {
    let metric = params.string(&["metric"])?;
    let start = time(&mut params, "start_time")?;
    let end = time(&mut params, "end_time")?;
    let mut conditions = match params.array(&["conditions"])? {
        Some(list) => list.into_iter().map(condition).collect::<Result<Vec<_>, _>>()?,
        None => Vec::new(),
    };
    let select = select(&mut params)?;
    let Some(metric) = metric else { return reply(format, &Value::Array(Vec::new())) };
    conditions.push(compare("metric", Comparator::Equals, metric.into()));
    if let Some(start) = start {
        conditions.push(compare("time", Comparator::GreaterThanEqual, Value::Float(start)));
    }
    if let Some(end) = end {
        conditions.push(compare("time", Comparator::LessThan, Value::Float(end)));
    }
    let table = table(state).await?;
    // An attribute no aggregate has had yet matches nothing (rather than being an
    // error, as it is for tables a client defines).
    if !conditions.iter().all(|condition| known(table.schema(), condition)) {
        return reply(format, &Value::Array(Vec::new()));
    }
    let query = Query { conditions, sort: vec![by_time(false)], ..Query::default() };
    let records = collect(table.clone(), query, Some(MAX_RECORDS)).await?;
    let shown = records.into_iter().map(|mut record| {
        if let Some(time) = record.get("time").cloned() {
            record.insert("id".into(), time);
        }
        Value::Object(select.project(table.schema(), record))
    });
    reply(format, &Value::Array(shown.collect()))
}

/// `list_metrics`: the built-in metrics (`metric_types` `["builtin"]`, the
/// default), and with `"custom"` every other metric recorded (request durations,
/// success, bytes sent).
pub async fn list_metrics(state: &Arc<AppState>, mut params: Params, format: Format) -> Result<Response, ApiError> {
    let types: Vec<String> = match params.array(&["metric_types"])? {
        None => vec!["builtin".into()],
        Some(list) => list.into_iter().filter_map(|v| v.as_str().map(str::to_string)).collect(),
    };
    let mut names: Vec<Value> = Vec::new();
    if types.iter().any(|t| t == "builtin") {
        names.extend(BUILTIN_METRICS.iter().map(|name| Value::from(*name)));
    }
    if types.iter().any(|t| t == "custom") {
        let table = table(state).await?;
        // Until the first aggregate is written the table has no `metric` yet.
        if table.schema().attribute("metric").is_none() {
            return reply(format, &Value::Array(names));
        }
        let query = Query { select: Select::Attributes(vec!["metric".into()]), ..Query::default() };
        // The names seen, not the records: a set as small as the metrics are few.
        let seen = blocking("listing metrics", move || {
            let mut seen = BTreeSet::new();
            table.search(&Context::system(), query)?.run(&mut |record| {
                if let Value::Object(record) = record
                    && let Some(Value::String(name)) = record.get("metric")
                    && !BUILTIN_METRICS.contains(&name.as_str())
                    && !seen.contains(name)
                {
                    seen.insert(name.clone());
                }
                ControlFlow::Continue(())
            })?;
            Ok::<_, lyre_core::Error>(seen)
        })
        .await?;
        names.extend(seen.into_iter().map(Value::from));
    }
    reply(format, &Value::Array(names))
}

/// `describe_metric`: the attributes of `metric`'s newest record, each with its
/// JavaScript type name; `{}` when nothing was recorded.
pub async fn describe_metric(state: &Arc<AppState>, mut params: Params, format: Format) -> Result<Response, ApiError> {
    let metric = params.required_string(&["metric"])?;
    let query = Query {
        conditions: vec![compare("metric", Comparator::Equals, metric.into())],
        sort: vec![by_time(true)],
        ..Query::default()
    };
    let table = table(state).await?;
    // Until the first aggregate is written the table has no `metric` or `time`.
    let newest = match query.conditions.iter().all(|condition| known(table.schema(), condition))
        && table.schema().attribute("time").is_some()
    {
        true => collect(table, query, Some(1)).await?.into_iter().next(),
        false => None,
    };
    let Some(record) = newest else { return reply(format, &Value::Object(Object::default())) };
    let attributes = record.into_iter().map(|(name, value)| {
        let kind = match value {
            Value::String(_) => "string",
            Value::Bool(_) => "boolean",
            Value::Int(_) | Value::Float(_) => "number",
            Value::Null | Value::Array(_) | Value::Object(_) | Value::Bytes(_) | Value::Blob(_) => "object",
        };
        let mut attribute = Object::default();
        attribute.insert("name".into(), name.into());
        attribute.insert("type".into(), kind.into());
        Value::Object(attribute)
    });
    let mut out = Object::default();
    out.insert("attributes".into(), Value::Array(attributes.collect()));
    reply(format, &Value::Object(out))
}

async fn table(state: &AppState) -> Result<Table, ApiError> {
    Ok(analytics_table(&state.engine, state.control.config.analytics.retention.0).await?)
}

/// Whether every attribute `condition` names is one of the table's.
fn known(schema: &lyre_core::catalog::TableSchema, condition: &Condition) -> bool {
    condition.undefined_attribute(&|name| schema.attribute(name).is_some()).is_none()
}

fn compare(attribute: &str, comparator: Comparator, value: Value) -> Condition {
    Condition::Compare { attribute: attribute.into(), comparator, value }
}

fn by_time(descending: bool) -> SortKey {
    SortKey { attribute: "time".into(), descending }
}

/// An optional time parameter in ms.
fn time(params: &mut Params, key: &str) -> Result<Option<f64>, ApiError> {
    match params.value(&[key]) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => {
            value.as_f64().map(Some).ok_or_else(|| ApiError::bad_request(format!("'{key}' must be a number of ms")))
        }
    }
}

/// Runs `query` (at most `limit` records) on a blocking thread.
async fn collect(table: Table, mut query: Query, limit: Option<usize>) -> Result<Vec<Object>, ApiError> {
    query.limit = limit;
    blocking("reading analytics", move || {
        let mut out = Vec::new();
        table.search(&Context::system(), query)?.run(&mut |record| {
            if let Value::Object(record) = record {
                out.push(record);
            }
            ControlFlow::Continue(())
        })?;
        Ok::<_, lyre_core::Error>(out)
    })
    .await
}
