//! Request metrics, kept two ways from one recording: Prometheus metrics for
//! `/metrics` (with the storage, writer and job figures read at each scrape,
//! `scrape.rs`), and Harper's analytics, aggregated per period into
//! `system.hdb_analytics` (`analytics.rs`).
//!
//! Every request is recorded once, after it is answered, by the Operations API
//! (path: the operation) and REST (path: the exported resource), either being
//! `unknown` when the request named none: one lock, one lookup by the path (no
//! allocation once a path is known, and the exports are asked only about a path not
//! seen before), the interface's duration bucket, a count per interface, method and
//! status, and the period's durations per interface and method (`histogram.rs`). Paths come from clients, so at most [`MAX_PATHS`]
//! distinct ones are kept (later ones count as `other`), and methods are the
//! standard ones (others count as `OTHER`): memory stays bounded whatever clients
//! send.

pub mod analytics;
mod histogram;
mod scrape;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use lyre_core::{Engine, Services};
use parking_lot::Mutex;
use prometheus_client::registry::Registry;

use histogram::LogHistogram;

/// Distinct request paths kept.
pub const MAX_PATHS: usize = 1_000;
/// The path later paths are counted under once [`MAX_PATHS`] are kept.
const OTHER_PATH: &str = "other";
/// The path a request that named no operation or resource is counted under.
pub const UNKNOWN_PATH: &str = "unknown";
/// The HTTP methods kept as themselves.
const METHODS: [&str; 10] = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "QUERY", "CONNECT", "TRACE"];

/// Which interface answered a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Interface {
    /// The Operations API (port 9925).
    Operations = 0,
    /// REST (port 9926).
    Rest = 1,
}

impl Interface {
    fn name(self) -> &'static str {
        match self {
            Interface::Operations => "operations",
            Interface::Rest => "rest",
        }
    }

    /// Harper's analytics `type` for a request's duration.
    fn analytics_type(self) -> &'static str {
        match self {
            Interface::Operations => "operation",
            Interface::Rest => "rest",
        }
    }
}

/// One answered request.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// Where it came in.
    pub interface: Interface,
    /// The operation, or the REST resource.
    pub path: &'a str,
    /// The HTTP method (REST) or `POST`.
    pub method: &'a str,
    /// The answer's status.
    pub status: u16,
    /// How long it took to answer.
    pub elapsed: Duration,
    /// Bytes of its answer's body, when known before it was sent.
    pub bytes_out: Option<u64>,
}

/// Upper bounds, in seconds, of the buckets of `lyre_request_duration_seconds`:
/// 50 µs doubling to about 6.5 s.
pub(crate) const DURATION_BUCKETS: [f64; 18] = {
    let mut bounds = [0.0; 18];
    let mut i = 0;
    let mut bound = 0.000_05;
    while i < 18 {
        bounds[i] = bound;
        bound *= 2.0;
        i += 1;
    }
    bounds
};

/// One interface's requests since the start, for the duration histogram and the
/// bytes counter.
#[derive(Default)]
pub(crate) struct InterfaceTotals {
    /// Requests per bucket of [`DURATION_BUCKETS`] (not cumulative; the last also
    /// counts slower ones).
    buckets: [u64; DURATION_BUCKETS.len()],
    count: u64,
    seconds: f64,
    bytes_out: u64,
}

/// What has been recorded, under one lock.
#[derive(Default)]
pub(crate) struct Recorded {
    paths: HashMap<Arc<str>, PathStats, foldhash::fast::RandomState>,
    /// The Operations API's totals, then REST's.
    interfaces: [InterfaceTotals; 2],
}

