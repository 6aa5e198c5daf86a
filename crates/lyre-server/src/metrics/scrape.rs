//! The figures read at each scrape rather than counted per request: database and
//! table sizes, what each database's writer has done (commits, batch sizes, time
//! committing), jobs, and the process's resident memory.

use std::sync::Arc;

use lyre_core::{BATCH_BUCKETS, Engine, Services};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

use super::{DURATION_BUCKETS, Interface};

/// The requests answered per interface, path, method and status, read from the
/// recorder's map at each scrape.
pub struct Requests {
    recorded: super::Shared,
}

impl Requests {
    /// The collector of the requests counted in `paths`.
    pub fn new(recorded: super::Shared) -> Requests {
        Requests { recorded }
    }
}

impl std::fmt::Debug for Requests {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Requests")
    }
}

impl Collector for Requests {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        // Copied out first: the lock is not held while the text is written.
        // (path, interface, method, status, count); (interface, cumulative buckets,
        // count, seconds, bytes).
        type Count = (std::sync::Arc<str>, &'static str, &'static str, String, u64);
        type Totals = (&'static str, Vec<(f64, u64)>, u64, f64, u64);
        let (counts, interfaces): (Vec<Count>, Vec<Totals>) = {
            let recorded = self.recorded.lock();
            let mut counts = Vec::new();
            for (path, stats) in recorded.paths.iter() {
                for ((interface, method, status), count) in &stats.counts {
                    counts.push((path.clone(), interface.name(), *method, status.to_string(), *count));
                }
            }
            let interfaces = [Interface::Operations, Interface::Rest]
                .iter()
                .map(|interface| {
                    let totals = &recorded.interfaces[*interface as usize];
                    let mut cumulative = 0;
                    let buckets = DURATION_BUCKETS
                        .iter()
                        .zip(totals.buckets)
                        .map(|(bound, count)| {
                            cumulative += count;
                            (*bound, cumulative)
                        })
                        .collect();
                    (interface.name(), buckets, totals.count, totals.seconds, totals.bytes_out)
                })
                .collect();
            (counts, interfaces)
        };
        let samples = counts
            .iter()
            .map(|(path, interface, method, status, count)| {
                let labels = vec![
                    ("interface", *interface),
                    ("path", &**path),
                    ("method", *method),
                    ("status", status.as_str()),
                ];
                (labels, ConstCounter::new(*count))
            })
            .collect();
        family(
            &mut encoder,
            ("requests", "Requests answered, by interface, path, method and status"),
            MetricType::Counter,
            samples,
        )?;
        {
            let mut durations = encoder.encode_descriptor(
                "request_duration_seconds",
                "Time to answer a request",
                None,
                MetricType::Histogram,
            )?;
            for (name, buckets, count, seconds, _) in &interfaces {
                let labels = [("interface", *name)];
                durations
                    .encode_family(&labels)?
                    .encode_histogram::<Vec<(String, String)>>(*seconds, *count, buckets, None)?;
            }
        }
        let bytes = interfaces
            .iter()
            .map(|(name, _, _, _, bytes)| (vec![("interface", *name)], ConstCounter::new(*bytes)))
            .collect();
        family(
            &mut encoder,
            ("response_bytes", "Response body bytes whose size was known when sent"),
            MetricType::Counter,
            bytes,
        )
    }
}

/// Reads the engine's and services' figures when scraped.
pub struct Storage {
    engine: Arc<Engine>,
    services: Arc<Services>,
}

impl Storage {
    /// The collector of `engine`'s and `services`' figures.
    pub fn new(engine: Arc<Engine>, services: Arc<Services>) -> Storage {
        Storage { engine, services }
    }
}

impl std::fmt::Debug for Storage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Storage")
    }
}

/// One metric's samples: label pairs and a value.
type Samples<'a, V> = Vec<(Vec<(&'static str, &'a str)>, V)>;

/// Writes one metric with its samples.
fn family<V: EncodeMetric>(
    encoder: &mut DescriptorEncoder,
    (name, help): (&str, &str),
    kind: MetricType,
    samples: Samples<'_, V>,
) -> Result<(), std::fmt::Error> {
    let mut metric = encoder.encode_descriptor(name, help, None, kind)?;
    for (labels, value) in &samples {
        value.encode(metric.encode_family(labels)?)?;
    }
    Ok(())
}

