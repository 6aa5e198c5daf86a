//! Counters: CRDT increments over REST, `PATCH /counter/<key>` with
//! `{"hits": {"__op__": "add", "value": 1}}`, on one hot key or spread over many.
//!
//! After each round every key is read back, and the increments the server holds are
//! compared with the increments it acknowledged: a lost increment is a bug, and is
//! reported. (A server without CRDT patches, such as Harper 4.7, stores the operation
//! object instead of a number; that is reported too, and its figure is then plain
//! PATCH throughput.)

use std::sync::Arc;

use bytes::Bytes;
use rand::Rng;

use crate::client::{Call, HttpClient};
use crate::stats::Measurement;
use crate::target::Target;
use crate::workload::{LoadSpec, one_per_success, run_load};

/// The exported table (declared in [`crate::workload::ycsb::SCHEMA`]).
pub const TABLE: &str = "counter";

/// Parameters of a counters run.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct CounterParams {
    /// Distinct counters (1 = one hot key).
    pub keys: u64,
    /// Increments per round.
    pub operations: u64,
    /// Requests in flight.
    pub concurrency: usize,
}

/// What the stored counters say after a round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tally {
    /// The sum of every counter.
    Sum(u64),
    /// Some key holds something other than a number.
    NotCounters,
}

/// Runs one round and checks the stored sum against the acknowledged increments.
pub async fn run(
    target: &Target,
    client: &HttpClient,
    params: CounterParams,
    round: usize,
) -> anyhow::Result<Measurement> {
    let CounterParams { keys, operations, concurrency } = params;
    let before = tally(client, keys).await?;
    let body = Bytes::from_static(br#"{"hits":{"__op__":"add","value":1}}"#);
    let request = Arc::new(move |_: u64| -> Call {
        let key = rand::rng().random_range(0..keys.max(1));
        Call::Patch(format!("/{TABLE}/c{key}"), body.clone())
    });
    let check = one_per_success();
    let workload = if keys == 1 { "counters-hot" } else { "counters-spread" };
    let measured =
        run_load(target, client, LoadSpec { workload, round, requests: operations, concurrency, request, check })
            .await?;
    match (before, tally(client, keys).await?) {
        (Tally::Sum(before), Tally::Sum(after)) => {
            let stored = after - before;
            let lost = measured.items.saturating_sub(stored);
            println!(
                "{}: round {round}: {} increments acknowledged, {stored} stored, {lost} lost",
                target.name, measured.items
            );
            anyhow::ensure!(lost == 0, "{}: {lost} acknowledged increments were lost", target.name);
        }
        _ => println!("{}: round {round}: the stored values are not numbers (no CRDT patches)", target.name),
    }
    Ok(measured)
}

/// Reads every counter back.
async fn tally(client: &HttpClient, keys: u64) -> anyhow::Result<Tally> {
    let mut sum = 0;
    for key in 0..keys {
        let (status, body) = client.call(&Call::Get(format!("/{TABLE}/c{key}"))).await?;
        if status == 404 {
            continue;
        }
        anyhow::ensure!(status == 200, "reading counter c{key} answered {status}");
        let record: serde_json::Value = serde_json::from_slice(&body)?;
        match &record["hits"] {
            serde_json::Value::Null => {}
            value => match value.as_u64() {
                Some(n) => sum += n,
                None => return Ok(Tally::NotCounters),
            },
        }
    }
    Ok(Tally::Sum(sum))
}
