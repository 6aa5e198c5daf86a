//! How the transaction log's entries are laid out in their LMDB sub-database.
//!
//! An entry of up to [`PART`] bytes is one value under its sequence number (8
//! bytes, big-endian). A larger one, up to [`SPLIT_MAX`], is split into parts of
//! at most [`PART`] bytes under `seq ‖ part` (8 + 4 bytes, big-endian), which
//! sort right after the entry's own key and before the next entry's, so the log
//! still reads in order. An entry larger still (a bulk load's batch) stays whole:
//! writing it as hundreds of parts cost a 1,000-record `insert` a fifth of its
//! throughput, and such entries are freed as long runs that the next one reuses.
//!
//! Why: LMDB keeps a value larger than about half a page in a run of contiguous
//! overflow pages, and a free list fragmented by steady churn (records written,
//! evicted, their log entries pruned) cannot always offer a run that long, so the
//! file kept growing while most of it was free. A part fits in a page and reuses
//! any free one. Entries written whole, before parts existed, read the same.

use std::borrow::Cow;
use std::iter::Peekable;
use std::ops::Bound::{Excluded, Included, Unbounded};

use heed::types::Bytes;
use heed::{RoTxn, RwTxn};

use crate::error::{Error, Result};

/// The log's sub-database: keys and values as raw bytes (see the module docs).
pub(crate) type LogDb = heed::Database<'static, Bytes, Bytes>;

/// The largest value stored under one key: with its 12-byte key and LMDB's node
/// header it stays within a 4 KiB page's limit for values kept in the page
/// (2,038 bytes per node).
pub(crate) const PART: usize = 1_984;

/// The largest entry split into parts; a larger one is stored whole.
pub(crate) const SPLIT_MAX: usize = 64 * 1024;

/// An entry's own key.
fn entry_key(seq: u64) -> [u8; 8] {
    seq.to_be_bytes()
}

/// The key of part `part` of entry `seq`.
fn part_key(seq: u64, part: u32) -> [u8; 12] {
    let mut key = [0u8; 12];
    key[..8].copy_from_slice(&seq.to_be_bytes());
    key[8..].copy_from_slice(&part.to_be_bytes());
    key
}

/// The sequence number a stored key belongs to.
fn seq_of(key: &[u8]) -> Result<u64> {
    match key.len() {
        8 | 12 => Ok(u64::from_be_bytes(key[..8].try_into().map_err(|_| corrupt(key))?)),
        _ => Err(corrupt(key)),
    }
}

/// The part number of a part's key (12 bytes, checked by the caller).
fn part_of(key: &[u8]) -> u32 {
    key.get(8..12).and_then(|b| b.try_into().ok()).map_or(u32::MAX, u32::from_be_bytes)
}

fn corrupt(key: &[u8]) -> Error {
    Error::Corrupt(format!("a transaction log key of {} bytes", key.len()))
}

/// Writes entry `seq` (`bytes`, encoded) after every entry in the log: appended,
/// so log pages fill up instead of splitting in half.
pub(crate) fn append(db: &LogDb, txn: &mut RwTxn<'_>, seq: u64, bytes: &[u8]) -> heed::Result<()> {
    write(db, txn, seq, bytes, heed::PutFlags::APPEND)
}

/// Replaces entry `seq` with `bytes` (anywhere in the log).
pub(crate) fn replace(db: &LogDb, txn: &mut RwTxn<'_>, seq: u64, bytes: &[u8]) -> heed::Result<()> {
    delete(db, txn, seq)?;
    write(db, txn, seq, bytes, heed::PutFlags::empty())
}

fn write(db: &LogDb, txn: &mut RwTxn<'_>, seq: u64, bytes: &[u8], flags: heed::PutFlags) -> heed::Result<()> {
    if bytes.len() <= PART || bytes.len() > SPLIT_MAX {
        return db.put_with_flags(txn, flags, &entry_key(seq), bytes);
    }
    for (part, chunk) in bytes.chunks(PART).enumerate() {
        db.put_with_flags(txn, flags, &part_key(seq, part as u32), chunk)?;
    }
    Ok(())
}

/// Removes entry `seq`, whole or in parts.
pub(crate) fn delete(db: &LogDb, txn: &mut RwTxn<'_>, seq: u64) -> heed::Result<()> {
    db.delete(txn, &entry_key(seq))?;
    let (first, last) = (part_key(seq, 0), part_key(seq, u32::MAX));
    db.delete_range(txn, &(Included(first.as_slice()), Included(last.as_slice())))?;
    Ok(())
}

