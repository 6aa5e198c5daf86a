//! Operations API workloads: bulk insert, search by id, by value, by conditions.

use std::sync::Arc;

use bytes::Bytes;
use rand::Rng;
use serde_json::{Value, json};

use crate::client::{Call, HttpClient};
use crate::stats::Measurement;
use crate::target::Target;
use crate::workload::records::{PER_CATEGORY, category, record};
use crate::workload::{LoadSpec, RequestFn, run_load};

/// The database and table every Operations API workload uses.
pub const DATABASE: &str = "bench";
/// See [`DATABASE`].
pub const TABLE: &str = "ycsb";

/// Drops and recreates the benchmark table (a dynamic table: every attribute indexed,
/// as Harper does for tables without a schema).
pub async fn reset_table(client: &HttpClient) -> anyhow::Result<()> {
    // Absent on a fresh server; any other failure shows up in create_table.
    let _ = client.op(&json!({"operation": "drop_table", "database": DATABASE, "table": TABLE})).await;
    client.op(&json!({"operation": "create_table", "database": DATABASE, "table": TABLE, "primary_key": "id"})).await?;
    Ok(())
}

/// An insert body for records `from..to` of a dataset of `records`.
fn insert_body(from: u64, to: u64, records: u64) -> Bytes {
    let batch: Vec<Value> = (from..to).map(|id| record(id, records)).collect();
    Bytes::from(json!({"operation": "insert", "database": DATABASE, "table": TABLE, "records": batch}).to_string())
}

/// Counts `inserted_hashes` in an insert answer.
fn count_inserted(status: u16, body: &[u8]) -> Result<u64, String> {
    if status != 200 {
        return Err(format!("status {status}: {}", String::from_utf8_lossy(body)));
    }
    let value: Value = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    value["inserted_hashes"].as_array().map(|a| a.len() as u64).ok_or_else(|| "no inserted_hashes".to_string())
}

/// Counts the records in a search answer (a JSON array).
fn count_results(status: u16, body: &[u8]) -> Result<u64, String> {
    if status != 200 {
        return Err(format!("status {status}: {}", String::from_utf8_lossy(body)));
    }
    let value: Value = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    value.as_array().map(|a| a.len() as u64).ok_or_else(|| "not an array".to_string())
}

/// Parameters of the bulk-insert workload.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct InsertParams {
    /// Records to insert.
    pub records: u64,
    /// Records per request.
    pub batch: u64,
    /// Requests in flight.
    pub concurrency: usize,
}

/// Timed bulk insert into a fresh table.
pub async fn insert(
    target: &Target,
    client: &HttpClient,
    params: InsertParams,
    round: usize,
) -> anyhow::Result<Measurement> {
    reset_table(client).await?;
    let InsertParams { records, batch, concurrency } = params;
    let requests = records.div_ceil(batch);
    let spec = LoadSpec {
        workload: "ops-insert",
        round,
        requests,
        concurrency,
        request: Arc::new(move |i| Call::Op(insert_body(i * batch, ((i + 1) * batch).min(records), records))),
        check: Arc::new(count_inserted),
    };
    let measurement = run_load(target, client, spec).await?;
    if measurement.items != records {
        anyhow::bail!("{}: inserted {} of {records} records", target.name, measurement.items);
    }
    Ok(measurement)
}

/// Loads the dataset untimed, unless the table already holds it.
pub async fn ensure_loaded(client: &HttpClient, records: u64) -> anyhow::Result<()> {
    let described = client.op(&json!({"operation": "describe_table", "database": DATABASE, "table": TABLE})).await;
    if described.ok().and_then(|d| d["record_count"].as_u64()) == Some(records) {
        return Ok(());
    }
    reset_table(client).await?;
    for from in (0..records).step_by(1000) {
        let (status, body) = client.call(&Call::Op(insert_body(from, (from + 1000).min(records), records))).await?;
        count_inserted(status, &body).map_err(anyhow::Error::msg)?;
    }
    Ok(())
}

/// Which search a search workload sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
pub enum SearchKind {
    /// `search_by_id` of one random id, all attributes.
    Id,
    /// `search_by_value` on the indexed category attribute (10 records each).
    Value,
    /// `search_by_conditions`: a category and an id range (AND).
    Conditions,
}

/// Parameters of a search workload.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct SearchParams {
    /// Records in the dataset.
    pub records: u64,
    /// Requests to send.
    pub requests: u64,
    /// Requests in flight.
    pub concurrency: usize,
    /// Which search.
    pub kind: SearchKind,
}

/// Timed searches over the loaded dataset.
pub async fn search(
    target: &Target,
    client: &HttpClient,
    params: SearchParams,
    round: usize,
) -> anyhow::Result<Measurement> {
    let SearchParams { records, requests, concurrency, kind } = params;
    let categories = (records / PER_CATEGORY).max(1);
    let request: RequestFn = Arc::new(move |_| {
        let mut rng = rand::rng();
        let body = match kind {
            SearchKind::Id => {
                let id = rng.random_range(0..records);
                json!({"operation": "search_by_id", "database": DATABASE, "table": TABLE, "ids": [id], "get_attributes": ["*"]})
            }
            SearchKind::Value => {
                let value = category(rng.random_range(0..categories), records);
                json!({"operation": "search_by_value", "database": DATABASE, "table": TABLE, "attribute": "field0", "value": value, "get_attributes": ["*"]})
            }
            SearchKind::Conditions => {
                let value = category(rng.random_range(0..categories), records);
                json!({"operation": "search_by_conditions", "database": DATABASE, "table": TABLE, "get_attributes": ["*"], "conditions": [
                    {"attribute": "field0", "comparator": "equals", "value": value},
                    {"attribute": "id", "comparator": "less_than", "value": records / 2}
                ]})
            }
        };
        Call::Op(Bytes::from(body.to_string()))
    });
    let workload = match kind {
        SearchKind::Id => "ops-search-id",
        SearchKind::Value => "ops-search-value",
        SearchKind::Conditions => "ops-search-conditions",
    };
    let spec = LoadSpec { workload, round, requests, concurrency, request, check: Arc::new(count_results) };
    run_load(target, client, spec).await
}
