//! The command line: one subcommand per workload, a target, optionally a second
//! target to compare against.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::client::HttpClient;
use crate::report;
use crate::stats::Measurement;
use crate::target::Target;
use crate::workload::ops::{self, InsertParams, SearchKind, SearchParams};
use crate::workload::sql::{self, SqlKind};
use crate::workload::{counters, ycsb};

/// Load generators and side-by-side benchmarks for Lyre and Harper.
#[derive(Debug, Parser)]
#[command(name = "lyre-bench", version, about)]
pub struct Cli {
    /// The workload.
    #[command(subcommand)]
    pub command: Command,
    /// The server to measure.
    #[command(flatten)]
    pub target: TargetArgs,
    /// A second server, measured in alternation with the first (A B A B ...).
    #[command(flatten)]
    pub compare: CompareArgs,
    /// Rounds per server (at least 3 when comparing).
    #[arg(long, default_value_t = 3, global = true)]
    pub rounds: usize,
    /// Write every measurement and the summary as JSON here.
    #[arg(long, global = true, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Seconds to wait after loading data before the timed rounds, so background work
    /// a server does after a bulk load (flushing, compaction) does not land in a round.
    #[arg(long, default_value_t = 5, global = true)]
    pub settle: u64,
    /// Load-generator threads.
    #[arg(long, default_value_t = 1, global = true)]
    pub threads: usize,
}

