//! Harper's analytics: each period (`analytics.aggregatePeriod`, 60 s by default)
//! the requests recorded are aggregated per path, method and type into records of
//! `system.hdb_analytics` (`duration`: mean, median, p90, p95, p99 in ms and count;
//! `success`; `bytes-sent`), beside the storage figures of that moment
//! (`database-size`, `table-size`) and the process's (`resource-usage`). The table
//! expires its records after `analytics.retention`. The flush runs as a task of
//! the services (`Services::every`).
//!
//! Between flushes one aggregate per path, interface and method is held (in
//! `mod.rs`, bounded there).

use std::time::Duration;

use lyre_core::catalog::{Expiration, TableSpec};
use lyre_core::{Context, Engine, Object, SYSTEM_DATABASE, Table, Value};

use super::{Interface, Period};

/// Harper's table of aggregated analytics.
pub const ANALYTICS_TABLE: &str = "hdb_analytics";
/// The metrics Lyre writes of itself each period (Harper's built-in names).
pub const BUILTIN_METRICS: [&str; 3] = ["table-size", "database-size", "resource-usage"];

/// Writes one period's aggregates (path, interface, method, requests), with the
/// storage and process figures of now, to `system.hdb_analytics` (created on first
/// use, its records expiring after `retention`); answers how many were written.
pub(super) async fn flush(
    engine: &Engine,
    aggregates: Vec<(String, Interface, &'static str, Period)>,
    period: Duration,
    retention: Duration,
) -> lyre_core::Result<usize> {
    let now =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64() * 1000.0);
    let mut records = request_records(aggregates, now, period);
    records.extend(storage_records(engine, now));
    records.push(resource_usage(now));
    let count = records.len();
    analytics_table(engine, retention).await?.insert(&Context::system(), records).await?;
    Ok(count)
}

/// Harper's records of one period's requests: `duration` (ms), `success` and
/// `bytes-sent` per path, method and type.
fn request_records(
    aggregates: Vec<(String, Interface, &'static str, Period)>,
    now: f64,
    period: Duration,
) -> Vec<Object> {
    let period_ms = Value::Int(period.as_millis() as i64);
    let mut records = Vec::new();
    for (path, interface, method, aggregate) in aggregates {
        let base = |metric: &str| {
            let mut record = Object::default();
            record.insert("id".into(), uuid::Uuid::new_v4().to_string().into());
            record.insert("metric".into(), metric.into());
            record.insert("path".into(), path.clone().into());
            record.insert("method".into(), method.into());
            record.insert("type".into(), interface.analytics_type().into());
            record.insert("time".into(), Value::Float(now));
            record.insert("period".into(), period_ms.clone());
            record
        };
        let durations = &aggregate.durations;
        let ms = |quantile: f64| Value::Float(durations.quantile_micros(quantile) / 1000.0);
        let mut duration = base("duration");
        duration.insert("mean".into(), Value::Float(durations.mean_micros() / 1000.0));
        duration.insert("median".into(), ms(0.5));
        duration.insert("p90".into(), ms(0.9));
        duration.insert("p95".into(), ms(0.95));
        duration.insert("p99".into(), ms(0.99));
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

/// `system.hdb_analytics`, created on first use (its records expiring after
/// `retention`).
pub async fn analytics_table(engine: &Engine, retention: Duration) -> lyre_core::Result<Table> {
    let expiration = Expiration { expiration: retention.as_secs().max(1), eviction: 0, scan_interval: None };
    let spec = TableSpec { expiration: Some(expiration), ..TableSpec::dynamic(ANALYTICS_TABLE, "id") };
    engine.database(SYSTEM_DATABASE)?.table_or_create(&Context::system(), spec).await
}

/// `database-size` and `table-size` records of every database now.
fn storage_records(engine: &Engine, now: f64) -> Vec<Object> {
    let mut records = Vec::new();
    let record = |metric: &str| {
        let mut record = Object::default();
        record.insert("id".into(), uuid::Uuid::new_v4().to_string().into());
        record.insert("metric".into(), metric.into());
        record.insert("time".into(), Value::Float(now));
        record
    };
    for db in engine.databases() {
        let stats = db.all_table_stats();
        if let Some(first) = stats.first() {
            let mut size = record("database-size");
            size.insert("database".into(), db.name().into());
            size.insert("size".into(), Value::Int(first.db_size as i64));
            size.insert("audit".into(), Value::Int(first.db_audit_size as i64));
            records.push(size);
        }
        for stat in stats {
            let mut size = record("table-size");
            size.insert("database".into(), db.name().into());
            size.insert("table".into(), stat.schema.name.clone().into());
            size.insert("size".into(), Value::Int(stat.table_size as i64));
            size.insert("records".into(), Value::Int(stat.record_count as i64));
            records.push(size);
        }
    }
    records
}

/// `resource-usage`: the process's CPU time so far (ms) and resident memory.
fn resource_usage(now: f64) -> Object {
    let mut record = Object::default();
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
    fn a_period_becomes_harpers_records_per_path_method_and_type() {
        let mut period = Period::default();
        for (ms, ok) in [(1, true), (2, true), (3, true), (100, false)] {
            period.durations.record(ms * 1000);
            period.succeeded += u64::from(ok);
            period.bytes += 10;
            period.sized += 1;
        }
        let records = request_records(
            vec![("search_by_value".into(), Interface::Operations, "POST", period)],
            1_000.0,
            Duration::from_secs(60),
        );
        let find = |metric: &str| records.iter().find(|r| r["metric"] == Value::from(metric)).unwrap();
        let duration = find("duration");
        assert_eq!(duration["count"], Value::Int(4));
        assert_eq!(duration["path"], Value::from("search_by_value"));
        assert_eq!(duration["type"], Value::from("operation"));
        assert_eq!(duration["period"], Value::Int(60_000));
        let median = duration["median"].as_f64().unwrap();
        assert!((1.6..=2.5).contains(&median), "{median}");
        assert!(duration["p99"].as_f64().unwrap() >= 80.0);
        assert_eq!(find("success")["count"], Value::Int(3));
        assert_eq!(find("success")["ratio"], Value::Float(0.75));
        assert_eq!(find("bytes-sent")["total"], Value::Int(40));
    }
}
