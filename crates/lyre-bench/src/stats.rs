//! Measurements: latency histograms, throughput, server resource use; medians and
//! ratios across rounds.

use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::target::ProcessSample;

/// Latency percentiles of one run, in microseconds.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Latency {
    /// Median.
    pub p50_us: u64,
    /// 90th percentile.
    pub p90_us: u64,
    /// 99th percentile.
    pub p99_us: u64,
    /// 99.9th percentile.
    pub p999_us: u64,
    /// Slowest.
    pub max_us: u64,
}

impl Latency {
    /// Percentiles of `histogram`.
    pub fn of(histogram: &Histogram<u64>) -> Self {
        Latency {
            p50_us: histogram.value_at_quantile(0.50),
            p90_us: histogram.value_at_quantile(0.90),
            p99_us: histogram.value_at_quantile(0.99),
            p999_us: histogram.value_at_quantile(0.999),
            max_us: histogram.max(),
        }
    }
}

/// What the server spent during a run.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct ServerUse {
    /// CPU seconds the server consumed during the run.
    pub cpu_seconds: f64,
    /// CPU microseconds per request.
    pub cpu_us_per_request: f64,
    /// Peak resident memory of the server so far, in KiB.
    pub peak_rss_kib: u64,
    /// `cpu_us_per_request` by what the server's threads do.
    pub cpu_us_by_thread: crate::target::ThreadCpu,
}

impl ServerUse {
    /// The difference between two samples taken around a run of `requests`.
    pub fn between(before: ProcessSample, after: ProcessSample, requests: u64) -> Self {
        let cpu = (after.cpu_seconds - before.cpu_seconds).max(0.0);
        let per_request = 1e6 / requests.max(1) as f64;
        ServerUse {
            cpu_seconds: cpu,
            cpu_us_per_request: cpu * per_request,
            peak_rss_kib: after.peak_rss_kib,
            cpu_us_by_thread: crate::target::ThreadCpu::between(&before.threads, &after.threads, cpu, per_request),
        }
    }
}

/// One run of one workload against one server.
#[derive(Debug, Clone, Serialize)]
pub struct Measurement {
    /// The workload's name.
    pub workload: String,
    /// The server's label.
    pub target: String,
    /// Round number (0-based).
    pub round: usize,
    /// Requests sent.
    pub requests: u64,
    /// Records written or returned.
    pub items: u64,
    /// Requests that failed.
    pub errors: u64,
    /// Wall time of the run.
    pub elapsed_secs: f64,
    /// Requests per second.
    pub requests_per_sec: f64,
    /// Records per second.
    pub items_per_sec: f64,
    /// Latency of requests.
    pub latency: Latency,
    /// Server resource use, when its pid was given.
    pub server: Option<ServerUse>,
    /// The load generator's own CPU over the run, as a share of one core (where
    /// the workload measures it): near 1.0 on the one core it is pinned to means
    /// the figure is the generator's bound, not the server's.
    pub load_cpu_share: Option<f64>,
}

impl Measurement {
    /// Builds a measurement from raw counts.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        workload: &str,
        target: &str,
        round: usize,
        requests: u64,
        items: u64,
        errors: u64,
        elapsed: Duration,
        histogram: &Histogram<u64>,
        server: Option<ServerUse>,
    ) -> Self {
        let secs = elapsed.as_secs_f64().max(1e-9);
        Measurement {
            workload: workload.to_string(),
            target: target.to_string(),
            round,
            requests,
            items,
            errors,
            elapsed_secs: secs,
            requests_per_sec: requests as f64 / secs,
            items_per_sec: items as f64 / secs,
            latency: Latency::of(histogram),
            server,
            load_cpu_share: None,
        }
    }

    /// The measurement with the load generator's CPU between `before` and
    /// `after`, samples of this process around the run.
    pub fn with_load_cpu(mut self, before: Option<ProcessSample>, after: Option<ProcessSample>) -> Self {
        if let (Some(before), Some(after)) = (before, after) {
            self.load_cpu_share = Some((after.cpu_seconds - before.cpu_seconds).max(0.0) / self.elapsed_secs);
        }
        self
    }

    /// The server's CPU over the run, as a share of one core, when sampled.
    pub fn server_cpu_share(&self) -> Option<f64> {
        self.server.map(|s| s.cpu_seconds / self.elapsed_secs)
    }
}

/// The median, minimum and maximum of a figure over rounds.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Spread {
    /// Median.
    pub median: f64,
    /// Smallest.
    pub min: f64,
    /// Largest.
    pub max: f64,
}

impl Spread {
    /// The spread of `values`; `None` when empty.
    pub fn of(values: &[f64]) -> Option<Spread> {
        if values.is_empty() {
            return None;
        }
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        let median = if n % 2 == 1 { sorted[n / 2] } else { (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0 };
        Some(Spread { median, min: sorted[0], max: sorted[n - 1] })
    }
}

/// A fresh latency histogram (1 µs to 100 s, 3 significant digits).
pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 100_000_000, 3).expect("constant histogram bounds are valid")
}

/// Waits for every receiver of a fan-out or fan-in round and adds up what they
/// saw: their latencies merged, and the deliveries they counted.
pub async fn gather_receivers(
    receivers: Vec<tokio::task::JoinHandle<(Histogram<u64>, u64)>>,
) -> anyhow::Result<(Histogram<u64>, u64)> {
    let mut latencies = histogram();
    let mut delivered = 0;
    for receiver in receivers {
        let (h, received) = receiver.await?;
        latencies.add(&h).map_err(|e| anyhow::anyhow!("merging histograms: {e}"))?;
        delivered += received;
    }
    Ok((latencies, delivered))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spreads_take_the_median() {
        let s = Spread::of(&[3.0, 1.0, 2.0]).unwrap();
        assert_eq!((s.median, s.min, s.max), (2.0, 1.0, 3.0));
        assert_eq!(Spread::of(&[1.0, 4.0]).unwrap().median, 2.5);
        assert!(Spread::of(&[]).is_none());
    }
}
