//! Vector search (`lyre-bench vector`): clustered vectors in a table with an HNSW
//! index (`embedding: [Float] @indexed(type: "HNSW", distance: "euclidean")`, the
//! same declaration on every server).
//!
//! * Build: the vectors are inserted through the Operations API, and the clock
//!   stops once a query for the last one finds it (Harper indexes inside the
//!   write; Lyre's runner follows the log): vectors per second, server CPU, and
//!   the server's memory growth per vector.
//! * Queries: REST `QUERY /vectordoc/` with `sort: {attribute, target, ef}` and
//!   `limit: 10`, for each search breadth `ef`; queries per second, recall@10
//!   against exact answers computed here, latency, server CPU per query.
//!
//! The dataset (seeded, so every server and the hnswlib anchor get the same one)
//! is written to a directory as raw little-endian arrays for
//! `bench/hnswlib-anchor.py`, the library anchor.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde::Serialize;

use crate::client::{Call, HttpClient};
use crate::stats::Measurement;
use crate::target::{ProcessSample, Target};
use crate::workload::{LoadSpec, run_load};

/// The table.
pub const TABLE: &str = "vectordoc";

/// Nearest neighbours asked for and compared.
pub const K: usize = 10;

/// The application's schema; `quantization` declares int8 vectors.
pub fn schema(quantization: bool) -> String {
    let int8 = if quantization { ", quantization: \"int8\"" } else { "" };
    format!(
        "type {TABLE} @table(database: \"bench\") @export {{\n  id: ID @primaryKey\n  embedding: [Float] @indexed(type: \"HNSW\", distance: \"euclidean\"{int8})\n}}\n"
    )
}

/// What a run measures.
#[derive(Debug, Clone, Serialize)]
pub struct VectorParams {
    /// Vectors inserted.
    pub vectors: usize,
    /// Their dimensions.
    pub dimensions: usize,
    /// Cluster centres they are drawn around.
    pub clusters: usize,
    /// Distinct queries (each round sends every one).
    pub queries: usize,
    /// Queries in flight.
    pub concurrency: usize,
    /// Search breadths measured.
    pub efs: Vec<usize>,
    /// Vectors per insert request.
    pub batch: usize,
}

/// The vectors, the queries, and each query's exact nearest `K` (indexes into
/// `base`, nearest first).
pub struct Dataset {
    /// Vectors inserted (id `v<i>`).
    pub base: Vec<Vec<f32>>,
    /// Query targets.
    pub queries: Vec<Vec<f32>>,
    /// Exact answers.
    pub truth: Vec<Vec<u32>>,
}

/// Points around `clusters` centres (centre plus uniform noise), rounded to four
/// decimals (the request bodies stay small), from a fixed seed.
fn clustered(count: usize, dimensions: usize, clusters: usize, seed: u64) -> Vec<Vec<f32>> {
    let mut next = lyre_vector::testing::uniform(seed);
    let centres: Vec<Vec<f64>> = (0..clusters).map(|_| (0..dimensions).map(|_| next() * 2.0 - 1.0).collect()).collect();
    (0..count)
        .map(|i| {
            let centre = &centres[(i * 7919) % clusters];
            centre.iter().map(|c| ((c + (next() - 0.5) * 0.4) * 1e4).round() as f32 / 1e4).collect()
        })
        .collect()
}

fn squared(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum()
}

