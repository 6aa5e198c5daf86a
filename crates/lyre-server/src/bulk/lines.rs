//! Line numbers of CSV records, kept beside the CSV reader.
//!
//! The `csv` crate's record positions count a record's line before the blank lines
//! it skips to reach it, and its byte offsets point at those blank lines, so neither
//! names the line a user sees. [`Lines`] wraps the source and remembers where each
//! line ends; [`Lines::line_of`] turns a record's byte offset into the line its
//! first character is on. Only the line ends after the record being read are kept.
//!
//! The reader builds a whole record before it returns it, so an unclosed quote would
//! make the rest of the document one record held in memory: a record longer than
//! [`MAX_RECORD_BYTES`] fails the read instead, naming its line.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::io::Read;
use std::rc::Rc;

/// The most bytes one record may take (with the read-ahead before it is returned).
pub const MAX_RECORD_BYTES: u64 = 16 << 20;

/// Line ends kept at most (16 bytes each): enough for a read-ahead of short lines.
const MAX_KEPT_ENDS: usize = 1 << 16;

/// The line ends seen so far: those still needed, and how many came before them.
#[derive(Default)]
struct Ends {
    /// Where the last record numbered starts (the next one starts after it).
    record_start: u64,
    /// Offsets of `\n` bytes not yet passed, each with whether a `\r` precedes it.
    kept: VecDeque<(u64, bool)>,
    /// Line ends before the first kept one.
    passed: u64,
    /// Bytes read so far.
    read: u64,
    /// Whether the last byte read was `\r`.
    after_cr: bool,
}

/// A source that notes its line ends as the CSV reader reads it.
pub struct Tracked<R> {
    inner: R,
    ends: Rc<RefCell<Ends>>,
}

/// The numbering side of a [`Tracked`] source.
pub struct Lines {
    ends: Rc<RefCell<Ends>>,
}

/// Wraps `source`; the [`Lines`] numbers what the reader of the [`Tracked`] reads.
pub fn track<R: Read>(source: R) -> (Tracked<R>, Lines) {
    let ends = Rc::new(RefCell::new(Ends::default()));
    (Tracked { inner: source, ends: ends.clone() }, Lines { ends })
}

impl<R: Read> Read for Tracked<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let ends = self.ends.borrow_mut();
        if ends.read.saturating_sub(ends.record_start) > MAX_RECORD_BYTES {
            let line = ends.passed + 1;
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("a record after line {line} runs over {} MiB (an unclosed quote?)", MAX_RECORD_BYTES >> 20),
            ));
        }
        drop(ends);
        let n = self.inner.read(buf)?;
        let mut ends = self.ends.borrow_mut();
        for (i, byte) in buf[..n].iter().enumerate() {
            if *byte == b'\n' {
                let crlf = if i == 0 { ends.after_cr } else { buf[i - 1] == b'\r' };
                let offset = ends.read + i as u64;
                ends.kept.push_back((offset, crlf));
                if ends.kept.len() > MAX_KEPT_ENDS {
                    // Inside a record of very many lines: its oldest ends come before
                    // any record still to be numbered, so they can be counted now.
                    ends.kept.pop_front();
                    ends.passed += 1;
                }
            }
        }
        if n > 0 {
            ends.after_cr = buf[n - 1] == b'\r';
        }
        ends.read += n as u64;
        Ok(n)
    }
}

impl Lines {
    /// The line (from 1) of the first character of the record that the reader found
    /// starting at byte `start` (blank lines before it passed over). Records must be
    /// numbered in order: the line ends before this one are forgotten.
    pub fn line_of(&self, start: u64) -> u64 {
        let mut ends = self.ends.borrow_mut();
        ends.record_start = start;
        // Forget the ends before `start`, counting them.
        while ends.kept.front().is_some_and(|(offset, _)| *offset < start) {
            ends.kept.pop_front();
            ends.passed += 1;
        }
        // Pass the blank lines the reader skipped: `\n` or `\r\n` right at `first`.
        let mut first = start;
        while let Some(&(offset, crlf)) = ends.kept.front() {
            if offset == first || (crlf && offset == first + 1) {
                first = offset + 1;
                ends.kept.pop_front();
                ends.passed += 1;
            } else {
                break;
            }
        }
        ends.passed + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The line of each record, by the csv reader's byte offsets.
    fn lines(text: &str) -> Vec<u64> {
        let (source, lines) = track(text.as_bytes());
        let mut reader = csv::ReaderBuilder::new().has_headers(false).flexible(true).from_reader(source);
        let mut row = csv::ByteRecord::new();
        let mut out = Vec::new();
        while reader.read_byte_record(&mut row).unwrap() {
            out.push(lines.line_of(row.position().map_or(0, csv::Position::byte)));
        }
        out
    }

    #[test]
    fn records_are_numbered_by_the_line_they_start_on() {
        assert_eq!(lines("id,name\n1,a\n2,b,extra\n3,c\n\n4\n5,\"x\ny\"\n\n\n6,z"), [1, 2, 3, 4, 6, 7, 11]);
        assert_eq!(lines("id,name\r\n1,a\r\n\r\n2,\"p\r\nq\"\r\n3,c\r\n"), [1, 2, 4, 6]);
        assert_eq!(lines("\n\nid\n1\n"), [3, 4]);
    }

    #[test]
    fn a_record_that_never_ends_fails_the_read_instead_of_filling_memory() {
        // An unclosed quote on line 3: the rest is one endless field.
        let endless = std::io::repeat(b'x').take(2 * MAX_RECORD_BYTES);
        let source = std::io::Cursor::new(b"id,name\n1,a\n2,\"".to_vec()).chain(endless);
        let (source, lines) = track(source);
        let mut reader = csv::ReaderBuilder::new().has_headers(false).from_reader(source);
        let mut row = csv::ByteRecord::new();
        let mut failure = None;
        loop {
            match reader.read_byte_record(&mut row) {
                Ok(true) => _ = lines.line_of(row.position().map_or(0, csv::Position::byte)),
                Ok(false) => break,
                Err(err) => {
                    failure = Some(err.to_string());
                    break;
                }
            }
        }
        let failure = failure.expect("the read fails");
        assert!(failure.contains("a record after line 2 runs over 16 MiB (an unclosed quote?)"), "{failure}");
    }

    #[test]
    fn line_ends_read_one_byte_at_a_time_count_the_same() {
        struct Trickle<'a>(&'a [u8]);
        impl Read for Trickle<'_> {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                let Some((first, rest)) = self.0.split_first() else { return Ok(0) };
                buf[0] = *first;
                self.0 = rest;
                Ok(1)
            }
        }
        let text = "id,name\r\n1,a\r\n\r\n2,\"p\r\nq\"\r\n3,c\r\n";
        let (source, lines) = track(Trickle(text.as_bytes()));
        let mut reader = csv::ReaderBuilder::new().has_headers(false).from_reader(source);
        let mut row = csv::ByteRecord::new();
        let mut out = Vec::new();
        while reader.read_byte_record(&mut row).unwrap() {
            out.push(lines.line_of(row.position().map_or(0, csv::Position::byte)));
        }
        assert_eq!(out, [1, 2, 4, 6]);
    }
}