/// The workloads.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Bulk insert through the Operations API into a fresh dynamic table.
    OpsInsert {
        /// Records to insert.
        #[arg(long, default_value_t = 100_000)]
        records: u64,
        /// Records per insert request.
        #[arg(long, default_value_t = 1000)]
        batch: u64,
        /// Requests in flight.
        #[arg(long, default_value_t = 4)]
        concurrency: usize,
    },
    /// YCSB over REST against an exported `usertable` (see `workload/ycsb.rs` for the
    /// schema both servers must load); the dataset is loaded untimed first.
    Ycsb {
        /// The workload: load, a, b, c, d, e or f.
        #[arg(value_enum)]
        workload: ycsb::Workload,
        /// Records in the dataset.
        #[arg(long, default_value_t = 100_000)]
        records: u64,
        /// Operations per round.
        #[arg(long, default_value_t = 100_000)]
        operations: u64,
        /// Requests in flight.
        #[arg(long, default_value_t = 32)]
        concurrency: usize,
    },
    /// CRDT increments over REST (`PATCH /counter/<key>`), checked for lost
    /// increments after every round; needs the same application as `ycsb`.
    Counters {
        /// Distinct counters: 1 for one hot key.
        #[arg(long, default_value_t = 1)]
        keys: u64,
        /// Increments per round.
        #[arg(long, default_value_t = 50_000)]
        operations: u64,
        /// Requests in flight.
        #[arg(long, default_value_t = 64)]
        concurrency: usize,
    },
    /// WebSocket fan-out: subscribers of one YCSB record receive every `PUT` of it
    /// (needs the same application as `ycsb`); deliveries per second, end-to-end
    /// latency, server CPU per delivery.
    Ws {
        /// WebSocket subscribers.
        #[arg(long, default_value_t = 100)]
        subscribers: usize,
        /// `PUT`s per round.
        #[arg(long, default_value_t = 2_000)]
        writes: u64,
        /// `PUT`s in flight.
        #[arg(long, default_value_t = 1)]
        concurrency: usize,
    },
    /// MQTT delivery (fan-out, fan-in) or idle connections' memory, over the
    /// targets' MQTT brokers (`--mqtt`, `--compare-mqtt`; a bare broker such as
    /// mosquitto can be the reference: its other URLs are not used).
    Mqtt {
        /// The traffic.
        #[arg(long, value_enum, default_value = "fan-out")]
        pattern: crate::workload::mqtt::Pattern,
        /// QoS of publishes and subscriptions.
        #[arg(long, default_value_t = 0)]
        qos: u8,
        /// Subscribers (fan-out), publishers (fan-in) or connections (idle).
        #[arg(long, default_value_t = 100)]
        clients: usize,
        /// Messages each publisher sends.
        #[arg(long, default_value_t = 2_000)]
        messages: u64,
        /// The topic (default `usertable/mqtt-<round>`, a YCSB record).
        #[arg(long)]
        topic: Option<String>,
    },
    /// Serve a fixed record to every GET (and 204 to every write) with bare hyper: the
    /// ceiling for REST requests.
    Ceiling {
        /// The port to listen on.
        #[arg(long, default_value_t = 9950)]
        port: u16,
        /// Store this many YCSB records in LMDB and answer `GET /usertable/<key>`
        /// from there (the HTTP stack plus LMDB's lookup), instead of a fixed record.
        #[arg(long)]
        lookup: Option<u64>,
    },
    /// Reads of a caching table whose origin is the `ceiling` server (see
    /// `workload/cache.rs`; the application is written by `cache-app`).
    Cache {
        /// `miss`: every read calls the origin; `hit`: every read is held.
        #[arg(value_enum)]
        phase: crate::workload::cache::Phase,
        /// Keys held for the hit phase (read once untimed first).
        #[arg(long, default_value_t = 10_000)]
        records: u64,
        /// Requests per round.
        #[arg(long, default_value_t = 20_000)]
        operations: u64,
        /// Requests in flight.
        #[arg(long, default_value_t = 32)]
        concurrency: usize,
    },
    /// TTL churn (see `workload/churn.rs`): records written at a fixed pace to
    /// every target at once into a table that evicts them after 10 s, while each
    /// server's database directory is measured; needs the `cache` application.
    TtlChurn {
        /// Records written in all.
        #[arg(long, default_value_t = 1_000_000)]
        writes: u64,
        /// Records per `upsert`.
        #[arg(long, default_value_t = 100)]
        batch: u64,
        /// Records per second.
        #[arg(long, default_value_t = 5_000)]
        rate: u64,
        /// Seconds between size samples.
        #[arg(long, default_value_t = 5)]
        sample: u64,
        /// Seconds sampled after the last write.
        #[arg(long, default_value_t = 60)]
        tail: u64,
        /// The target's database directory (`<root>/database`).
        #[arg(long)]
        data: PathBuf,
        /// The reference's database directory.
        #[arg(long)]
        compare_data: Option<PathBuf>,
        /// Where to draw size against time (PNG).
        #[arg(long)]
        chart: Option<PathBuf>,
    },
    /// Write the caching application for a server into a component directory.
    CacheApp {
        /// Which server it is for (Lyre: a declarative source; Harper: JavaScript).
        #[arg(long, value_enum)]
        server: crate::workload::cache::Server,
        /// The origin, `http://host:port` (a `ceiling` server).
        #[arg(long, default_value = "http://127.0.0.1:9950")]
        origin: String,
        /// The component directory to write.
        #[arg(long)]
        dir: std::path::PathBuf,
    },
    /// Vector search (see `workload/vector.rs`): clustered vectors inserted into a
    /// table with an HNSW index (the build timed until the index holds the last),
    /// then every query at each search breadth; needs the `vector` application.
    Vector {
        /// Vectors inserted.
        #[arg(long, default_value_t = 100_000)]
        vectors: usize,
        /// Their dimensions.
        #[arg(long, default_value_t = 128)]
        dimensions: usize,
        /// Cluster centres.
        #[arg(long, default_value_t = 1_000)]
        clusters: usize,
        /// Distinct queries per round.
        #[arg(long, default_value_t = 1_000)]
        queries: usize,
        /// Queries in flight.
        #[arg(long, default_value_t = 8)]
        concurrency: usize,
        /// Search breadths, comma-separated (each server is also measured at its
        /// default breadth).
        #[arg(long, value_delimiter = ',', default_value = "10,20,40,80,160")]
        ef: Vec<usize>,
        /// Vectors per insert request.
        #[arg(long, default_value_t = 500)]
        batch: usize,
        /// Where to write the dataset for the hnswlib anchor.
        #[arg(long)]
        data_dir: Option<PathBuf>,
        /// Only write the dataset (and its exact answers), measure nothing.
        #[arg(long)]
        dataset_only: bool,
        /// Measure queries only (the servers hold the data already, or answer
        /// without it: the HTTP ceiling).
        #[arg(long)]
        skip_build: bool,
        /// Libraries measured in process on the same dataset, reported beside:
        /// `bench/hnswlib-anchor.py`'s output, `vector-library`'s (repeatable).
        #[arg(long)]
        anchor: Vec<PathBuf>,
        /// Where to draw queries/s against recall (PNG).
        #[arg(long)]
        chart: Option<PathBuf>,
        /// Servers measured at their default breadth only (Harper 4.7 takes no `ef`).
        #[arg(long, value_delimiter = ',')]
        default_ef_only: Vec<String>,
    },
    /// Lyre's vector graph in process on a dataset `vector --dataset-only` wrote,
    /// measured as the hnswlib anchor is; prints the same JSON.
    VectorLibrary {
        /// The dataset's directory.
        #[arg(long)]
        data_dir: PathBuf,
        /// Search breadths, comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "10,20,40,80,160")]
        ef: Vec<usize>,
    },
    /// Print the `schema.graphql` of the `vector` workload.
    VectorSchema {
        /// Declare int8 quantization.
        #[arg(long)]
        quantization: bool,
    },
    /// Print the `schema.graphql` the YCSB workloads need.
    YcsbSchema,
    /// Print the REST path of every YCSB record, one per line (what an outside load
    /// generator such as `wrk` requests; `bench/hot-path.sh`).
    YcsbPaths {
        /// Records in the dataset.
        #[arg(long, default_value_t = 100_000)]
        records: u64,
    },
    /// Print the `schema.graphql` the differential test needs (both servers load it).
    DiffSchema,
    /// The differential test: the same seeded requests to the target and to the
    /// `--compare-url` reference, answers normalised and compared (see `diff/`).
    Diff {
        /// The sequence's seed.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Requests to send.
        #[arg(long, default_value_t = 2_000)]
        requests: usize,
        /// The allow-list of documented differences.
        #[arg(long, default_value = "bench/diff-allowed.json")]
        allowed: PathBuf,
        /// Write the Markdown report here (it is printed either way).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Differences not allowed to keep per kind of request, as reproductions.
        #[arg(long, default_value_t = crate::diff::compare::REPRODUCTIONS)]
        reproductions: usize,
        /// Also write every kept reproduction, bodies whole, as JSON here.
        #[arg(long)]
        differences: Option<PathBuf>,
        /// Also write every request with both answers, one JSON line each, here
        /// (to follow how a difference came about).
        #[arg(long)]
        trace: Option<PathBuf>,
    },
    /// Draw a PNG chart of throughput and p99 from `--json` result files.
    Chart {
        /// Where to write the PNG.
        #[arg(long)]
        out: PathBuf,
        /// Result files written with `--json`, one per workload.
        inputs: Vec<PathBuf>,
    },
    /// A PNG of throughput against the client count: one result file per count
    /// (`mqtt` runs at several `--clients`), one line per server.
    ChartSweep {
        /// Where to write the PNG.
        #[arg(long)]
        out: PathBuf,
        /// Result files written with `--json`.
        inputs: Vec<PathBuf>,
    },
    /// `csv_file_load` of a generated CSV file into a fresh dynamic table, timed to
    /// the job's end; CPU is per row. Both servers read the file from this machine.
    CsvLoad {
        /// Rows in the file.
        #[arg(long, default_value_t = 1_000_000)]
        rows: u64,
        /// Where the file is written (once; reused while it has that many rows).
        #[arg(long, default_value = "/tmp/lyre-bench-load.csv")]
        file: PathBuf,
    },
    /// SQL statements through the `sql` operation over 100,000 orders and 10,000
    /// customers (loaded untimed).
    Sql {
        /// Which query.
        #[arg(long, value_enum, default_value_t = SqlKind::Point)]
        kind: SqlKind,
        /// Requests per round.
        #[arg(long, default_value_t = 5_000)]
        requests: u64,
        /// Requests in flight.
        #[arg(long, default_value_t = 16)]
        concurrency: usize,
    },
    /// The SQL workloads' queries in SQLite in-process over the same rows: the
    /// floor, in queries per second, one at a time (no server involved).
    SqlFloor {
        /// Queries per kind (the join and grouping run at most 200).
        #[arg(long, default_value_t = 5_000)]
        requests: u64,
    },
    /// Searches through the Operations API over a loaded dataset (loaded untimed).
    OpsSearch {
        /// Which search.
        #[arg(long, value_enum, default_value_t = SearchKind::Id)]
        kind: SearchKind,
        /// Records in the dataset.
        #[arg(long, default_value_t = 100_000)]
        records: u64,
        /// Requests per round.
        #[arg(long, default_value_t = 10_000)]
        requests: u64,
        /// Requests in flight.
        #[arg(long, default_value_t = 16)]
        concurrency: usize,
    },
}

