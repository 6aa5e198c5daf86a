//! Databases, tables and attributes: create, drop, describe.

use std::sync::Arc;

use axum::response::Response;
use lyre_core::catalog::{AttributeSpec, Expiration, TableSpec};
use lyre_core::{Context, Engine, Object, TableStats, Value};

use crate::http::error::ApiError;
use crate::http::format::Format;
use crate::http::ops::{Params, message, reply};

pub async fn create_database(
    engine: &Arc<Engine>,
    ctx: &Context,
    mut params: Params,
    format: Format,
) -> Result<Response, ApiError> {
    let database = params.database()?;
    engine.create_database(ctx, &database).await?;
    message(format, format!("database '{database}' successfully created"))
}

pub async fn drop_database(
    engine: &Arc<Engine>,
    ctx: &Context,
    mut params: Params,
    format: Format,
) -> Result<Response, ApiError> {
    let database = params.required_string(&["database", "schema"])?;
    let (engine, ctx, name) = (engine.clone(), ctx.clone(), database.clone());
    super::lifecycle::detached(async move { engine.drop_database(&ctx, &name).await }).await?;
    message(format, format!("successfully deleted '{database}'"))
}

pub async fn create_table(
    engine: &Arc<Engine>,
    ctx: &Context,
    mut params: Params,
    format: Format,
) -> Result<Response, ApiError> {
    let database = params.database()?;
    let table = params.required_string(&["table"])?;
    let primary_key = params.required_string(&["primary_key", "hash_attribute"])?;
    let audit = params.bool(&["audit"])?.unwrap_or(true);
    let declared = match params.array(&["attributes"])? {
        None => None,
        Some(items) => Some(
            items.into_iter().enumerate().map(|(i, item)| attribute_spec(i, item)).collect::<Result<Vec<_>, _>>()?,
        ),
    };
    let primary_key_type = declared
        .as_ref()
        .and_then(|attrs| attrs.iter().find(|a| a.name == primary_key))
        .and_then(|a| a.type_name.clone());
    let expiration = match params.count(&["expiration"])? {
        None => None,
        Some(seconds) if seconds == 0 || seconds as u64 > Expiration::MAX_SECONDS => {
            return Err(ApiError::bad_request(format!(
                "'expiration' must be from 1 to {} (seconds)",
                Expiration::MAX_SECONDS
            )));
        }
        Some(seconds) => Some(Expiration { expiration: seconds as u64, eviction: 0, scan_interval: None }),
    };
    let spec = TableSpec {
        name: table.clone(),
        primary_key,
        primary_key_type,
        attributes: declared,
        audit,
        expiration,
        expires_at: None,
    };
    engine.create_table(ctx, &database, spec).await?;
    message(format, format!("table '{database}.{table}' successfully created."))
}

fn attribute_spec(index: usize, item: Value) -> Result<AttributeSpec, ApiError> {
    let Value::Object(mut attribute) = item else {
        return Err(ApiError::bad_request(format!("'attributes[{index}]' must be of type object")));
    };
    let name = match attribute.shift_remove("name") {
        Some(Value::String(name)) => name,
        _ => {
            return Err(ApiError::bad_request(format!("'attributes[{index}].name' must be a string")));
        }
    };
    let type_name = match attribute.shift_remove("type") {
        None | Some(Value::Null) => None,
        Some(Value::String(t)) => Some(t),
        Some(_) => {
            return Err(ApiError::bad_request(format!("'attributes[{index}].type' must be a string")));
        }
    };
    let indexed = match attribute.shift_remove("indexed") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => b,
        Some(_) => {
            return Err(ApiError::bad_request(format!("'attributes[{index}].indexed' must be a boolean")));
        }
    };
    Ok(AttributeSpec { name, type_name, indexed })
}

pub async fn drop_table(
    engine: &Arc<Engine>,
    ctx: &Context,
    mut params: Params,
    format: Format,
) -> Result<Response, ApiError> {
    let database = params.database()?;
    let table = params.required_string(&["table"])?;
    engine.database(&database)?.drop_table(ctx, &table).await?;
    message(format, format!("successfully deleted table '{database}.{table}'"))
}

