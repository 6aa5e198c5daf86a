//! Harper's analytics: each period (`analytics.aggregatePeriod`, 60 s by default)
//! the requests recorded are aggregated per path, method and type into records of
//! `system.hdb_analytics` (`duration`: mean, median, p90, p95, p99 in ms and count;
//! `success`; `bytes-sent`), beside the storage figures of that moment
//! (`database-size`, `table-size`) and the process's (`resource-usage`). The table
//! expires its records after `analytics.retention`. The flush runs as a task of
//! the services (`Services::every`).
//!
//! Between flushes one aggregate per (path, method, type) is held; paths and
//! methods are bounded by the caller ([`super::MAX_PATHS`]), so memory is too.

use std::collections::HashMap;
use std::time::Duration;

use hdrhistogram::Histogram;
use lyre_core::catalog::{Expiration, TableSpec};
use lyre_core::{Context, Engine, Object, SYSTEM_DATABASE, Table, Value};
use parking_lot::Mutex;

/// Harper's table of aggregated analytics.
pub const ANALYTICS_TABLE: &str = "hdb_analytics";
/// The metrics Lyre writes of itself each period (Harper's built-in names).
pub const BUILTIN_METRICS: [&str; 3] = ["table-size", "database-size", "resource-usage"];

/// One answered request, as the analytics aggregate it.
pub struct Sample<'a> {
    /// The operation or resource.
    pub path: &'a str,
    /// The HTTP method.
    pub method: &'a str,
    /// Harper's type (`operation`, `rest`).
    pub kind: &'static str,
    /// Time to answer.
    pub elapsed: Duration,
    /// Whether it did not fail on the server's side (status below 500).
    pub success: bool,
    /// Bytes of its answer, when known.
    pub bytes_out: Option<u64>,
}

/// The requests of the current period.
#[derive(Default)]
pub struct Analytics {
    current: Mutex<HashMap<(String, String, &'static str), Aggregate>>,
}

struct Aggregate {
    /// Durations in microseconds, to two significant figures (about 11 kB).
    durations: Histogram<u32>,
    succeeded: u64,
    bytes: u64,
    sized: u64,
}

impl Analytics {
    /// Adds one request to the current period.
    pub fn record(&self, sample: Sample<'_>) {
        let micros = (sample.elapsed.as_micros() as u64).max(1);
        let mut current = self.current.lock();
        let key = (sample.path.to_string(), sample.method.to_string(), sample.kind);
        let aggregate = current.entry(key).or_insert_with(|| Aggregate {
            durations: new_histogram(),
            succeeded: 0,
            bytes: 0,
            sized: 0,
        });
        let _ = aggregate.durations.record(micros.min(3_600_000_000));
        aggregate.succeeded += u64::from(sample.success);
        if let Some(bytes) = sample.bytes_out {
            aggregate.bytes += bytes;
            aggregate.sized += 1;
        }
    }

    /// Ends the current period at `now` (ms): its records, Harper's shape.
    fn drain(&self, now: f64, period: Duration) -> Vec<Object> {
        let taken = std::mem::take(&mut *self.current.lock());
        let period_ms = Value::Int(period.as_millis() as i64);
        let mut records = Vec::new();
        for ((path, method, kind), aggregate) in taken {
            let base = |metric: &str| {
                let mut record = Object::new();
                record.insert("id".into(), uuid::Uuid::new_v4().to_string().into());
                record.insert("metric".into(), metric.into());
                record.insert("path".into(), path.clone().into());
                record.insert("method".into(), method.clone().into());
                record.insert("type".into(), kind.into());
                record.insert("time".into(), Value::Float(now));
                record.insert("period".into(), period_ms.clone());
                record
            };
            let durations = &aggregate.durations;
            let ms = |micros: u64| Value::Float(micros as f64 / 1000.0);
            let mut duration = base("duration");
            duration.insert("mean".into(), Value::Float(durations.mean() / 1000.0));
            duration.insert("median".into(), ms(durations.value_at_quantile(0.5)));
            duration.insert("p90".into(), ms(durations.value_at_quantile(0.9)));
            duration.insert("p95".into(), ms(durations.value_at_quantile(0.95)));
            duration.insert("p99".into(), ms(durations.value_at_quantile(0.99)));
            duration.insert("count".into(), Value::Int(durations.len() as i64));
            records.push(duration);
            let mut success = base("success");
            success.insert("total".into(), Value::Int(durations.len() as i64));
            success.insert("count".into(), Value::Int(aggregate.succeeded as i64));
            success.insert("ratio".into(), Value::Float(aggregate.succeeded as f64 / durations.len().max(1) as f64));
            records.push(success);
            if aggregate.sized > 0 {
                let mut bytes = base("bytes-sent");
                bytes.insert("total".into(), Value::Int(aggregate.bytes as i64));
                bytes.insert("count".into(), Value::Int(aggregate.sized as i64));
                bytes.insert("mean".into(), Value::Float(aggregate.bytes as f64 / aggregate.sized as f64));
                records.push(bytes);
            }
        }
        records
    }

