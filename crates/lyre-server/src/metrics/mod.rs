//! Request metrics, kept two ways from one recording: Prometheus families for
//! `/metrics` (with the storage, writer and job figures read at each scrape,
//! `scrape.rs`), and Harper's analytics, aggregated per period into
//! `system.hdb_analytics` (`analytics.rs`).
//!
//! Every request is recorded once, after it is answered, by the Operations API
//! (path: the operation) and REST (path: the first segment, the resource). Paths
//! come from clients, so at most [`MAX_PATHS`] distinct ones are kept; later ones
//! are counted as `other`, and memory stays bounded whatever clients send.

pub mod analytics;
mod scrape;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use lyre_core::{Engine, Services};
use parking_lot::Mutex;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Distinct request paths kept as labels.
pub const MAX_PATHS: usize = 1_000;

/// Which interface answered a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Interface {
    /// The Operations API (port 9925).
    Operations,
    /// REST (port 9926).
    Rest,
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

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct RequestLabels {
    interface: &'static str,
    path: String,
    method: String,
    status: u16,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct InterfaceLabels {
    interface: &'static str,
}

type DurationFamily = Family<InterfaceLabels, Histogram, fn() -> Histogram>;

/// The size of `response`'s body when it is known before it is sent.
pub fn body_size(response: &axum::response::Response) -> Option<u64> {
    use axum::body::HttpBody as _;
    response.body().size_hint().exact()
}

/// The server's metrics.
pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    durations: DurationFamily,
    bytes_out: Family<InterfaceLabels, Counter>,
    paths: Mutex<HashSet<String>>,
    /// Harper's analytics, aggregated per period.
    pub analytics: analytics::Analytics,
}

impl Metrics {
    /// Metrics for a server over `engine` and its `services`.
    pub fn new(engine: Arc<Engine>, services: Arc<Services>) -> Metrics {
        let mut registry = Registry::with_prefix("lyre");
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register("requests", "Requests answered, by interface, path, method and status", requests.clone());
        let durations: DurationFamily =
            Family::new_with_constructor(|| Histogram::new(exponential_buckets(0.000_05, 2.0, 18)));
        registry.register_with_unit(
            "request_duration",
            "Time to answer a request",
            prometheus_client::registry::Unit::Seconds,
            durations.clone(),
        );
        let bytes_out = Family::<InterfaceLabels, Counter>::default();
        registry.register_with_unit(
            "response",
            "Response body bytes whose size was known when sent",
            prometheus_client::registry::Unit::Bytes,
            bytes_out.clone(),
        );
        registry.register_collector(Box::new(scrape::Storage::new(engine, services)));
        Metrics {
            registry,
            requests,
            durations,
            bytes_out,
            paths: Mutex::new(HashSet::new()),
            analytics: analytics::Analytics::default(),
        }
    }

    /// Records one answered request.
    pub fn record(&self, request: Request<'_>) {
        let path = self.bounded_path(request.path);
        let interface = request.interface.name();
        // Methods are any token a client sends; only the standard ones are labels.
        let method = match request.method {
            "GET" | "HEAD" | "POST" | "PUT" | "PATCH" | "DELETE" | "OPTIONS" | "QUERY" | "CONNECT" | "TRACE" => {
                request.method
            }
            _ => "OTHER",
        };
        let labels = RequestLabels { interface, path, method: method.to_string(), status: request.status };
        self.requests.get_or_create(&labels).inc();
        let seconds = request.elapsed.as_secs_f64();
        self.durations.get_or_create(&InterfaceLabels { interface }).observe(seconds);
        if let Some(bytes) = request.bytes_out {
            self.bytes_out.get_or_create(&InterfaceLabels { interface }).inc_by(bytes);
        }
        self.analytics.record(analytics::Sample {
            path: &labels.path,
            method: &labels.method,
            kind: request.interface.analytics_type(),
            elapsed: request.elapsed,
            success: request.status < 500,
            bytes_out: request.bytes_out,
        });
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry)?;
        Ok(out)
    }

    /// `path`, or `other` once [`MAX_PATHS`] others are kept.
    fn bounded_path(&self, path: &str) -> String {
        let mut paths = self.paths.lock();
        if paths.contains(path) {
            return path.to_string();
        }
        if paths.len() >= MAX_PATHS {
            return "other".to_string();
        }
        paths.insert(path.to_string());
        path.to_string()
    }
}