/// The newest entry: its sequence number and bytes.
pub(crate) fn last<'t>(db: &LogDb, txn: &'t RoTxn<'_>) -> Result<Option<(u64, Cow<'t, [u8]>)>> {
    before(db, txn, u64::MAX)?.next().transpose()
}

/// Entries with sequence number `from` or later, in order.
pub(crate) fn from<'t>(
    db: &LogDb,
    txn: &'t RoTxn<'_>,
    from: u64,
) -> Result<impl Iterator<Item = Result<(u64, Cow<'t, [u8]>)>> + 't> {
    let start = entry_key(from);
    let raw = db.range(txn, &(Included(start.as_slice()), Unbounded))?;
    Ok(Entries { raw: raw.peekable(), newest_first: false })
}

/// Entries with sequence number below `before`, newest first.
pub(crate) fn before<'t>(
    db: &LogDb,
    txn: &'t RoTxn<'_>,
    before: u64,
) -> Result<impl Iterator<Item = Result<(u64, Cow<'t, [u8]>)>> + 't> {
    let end = entry_key(before);
    let raw = db.rev_range(txn, &(Unbounded, Excluded(end.as_slice())))?;
    Ok(Entries { raw: raw.peekable(), newest_first: true })
}

/// Joins the stored values of consecutive keys of one entry.
struct Entries<'t, I: Iterator<Item = heed::Result<(&'t [u8], &'t [u8])>>> {
    raw: Peekable<I>,
    /// Parts arrive last first (a reverse walk).
    newest_first: bool,
}

