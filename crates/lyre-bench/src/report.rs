//! Reports: a human table per round, medians with min–max spread per server, and
//! the ratio of the first server's medians to the second's; also as JSON.

use std::path::Path;

use comfy_table::{Table, presets::UTF8_BORDERS_ONLY};
use serde::Serialize;

use crate::stats::{Measurement, Spread};
use crate::target::{Target, ThreadCpu};

/// Medians over rounds for one server.
#[derive(Debug, Clone, Serialize)]
pub struct TargetSummary {
    /// The server.
    pub target: String,
    /// Records per second.
    pub items_per_sec: Spread,
    /// Requests per second.
    pub requests_per_sec: Spread,
    /// Median latency (µs).
    pub p50_us: Spread,
    /// 99th-percentile latency (µs).
    pub p99_us: Spread,
    /// Server CPU µs per request, when measured.
    pub cpu_us_per_request: Option<Spread>,
    /// Peak server memory (KiB), when measured.
    pub peak_rss_kib: Option<f64>,
    /// Server CPU µs per request by what its threads do (each part's median), when
    /// measured.
    pub cpu_us_by_thread: Option<ThreadCpu>,
}

/// The whole summary: per server, and first/second ratios of the medians.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// The workload.
    pub workload: String,
    /// Per server.
    pub targets: Vec<TargetSummary>,
    /// First server's throughput median over the second's (higher is better).
    pub throughput_ratio: Option<f64>,
    /// Second server's p99 median over the first's (higher is better for the first).
    pub p99_ratio: Option<f64>,
    /// Per-round throughput ratios first/second, to show the spread.
    pub round_throughput_ratios: Vec<f64>,
}

/// Medians and ratios of `measurements`.
pub fn summarize(measurements: &[Measurement], targets: &[Target]) -> Summary {
    let per_target: Vec<TargetSummary> = targets
        .iter()
        .filter_map(|t| {
            let mine: Vec<&Measurement> = measurements.iter().filter(|m| m.target == t.name).collect();
            let spread = |f: &dyn Fn(&Measurement) -> f64| Spread::of(&mine.iter().map(|m| f(m)).collect::<Vec<_>>());
            let cpu: Vec<f64> = mine.iter().filter_map(|m| m.server.map(|s| s.cpu_us_per_request)).collect();
            let cpu_us_by_thread = median_by_thread(&mine);
            Some(TargetSummary {
                target: t.name.clone(),
                items_per_sec: spread(&|m| m.items_per_sec)?,
                requests_per_sec: spread(&|m| m.requests_per_sec)?,
                p50_us: spread(&|m| m.latency.p50_us as f64)?,
                p99_us: spread(&|m| m.latency.p99_us as f64)?,
                cpu_us_per_request: Spread::of(&cpu),
                peak_rss_kib: mine.iter().filter_map(|m| m.server.map(|s| s.peak_rss_kib as f64)).reduce(f64::max),
                cpu_us_by_thread,
            })
        })
        .collect();
    let (throughput_ratio, p99_ratio) = match per_target.as_slice() {
        [a, b] => {
            (Some(a.items_per_sec.median / b.items_per_sec.median), Some(b.p99_us.median / a.p99_us.median.max(1.0)))
        }
        _ => (None, None),
    };
    let mut round_throughput_ratios = Vec::new();
    if let [a, b] = targets {
        let rounds = measurements.iter().map(|m| m.round).max().map_or(0, |r| r + 1);
        for round in 0..rounds {
            let find = |name: &str| measurements.iter().find(|m| m.round == round && m.target == name);
            if let (Some(x), Some(y)) = (find(&a.name), find(&b.name)) {
                round_throughput_ratios.push(x.items_per_sec / y.items_per_sec);
            }
        }
    }
    Summary {
        workload: measurements.first().map(|m| m.workload.clone()).unwrap_or_default(),
        targets: per_target,
        throughput_ratio,
        p99_ratio,
        round_throughput_ratios,
    }
}

/// Each part of the server's CPU by thread, its median over `measurements`; `None`
/// when the server's CPU was not measured.
fn median_by_thread(measurements: &[&Measurement]) -> Option<ThreadCpu> {
    let part = |f: fn(&ThreadCpu) -> f64| {
        let values: Vec<f64> = measurements.iter().filter_map(|m| m.server.map(|s| f(&s.cpu_us_by_thread))).collect();
        Spread::of(&values).map(|s| s.median)
    };
    Some(ThreadCpu {
        request: part(|t| t.request)?,
        writer: part(|t| t.writer)?,
        javascript: part(|t| t.javascript)?,
        other: part(|t| t.other)?,
    })
}