impl Collector for Storage {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let databases = self.engine.databases();
        let names: Vec<String> = databases.iter().map(|db| db.name().to_string()).collect();
        let mut db_bytes = Vec::new();
        let mut log_bytes = Vec::new();
        let mut tables = Vec::new();
        for (db, name) in databases.iter().zip(&names) {
            let stats = db.all_table_stats();
            if let Some(first) = stats.first() {
                db_bytes.push((vec![("database", name.as_str())], ConstGauge::new(first.db_size as i64)));
                log_bytes.push((vec![("database", name.as_str())], ConstGauge::new(first.db_audit_size as i64)));
            }
            for stat in stats {
                tables.push((name.as_str(), stat.schema.name.clone(), stat.record_count, stat.table_size));
            }
        }
        family(&mut encoder, ("database_size_bytes", "Bytes of each database's file"), MetricType::Gauge, db_bytes)?;
        family(
            &mut encoder,
            ("transaction_log_size_bytes", "Bytes each database's transaction log occupies"),
            MetricType::Gauge,
            log_bytes,
        )?;
        let records = tables
            .iter()
            .map(|(db, table, count, _)| {
                (vec![("database", *db), ("table", table.as_str())], ConstGauge::new(*count as i64))
            })
            .collect();
        family(&mut encoder, ("table_records", "Records in each table"), MetricType::Gauge, records)?;
        let sizes = tables
            .iter()
            .map(|(db, table, _, size)| {
                (vec![("database", *db), ("table", table.as_str())], ConstGauge::new(*size as i64))
            })
            .collect();
        family(
            &mut encoder,
            ("table_size_bytes", "Bytes each table's records and indexes occupy"),
            MetricType::Gauge,
            sizes,
        )?;

        let writers: Vec<_> = databases.iter().map(|db| db.writer_stats()).collect();
        let per_db = |value: &dyn Fn(&lyre_core::WriterCounts) -> u64| -> Samples<'_, ConstCounter> {
            names
                .iter()
                .zip(&writers)
                .map(|(name, w)| (vec![("database", name.as_str())], ConstCounter::new(value(w))))
                .collect()
        };
        family(
            &mut encoder,
            ("writer_commits", "Write transactions committed"),
            MetricType::Counter,
            per_db(&|w| w.commits),
        )?;
        family(
            &mut encoder,
            ("writer_jobs", "Writes (jobs) in committed transactions"),
            MetricType::Counter,
            per_db(&|w| w.jobs),
        )?;
        family(
            &mut encoder,
            ("writer_failed_commits", "Write transactions that failed to commit"),
            MetricType::Counter,
            per_db(&|w| w.failed_commits),
        )?;
        let seconds: Samples<'_, ConstCounter<f64>> = names
            .iter()
            .zip(&writers)
            .map(|(name, w)| (vec![("database", name.as_str())], ConstCounter::new(w.commit_micros as f64 / 1e6)))
            .collect();
        family(
            &mut encoder,
            ("writer_commit_seconds", "Time writers spent applying and committing batches"),
            MetricType::Counter,
            seconds,
        )?;
        {
            let mut batches = encoder.encode_descriptor(
                "writer_batch_size",
                "Jobs per committed write transaction",
                None,
                MetricType::Histogram,
            )?;
            for (name, w) in names.iter().zip(&writers) {
                let mut cumulative = 0;
                let buckets: Vec<(f64, u64)> = BATCH_BUCKETS
                    .iter()
                    .zip(w.batches)
                    .map(|(bound, count)| {
                        cumulative += count;
                        (*bound as f64, cumulative)
                    })
                    .collect();
                let labels = [("database", name.as_str())];
                batches.encode_family(&labels)?.encode_histogram::<Vec<(String, String)>>(
                    w.jobs as f64,
                    w.commits,
                    &buckets,
                    None,
                )?;
            }
        }

        let jobs = self.services.jobs().counts();
        let none: Vec<(&'static str, &str)> = Vec::new();
        family(
            &mut encoder,
            ("jobs_started", "Jobs started"),
            MetricType::Counter,
            vec![(none.clone(), ConstCounter::new(jobs.started))],
        )?;
        family(
            &mut encoder,
            ("jobs_completed", "Jobs that ended COMPLETE"),
            MetricType::Counter,
            vec![(none.clone(), ConstCounter::new(jobs.completed))],
        )?;
        family(
            &mut encoder,
            ("jobs_failed", "Jobs that ended ERROR"),
            MetricType::Counter,
            vec![(none.clone(), ConstCounter::new(jobs.failed))],
        )?;
        let running = jobs.started.saturating_sub(jobs.completed + jobs.failed) as i64;
        family(
            &mut encoder,
            ("jobs_running", "Jobs running now"),
            MetricType::Gauge,
            vec![(none.clone(), ConstGauge::new(running))],
        )?;
        if let Some(rss) = resident_bytes() {
            family(
                &mut encoder,
                ("process_resident_memory_bytes", "The process's resident memory"),
                MetricType::Gauge,
                vec![(none, ConstGauge::new(rss as i64))],
            )?;
        }
        Ok(())
    }
}

/// The process's resident set, from `/proc/self/statm` (pages × page size).
pub fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * rustix::param::page_size() as u64)
}
