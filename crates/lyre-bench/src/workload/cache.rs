//! A caching table in front of an HTTP origin (`cacheditem`, sourced from the
//! `ceiling` server answering every `GET` with a YCSB record): `GET
//! /cacheditem/<key>` reads.
//!
//! * `miss`: every request names a key not read before, so each one calls the
//!   origin and stores what it answered.
//! * `hit`: keys drawn from a zipfian over `records` keys read once untimed first,
//!   so each request is answered from storage.
//!
//! Lyre declares the source in its component's `config.yaml` (`sources`);
//! Harper, which has no declarative sources, in `resources.js` with
//! `sourcedFrom` and `fetch`, the way its documentation shows. Both store the
//! origin's record under the requested key, fresh for an hour.

use std::path::Path;
use std::sync::Arc;

use crate::client::{Call, HttpClient};
use crate::stats::Measurement;
use crate::target::Target;
use crate::workload::ycsb::{Zipfian, key};
use crate::workload::{LoadSpec, RequestFn, one_per_success, run_load};

/// The caching table.
pub const TABLE: &str = "cacheditem";

/// The database of the application's tables.
pub const DATABASE: &str = "cache";

/// Its schema (both servers load it): the caching table, and the table the TTL
/// churn workload writes (`churn.rs`), whose records expire and are evicted 10 s
/// after their write.
const SCHEMA: &str = "type churn @table(database: \"cache\", expiration: 10, eviction: 10) @export {\n  id: ID @primaryKey\n  field0: String\n  field1: String\n}\ntype cacheditem @table(database: \"cache\", expiration: 3600) @export {\n  id: ID @primaryKey\n  field0: String\n  field1: String\n  field2: String\n  field3: String\n  field4: String\n  field5: String\n  field6: String\n  field7: String\n  field8: String\n  field9: String\n}\n";

/// Which reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
pub enum Phase {
    /// Each read a key never read: the origin is called.
    Miss,
    /// Reads of keys already held.
    Hit,
}

/// The server an application is written for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Server {
    /// Lyre: a declarative source.
    Lyre,
    /// Harper: a JavaScript source.
    Harper,
}

/// Parameters of one run.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct CacheParams {
    /// Which reads.
    pub phase: Phase,
    /// Keys held for the hit phase.
    pub records: u64,
    /// Requests per round.
    pub operations: u64,
    /// Requests in flight.
    pub concurrency: usize,
}

/// Writes the caching application for `server` into component directory `dir`,
/// its source the origin at `origin` (`http://host:port`).
pub fn write_app(server: Server, origin: &str, dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("schema.graphql"), SCHEMA)?;
    let config = "rest: true\ngraphqlSchema:\n  files: '*.graphql'\n";
    match server {
        Server::Lyre => {
            let sources = format!("sources:\n  {TABLE}:\n    url: {origin}/usertable/{{id}}\n");
            std::fs::write(dir.join("config.yaml"), format!("{config}{sources}"))?;
        }
        Server::Harper => {
            std::fs::write(dir.join("config.yaml"), format!("{config}jsResource:\n  files: resources.js\n"))?;
            let resources = format!(
                "// The origin as a JavaScript source, as Harper's caching documentation shows.\n\
                 class Origin extends Resource {{\n\
                 \x20 async get() {{\n\
                 \x20   const response = await fetch(`{origin}/usertable/${{this.getId()}}`);\n\
                 \x20   const record = await response.json();\n\
                 \x20   record.id = this.getId();\n\
                 \x20   return record;\n\
                 \x20 }}\n\
                 }}\n\
                 databases.cache.{TABLE}.sourcedFrom(Origin);\n"
            );
            std::fs::write(dir.join("resources.js"), resources)?;
        }
    }
    Ok(())
}

/// The key of the `i`th miss of round `round` (never read before in this run).
fn miss_key(round: usize, i: u64) -> String {
    format!("miss{round}-{i}")
}

/// Reads every hit key once, untimed, so the hit phase finds them held.
pub async fn ensure_held(target: &Target, client: &HttpClient, params: CacheParams) -> anyhow::Result<()> {
    let request: RequestFn = Arc::new(move |i: u64| Call::Get(format!("/{TABLE}/{}", key(i))));
    let spec = LoadSpec {
        workload: "cache-warm",
        round: 0,
        requests: params.records,
        concurrency: params.concurrency,
        request,
        check: one_per_success(),
    };
    let measured = run_load(target, client, spec).await?;
    anyhow::ensure!(
        measured.errors == 0,
        "{}: {} of {} first reads failed",
        target.name,
        measured.errors,
        params.records
    );
    Ok(())
}

/// Runs one round against `target`.
pub async fn run(
    target: &Target,
    client: &HttpClient,
    params: CacheParams,
    round: usize,
) -> anyhow::Result<Measurement> {
    let CacheParams { phase, records, operations, concurrency } = params;
    let zipf = Arc::new(Zipfian::new(records.max(1)));
    let request: RequestFn = Arc::new(move |i: u64| -> Call {
        match phase {
            Phase::Miss => Call::Get(format!("/{TABLE}/{}", miss_key(round, i))),
            Phase::Hit => Call::Get(format!("/{TABLE}/{}", key(zipf.item(rand::random::<f64>())))),
        }
    });
    let workload = match phase {
        Phase::Miss => "cache-miss",
        Phase::Hit => "cache-hit",
    };
    run_load(
        target,
        client,
        LoadSpec { workload, round, requests: operations, concurrency, request, check: one_per_success() },
    )
    .await
}
