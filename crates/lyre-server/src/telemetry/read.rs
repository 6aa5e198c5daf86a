//! `read_log`'s reading of the log file: entries filtered by level, time and text,
//! paged by `start` and `limit`, oldest or newest first.
//!
//! The file is read line by line, each line at most [`MESSAGE_BYTES`]; the entries
//! skipped by `start` are counted, not kept; at most `limit` entries and
//! [`ANSWER_BYTES`] of messages are held. Newest first takes two passes: one counts
//! the matching entries, the next keeps the ones the page covers. So memory stays
//! bounded whatever the file's size or contents.

use std::io::{BufRead, Read as _};
use std::path::Path;

use super::line::parse_header;

/// Longest message kept of one entry (the rest is cut, marked with `…`).
pub const MESSAGE_BYTES: usize = 64 * 1024;
/// Most bytes of messages one answer holds; a page that would pass it ends early
/// (the next page starts where it ended).
pub const ANSWER_BYTES: usize = 32 << 20;

/// Which entries to read.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LogQuery {
    /// Matching entries skipped first.
    pub start: usize,
    /// Matching entries answered at most.
    pub limit: usize,
    /// Only entries of this level (exactly, as Harper filters).
    pub level: Option<String>,
    /// Only entries at or after this time (ms since the epoch).
    pub from: Option<f64>,
    /// Only entries at or before this time.
    pub until: Option<f64>,
    /// Only entries whose message contains this text.
    pub filter: Option<String>,
    /// Newest first.
    pub descending: bool,
}

/// One entry, in Harper's shape.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Entry {
    /// When, as written (ISO 8601).
    pub timestamp: String,
    /// The thread that logged it.
    pub thread: String,
    /// Its level.
    pub level: String,
    /// Its tags.
    pub tags: Vec<String>,
    /// Its message, over several lines where it ran over several.
    pub message: String,
    #[serde(skip)]
    time: f64,
}

impl LogQuery {
    fn matches(&self, entry: &Entry) -> bool {
        self.level.as_ref().is_none_or(|level| *level == entry.level)
            && self.from.is_none_or(|from| entry.time >= from)
            && self.until.is_none_or(|until| entry.time <= until)
            && self.filter.as_ref().is_none_or(|text| entry.message.contains(text.as_str()))
    }
}

/// The entries of the log file at `path` that `query` asks for (none when the file
/// does not exist yet).
pub fn read_log(path: &Path, query: &LogQuery) -> std::io::Result<Vec<Entry>> {
    if !path.exists() {
        return Ok(Vec::new());
    }
    // The page as a range of matching entries, oldest first: `start` on from the
    // oldest, or, newest first, the `limit` before the newest `start`.
    let (skip, wanted) = if query.descending {
        let mut matching = 0usize;
        each_entry(path, &mut |entry| {
            matching += usize::from(query.matches(&entry));
            true
        })?;
        let skip = matching.saturating_sub(query.start.saturating_add(query.limit));
        (skip, matching.saturating_sub(query.start).saturating_sub(skip))
    } else {
        (query.start, query.limit)
    };
    let (mut seen, mut kept, mut bytes) = (0usize, Vec::new(), 0usize);
    if wanted == 0 {
        return Ok(kept);
    }
    each_entry(path, &mut |entry| {
        if !query.matches(&entry) {
            return true;
        }
        seen += 1;
        if seen <= skip {
            return true;
        }
        bytes += entry.message.len();
        if bytes > ANSWER_BYTES && !kept.is_empty() {
            return false;
        }
        kept.push(entry);
        kept.len() < wanted
    })?;
    if query.descending {
        kept.reverse();
    }
    Ok(kept)
}

/// Calls `each` with every entry of the file in order until it answers false.
fn each_entry(path: &Path, each: &mut dyn FnMut(Entry) -> bool) -> std::io::Result<()> {
    let mut reader = std::io::BufReader::new(std::fs::File::open(path)?);
    let mut current: Option<Entry> = None;
    let mut bytes = Vec::new();
    loop {
        bytes.clear();
        if !read_line_capped(&mut reader, &mut bytes)? {
            break;
        }
        let text = String::from_utf8_lossy(&bytes);
        let line = text.trim_end_matches(['\n', '\r']);
        match parse_header(line) {
            Some(header) => {
                let mut message = String::new();
                append(&mut message, header.message);
                let entry = Entry {
                    timestamp: header.timestamp.to_string(),
                    thread: header.thread.to_string(),
                    level: header.level.to_string(),
                    tags: header.tags.iter().map(|t| t.to_string()).collect(),
                    message,
                    time: header.time,
                };
                if let Some(done) = current.replace(entry)
                    && !each(done)
                {
                    return Ok(());
                }
            }
            None => {
                if let Some(entry) = current.as_mut() {
                    append(&mut entry.message, "\n");
                    append(&mut entry.message, line);
                }
            }
        }
    }
    if let Some(last) = current {
        each(last);
    }
    Ok(())
}