pub async fn create_attribute(
    engine: &Arc<Engine>,
    ctx: &Context,
    mut params: Params,
    format: Format,
) -> Result<Response, ApiError> {
    let database = params.database()?;
    let table = params.required_string(&["table"])?;
    let attribute =
        params.string(&["attribute"])?.ok_or_else(|| ApiError::bad_request("Attribute name is required"))?;
    let indexed = params.bool(&["indexed"])?.unwrap_or(true);
    let spec = AttributeSpec { name: attribute.clone(), type_name: None, indexed };
    engine.database(&database)?.create_attribute(ctx, &table, spec).await?;
    message(format, format!("attribute '{database}.{table}.{attribute}' successfully created."))
}

pub async fn drop_attribute(
    engine: &Arc<Engine>,
    ctx: &Context,
    mut params: Params,
    format: Format,
) -> Result<Response, ApiError> {
    let database = params.database()?;
    let table = params.required_string(&["table"])?;
    let attribute = params.required_string(&["attribute"])?;
    engine.database(&database)?.drop_attribute(ctx, &table, &attribute).await?;
    message(format, format!("successfully deleted attribute '{attribute}'"))
}

/// `describe_all`: every database the caller may describe (`exact_count: true` counts
/// only records a read sees, see [`Table::live_count`](lyre_core::Table::live_count)).
pub async fn describe_all(
    engine: &Arc<Engine>,
    ctx: &Context,
    mut params: Params,
    format: Format,
) -> Result<Response, ApiError> {
    let asked = asked(&mut params)?;
    let (engine, ctx) = (engine.clone(), ctx.clone());
    let all = counting(asked.exact, move || {
        let mut all = Object::default();
        for db in engine.databases() {
            // Others than super users see only the databases their role grants on.
            if !ctx.user.role.permissions.describes_database(db.name()) {
                continue;
            }
            all.insert(db.name().to_string(), Value::Object(describe_tables(&ctx, &db, asked)?));
        }
        Ok(all)
    })
    .await?;
    reply(format, &Value::Object(all))
}

/// Runs `describe` where it stands, or with `exact` counts (which may walk whole
/// tables) on the blocking pool.
async fn counting(
    exact: bool,
    describe: impl FnOnce() -> Result<Object, ApiError> + Send + 'static,
) -> Result<Object, ApiError> {
    match exact {
        true => crate::http::blocking::blocking("an exact count", describe).await,
        false => describe(),
    }
}

/// `describe_database` (`describe_schema`): the database's tables, as `describe_table`
/// gives each.
pub async fn describe_database(
    engine: &Arc<Engine>,
    ctx: &Context,
    mut params: Params,
    format: Format,
) -> Result<Response, ApiError> {
    let database = params.database()?;
    let asked = asked(&mut params)?;
    if !ctx.user.role.permissions.describes_database(&database) {
        return Err(lyre_core::Error::hidden(format!("database '{database}' does not exist")).into());
    }
    let (db, ctx) = (engine.database(&database)?, ctx.clone());
    let tables = counting(asked.exact, move || describe_tables(&ctx, &db, asked)).await?;
    reply(format, &Value::Object(tables))
}

/// `describe_table`: Harper's description of one table, with counts and sizes.
pub async fn describe_table(
    engine: &Arc<Engine>,
    ctx: &Context,
    mut params: Params,
    format: Format,
) -> Result<Response, ApiError> {
    let asked = asked(&mut params)?;
    let (table, ctx) = (params.table(engine)?, ctx.clone());
    let described = counting(asked.exact, move || {
        let stats = table.stats(&ctx)?;
        Ok(describe(&counted(&ctx, &table, stats, asked.exact)?, asked.computed))
    })
    .await?;
    reply(format, &Value::Object(described))
}

/// What a describe operation was asked to include.
#[derive(Debug, Clone, Copy)]
struct Asked {
    /// `exact_count`: count only the records a read sees.
    exact: bool,
    /// `include_computed`: list `@computed` attributes too (marked `computed`).
    computed: bool,
}

/// Harper's `exact_count` and `include_computed` (strict booleans, off by default).
fn asked(params: &mut Params) -> Result<Asked, ApiError> {
    Ok(Asked {
        exact: params.bool(&["exact_count"])?.unwrap_or(false),
        computed: params.bool(&["include_computed"])?.unwrap_or(false),
    })
}

