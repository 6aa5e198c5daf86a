//! The log file's line format, Harper's: `<ISO time> [<thread>] [<level>]
//! [<target>]: <message> <fields>`, written by [`HarperLines`] and read back by
//! [`parse_header`] (`read_log`). A message may run over several lines; an entry
//! ends where the next header begins.

use std::fmt;

use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// Formats events as Harper's log lines.
pub struct HarperLines;

impl<S, N> FormatEvent<S, N> for HarperLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(&self, ctx: &FmtContext<'_, S, N>, mut writer: Writer<'_>, event: &Event<'_>) -> fmt::Result {
        let time = chrono::Utc::now().format("%Y-%m-%dT%H:%M:%S%.3fZ");
        let thread = std::thread::current();
        let level = event.metadata().level().as_str().to_ascii_lowercase();
        let target = event.metadata().target();
        write!(writer, "{time} [{}] [{level}] [{target}]: ", thread.name().unwrap_or("main"))?;
        ctx.field_format().format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}

/// A log entry's header, parsed.
#[derive(Debug, Clone, PartialEq)]
pub struct Header<'a> {
    /// When, in ms since the epoch.
    pub time: f64,
    /// The time as written.
    pub timestamp: &'a str,
    /// The thread that logged it.
    pub thread: &'a str,
    /// Its level (`info`, `warn`, ...).
    pub level: &'a str,
    /// Its tags (the module that logged it).
    pub tags: Vec<&'a str>,
    /// The message's first line.
    pub message: &'a str,
}

/// The header of an entry starting on `line`, or `None` when `line` continues the
/// previous entry's message.
pub fn parse_header(line: &str) -> Option<Header<'_>> {
    let (timestamp, rest) = line.split_once(' ')?;
    if timestamp.len() < 20 || !timestamp.ends_with('Z') || !timestamp.as_bytes()[0].is_ascii_digit() {
        return None;
    }
    let time = chrono::DateTime::parse_from_rfc3339(timestamp).ok()?.timestamp_millis() as f64;
    let (brackets, message) = rest.strip_prefix('[')?.split_once("]: ")?;
    let mut parts = brackets.split("] [");
    let thread = parts.next()?;
    let level = parts.next()?;
    Some(Header { time, timestamp, thread, level, tags: parts.collect(), message })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_parse_and_other_lines_continue_a_message() {
        let header =
            parse_header("2026-12-02T08:00:01.250Z [lyre-worker] [warn] [lyre_server::listen]: slow start x=1")
                .expect("a header");
        assert_eq!(header.time, 1_796_198_401_250.0);
        assert_eq!((header.thread, header.level), ("lyre-worker", "warn"));
        assert_eq!(header.tags, ["lyre_server::listen"]);
        assert_eq!(header.message, "slow start x=1");
        let harper =
            parse_header("2023-03-09T14:25:05.269Z [main/0] [notify]: HarperDB successfully started.").unwrap();
        assert_eq!((harper.thread, harper.level, harper.tags.len()), ("main/0", "notify", 0));
        for line in ["  at frame", "", "2026-12-02 not a header", "2026-12-02T08:00:01.250Z no brackets"] {
            assert_eq!(parse_header(line), None, "{line}");
        }
    }
}