impl<'t, I: Iterator<Item = heed::Result<(&'t [u8], &'t [u8])>>> Iterator for Entries<'t, I> {
    type Item = Result<(u64, Cow<'t, [u8]>)>;

    fn next(&mut self) -> Option<Self::Item> {
        let (key, value) = match self.raw.next()? {
            Ok(item) => item,
            Err(err) => return Some(Err(err.into())),
        };
        let seq = match seq_of(key) {
            Ok(seq) => seq,
            Err(err) => return Some(Err(err)),
        };
        if key.len() == 8 {
            return Some(Ok((seq, Cow::Borrowed(value))));
        }
        let mut parts = vec![(part_of(key), value)];
        loop {
            match self.raw.peek() {
                Some(Ok((next, _))) if next.len() == 12 && seq_of(next).ok() == Some(seq) => {}
                Some(Err(_)) => {
                    let err = self.raw.next().and_then(|item| item.err());
                    let reading = || Error::Corrupt(format!("transaction log entry {seq} could not be read whole"));
                    return Some(Err(err.map_or_else(reading, Error::from)));
                }
                _ => break,
            }
            if let Some(Ok((key, value))) = self.raw.next() {
                parts.push((part_of(key), value));
            }
        }
        if self.newest_first {
            parts.reverse();
        }
        // Parts 0, 1, 2, … with none missing, or the entry is damaged.
        if parts.iter().enumerate().any(|(i, (part, _))| *part != i as u32) {
            return Some(Err(Error::Corrupt(format!("transaction log entry {seq} is missing a part"))));
        }
        let parts: Vec<&[u8]> = parts.into_iter().map(|(_, value)| value).collect();
        Some(Ok((seq, Cow::Owned(parts.concat()))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A log sub-database in a fresh environment.
    fn log() -> (tempfile::TempDir, heed::Env<heed::WithoutTls>, LogDb) {
        let dir = tempfile::tempdir().unwrap();
        let env = crate::env::open_env(dir.path(), 1 << 26, true).unwrap();
        let txn = env.write_txn().unwrap();
        let db: LogDb = env
            .create_databases_and_commit(txn, |opener, txn| {
                let db = opener.create_database(txn, Some("log"))?;
                Ok::<_, heed::Error>(heed::CommitOrAbort::<_, ()>::Commit(db))
            })
            .unwrap()
            .unwrap_commit();
        (dir, env, db)
    }

    /// Entry `seq`'s bytes: `len` bytes that differ from part to part.
    fn entry(seq: u64, len: usize) -> Vec<u8> {
        (0..len).map(|i| (seq as usize * 7 + i / 13) as u8).collect()
    }

    #[test]
    fn large_entries_are_stored_in_page_sized_parts_and_read_whole() {
        let (_dir, env, db) = log();
        let sizes = [10, PART, PART + 1, 5 * PART + 17, 3, SPLIT_MAX + 1, 20_000];
        let mut txn = env.write_txn().unwrap();
        for (seq, len) in sizes.iter().enumerate() {
            append(&db, &mut txn, seq as u64 + 1, &entry(seq as u64 + 1, *len)).unwrap();
        }
        txn.commit().unwrap();
        let txn = env.read_txn().unwrap();
        // No stored value is larger than a part (none needs overflow pages) but
        // the one past the split limit, kept whole.
        let large: Vec<usize> =
            db.iter(&txn).unwrap().map(|item| item.unwrap().1.len()).filter(|len| *len > PART).collect();
        assert_eq!(large, [SPLIT_MAX + 1]);
        assert_eq!(db.len(&txn).unwrap(), 1 + 1 + 2 + 6 + 1 + 1 + 11);
        let forward: Vec<(u64, Vec<u8>)> =
            from(&db, &txn, 1).unwrap().map(|e| e.map(|(s, b)| (s, b.into_owned())).unwrap()).collect();
        let expected: Vec<(u64, Vec<u8>)> =
            sizes.iter().enumerate().map(|(i, len)| (i as u64 + 1, entry(i as u64 + 1, *len))).collect();
        assert_eq!(forward, expected);
        let backward: Vec<(u64, Vec<u8>)> =
            before(&db, &txn, u64::MAX).unwrap().map(|e| e.map(|(s, b)| (s, b.into_owned())).unwrap()).collect();
        assert_eq!(backward, expected.iter().rev().cloned().collect::<Vec<_>>());
        let middle: Vec<u64> = from(&db, &txn, 4).unwrap().map(|e| e.unwrap().0).collect();
        assert_eq!(middle, [4, 5, 6, 7]);
        let below: Vec<u64> = before(&db, &txn, 4).unwrap().map(|e| e.unwrap().0).collect();
        assert_eq!(below, [3, 2, 1]);
        let (seq, bytes) = last(&db, &txn).unwrap().unwrap();
        assert_eq!((seq, bytes.into_owned()), (7, entry(7, 20_000)));
    }

    #[test]
    fn entries_are_replaced_and_deleted_with_all_their_parts() {
        let (_dir, env, db) = log();
        let mut txn = env.write_txn().unwrap();
        for seq in 1..=3 {
            append(&db, &mut txn, seq, &entry(seq, 3 * PART)).unwrap();
        }
        replace(&db, &mut txn, 2, &entry(9, 40)).unwrap(); // a large entry made small
        delete(&db, &mut txn, 1).unwrap();
        replace(&db, &mut txn, 3, &entry(8, 2 * PART + 1)).unwrap();
        txn.commit().unwrap();
        let txn = env.read_txn().unwrap();
        let left: Vec<(u64, Vec<u8>)> =
            from(&db, &txn, 0).unwrap().map(|e| e.map(|(s, b)| (s, b.into_owned())).unwrap()).collect();
        assert_eq!(left, [(2, entry(9, 40)), (3, entry(8, 2 * PART + 1))]);
        assert_eq!(db.len(&txn).unwrap(), 1 + 3);
    }

    #[test]
    fn entries_written_whole_before_parts_existed_read_the_same() {
        let (_dir, env, db) = log();
        let mut txn = env.write_txn().unwrap();
        db.put(&mut txn, &entry_key(1), &entry(1, 3 * PART)).unwrap(); // as older roots hold it
        append(&db, &mut txn, 2, &entry(2, 3 * PART)).unwrap();
        txn.commit().unwrap();
        let txn = env.read_txn().unwrap();
        let read: Vec<(u64, Vec<u8>)> =
            from(&db, &txn, 1).unwrap().map(|e| e.map(|(s, b)| (s, b.into_owned())).unwrap()).collect();
        assert_eq!(read, [(1, entry(1, 3 * PART)), (2, entry(2, 3 * PART))]);
        drop(txn);
        let mut txn = env.write_txn().unwrap();
        delete(&db, &mut txn, 1).unwrap();
        txn.commit().unwrap();
        assert_eq!(last(&db, &env.read_txn().unwrap()).unwrap().map(|(seq, _)| seq), Some(2));
    }

    #[test]
    fn an_entry_missing_a_part_is_an_error_not_a_shorter_entry() {
        let (_dir, env, db) = log();
        let mut txn = env.write_txn().unwrap();
        append(&db, &mut txn, 1, &entry(1, 3 * PART)).unwrap();
        db.delete(&mut txn, &part_key(1, 1)).unwrap();
        txn.commit().unwrap();
        let txn = env.read_txn().unwrap();
        assert!(matches!(from(&db, &txn, 0).unwrap().next(), Some(Err(Error::Corrupt(_)))));
        assert!(matches!(last(&db, &txn), Err(Error::Corrupt(_))));
    }
}