/// The measured server.
#[derive(Debug, Args)]
pub struct TargetArgs {
    /// Its label in reports.
    #[arg(long, default_value = "lyre", global = true)]
    pub name: String,
    /// Its Operations API URL.
    #[arg(long, default_value = "http://127.0.0.1:9925", global = true)]
    pub url: String,
    /// Its REST URL.
    #[arg(long, default_value = "http://127.0.0.1:9926", global = true)]
    pub rest: String,
    /// Login name.
    #[arg(long, default_value = "admin", global = true)]
    pub user: String,
    /// Password.
    #[arg(long, default_value = "password", global = true)]
    pub password: String,
    /// A header to authenticate with instead (`authorization: Bearer …`, `cookie: …`).
    #[arg(long, global = true)]
    pub auth_header: Option<String>,
    /// Its process id (for CPU time per operation and peak memory).
    #[arg(long, global = true)]
    pub pid: Option<u32>,
    /// Its MQTT broker, `host:port`.
    #[arg(long, default_value = "127.0.0.1:1883", global = true)]
    pub mqtt: String,
}

/// The reference server, when comparing.
#[derive(Debug, Args)]
pub struct CompareArgs {
    /// The reference server's Operations API URL; enables the comparison.
    #[arg(id = "compare_url", long = "compare-url", global = true)]
    pub url: Option<String>,
    /// Its label.
    #[arg(id = "compare_name", long = "compare-name", default_value = "harper", global = true)]
    pub name: String,
    /// Its REST URL.
    #[arg(id = "compare_rest", long = "compare-rest", default_value = "http://127.0.0.1:9926", global = true)]
    pub rest: String,
    /// Login name.
    #[arg(id = "compare_user", long = "compare-user", default_value = "admin", global = true)]
    pub user: String,
    /// Password.
    #[arg(id = "compare_password", long = "compare-password", default_value = "password", global = true)]
    pub password: String,
    /// A header to authenticate with instead.
    #[arg(id = "compare_auth_header", long = "compare-auth-header", global = true)]
    pub auth_header: Option<String>,
    /// Its process id.
    #[arg(id = "compare_pid", long = "compare-pid", global = true)]
    pub pid: Option<u32>,
    /// Its MQTT broker, `host:port`.
    #[arg(id = "compare_mqtt", long = "compare-mqtt", default_value = "127.0.0.1:1883", global = true)]
    pub mqtt: String,
}