/// Reads one line into `line`, at most [`MESSAGE_BYTES`] of it (the rest is read
/// and dropped); false at the end of the file.
fn read_line_capped(reader: &mut impl BufRead, line: &mut Vec<u8>) -> std::io::Result<bool> {
    let read = reader.by_ref().take(MESSAGE_BYTES as u64 + 1).read_until(b'\n', line)?;
    if read == 0 {
        return Ok(false);
    }
    if line.last() != Some(&b'\n') && line.len() > MESSAGE_BYTES {
        // Too long: drop the rest of it.
        let mut rest = Vec::new();
        while reader.by_ref().take(MESSAGE_BYTES as u64).read_until(b'\n', &mut rest)? > 0 {
            if rest.last() == Some(&b'\n') {
                break;
            }
            rest.clear();
        }
    }
    Ok(true)
}

/// Adds `text` to a message, within [`MESSAGE_BYTES`].
fn append(message: &mut String, text: &str) {
    if message.len() >= MESSAGE_BYTES {
        return;
    }
    let room = MESSAGE_BYTES - message.len();
    if text.len() <= room {
        message.push_str(text);
    } else {
        let cut = (0..=room).rev().find(|at| text.is_char_boundary(*at)).unwrap_or(0);
        message.push_str(&text[..cut]);
        message.push('…');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &str = "\
2026-12-02T08:00:00.000Z [main] [info] [lyre_server::listen]: Lyre is running
2026-12-02T08:00:01.000Z [lyre-worker] [warn] [lyre_server::http]: slow client
2026-12-02T08:00:02.000Z [lyre-worker] [error] [lyre_core::db]: a write failed
  caused by: disk full
2026-12-02T08:00:03.000Z [lyre-worker] [info] [lyre_server::http]: another slow client
";

    fn read(query: LogQuery) -> Vec<String> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lyre.log");
        std::fs::write(&path, LOG).unwrap();
        read_log(&path, &query).unwrap().into_iter().map(|e| format!("{} {}", e.level, e.message)).collect()
    }

    fn all() -> LogQuery {
        LogQuery { limit: 1000, ..LogQuery::default() }
    }

    #[test]
    fn entries_filter_by_level_time_and_text_and_keep_their_continuation_lines() {
        assert_eq!(read(all()).len(), 4);
        assert_eq!(
            read(LogQuery { level: Some("error".into()), ..all() }),
            ["error a write failed\n  caused by: disk full"]
        );
        let from = chrono::DateTime::parse_from_rfc3339("2026-12-02T08:00:01Z").unwrap().timestamp_millis() as f64;
        let until = from + 1_000.0;
        assert_eq!(read(LogQuery { from: Some(from), until: Some(until), ..all() }).len(), 2, "both bounds inclusive");
        assert_eq!(
            read(LogQuery { filter: Some("slow".into()), ..all() }),
            ["warn slow client", "info another slow client"]
        );
    }

    #[test]
    fn start_and_limit_page_from_either_end() {
        assert_eq!(
            read(LogQuery { start: 1, limit: 2, ..all() }),
            ["warn slow client", "error a write failed\n  caused by: disk full"]
        );
        assert_eq!(
            read(LogQuery { limit: 2, descending: true, ..all() }),
            ["info another slow client", "error a write failed\n  caused by: disk full"]
        );
        assert_eq!(read(LogQuery { start: 3, limit: 5, descending: true, ..all() }), ["info Lyre is running"]);
        assert_eq!(
            read(LogQuery { start: 1, limit: 2, descending: true, ..all() }),
            ["error a write failed\n  caused by: disk full", "warn slow client"]
        );
        assert_eq!(read(LogQuery { start: 9, limit: 2, ..all() }), Vec::<String>::new());
    }

    #[test]
    fn a_long_message_or_line_is_cut() {
        let mut message = String::from("first");
        for _ in 0..100 {
            append(&mut message, "\n");
            append(&mut message, &"é".repeat(1_000));
        }
        assert!(message.len() <= MESSAGE_BYTES + '…'.len_utf8() + 1, "{}", message.len());
        assert!(message.ends_with('…'));
        // One line of 1 MiB, then an entry: the line is cut, the entry still found.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lyre.log");
        let long = format!("2026-12-02T08:00:00.000Z [main] [info] [x]: {}\n", "y".repeat(1 << 20));
        std::fs::write(&path, format!("{long}{LOG}")).unwrap();
        let entries = read_log(&path, &all()).unwrap();
        assert_eq!(entries.len(), 5);
        assert!(entries[0].message.len() <= MESSAGE_BYTES + 3);
        assert_eq!(entries[1].message, "Lyre is running");
    }
}
