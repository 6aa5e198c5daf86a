//! A server under test: where it listens, how to log in, which process it is.

use std::time::Duration;

/// A server to measure.
#[derive(Debug, Clone)]
pub struct Target {
    /// A short label for reports (`lyre`, `harper`).
    pub name: String,
    /// The Operations API base URL.
    pub url: String,
    /// The REST interface base URL.
    pub rest: String,
    /// Login name.
    pub user: String,
    /// Password.
    pub password: String,
    /// A header sent instead of Basic credentials (`authorization: Bearer …`,
    /// `cookie: …-hdb-session=…`), as `name: value`.
    pub auth_header: Option<String>,
    /// The server's process id, for CPU time and memory figures.
    pub pid: Option<u32>,
    /// Its MQTT broker's host and port.
    pub mqtt: Option<(String, u16)>,
}

/// Resource use of the server process, read from `/proc`.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct ProcessSample {
    /// User plus system CPU time consumed so far, in seconds.
    pub cpu_seconds: f64,
    /// Peak resident set size so far, in KiB (`VmHWM`).
    pub peak_rss_kib: u64,
    /// Current resident set size, in KiB (`VmRSS`).
    pub rss_kib: u64,
    /// Of which anonymous memory (the heap, stacks), in KiB (`RssAnon`).
    pub rss_anon_kib: u64,
    /// Of which mapped files (a database's map), in KiB (`RssFile`).
    pub rss_file_kib: u64,
}

impl Target {
    /// Samples the server process (all its threads), if its pid is known.
    pub fn sample(&self) -> Option<ProcessSample> {
        ProcessSample::of(self.pid?)
    }

    /// Sums samples over the process and its children (Harper runs under `npm`).
    pub fn sample_tree(&self) -> Option<ProcessSample> {
        let root = self.sample()?;
        let mut total = root;
        for child in children(self.pid?) {
            let t = Target { pid: Some(child), ..self.clone() };
            if let Some(s) = t.sample_tree() {
                total.cpu_seconds += s.cpu_seconds;
                total.peak_rss_kib += s.peak_rss_kib;
                total.rss_kib += s.rss_kib;
                total.rss_anon_kib += s.rss_anon_kib;
                total.rss_file_kib += s.rss_file_kib;
            }
        }
        Some(total)
    }
}

impl ProcessSample {
    /// Samples process `pid` (all its threads) from `/proc`.
    pub fn of(pid: u32) -> Option<ProcessSample> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // Fields after the parenthesised command name; utime and stime are 14 and 15.
        let after = stat.rsplit_once(')')?.1;
        let fields: Vec<&str> = after.split_whitespace().collect();
        let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let kib = |key: &str| {
            status
                .lines()
                .find(|l| l.starts_with(key))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        Some(ProcessSample {
            cpu_seconds: ticks / clock_ticks_per_second(),
            peak_rss_kib: kib("VmHWM:"),
            rss_kib: kib("VmRSS:"),
            rss_anon_kib: kib("RssAnon:"),
            rss_file_kib: kib("RssFile:"),
        })
    }

    /// Samples this process: the load generator itself.
    pub fn of_self() -> Option<ProcessSample> {
        ProcessSample::of(std::process::id())
    }
}

fn children(pid: u32) -> Vec<u32> {
    let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")) else {
        return Vec::new();
    };
    text.split_whitespace().filter_map(|p| p.parse().ok()).collect()
}

/// `sysconf(_SC_CLK_TCK)`: 100 on every Linux this runs on.
fn clock_ticks_per_second() -> f64 {
    100.0
}

/// How long to wait for a server to answer `/health`.
pub const READY_TIMEOUT: Duration = Duration::from_secs(120);