impl Cli {
    fn targets(&self) -> Vec<Target> {
        let t = &self.target;
        let mut targets = vec![Target {
            name: t.name.clone(),
            url: t.url.clone(),
            rest: t.rest.clone(),
            user: t.user.clone(),
            password: t.password.clone(),
            auth_header: t.auth_header.clone(),
            pid: t.pid,
            mqtt: host_port(&t.mqtt),
        }];
        if let Some(url) = &self.compare.url {
            let c = &self.compare;
            targets.push(Target {
                name: c.name.clone(),
                url: url.clone(),
                rest: c.rest.clone(),
                user: c.user.clone(),
                password: c.password.clone(),
                auth_header: c.auth_header.clone(),
                pid: c.pid,
                mqtt: host_port(&c.mqtt),
            });
        }
        targets
    }
}

/// `host:port` split, when it is one.
fn host_port(address: &str) -> Option<(String, u16)> {
    let (host, port) = address.rsplit_once(':')?;
    Some((host.to_string(), port.parse().ok()?))
}

/// Runs the chosen workload and reports it.
pub async fn run(cli: Cli) -> anyhow::Result<Vec<Measurement>> {
    match &cli.command {
        Command::Ceiling { port, lookup } => {
            crate::ceiling::serve(*port, *lookup).await?;
            return Ok(Vec::new());
        }
        Command::YcsbSchema => {
            print!("{}", ycsb::SCHEMA);
            return Ok(Vec::new());
        }
        Command::TtlChurn { writes, batch, rate, sample, tail, data, compare_data, chart } => {
            let params = crate::workload::churn::ChurnParams {
                writes: *writes,
                batch: *batch,
                rate: *rate,
                sample: *sample,
                tail: *tail,
            };
            let dirs = std::iter::once(data.clone()).chain(compare_data.clone());
            let mut targets = Vec::new();
            for (target, dir) in cli.targets().into_iter().zip(dirs) {
                let client = HttpClient::new(&target)?;
                client.wait_ready().await?;
                targets.push((target, client, dir));
            }
            let series = crate::workload::churn::run(&targets, params).await?;
            crate::report::print_churn(&series);
            if let Some(path) = &cli.json {
                std::fs::write(
                    path,
                    serde_json::to_vec_pretty(&serde_json::json!({"params": params, "series": series}))?,
                )?;
            }
            if let Some(out) = chart {
                crate::chart::draw_churn(&series, out)?;
                println!("wrote {}", out.display());
            }
            return Ok(Vec::new());
        }
        Command::CacheApp { server, origin, dir } => {
            crate::workload::cache::write_app(*server, origin, dir)?;
            return Ok(Vec::new());
        }
        Command::VectorLibrary { data_dir, ef } => {
            let measured = crate::workload::vector::library(data_dir, ef)?;
            println!("{}", serde_json::to_string_pretty(&measured)?);
            return Ok(Vec::new());
        }
        Command::VectorSchema { quantization } => {
            print!("{}", crate::workload::vector::schema(*quantization));
            return Ok(Vec::new());
        }
        Command::Vector { .. } => {
            run_vector(&cli).await?;
            return Ok(Vec::new());
        }
        Command::SqlFloor { requests } => {
            for (kind, rate) in sql::floor(*requests)? {
                println!("{}\tsqlite\t{rate:.1} queries/s", kind.name());
            }
            return Ok(Vec::new());
        }
        Command::YcsbPaths { records } => {
            use std::io::Write as _;
            let mut out = std::io::BufWriter::new(std::io::stdout().lock());
            for n in 0..*records {
                writeln!(out, "/usertable/{}", ycsb::key(n))?;
            }
            out.flush()?;
            return Ok(Vec::new());
        }
        Command::DiffSchema => {
            print!("{}", crate::diff::SCHEMA);
            return Ok(Vec::new());
        }
        Command::Diff { seed, requests, allowed, out, reproductions, differences, trace } => {
            let targets = cli.targets();
            let [lyre, reference] = targets.as_slice() else {
                anyhow::bail!("diff needs --compare-url: the reference server");
            };
            let (lyre, reference) = (HttpClient::new(lyre)?, HttpClient::new(reference)?);
            lyre.wait_ready().await?;
            reference.wait_ready().await?;
            let mut trace = trace.as_ref().map(std::fs::File::create).transpose()?.map(std::io::BufWriter::new);
            let report = crate::diff::run(
                &lyre,
                &reference,
                *seed,
                *requests,
                allowed,
                *reproductions,
                trace.as_mut().map(|t| t as &mut dyn std::io::Write),
            )
            .await?;
            if let Some(trace) = trace.as_mut() {
                std::io::Write::flush(trace)?;
            }
            let text = report.markdown();
            print!("{text}");
            if let Some(out) = out {
                std::fs::write(out, &text)?;
            }
            if let Some(path) = differences {
                std::fs::write(path, serde_json::to_vec_pretty(&report.kinds)?)?;
            }
            return Ok(Vec::new());
        }
        Command::Chart { out, inputs } => {
            crate::chart::draw(&crate::chart::read(inputs)?, out)?;
            println!("wrote {}", out.display());
            return Ok(Vec::new());
        }
        Command::ChartSweep { out, inputs } => {
            crate::chart::draw_sweep(inputs, out)?;
            println!("wrote {}", out.display());
            return Ok(Vec::new());
        }
        _ => {}
    }
    let targets = cli.targets();
    let rounds = if targets.len() > 1 { cli.rounds.max(3) } else { cli.rounds.max(1) };
    let clients = targets.iter().map(HttpClient::new).collect::<anyhow::Result<Vec<_>>>()?;
    // An MQTT run may compare with a bare broker, which has no HTTP side.
    if !matches!(cli.command, Command::Mqtt { .. }) {
        for client in &clients {
            client.wait_ready().await?;
        }
    }
    let mut measurements = Vec::new();
    let params = match cli.command {
        Command::OpsInsert { records, batch, concurrency } => {
            let params = InsertParams { records, batch: batch.max(1), concurrency };
            for round in 0..rounds {
                for (target, client) in targets.iter().zip(&clients) {
                    measurements.push(ops::insert(target, client, params, round).await?);
                }
            }
            serde_json::to_value(params)?
        }
        Command::Ycsb { workload, records, operations, concurrency } => {
            let params = ycsb::YcsbParams { workload, records, operations, concurrency };
            if workload != ycsb::Workload::Load {
                for (target, client) in targets.iter().zip(&clients) {
                    ycsb::ensure_loaded(target, client, records, concurrency).await?;
                }
                tokio::time::sleep(std::time::Duration::from_secs(cli.settle)).await;
            }
            for round in 0..rounds {
                for (target, client) in targets.iter().zip(&clients) {
                    measurements.push(ycsb::run(target, client, params, round).await?);
                }
            }
            serde_json::to_value(params)?
        }
        Command::Counters { keys, operations, concurrency } => {
            let params = counters::CounterParams { keys, operations, concurrency };
            for round in 0..rounds {
                for (target, client) in targets.iter().zip(&clients) {
                    measurements.push(counters::run(target, client, params, round).await?);
                }
            }
            serde_json::to_value(params)?
        }
        Command::CsvLoad { rows, ref file } => {
            crate::workload::csv_load::ensure_file(file, rows)?;
            let params = crate::workload::csv_load::CsvLoadParams { rows, file: std::path::absolute(file)? };
            for round in 0..rounds {
                for (target, client) in targets.iter().zip(&clients) {
                    measurements.push(crate::workload::csv_load::run(target, client, &params, round).await?);
                }
            }
            serde_json::to_value(params)?
        }
        Command::Mqtt { pattern, qos, clients: count, messages, ref topic } => {
            let params =
                crate::workload::mqtt::MqttParams { pattern, qos, clients: count, messages, topic: topic.clone() };
            for round in 0..rounds {
                for target in &targets {
                    measurements.push(crate::workload::mqtt::run(target, &params, round).await?);
                }
            }
            serde_json::to_value(params)?
        }
        Command::Ws { subscribers, writes, concurrency } => {
            let params = crate::workload::fanout::FanoutParams { subscribers, writes, concurrency };
            for round in 0..rounds {
                for (target, client) in targets.iter().zip(&clients) {
                    measurements.push(crate::workload::fanout::run(target, client, params, round).await?);
                }
            }
            serde_json::to_value(params)?
        }
        Command::Cache { phase, records, operations, concurrency } => {
            use crate::workload::cache;
            let params = cache::CacheParams { phase, records, operations, concurrency };
            if phase == cache::Phase::Hit {
                for (target, client) in targets.iter().zip(&clients) {
                    cache::ensure_held(target, client, params).await?;
                }
            }
            for round in 0..rounds {
                for (target, client) in targets.iter().zip(&clients) {
                    measurements.push(cache::run(target, client, params, round).await?);
                }
            }
            serde_json::to_value(params)?
        }
        Command::Ceiling { .. }
        | Command::Vector { .. }
        | Command::VectorSchema { .. }
        | Command::VectorLibrary { .. }
        | Command::CacheApp { .. }
        | Command::TtlChurn { .. }
        | Command::YcsbSchema
        | Command::YcsbPaths { .. }
        | Command::DiffSchema
        | Command::SqlFloor { .. }
        | Command::Diff { .. }
        | Command::Chart { .. }
        | Command::ChartSweep { .. } => return Ok(Vec::new()),
        Command::Sql { kind, requests, concurrency } => {
            let params = sql::SqlParams { kind, requests, concurrency };
            for client in &clients {
                sql::ensure_loaded(client).await?;
            }
            tokio::time::sleep(std::time::Duration::from_secs(cli.settle)).await;
            for round in 0..rounds {
                for (target, client) in targets.iter().zip(&clients) {
                    measurements.push(sql::run(target, client, params, round).await?);
                }
            }
            serde_json::to_value(params)?
        }
        Command::OpsSearch { kind, records, requests, concurrency } => {
            let params = SearchParams { records, requests, concurrency, kind };
            for client in &clients {
                ops::ensure_loaded(client, records).await?;
            }
            tokio::time::sleep(std::time::Duration::from_secs(cli.settle)).await;
            for round in 0..rounds {
                for (target, client) in targets.iter().zip(&clients) {
                    measurements.push(ops::search(target, client, params, round).await?);
                }
            }
            serde_json::to_value(params)?
        }
    };
    let summary = report::summarize(&measurements, &targets);
    report::print(&measurements, &summary);
    if let Some(path) = &cli.json {
        report::write_json(path, &params, &measurements, &summary)?;
    }
    Ok(measurements)
}