impl Dataset {
    /// Generates the dataset and its exact answers (on every core).
    pub fn generate(params: &VectorParams) -> Dataset {
        let all = clustered(params.vectors + params.queries, params.dimensions, params.clusters, 0x5EED);
        let (base, queries) = all.split_at(params.vectors);
        let (base, queries) = (base.to_vec(), queries.to_vec());
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        let per = queries.len().div_ceil(threads).max(1);
        let truth = std::thread::scope(|scope| {
            let workers: Vec<_> = queries
                .chunks(per)
                .map(|chunk| {
                    let base = &base;
                    scope.spawn(move || {
                        chunk
                            .iter()
                            .map(|q| {
                                let mut scored: Vec<(f32, u32)> =
                                    base.iter().enumerate().map(|(i, v)| (squared(q, v), i as u32)).collect();
                                scored.select_nth_unstable_by(K, |a, b| a.0.total_cmp(&b.0));
                                scored.truncate(K);
                                scored.sort_by(|a, b| a.0.total_cmp(&b.0));
                                scored.into_iter().map(|(_, i)| i).collect::<Vec<u32>>()
                            })
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            workers.into_iter().flat_map(|w| w.join().unwrap_or_default()).collect()
        });
        Dataset { base, queries, truth }
    }

    /// Writes `base.f32`, `queries.f32` (row-major little-endian f32), `truth.u32`
    /// and `meta.json` into `dir`, for the hnswlib anchor.
    pub fn write(&self, dir: &Path) -> anyhow::Result<()> {
        std::fs::create_dir_all(dir)?;
        let floats = |rows: &[Vec<f32>]| rows.iter().flatten().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        std::fs::write(dir.join("base.f32"), floats(&self.base))?;
        std::fs::write(dir.join("queries.f32"), floats(&self.queries))?;
        let truth: Vec<u8> = self.truth.iter().flatten().flat_map(|x| x.to_le_bytes()).collect();
        std::fs::write(dir.join("truth.u32"), truth)?;
        let meta = serde_json::json!({
            "vectors": self.base.len(), "dimensions": self.base.first().map_or(0, Vec::len),
            "queries": self.queries.len(), "k": K,
        });
        std::fs::write(dir.join("meta.json"), serde_json::to_vec_pretty(&meta)?)?;
        Ok(())
    }
}

impl Dataset {
    /// Reads back what [`Dataset::write`] wrote.
    pub fn read(dir: &Path) -> anyhow::Result<Dataset> {
        let meta: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("meta.json"))?)?;
        let field = |name: &str| {
            meta[name].as_u64().map(|n| n as usize).ok_or_else(|| anyhow::anyhow!("meta.json has no {name}"))
        };
        let (dimensions, k) = (field("dimensions")?.max(1), field("k")?.max(1));
        let rows = |name: &str, width: usize| -> anyhow::Result<Vec<Vec<[u8; 4]>>> {
            let bytes = std::fs::read(dir.join(name))?;
            let words: Vec<[u8; 4]> = bytes.chunks_exact(4).map(|c| [c[0], c[1], c[2], c[3]]).collect();
            Ok(words.chunks(width).map(<[[u8; 4]]>::to_vec).collect())
        };
        let floats = |rows: Vec<Vec<[u8; 4]>>| {
            rows.into_iter().map(|r| r.into_iter().map(f32::from_le_bytes).collect()).collect()
        };
        Ok(Dataset {
            base: floats(rows("base.f32", dimensions)?),
            queries: floats(rows("queries.f32", dimensions)?),
            truth: rows("truth.u32", k)?.into_iter().map(|r| r.into_iter().map(u32::from_le_bytes).collect()).collect(),
        })
    }
}

/// Lyre's graph (`lyre-vector`) in process on the dataset in `dir`, one thread,
/// measured as the hnswlib anchor is (the same declaration: L2, M 16,
/// efConstruction 100; queries one at a time): what the library costs without
/// the server around it.
pub fn library(dir: &Path, efs: &[usize]) -> anyhow::Result<Anchor> {
    use lyre_vector::{Distance, Graph, VectorIndex, accept_all};
    let data = Dataset::read(dir)?;
    let spec = VectorIndex { distance: Distance::Euclidean, m: 16, ef_construction: 100, ..VectorIndex::default() };
    let resident = || ProcessSample::of_self().map_or(0, |s| s.rss_kib * 1024);
    let before = resident();
    let mut graph = Graph::new(spec);
    let started = Instant::now();
    for (i, vector) in data.base.iter().enumerate() {
        let vector: Vec<f64> = vector.iter().map(|&x| f64::from(x)).collect();
        graph.insert(&(i as u32).to_be_bytes(), &vector).map_err(|e| anyhow::anyhow!(e))?;
    }
    let build_seconds = started.elapsed().as_secs_f64();
    let grown = resident().saturating_sub(before);
    let mut points = Vec::new();
    for &ef in efs {
        let started = Instant::now();
        let mut hits = 0usize;
        for (query, truth) in data.queries.iter().zip(&data.truth) {
            let target: Vec<f64> = query.iter().map(|&x| f64::from(x)).collect();
            let found = graph.search(&graph.prepare(&target), ef.max(K), &accept_all);
            hits += found
                .iter()
                .take(K)
                .filter_map(|(_, id)| graph.key_of(*id))
                .filter_map(|key| key.try_into().ok().map(u32::from_be_bytes))
                .filter(|i| truth.contains(i))
                .count();
        }
        let seconds = started.elapsed().as_secs_f64();
        let queries = data.queries.len().max(1);
        points.push((ef, queries as f64 / seconds, hits as f64 / (queries * K) as f64));
    }
    Ok(Anchor {
        name: "lyre-vector".to_string(),
        build_vectors_per_sec: data.base.len() as f64 / build_seconds,
        bytes_per_vector: grown as f64 / data.base.len().max(1) as f64,
        points,
    })
}

/// One server's build.
#[derive(Debug, Clone, Serialize)]
pub struct Build {
    /// The server.
    pub target: String,
    /// Seconds from the first insert until the last vector was found.
    pub seconds: f64,
    /// Vectors per second.
    pub vectors_per_sec: f64,
    /// Server CPU seconds over the build.
    pub server_cpu_seconds: Option<f64>,
    /// Growth of the server's anonymous memory (heap) over the build, per vector.
    pub heap_bytes_per_vector: Option<f64>,
    /// Growth of its whole resident memory (heap and mapped files), per vector.
    pub resident_bytes_per_vector: Option<f64>,
    /// The index's own memory per vector, where the server reports it (Lyre's
    /// `describe_table`).
    pub index_bytes_per_vector: Option<f64>,
}

/// Inserts every vector and waits until the index holds the last one.
pub async fn build(
    target: &Target,
    client: &HttpClient,
    data: &Arc<Dataset>,
    params: &VectorParams,
) -> anyhow::Result<Build> {
    let before = target.sample_tree();
    let started = Instant::now();
    let batches = data.base.len().div_ceil(params.batch) as u64;
    let (rows, batch) = (data.clone(), params.batch);
    let request = Arc::new(move |i: u64| {
        let from = i as usize * batch;
        let records: Vec<serde_json::Value> = rows.base[from..(from + batch).min(rows.base.len())]
            .iter()
            .enumerate()
            .map(|(k, v)| serde_json::json!({"id": format!("v{}", from + k), "embedding": v}))
            .collect();
        let body = serde_json::json!({"operation": "insert", "database": "bench", "table": TABLE, "records": records});
        Call::Op(Bytes::from(body.to_string()))
    });
    let spec = LoadSpec {
        workload: "vector-build",
        round: 0,
        requests: batches,
        concurrency: 2,
        request,
        check: crate::workload::one_per_success(),
    };
    let inserted = run_load(target, client, spec).await?;
    anyhow::ensure!(inserted.errors == 0, "{}: {} insert requests failed", target.name, inserted.errors);
    let last = data.base.len() - 1;
    let deadline = Instant::now() + Duration::from_secs(3_600);
    loop {
        // A server whose index is behind may refuse (503) until it catches up.
        let found = query(client, &data.base[last], None, 1).await.unwrap_or_default();
        if found.first() == Some(&format!("v{last}")) {
            break;
        }
        anyhow::ensure!(Instant::now() < deadline, "{}: the index never held the last vector", target.name);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let seconds = started.elapsed().as_secs_f64();
    let after = target.sample_tree();
    let per_vector = |f: fn(&ProcessSample) -> u64| {
        before.as_ref().zip(after.as_ref()).map(|(b, a)| (f(a) as f64 - f(b) as f64) * 1024.0 / data.base.len() as f64)
    };
    let described =
        client.op(&serde_json::json!({"operation": "describe_table", "database": "bench", "table": TABLE})).await.ok();
    let index_bytes = described.as_ref().and_then(|d| {
        let attributes = d["attributes"].as_array()?;
        let embedding = attributes.iter().find(|a| a["attribute"] == "embedding")?;
        embedding["indexed"]["memory_bytes"].as_f64()
    });
    Ok(Build {
        index_bytes_per_vector: index_bytes.map(|b| b / data.base.len() as f64),
        target: target.name.clone(),
        seconds,
        vectors_per_sec: data.base.len() as f64 / seconds,
        server_cpu_seconds: before.as_ref().zip(after.as_ref()).map(|(b, a)| a.cpu_seconds - b.cpu_seconds),
        heap_bytes_per_vector: per_vector(|s| s.rss_anon_kib),
        resident_bytes_per_vector: per_vector(|s| s.rss_kib),
    })
}

/// The body of a `QUERY` for the `limit` nearest to `target`, at breadth `ef`.
fn query_body(target: &[f32], ef: Option<usize>, limit: usize) -> Bytes {
    let mut sort = serde_json::json!({"attribute": "embedding", "target": target});
    if let Some(ef) = ef {
        sort["ef"] = ef.into();
    }
    Bytes::from(serde_json::json!({"sort": sort, "limit": limit, "select": ["id"]}).to_string())
}

/// The ids a `QUERY` answers.
async fn query(client: &HttpClient, target: &[f32], ef: Option<usize>, limit: usize) -> anyhow::Result<Vec<String>> {
    let (status, body) = client.call(&Call::Query(format!("/{TABLE}/"), query_body(target, ef, limit))).await?;
    anyhow::ensure!(status == 200, "QUERY answered {status}: {}", String::from_utf8_lossy(&body));
    ids(&body)
}

fn ids(body: &[u8]) -> anyhow::Result<Vec<String>> {
    let found: Vec<serde_json::Value> = serde_json::from_slice(body)?;
    Ok(found.iter().filter_map(|r| r["id"].as_str().map(str::to_string)).collect())
}

/// One round of every query at breadth `ef` (`None`: the server's default), from
/// `concurrency` workers, each answer scored against the exact answer of the
/// query it was sent for. The measurement's items are the true neighbours found,
/// so recall@10 is `items / (requests · 10)`.
pub async fn queries(
    target: &Target,
    client: &HttpClient,
    data: &Arc<Dataset>,
    ef: Option<usize>,
    concurrency: usize,
    round: usize,
) -> anyhow::Result<Measurement> {
    let count = data.queries.len() as u64;
    let next = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let before = target.sample_tree();
    let started = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..concurrency.max(1) {
        let (client, next, data) = (client.clone(), next.clone(), data.clone());
        workers.push(tokio::spawn(async move {
            let mut latencies = crate::stats::histogram();
            let (mut hits, mut errors) = (0u64, 0u64);
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= count {
                    break;
                }
                let sent = Instant::now();
                let answer = query(&client, &data.queries[i as usize], ef, K).await;
                let _ = latencies.record((sent.elapsed().as_micros() as u64).clamp(1, 100_000_000));
                match answer {
                    Ok(found) => {
                        let truth: HashSet<String> = data.truth[i as usize].iter().map(|t| format!("v{t}")).collect();
                        hits += found.iter().take(K).filter(|id| truth.contains(*id)).count() as u64;
                    }
                    Err(err) => {
                        if errors == 0 {
                            eprintln!("a query failed: {err}");
                        }
                        errors += 1;
                    }
                }
            }
            (latencies, hits, errors)
        }));
    }
    let mut latencies = crate::stats::histogram();
    let (mut hits, mut errors) = (0, 0);
    for worker in workers {
        let (h, n, e) = worker.await?;
        latencies.add(&h).map_err(|e| anyhow::anyhow!("merging histograms: {e}"))?;
        hits += n;
        errors += e;
    }
    let elapsed = started.elapsed();
    let server = before.zip(target.sample_tree()).map(|(b, a)| crate::stats::ServerUse::between(b, a, count));
    let workload = format!("vector-query-ef{}", ef.map_or("default".to_string(), |e| e.to_string()));
    Ok(Measurement::new(&workload, &target.name, round, count, hits, errors, elapsed, &latencies, server))
}

/// Recall@10 of a query round (see [`queries`]).
pub fn recall(measurement: &Measurement) -> f64 {
    measurement.items as f64 / (measurement.requests.max(1) as f64 * K as f64)
}

/// A run's results, as printed and written with `--json`.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// What was run.
    pub params: VectorParams,
    /// Each server's build.
    pub builds: Vec<Build>,
    /// Each round at each breadth: `(ef, measurement, recall@10)`.
    pub rounds: Vec<(Option<usize>, Measurement, f64)>,
}

/// Where the dataset of `params` is written by default.
pub fn default_dir(params: &VectorParams) -> PathBuf {
    std::env::temp_dir().join(format!("lyre-bench-vector-{}x{}-{}", params.vectors, params.dimensions, params.queries))
}

/// A library measured in process on the same dataset: hnswlib
/// (`bench/hnswlib-anchor.py`), or Lyre's own graph ([`library`]).
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct Anchor {
    /// What was measured.
    #[serde(default = "hnswlib")]
    pub name: String,
    /// Vectors per second while building, one thread.
    pub build_vectors_per_sec: f64,
    /// Resident memory growth over the build, per vector.
    pub bytes_per_vector: f64,
    /// `(ef, queries per second on one thread, recall@10)`.
    pub points: Vec<(usize, f64, f64)>,
}

/// One server's medians at one breadth: `(server, ef, queries/s, recall@10, p99
/// ms, server CPU µs per query)`.
pub type Medians = (String, Option<usize>, f64, f64, f64, Option<f64>);

/// Medians over rounds, by server and breadth.
pub fn medians(report: &Report) -> Vec<Medians> {
    let mut keys: Vec<(String, Option<usize>)> = Vec::new();
    for (ef, m, _) in &report.rounds {
        if !keys.contains(&(m.target.clone(), *ef)) {
            keys.push((m.target.clone(), *ef));
        }
    }
    let median = |mut values: Vec<f64>| {
        values.sort_by(f64::total_cmp);
        values.get(values.len() / 2).copied().unwrap_or(0.0)
    };
    keys.into_iter()
        .map(|(target, ef)| {
            let runs: Vec<&(Option<usize>, Measurement, f64)> =
                report.rounds.iter().filter(|(e, m, _)| *e == ef && m.target == target).collect();
            let cpu: Vec<f64> = runs.iter().filter_map(|(_, m, _)| m.server.map(|s| s.cpu_us_per_request)).collect();
            (
                target,
                ef,
                median(runs.iter().map(|(_, m, _)| m.requests_per_sec).collect()),
                median(runs.iter().map(|(_, _, r)| *r).collect()),
                median(runs.iter().map(|(_, m, _)| m.latency.p99_us as f64 / 1000.0).collect()),
                (!cpu.is_empty()).then(|| median(cpu)),
            )
        })
        .collect()
}

fn hnswlib() -> String {
    "hnswlib".to_string()
}

/// Prints the builds, the query medians, and the anchors beside them.
pub fn print(report: &Report, anchors: &[Anchor]) {
    let p = &report.params;
    println!(
        "vector: {} x {}-d vectors around {} centres, {} queries, {} in flight",
        p.vectors, p.dimensions, p.clusters, p.queries, p.concurrency
    );
    println!("\nbuild\tvectors/s\tseconds\tserver CPU s\theap B/vector\tresident B/vector\tindex B/vector");
    let opt = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.0}"));
    for b in &report.builds {
        println!(
            "{}\t{:.0}\t{:.1}\t{}\t{}\t{}\t{}",
            b.target,
            b.vectors_per_sec,
            b.seconds,
            opt(b.server_cpu_seconds),
            opt(b.heap_bytes_per_vector),
            opt(b.resident_bytes_per_vector),
            opt(b.index_bytes_per_vector)
        );
    }
    for a in anchors {
        println!("{}\t{:.0}\t-\t-\t{:.0}\t-\t-", a.name, a.build_vectors_per_sec, a.bytes_per_vector);
    }
    println!("\nqueries (medians of rounds)\nserver\tef\tqueries/s\trecall@10\tp99 ms\tserver CPU µs/query");
    for (target, ef, qps, recall, p99, cpu) in medians(report) {
        let ef = ef.map_or("default".to_string(), |e| e.to_string());
        println!(
            "{target}\t{ef}\t{qps:.0}\t{recall:.4}\t{p99:.2}\t{}",
            cpu.map_or("-".to_string(), |c| format!("{c:.0}"))
        );
    }
    for a in anchors {
        for (ef, qps, recall) in &a.points {
            println!("{}\t{ef}\t{qps:.0}\t{recall:.4}\t-\t{:.0}", a.name, 1e6 / qps.max(1e-9));
        }
    }
}

/// QPS against recall@10, one line per server (and per anchor).
pub fn chart(report: &Report, anchors: &[Anchor], out: &Path) -> anyhow::Result<()> {
    let mut series: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
    for (target, _, qps, recall, _, _) in medians(report) {
        match series.iter_mut().find(|(name, _)| *name == target) {
            Some((_, points)) => points.push((recall, qps)),
            None => series.push((target, vec![(recall, qps)])),
        }
    }
    for a in anchors {
        let name = format!("{} (library, in process)", a.name);
        series.push((name, a.points.iter().map(|(_, q, r)| (*r, *q)).collect()));
    }
    crate::chart::draw_tradeoff(&mut series, out)
}