/// Prints the per-round table and the summary.
pub fn print(measurements: &[Measurement], summary: &Summary) {
    let mut rounds = Table::new();
    rounds.load_preset(UTF8_BORDERS_ONLY).set_header([
        "round",
        "server",
        "records/s",
        "req/s",
        "p50 µs",
        "p90 µs",
        "p99 µs",
        "p99.9 µs",
        "errors",
        "server CPU µs/req",
        "server CPU %",
        "load CPU %",
        "peak RSS MiB",
    ]);
    for m in measurements {
        rounds.add_row([
            m.round.to_string(),
            m.target.clone(),
            format!("{:.0}", m.items_per_sec),
            format!("{:.0}", m.requests_per_sec),
            m.latency.p50_us.to_string(),
            m.latency.p90_us.to_string(),
            m.latency.p99_us.to_string(),
            m.latency.p999_us.to_string(),
            m.errors.to_string(),
            m.server.map_or("-".into(), |s| format!("{:.1}", s.cpu_us_per_request)),
            m.server_cpu_share().map_or("-".into(), |c| format!("{:.0}", c * 100.0)),
            m.load_cpu_share.map_or("-".into(), |c| format!("{:.0}", c * 100.0)),
            m.server.map_or("-".into(), |s| format!("{:.1}", s.peak_rss_kib as f64 / 1024.0)),
        ]);
    }
    println!("{}\n{rounds}", summary.workload);
    let mut medians = Table::new();
    medians.load_preset(UTF8_BORDERS_ONLY).set_header([
        "server",
        "records/s median (min–max)",
        "p50 µs",
        "p99 µs median (min–max)",
        "CPU µs/req",
    ]);
    for t in &summary.targets {
        medians.add_row([
            t.target.clone(),
            format!("{:.0} ({:.0}–{:.0})", t.items_per_sec.median, t.items_per_sec.min, t.items_per_sec.max),
            format!("{:.0}", t.p50_us.median),
            format!("{:.0} ({:.0}–{:.0})", t.p99_us.median, t.p99_us.min, t.p99_us.max),
            t.cpu_us_per_request.map_or("-".into(), |c| format!("{:.1}", c.median)),
        ]);
    }
    println!("{medians}");
    for t in &summary.targets {
        // Only a server whose threads carry Lyre's names can be told apart.
        if let Some(by) = t.cpu_us_by_thread.filter(|by| by.request + by.writer + by.javascript > 0.0) {
            println!(
                "{} CPU µs/req by thread (medians): request {:.1}, writer {:.1}, javascript {:.1}, other {:.1}",
                t.target, by.request, by.writer, by.javascript, by.other
            );
        }
    }
    if let (Some(throughput), Some(p99)) = (summary.throughput_ratio, summary.p99_ratio) {
        let rounds: Vec<String> = summary.round_throughput_ratios.iter().map(|r| format!("{r:.2}")).collect();
        println!("throughput ratio (first/second, medians): {throughput:.2}x   per round: [{}]", rounds.join(", "));
        println!("p99 ratio (second/first, medians): {p99:.2}x");
    }
}

/// A TTL churn run: each server's database size (MiB) at each sample, records
/// written by then, and its peak and last size.
pub fn print_churn(series: &[crate::workload::churn::Series]) {
    let mib = |bytes: u64| format!("{:.1}", bytes as f64 / (1024.0 * 1024.0));
    let mut table = Table::new();
    let mut header = vec!["s".to_string()];
    for s in series {
        header.push(format!("{} MiB", s.server));
        header.push(format!("{} written", s.server));
    }
    table.load_preset(UTF8_BORDERS_ONLY).set_header(header);
    let samples = series.iter().map(|s| s.points.len()).min().unwrap_or(0);
    for i in 0..samples {
        let mut row = vec![format!("{:.0}", series[0].points[i].0)];
        for s in series {
            row.push(mib(s.points[i].1));
            row.push(s.points[i].2.to_string());
        }
        table.add_row(row);
    }
    println!("ttl-churn\n{table}");
    for s in series {
        let peak = s.points.iter().map(|p| p.1).max().unwrap_or(0);
        let last = s.points.last().map_or(0, |p| p.1);
        println!(
            "{}: writes took {:.0} s, {} failed; peak {} MiB, last {} MiB",
            s.server,
            s.writing_s,
            s.errors,
            mib(peak),
            mib(last)
        );
    }
}

/// Writes the measurements and summary as JSON.
pub fn write_json(
    path: &Path,
    params: &serde_json::Value,
    measurements: &[Measurement],
    summary: &Summary,
) -> anyhow::Result<()> {
    let document = serde_json::json!({"params": params, "measurements": measurements, "summary": summary});
    std::fs::write(path, serde_json::to_vec_pretty(&document)?)?;
    Ok(())
}