/// The `vector` workload: the dataset, each server's build, then alternating
/// query rounds at every breadth (see `workload/vector.rs`).
async fn run_vector(cli: &Cli) -> anyhow::Result<()> {
    use crate::workload::vector::{self, Dataset, Report, VectorParams};
    let Command::Vector {
        vectors,
        dimensions,
        clusters,
        queries,
        concurrency,
        ref ef,
        batch,
        ref data_dir,
        dataset_only,
        skip_build,
        ref anchor,
        ref chart,
        ref default_ef_only,
    } = cli.command
    else {
        anyhow::bail!("not the vector workload");
    };
    let params =
        VectorParams { vectors, dimensions, clusters, queries, concurrency, efs: ef.clone(), batch: batch.max(1) };
    eprintln!("vector: generating {vectors} x {dimensions}-d vectors and the exact answers of {queries} queries");
    let data = std::sync::Arc::new(Dataset::generate(&params));
    let dir = data_dir.clone().unwrap_or_else(|| vector::default_dir(&params));
    data.write(&dir)?;
    eprintln!("vector: dataset written to {}", dir.display());
    if dataset_only {
        return Ok(());
    }
    let targets = cli.targets();
    let clients = targets.iter().map(HttpClient::new).collect::<anyhow::Result<Vec<_>>>()?;
    let mut builds = Vec::new();
    for (target, client) in targets.iter().zip(&clients) {
        client.wait_ready().await?;
        if skip_build {
            continue;
        }
        let built = vector::build(target, client, &data, &params).await?;
        eprintln!("{}: built in {:.1} s ({:.0} vectors/s)", target.name, built.seconds, built.vectors_per_sec);
        builds.push(built);
    }
    tokio::time::sleep(std::time::Duration::from_secs(cli.settle)).await;
    let rounds = if targets.len() > 1 { cli.rounds.max(3) } else { cli.rounds.max(1) };
    let breadths: Vec<Option<usize>> = std::iter::once(None).chain(params.efs.iter().copied().map(Some)).collect();
    let mut report = Report { params: params.clone(), builds, rounds: Vec::new() };
    for breadth in breadths {
        for round in 0..rounds {
            for (target, client) in targets.iter().zip(&clients) {
                if breadth.is_some() && default_ef_only.contains(&target.name) {
                    continue;
                }
                let m = vector::queries(target, client, &data, breadth, concurrency, round).await?;
                let recall = vector::recall(&m);
                report.rounds.push((breadth, m, recall));
            }
        }
    }
    let anchors: Vec<vector::Anchor> = anchor
        .iter()
        .map(|path| anyhow::Ok(serde_json::from_slice(&std::fs::read(path)?)?))
        .collect::<anyhow::Result<_>>()?;
    vector::print(&report, &anchors);
    if let Some(out) = chart {
        vector::chart(&report, &anchors, out)?;
        println!("wrote {}", out.display());
    }
    if let Some(path) = &cli.json {
        let document = serde_json::json!({"report": report, "medians": vector::medians(&report), "anchors": anchors});
        std::fs::write(path, serde_json::to_vec_pretty(&document)?)?;
    }
    Ok(())
}