    /// Writes the period's records and the storage and process figures to
    /// `system.hdb_analytics` (created on first use, its records expiring after
    /// `retention`).
    pub async fn flush(&self, engine: &Engine, period: Duration, retention: Duration) -> lyre_core::Result<usize> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64() * 1000.0);
        let mut records = self.drain(now, period);
        records.extend(storage_records(engine, now));
        records.push(resource_usage(now));
        let count = records.len();
        analytics_table(engine, retention).await?.insert(&Context::system(), records).await?;
        Ok(count)
    }
}

/// A histogram of microseconds up to an hour, to two significant figures.
fn new_histogram() -> Histogram<u32> {
    // Constant bounds that hdrhistogram accepts: no input can make this fail.
    Histogram::new_with_bounds(1, 3_600_000_000, 2).expect("valid histogram bounds")
}

/// `system.hdb_analytics`, created on first use.
pub async fn analytics_table(engine: &Engine, retention: Duration) -> lyre_core::Result<Table> {
    let system = engine.database(SYSTEM_DATABASE)?;
    if system.schema().table(ANALYTICS_TABLE).is_none() {
        let expiration = Expiration { expiration: retention.as_secs().max(1), eviction: 0, scan_interval: None };
        let spec = TableSpec { expiration: Some(expiration), ..TableSpec::dynamic(ANALYTICS_TABLE, "id") };
        if let Err(err) = system.create_table(&Context::system(), spec).await
            && system.schema().table(ANALYTICS_TABLE).is_none()
        {
            return Err(err);
        }
    }
    system.table(ANALYTICS_TABLE)
}

/// `database-size` and `table-size` records of every database now.
fn storage_records(engine: &Engine, now: f64) -> Vec<Object> {
    let mut records = Vec::new();
    let record = |metric: &str| {
        let mut record = Object::new();
        record.insert("id".into(), uuid::Uuid::new_v4().to_string().into());
        record.insert("metric".into(), metric.into());
        record.insert("time".into(), Value::Float(now));
        record
    };
    for db in engine.databases() {
        let schema = db.schema();
        let mut sized = false;
        for table in schema.tables.values() {
            let Ok(stats) = db.table_stats(table) else { continue };
            if !sized {
                let mut size = record("database-size");
                size.insert("database".into(), db.name().into());
                size.insert("size".into(), Value::Int(stats.db_size as i64));
                size.insert("audit".into(), Value::Int(stats.db_audit_size as i64));
                records.push(size);
                sized = true;
            }
            let mut size = record("table-size");
            size.insert("database".into(), db.name().into());
            size.insert("table".into(), table.name.clone().into());
            size.insert("size".into(), Value::Int(stats.table_size as i64));
            size.insert("records".into(), Value::Int(stats.record_count as i64));
            records.push(size);
        }
    }
    records
}

/// `resource-usage`: the process's CPU time so far (ms) and resident memory.
fn resource_usage(now: f64) -> Object {
    let mut record = Object::new();
    record.insert("id".into(), uuid::Uuid::new_v4().to_string().into());
    record.insert("metric".into(), "resource-usage".into());
    record.insert("time".into(), Value::Float(now));
    // /proc/self/stat: after the command's closing parenthesis, utime and stime are
    // the 12th and 13th fields, in clock ticks.
    let times = std::fs::read_to_string("/proc/self/stat").ok().and_then(|stat| {
        let fields: Vec<u64> =
            stat.rsplit_once(") ")?.1.split_whitespace().skip(11).take(2).filter_map(|f| f.parse().ok()).collect();
        let ticks = rustix::param::clock_ticks_per_second().max(1) as f64;
        Some((fields.first()? * 1000) as f64 / ticks).zip(Some((fields.get(1)? * 1000) as f64 / ticks))
    });
    if let Some((user, system)) = times {
        record.insert("userCPUTime".into(), Value::Float(user));
        record.insert("systemCPUTime".into(), Value::Float(system));
    }
    if let Some(rss) = super::scrape::resident_bytes() {
        record.insert("rss".into(), Value::Int(rss as i64));
    }
    record
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_period_aggregates_per_path_method_and_type() {
        let analytics = Analytics::default();
        for (ms, status_ok) in [(1, true), (2, true), (3, true), (100, false)] {
            analytics.record(Sample {
                path: "search_by_value",
                method: "POST",
                kind: "operation",
                elapsed: Duration::from_millis(ms),
                success: status_ok,
                bytes_out: Some(10),
            });
        }
        let records = analytics.drain(1_000.0, Duration::from_secs(60));
        let find = |metric: &str| records.iter().find(|r| r["metric"] == Value::from(metric)).unwrap();
        let duration = find("duration");
        assert_eq!(duration["count"], Value::Int(4));
        assert_eq!(duration["path"], Value::from("search_by_value"));
        assert_eq!(duration["period"], Value::Int(60_000));
        let median = duration["median"].as_f64().unwrap();
        assert!((1.99..=2.01).contains(&median), "{median}");
        assert!(duration["p99"].as_f64().unwrap() >= 99.0);
        assert_eq!(find("success")["count"], Value::Int(3));
        assert_eq!(find("success")["ratio"], Value::Float(0.75));
        assert_eq!(find("bytes-sent")["total"], Value::Int(40));
        assert!(analytics.drain(2_000.0, Duration::from_secs(60)).is_empty(), "a period starts empty");
    }
}