/// What one path's requests added up to.
#[derive(Default)]
struct PathStats {
    /// Answers per interface, method and status, since the start.
    counts: Vec<((Interface, &'static str, u16), u64)>,
    /// This period's requests per interface and method.
    period: Vec<((Interface, &'static str), Period)>,
}

/// One period's requests of a path, interface and method.
#[derive(Default)]
pub(crate) struct Period {
    durations: LogHistogram,
    succeeded: u64,
    bytes: u64,
    sized: u64,
}

/// What has been recorded, shared by the recorder, the scrape and the analytics
/// flush.
type Shared = Arc<Mutex<Recorded>>;

/// The server's metrics.
pub struct Metrics {
    registry: Registry,
    recorded: Shared,
}

impl Metrics {
    /// Metrics for a server over `engine` and its `services`.
    pub fn new(engine: Arc<Engine>, services: Arc<Services>) -> Metrics {
        let mut registry = Registry::with_prefix("lyre");
        let recorded: Shared = Arc::default();
        registry.register_collector(Box::new(scrape::Requests::new(recorded.clone())));
        registry.register_collector(Box::new(scrape::Storage::new(engine, services)));
        Metrics { registry, recorded }
    }

    /// Records one answered request. A path not seen before is kept only when
    /// `known` says it names something real (else it counts as `unknown`), and
    /// while fewer than [`MAX_PATHS`] are kept (else `other`).
    pub fn record(&self, request: Request<'_>, known: &dyn Fn(&str) -> bool) {
        let interface = request.interface;
        let method = METHODS.iter().find(|m| **m == request.method).copied().unwrap_or("OTHER");
        let seconds = request.elapsed.as_secs_f64();
        let mut recorded = self.recorded.lock();
        let totals = &mut recorded.interfaces[interface as usize];
        let bucket = DURATION_BUCKETS.iter().position(|bound| seconds <= *bound).unwrap_or(DURATION_BUCKETS.len() - 1);
        totals.buckets[bucket] += 1;
        totals.count += 1;
        totals.seconds += seconds;
        totals.bytes_out += request.bytes_out.unwrap_or(0);
        let paths = &mut recorded.paths;
        let stats = match paths.get_mut(request.path) {
            Some(stats) => stats,
            None => {
                let path = if !known(request.path) {
                    UNKNOWN_PATH
                } else if paths.len() < MAX_PATHS {
                    request.path
                } else {
                    OTHER_PATH
                };
                paths.entry(Arc::from(path)).or_default()
            }
        };
        let key = (interface, method, request.status);
        match stats.counts.iter_mut().find(|(k, _)| *k == key) {
            Some((_, count)) => *count += 1,
            None => stats.counts.push((key, 1)),
        }
        let at = match stats.period.iter().position(|(k, _)| *k == (interface, method)) {
            Some(at) => at,
            None => {
                stats.period.push(((interface, method), Period::default()));
                stats.period.len() - 1
            }
        };
        let period = &mut stats.period[at].1;
        period.durations.record(request.elapsed.as_micros() as u64);
        period.succeeded += u64::from(request.status < 500);
        if let Some(bytes) = request.bytes_out {
            period.bytes += bytes;
            period.sized += 1;
        }
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry)?;
        Ok(out)
    }

    /// Ends the analytics period: writes its aggregates, with the storage and
    /// process figures of now, to `system.hdb_analytics` (records expiring after
    /// `retention`); answers how many records were written.
    pub async fn flush_analytics(
        &self,
        engine: &Engine,
        period: Duration,
        retention: Duration,
    ) -> lyre_core::Result<usize> {
        let taken: Vec<(String, Interface, &'static str, Period)> = {
            let mut recorded = self.recorded.lock();
            let mut taken = Vec::new();
            for (path, stats) in recorded.paths.iter_mut() {
                for ((interface, method), aggregate) in std::mem::take(&mut stats.period) {
                    taken.push((path.to_string(), interface, method, aggregate));
                }
            }
            taken
        };
        analytics::flush(engine, taken, period, retention).await
    }
}

/// The size of `response`'s body when it is known before it is sent.
pub fn body_size(response: &axum::response::Response) -> Option<u64> {
    use axum::body::HttpBody as _;
    response.body().size_hint().exact()
}
