//! The differential test: the same seeded random sequence of Operations API and
//! REST requests sent to Lyre and to a reference server (Harper 5), every answer
//! normalised (what legitimately differs: version stamps, sizes, the order of
//! unordered results, `5` versus `5.0`) and compared, status and body, per kind of
//! request, with the first differing requests of each kind as reproductions.
//!
//! Differences listed in the allow-list (`bench/diff-allowed.json`: documented,
//! deliberate differences and reference-server defects, each with its reason) count
//! as agreement and are reported apart. Run it with `bench/diff-harper5.sh`; it never
//! runs under `cargo test`.
//!
//! * `generate.rs`: the request sequence (records, REST query strings, searches).
//! * `compare.rs`: normalisation, comparison, the allow-list and the report.

pub mod compare;
mod generate;

use std::io::Write as _;
use std::path::Path;

use bytes::Bytes;
use hyper::Method;

use crate::client::HttpClient;
pub use compare::Report;
pub use generate::SCHEMA;

/// One request of the sequence.
#[derive(Debug, Clone)]
pub struct Request {
    /// The kind it is reported under (`rest GET query`, `op insert`, ...).
    pub kind: &'static str,
    /// The method (POST for operations).
    pub method: Method,
    /// The REST path and query, or `None` for an operation.
    pub path: Option<String>,
    /// The body (JSON), possibly empty.
    pub body: String,
    /// Whether results come in no defined order (compared as sets).
    pub unordered: bool,
}

impl Request {
    /// How the request reads in a report.
    pub fn describe(&self) -> String {
        match &self.path {
            Some(path) if self.body.is_empty() => format!("{} {path}", self.method),
            Some(path) => format!("{} {path} {}", self.method, self.body),
            None => format!("POST / {}", self.body),
        }
    }
}

/// Sends `request` to `client`; a transport failure answers status 0.
async fn send(client: &HttpClient, request: &Request) -> (u16, Bytes) {
    let body = Bytes::from(request.body.clone());
    let answered = match &request.path {
        Some(path) => client.rest(request.method.clone(), path, body).await,
        None => client.call(&crate::client::Call::Op(body)).await,
    };
    answered.unwrap_or_else(|err| (0, Bytes::from(err.to_string())))
}

/// Runs `requests` requests of sequence `seed` against both servers (after setting
/// up the dynamic table the operations use) and compares every answer.
pub async fn run(
    lyre: &HttpClient,
    reference: &HttpClient,
    seed: u64,
    requests: usize,
    allowed: &Path,
    reproductions: usize,
    mut trace: Option<&mut dyn std::io::Write>,
) -> anyhow::Result<Report> {
    let allow = compare::AllowList::load(allowed)?;
    for setup in generate::setup() {
        let (a, b) = (send(lyre, &setup).await, send(reference, &setup).await);
        if a.0 != 200 || b.0 != 200 {
            anyhow::bail!(
                "setup {} failed: {} {} / {} {}",
                setup.describe(),
                a.0,
                String::from_utf8_lossy(&a.1),
                b.0,
                String::from_utf8_lossy(&b.1)
            );
        }
    }
    let mut report = Report::keeping(reproductions);
    for request in generate::sequence(seed, requests) {
        let (a, b) = (send(lyre, &request).await, send(reference, &request).await);
        if let Some(out) = trace.as_mut() {
            let line = serde_json::json!({
                "request": request.describe(),
                "lyre": [a.0, String::from_utf8_lossy(&a.1)],
                "reference": [b.0, String::from_utf8_lossy(&b.1)],
            });
            writeln!(out, "{line}")?;
        }
        report.record(&request, a, b, &allow);
    }
    Ok(report)
}
