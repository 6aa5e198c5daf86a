//! `read_log`'s reading of the log file: entries filtered by level, time and text,
//! paged by `start` and `limit`, oldest or newest first.
//!
//! The file is read line by line; at most `start + limit` entries are held (the
//! newest so far, for `desc`), and one entry's message at most
//! [`MESSAGE_BYTES`], so memory stays bounded whatever the file's size.

use std::collections::VecDeque;
use std::io::BufRead;
use std::path::Path;

use super::line::parse_header;

/// Longest message kept of one entry (the rest is cut, marked with `…`).
pub const MESSAGE_BYTES: usize = 64 * 1024;

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
    let file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(err) => return Err(err),
    };
    let wanted = query.start.saturating_add(query.limit);
    let mut kept: VecDeque<Entry> = VecDeque::new();
    let mut current: Option<Entry> = None;
    let mut reader = std::io::BufReader::new(file);
    let mut bytes = Vec::new();
    // Takes a finished entry; false once no more are needed.
    let take = |entry: Entry, kept: &mut VecDeque<Entry>| -> bool {
        if !query.matches(&entry) {
            return true;
        }
        if kept.len() == wanted {
            if !query.descending {
                return false;
            }
            kept.pop_front();
        }
        kept.push_back(entry);
        query.descending || kept.len() < wanted
    };
    loop {
        bytes.clear();
        if reader.read_until(b'\n', &mut bytes)? == 0 {
            break;
        }
        let text = String::from_utf8_lossy(&bytes);
        let line = text.trim_end_matches(['\n', '\r']);
        match parse_header(line) {
            Some(header) => {
                let entry = Entry {
                    timestamp: header.timestamp.to_string(),
                    thread: header.thread.to_string(),
                    level: header.level.to_string(),
                    tags: header.tags.iter().map(|t| t.to_string()).collect(),
                    message: header.message.to_string(),
                    time: header.time,
                };
                if let Some(done) = current.replace(entry)
                    && !take(done, &mut kept)
                {
                    current = None;
                    break;
                }
            }
            None => {
                if let Some(entry) = current.as_mut() {
                    append(&mut entry.message, line);
                }
            }
        }
    }
    if let Some(last) = current {
        take(last, &mut kept);
    }
    let mut entries: Vec<Entry> = kept.into_iter().collect();
    if query.descending {
        entries.reverse();
    }
    Ok(entries.into_iter().skip(query.start).take(query.limit).collect())
}

/// Adds a continuation line to a message, within [`MESSAGE_BYTES`].
fn append(message: &mut String, line: &str) {
    if message.len() >= MESSAGE_BYTES {
        return;
    }
    message.push('\n');
    let room = MESSAGE_BYTES - message.len();
    if line.len() <= room {
        message.push_str(line);
    } else {
        let cut = (0..=room).rev().find(|at| line.is_char_boundary(*at)).unwrap_or(0);
        message.push_str(&line[..cut]);
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
    }

    #[test]
    fn a_long_message_is_cut() {
        let mut message = String::from("first");
        for _ in 0..100 {
            append(&mut message, &"é".repeat(1_000));
        }
        assert!(message.len() <= MESSAGE_BYTES + '…'.len_utf8() + 1, "{}", message.len());
        assert!(message.ends_with('…'));
    }
}
