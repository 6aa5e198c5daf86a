//! Logging through `tracing`, to stderr and to `<root>/log/lyre.log` in Harper's
//! line format (`line.rs`), which `read_log` reads back (`read.rs`).

mod line;
pub mod read;

/// The log file's name, under `<root>/log/`.
pub const LOG_FILE: &str = "lyre.log";

use std::path::Path;

use tracing_appender::non_blocking::WorkerGuard;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// Installs the global subscriber. Keep the guard alive: dropping it flushes and
/// stops the file writer.
pub fn init(log_dir: &Path, level: &str) -> std::io::Result<WorkerGuard> {
    std::fs::create_dir_all(log_dir)?;
    let level = match level {
        // Harper's levels that tracing lacks.
        "fatal" | "notify" => "error",
        other => other,
    };
    let filter =
        || EnvFilter::try_new(format!("{level},h2=warn,hyper=warn")).unwrap_or_else(|_| EnvFilter::new("info"));
    let file = tracing_appender::rolling::never(log_dir, LOG_FILE);
    let (writer, guard) = tracing_appender::non_blocking(file);
    let result = tracing_subscriber::registry()
        .with(tracing_subscriber::fmt::layer().with_writer(std::io::stderr).with_filter(filter()))
        .with(
            tracing_subscriber::fmt::layer()
                .with_ansi(false)
                .event_format(line::HarperLines)
                .with_writer(writer)
                .with_filter(filter()),
        )
        .try_init();
    if let Err(err) = result {
        eprintln!("logging was already initialised: {err}");
    }
    Ok(guard)
}

use tracing_subscriber::Layer as _;