fn describe_tables(ctx: &Context, db: &Arc<lyre_core::Db>, asked: Asked) -> Result<Object, ApiError> {
    let mut tables = Object::default();
    for name in db.schema().tables.keys() {
        // Tables the user may not read are left out, as Harper filters by role.
        let Ok((table, stats)) = db.table(name).and_then(|t| t.stats(ctx).map(|stats| (t, stats))) else {
            continue;
        };
        tables
            .insert(name.clone(), Value::Object(describe(&counted(ctx, &table, stats, asked.exact)?, asked.computed)));
    }
    Ok(tables)
}

/// `stats` with `record_count` the records a read sees, when `exact`.
fn counted(
    ctx: &Context,
    table: &lyre_core::Table,
    mut stats: TableStats,
    exact: bool,
) -> Result<TableStats, ApiError> {
    if exact {
        stats.record_count = table.live_count(ctx)?;
    }
    Ok(stats)
}

/// A vector attribute's `indexed`: the declaration's options as Harper names them,
/// and where the index stands (`state` building, ready or rebuilding, its owner
/// epoch, vectors held, lag).
fn vector_index(spec: &lyre_core::catalog::VectorIndex, status: Option<&lyre_core::db::derived::IndexStatus>) -> Value {
    let mut out = Object::default();
    out.insert("type".into(), "HNSW".into());
    out.insert("distance".into(), spec.distance.name().into());
    out.insert("M".into(), Value::Int(i64::from(spec.m)));
    out.insert("efConstruction".into(), Value::Int(i64::from(spec.ef_construction)));
    out.insert("efConstructionSearch".into(), Value::Int(i64::from(spec.ef_search)));
    out.insert("optimizeRouting".into(), Value::Float(spec.optimize_routing));
    if let Some(lag) = spec.max_lag_ms {
        out.insert("maxLagMilliseconds".into(), Value::Int(lag as i64));
    }
    if let Some(status) = status {
        out.insert("state".into(), status.phase.name().into());
        out.insert("epoch".into(), Value::Int(status.epoch as i64));
        out.insert("vectors".into(), Value::Int(status.nodes as i64));
        out.insert("memory_bytes".into(), Value::Int(status.memory_bytes as i64));
        out.insert("lag_ms".into(), Value::Int(status.lag_ms as i64));
        out.insert("refusing_writes".into(), status.lagging.into());
    }
    Value::Object(out)
}

/// Harper's `describe_table` shape, key order included; `@computed` attributes
/// only when `computed` (Harper's `include_computed`).
fn describe(stats: &TableStats, computed: bool) -> Object {
    let table = &stats.schema;
    let attributes = table
        .attributes
        .iter()
        .filter(|a| computed || a.shape.computed.is_none())
        .map(|a| {
            let mut attribute = Object::default();
            attribute.insert("attribute".into(), a.name.clone().into());
            if let Some(t) = &a.type_name {
                attribute.insert("type".into(), t.clone().into());
            }
            if a.is_primary_key {
                attribute.insert("is_primary_key".into(), true.into());
            } else if a.indexed {
                attribute.insert("indexed".into(), true.into());
            }
            if let Some(spec) = &a.vector {
                attribute.insert(
                    "indexed".into(),
                    vector_index(spec, stats.vector_indexes.iter().find(|s| s.attribute == a.name)),
                );
            }
            if a.shape.computed.is_some() {
                attribute.insert("computed".into(), true.into());
            }
            Value::Object(attribute)
        })
        .collect::<Vec<_>>();
    let mut out = Object::default();
    out.insert("schema".into(), table.database.clone().into());
    out.insert("name".into(), table.name.clone().into());
    out.insert("hash_attribute".into(), table.primary_key.clone().into());
    out.insert("audit".into(), table.audit.into());
    out.insert("schema_defined".into(), table.schema_defined.into());
    out.insert("attributes".into(), attributes.into());
    out.insert("db_size".into(), count(stats.db_size));
    if let Some(expiration) = &table.expiration {
        out.insert("expiration".into(), format!("{}s", expiration.expiration).into());
    }
    out.insert("sources".into(), Value::Array(Vec::new()));
    out.insert("record_count".into(), count(stats.record_count));
    out.insert("table_size".into(), count(stats.table_size));
    out.insert("db_audit_size".into(), count(stats.db_audit_size));
    if let Some(version) = stats.last_updated_record {
        out.insert("last_updated_record".into(), Value::Float(version));
    }
    out
}

fn count(n: u64) -> Value {
    Value::Int(i64::try_from(n).unwrap_or(i64::MAX))
}
