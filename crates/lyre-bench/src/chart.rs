//! A PNG chart of comparison results: throughput and p99 latency per workload, one
//! bar per server.

use std::path::Path;

use plotters::prelude::*;
use plotters::style::{FontStyle, register_font};

/// One workload's medians for each server, read from a result file.
pub struct Row {
    /// The workload.
    pub workload: String,
    /// `(server, throughput median, p99 median in ms)`.
    pub servers: Vec<(String, f64, f64)>,
}

/// Reads the rows from `--json` result files.
pub fn read(files: &[std::path::PathBuf]) -> anyhow::Result<Vec<Row>> {
    let mut rows = Vec::new();
    for file in files {
        let document: serde_json::Value = serde_json::from_slice(&std::fs::read(file)?)?;
        let summary = &document["summary"];
        let servers = summary["targets"]
            .as_array()
            .map(|targets| {
                targets
                    .iter()
                    .map(|t| {
                        let name = t["target"].as_str().unwrap_or("?").to_string();
                        (
                            name,
                            t["items_per_sec"]["median"].as_f64().unwrap_or(0.0),
                            t["p99_us"]["median"].as_f64().unwrap_or(0.0) / 1000.0,
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        rows.push(Row { workload: summary["workload"].as_str().unwrap_or("?").to_string(), servers });
    }
    Ok(rows)
}

const FONT: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";
const COLORS: [RGBColor; 3] = [RGBColor(31, 119, 180), RGBColor(255, 127, 14), RGBColor(44, 160, 44)];

/// Makes the font the charts write with available to plotters.
fn register() -> anyhow::Result<()> {
    let font =
        std::fs::read(FONT).map_err(|e| anyhow::anyhow!("the chart needs the DejaVu Sans font at {FONT}: {e}"))?;
    register_font("sans-serif", FontStyle::Normal, Box::leak(font.into_boxed_slice()))
        .map_err(|_| anyhow::anyhow!("{FONT} is not a usable font"))
}

/// Draws the chart into `out` (PNG).
pub fn draw(rows: &[Row], out: &Path) -> anyhow::Result<()> {
    register()?;
    let root = BitMapBackend::new(out, (1200, 900)).into_drawing_area();
    root.fill(&WHITE)?;
    let (top, bottom) = root.split_vertically(450);
    panel(&top, rows, "throughput (records/s, median; ratio first/second above)", Scale::Linear, |s| s.1)?;
    panel(&bottom, rows, "p99 latency (ms, median, log scale)", Scale::Log, |s| s.2)?;
    root.present()?;
    Ok(())
}

/// How a panel's values map to bar heights.
#[derive(Clone, Copy)]
enum Scale {
    Linear,
    /// Bars of log10 of the value, so sub-millisecond and second-long latencies are
    /// both readable.
    Log,
}

impl Scale {
    fn height(self, value: f64) -> f64 {
        match self {
            Scale::Linear => value,
            Scale::Log => value.max(LOG_FLOOR).log10(),
        }
    }

    fn label(self, height: f64) -> String {
        match self {
            Scale::Linear => format!("{height:.0}"),
            Scale::Log => {
                let value = 10f64.powf(height);
                if value < 1.0 { format!("{value:.2}") } else { format!("{value:.0}") }
            }
        }
    }
}

/// The smallest latency (ms) the log scale shows.
const LOG_FLOOR: f64 = 0.01;

fn panel(
    area: &DrawingArea<BitMapBackend<'_>, plotters::coord::Shift>,
    rows: &[Row],
    title: &str,
    scale: Scale,
    value: impl Fn(&(String, f64, f64)) -> f64,
) -> anyhow::Result<()> {
    let heights = rows.iter().flat_map(|r| r.servers.iter().map(|s| scale.height(value(s))));
    let (low, high) = match scale {
        Scale::Linear => (0.0, heights.fold(0.0f64, f64::max).max(1.0) * 1.15),
        Scale::Log => {
            let (min, max) = heights.fold((f64::MAX, f64::MIN), |(lo, hi), h| (lo.min(h), hi.max(h)));
            if min > max { (-1.0, 1.0) } else { ((min - 0.5).floor(), max + 0.5) }
        }
    };
    let servers = rows.iter().map(|r| r.servers.len()).max().unwrap_or(1).max(1);
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 22))
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(80)
        .build_cartesian_2d(0f64..rows.len().max(1) as f64, low..high)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(rows.len().max(1) * 2 + 1)
        .x_label_formatter(&|x| {
            let i = x.floor() as usize;
            if (x - x.floor() - 0.5).abs() < 0.01 {
                rows.get(i).map(|r| r.workload.clone()).unwrap_or_default()
            } else {
                String::new()
            }
        })
        .y_label_formatter(&|y| scale.label(*y))
        .label_style(("sans-serif", 14))
        .draw()?;
    let width = 0.8 / servers as f64;
    for (i, row) in rows.iter().enumerate() {
        for (j, server) in row.servers.iter().enumerate() {
            let x0 = i as f64 + 0.1 + j as f64 * width;
            let color = COLORS[j % COLORS.len()];
            let bar = chart.draw_series(std::iter::once(Rectangle::new(
                [(x0, low), (x0 + width * 0.9, scale.height(value(server)))],
                color.filled(),
            )))?;
            if i == 0 {
                // One legend entry per server, not one per workload.
                bar.label(server.0.clone())
                    .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], color.filled()));
            }
        }
        if let (Scale::Linear, [first, second, ..]) = (scale, row.servers.as_slice())
            && second.1 > 0.0
        {
            let top = scale.height(value(first)).max(scale.height(value(second)));
            chart.draw_series(std::iter::once(Text::new(
                format!("{:.1}×", first.1 / second.1),
                (i as f64 + 0.35, top + (high - low) * 0.03),
                ("sans-serif", 15),
            )))?;
        }
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .label_font(("sans-serif", 14))
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .draw()?;
    Ok(())
}

/// Draws throughput against the client count of each result file (its
/// `params.clients`: subscribers, say), one line per server, into `out` (PNG).
pub fn draw_sweep(files: &[std::path::PathBuf], out: &Path) -> anyhow::Result<()> {
    let rows = read(files)?;
    let mut series: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
    for (file, row) in files.iter().zip(&rows) {
        let document: serde_json::Value = serde_json::from_slice(&std::fs::read(file)?)?;
        let clients = document["params"]["clients"]
            .as_f64()
            .ok_or_else(|| anyhow::anyhow!("{} has no params.clients", file.display()))?;
        for (server, throughput, _) in &row.servers {
            match series.iter_mut().find(|(name, _)| name == server) {
                Some((_, points)) => points.push((clients, *throughput)),
                None => series.push((server.clone(), vec![(clients, *throughput)])),
            }
        }
    }
    let labels = ("deliveries/s (median) against subscribers", "subscribers", "deliveries/s");
    draw_lines(&mut series, labels, out)
}

/// Draws each server's database size (MiB) against time over a TTL churn run.
pub fn draw_churn(runs: &[crate::workload::churn::Series], out: &Path) -> anyhow::Result<()> {
    let mut series: Vec<(String, Vec<(f64, f64)>)> = runs
        .iter()
        .map(|run| {
            let points = run.points.iter().map(|(t, bytes, _)| (*t, *bytes as f64 / (1024.0 * 1024.0))).collect();
            (run.server.clone(), points)
        })
        .collect();
    let labels = ("database size on disk during TTL churn (10 s expiration and eviction)", "seconds", "MiB");
    draw_lines(&mut series, labels, out)
}

/// Draws queries per second against recall@10 (vector search), one line per
/// server, each point a search breadth.
pub fn draw_tradeoff(series: &mut [(String, Vec<(f64, f64)>)], out: &Path) -> anyhow::Result<()> {
    draw_lines(
        series,
        ("vector search: queries/s against recall@10 (each point one ef)", "recall@10", "queries/s"),
        out,
    )
}

/// Draws one line per named series of `(x, y)` points into `out` (PNG), with
/// `labels`: the caption, the x axis and the y axis.
fn draw_lines(
    series: &mut [(String, Vec<(f64, f64)>)],
    (caption, x_desc, y_desc): (&str, &str, &str),
    out: &Path,
) -> anyhow::Result<()> {
    let max_x = series.iter().flat_map(|(_, p)| p.iter().map(|(x, _)| *x)).fold(1.0f64, f64::max);
    let max_y = series.iter().flat_map(|(_, p)| p.iter().map(|(_, y)| *y)).fold(1.0f64, f64::max);
    register()?;
    let root = BitMapBackend::new(out, (1000, 600)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(caption, ("sans-serif", 22))
        .margin(20)
        .x_label_area_size(40)
        .y_label_area_size(90)
        .build_cartesian_2d(0f64..max_x * 1.05, 0f64..max_y * 1.15)?;
    chart.configure_mesh().x_desc(x_desc).y_desc(y_desc).label_style(("sans-serif", 14)).draw()?;
    for (i, (name, points)) in series.iter_mut().enumerate() {
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        let color = COLORS[i % COLORS.len()];
        chart
            .draw_series(LineSeries::new(points.iter().copied(), color.stroke_width(3)))?
            .label(name.clone())
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color.stroke_width(3)));
        chart.draw_series(points.iter().map(|p| Circle::new(*p, 4, color.filled())))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font(("sans-serif", 14))
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .draw()?;
    root.present()?;
    Ok(())
}
