//! Read snapshots and the write transaction handed to write jobs.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use heed::{RoTxn, RwTxn, WithoutTls};

use crate::database::{Database, TableStore, next_incarnation, stored_u64};
use crate::error::{Error, Result};
use crate::logstore;
use crate::txlog::{Change, ChangeKind, JobMeta, LogEntry, PRUNE_BYTES, PruneProgress, PruneScope, WrittenEntry};
use crate::version::Version;

/// The read transaction of a [`ReadTxn`]: always present until the snapshot ends,
/// when it goes back to its database's [`Snapshots`] (or is aborted).
struct Snapshot(Option<RoTxn<'static, WithoutTls>>);

impl std::ops::Deref for Snapshot {
    type Target = RoTxn<'static, WithoutTls>;

    fn deref(&self) -> &Self::Target {
        // Taken only by `ReadTxn`'s drop, after which nothing reads it.
        self.0.as_ref().unwrap_or_else(|| unreachable!("a snapshot read after it ended"))
    }
}

impl Drop for ReadTxn {
    fn drop(&mut self) {
        if let Some(txn) = self.txn.0.take() {
            // LMDB fails a transaction for good on a fatal read error (a damaged
            // page); such a one would answer every later read with an error, so it is
            // not kept. Asking a sub-database's size tells, reading at most its record.
            if self.db.inner.meta.len(&txn).is_err() {
                return;
            }
            let verified = std::mem::take(&mut *self.verified.lock());
            self.db.inner.snapshots.give_back((txn, verified), &self.db.inner.env);
        }
    }
}

/// Read transactions that ended while no write had committed since they began. The
/// next read takes one instead of beginning a transaction (LMDB allocates and zeroes
/// about 25 KB for each, sized by the environment's sub-database limit, and takes
/// its reader-table lock): a REST `GET` spent about 4% of its CPU there. A kept
/// transaction is taken only while its id is still the environment's last committed
/// one, so it sees exactly what a new one would; every commit drops the kept ones
/// (`clear`), so none pins pages that writes have since freed.
#[derive(Default)]
pub(crate) struct Snapshots {
    idle: parking_lot::Mutex<Vec<Kept>>,
}

/// A kept transaction and the table slots it was found to assign.
type Kept = (RoTxn<'static, WithoutTls>, Verified);

/// The most transactions kept per database (one per concurrent reader is enough).
const KEPT_SNAPSHOTS: usize = 64;

impl Snapshots {
    /// A kept transaction that reads the latest commit, if any; stale ones are
    /// aborted on the way.
    fn take(&self, env: &heed::Env<WithoutTls>) -> Option<Kept> {
        let mut idle = self.idle.lock();
        let kept = idle.pop()?;
        if kept.0.id() == env.info().last_txn_id {
            return Some(kept);
        }
        // Everything kept is at least as old: none reads the latest commit.
        let stale = std::mem::take(&mut *idle);
        drop(idle);
        drop((kept, stale));
        None
    }

    /// Keeps `txn` for the next read if no write committed since it began.
    fn give_back(&self, kept: Kept, env: &heed::Env<WithoutTls>) {
        if kept.0.id() != env.info().last_txn_id {
            return;
        }
        let mut idle = self.idle.lock();
        if idle.len() < KEPT_SNAPSHOTS {
            idle.push(kept);
        }
    }

    /// Aborts every kept transaction (after a commit: they no longer read the latest).
    pub(crate) fn clear(&self) {
        let stale = std::mem::take(&mut *self.idle.lock());
        drop(stale);
    }
}

/// A byte range over keys, with each bound inclusive, exclusive or open.
pub type KeyRange<'k> = (Bound<&'k [u8]>, Bound<&'k [u8]>);

/// Primary records in key order: `(encoded primary key, stored record)`.
pub type Records<'t> = Box<dyn Iterator<Item = Result<(&'t [u8], &'t [u8])>> + 't>;

/// Index entries in key order: `attribute id ++ encoded value ++ encoded primary key`.
pub type IndexEntries<'t> = Box<dyn Iterator<Item = Result<&'t [u8]>> + 't>;

/// Derived-index entries (key, value) in key order.
pub type DerivedEntries<'t> = Box<dyn Iterator<Item = Result<(&'t [u8], &'t [u8])>> + 't>;

/// A consistent read snapshot of one database. `Send`, so a streamed result can be
/// produced on another thread; keep it short-lived (it pins old pages).
pub struct ReadTxn {
    txn: Snapshot,
    /// Tables whose slot this snapshot was found to assign (a snapshot never
    /// changes, so the check holds for its life, and a kept snapshot keeps it).
    verified: parking_lot::Mutex<Verified>,
    db: Database,
}

/// `(table, slot)` pairs a snapshot assigns.
type Verified = Vec<(Arc<str>, String)>;

impl ReadTxn {
    pub(crate) fn new(db: Database) -> Result<Self> {
        let (txn, verified) = match db.inner.snapshots.take(&db.inner.env) {
            Some(kept) => kept,
            None => (db.inner.env.clone().static_read_txn()?, Vec::new()),
        };
        Ok(Self { txn: Snapshot(Some(txn)), verified: parking_lot::Mutex::new(verified), db })
    }

    /// The database this snapshot reads.
    pub fn database(&self) -> &Database {
        &self.db
    }

    /// Handles of `table`, or `None` when its sub-databases do not exist in this
    /// snapshot. A dropped table's slot is reused by the next table created, so the
    /// handle is trusted only if this snapshot assigns the table that same slot (an
    /// old snapshot must never read another table's records under this name).
    pub fn table(&self, table: &str) -> Result<Option<TableStore>> {
        let Some(store) = self.db.open_table(table) else { return Ok(None) };
        let known = |(name, slot): &(Arc<str>, String)| **name == *table && *slot == store.slot;
        if self.verified.lock().iter().any(known) {
            return Ok(Some(store));
        }
        let assigned = self.db.inner.meta.get(&self.txn, &crate::names::slot_key(table))?;
        if assigned != Some(store.slot.as_bytes()) {
            return Ok(None);
        }
        self.verified.lock().push((store.name.clone(), store.slot.clone()));
        Ok(Some(store))
    }

    /// The stored record with primary key `key`.
    pub fn get_record(&self, table: &TableStore, key: &[u8]) -> Result<Option<&[u8]>> {
        Ok(table.records.get(&self.txn, key)?)
    }

    /// Records whose primary key lies in `range`, ascending or descending.
    pub fn records(&self, table: &TableStore, range: KeyRange<'_>, descending: bool) -> Result<Records<'_>> {
        records_in(&self.txn, table, range, descending)
    }

    /// Index entries in `range`, ascending or descending.
    pub fn index_entries(&self, table: &TableStore, range: KeyRange<'_>, descending: bool) -> Result<IndexEntries<'_>> {
        index_entries_in(&self.txn, table, range, descending)
    }

    /// The number of records in `table` (constant time).
    pub fn count_records(&self, table: &TableStore) -> Result<u64> {
        Ok(table.records.len(&self.txn)?)
    }

    /// Bytes the table's records and index entries occupy.
    pub fn table_size(&self, table: &TableStore) -> Result<u64> {
        let records = table.records.stat(&self.txn)?;
        let index = table.index.stat(&self.txn)?;
        Ok(stat_bytes(&records) + stat_bytes(&index))
    }

    /// Bytes the transaction log occupies.
    pub fn log_size(&self) -> Result<u64> {
        Ok(stat_bytes(&self.db.inner.txlog.stat(&self.txn)?))
    }

    /// Every catalog entry, in key order.
    pub fn catalog_entries(&self) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut out = Vec::new();
        for item in self.db.inner.catalog.iter(&self.txn)? {
            let (k, v) = item?;
            out.push((k.to_vec(), v.to_vec()));
        }
        Ok(out)
    }

    /// A metadata value.
    pub fn meta(&self, key: &[u8]) -> Result<Option<&[u8]>> {
        Ok(self.db.inner.meta.get(&self.txn, key)?)
    }

    /// Metadata entries whose key starts with `prefix`, in key order.
    pub fn meta_prefix(&self, prefix: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        meta_prefix_in(&self.txn, &self.db, prefix)
    }

    /// A derived index's value (see `names::DERIVED`).
    pub fn derived(&self, key: &[u8]) -> Result<Option<&[u8]>> {
        Ok(self.db.inner.derived.get(&self.txn, key)?)
    }

    /// Derived-index entries whose key starts with `prefix`, in key order, read
    /// lazily (a vector graph is read whole at start-up, one entry at a time).
    pub fn derived_prefix<'t>(&'t self, prefix: &[u8]) -> Result<DerivedEntries<'t>> {
        let map = |item: heed::Result<(&'t [u8], &'t [u8])>| item.map_err(Error::from);
        Ok(Box::new(self.db.inner.derived.prefix_iter(&self.txn, prefix)?.map(map)))
    }

    /// The first derived-index entry whose key is `from` or after it: a seek, so
    /// listing which indexes are stored reads one entry per index.
    pub fn derived_from(&self, from: &[u8]) -> Result<Option<(&[u8], &[u8])>> {
        let range = (std::ops::Bound::Included(from), std::ops::Bound::Unbounded);
        Ok(self.db.inner.derived.range(&self.txn, &range)?.next().transpose()?)
    }

    /// The log's epoch in this snapshot (see `names::LOG_EPOCH`).
    pub fn log_epoch(&self) -> Result<u64> {
        Ok(self.db.inner.meta.get(&self.txn, crate::names::LOG_EPOCH)?.and_then(stored_u64).unwrap_or(0))
    }

    /// `table`'s incarnation in this snapshot (0 when it has none): what the log's
    /// changes to this table, and no earlier table of the name, carry.
    pub fn incarnation(&self, table: &str) -> Result<u64> {
        incarnation_in(&self.txn, &self.db, table)
    }

    /// The sequence number of the newest log entry in this snapshot (0 when none).
    pub fn last_log_seq(&self) -> Result<u64> {
        Ok(logstore::last(&self.db.inner.txlog, &self.txn)?.map_or(0, |(seq, _)| seq))
    }

    /// Transaction-log entries with sequence number `from` or later, in order, with
    /// the size of each as stored (for callers that bound what they read by bytes).
    pub fn log_sized_from(&self, from: u64) -> Result<impl Iterator<Item = Result<(LogEntry, usize)>> + '_> {
        let iter = logstore::from(&self.db.inner.txlog, &self.txn, from)?;
        Ok(iter.map(|item| {
            let (_, bytes) = item?;
            Ok((LogEntry::decode(&bytes)?, bytes.len()))
        }))
    }

    /// Transaction-log entries with sequence number below `before`, newest first,
    /// with the size of each as stored.
    pub fn log_sized_before(&self, before: u64) -> Result<impl Iterator<Item = Result<(LogEntry, usize)>> + '_> {
        let iter = logstore::before(&self.db.inner.txlog, &self.txn, before)?;
        Ok(iter.map(|item| {
            let (_, bytes) = item?;
            Ok((LogEntry::decode(&bytes)?, bytes.len()))
        }))
    }

    /// Transaction-log entries with sequence number `from` or later, in order.
    pub fn log_from(&self, from: u64) -> Result<impl Iterator<Item = Result<LogEntry>> + '_> {
        let iter = logstore::from(&self.db.inner.txlog, &self.txn, from)?;
        Ok(iter.map(|item| {
            let (_, bytes) = item?;
            LogEntry::decode(&bytes)
        }))
    }
}

fn meta_prefix_in(txn: &RoTxn<'_>, db: &Database, prefix: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let mut out = Vec::new();
    for item in db.inner.meta.prefix_iter(txn, prefix)? {
        let (k, v) = item?;
        out.push((k.to_vec(), v.to_vec()));
    }
    Ok(out)
}

/// `table`'s incarnation as `txn` sees it (0 when it has none).
fn incarnation_in(txn: &RoTxn<'_>, db: &Database, table: &str) -> Result<u64> {
    let stored = db.inner.meta.get(txn, &crate::names::incarnation_key(table))?;
    Ok(stored.and_then(stored_u64).unwrap_or(0))
}

fn stat_bytes(stat: &heed::DatabaseStat) -> u64 {
    let pages = stat.branch_pages + stat.leaf_pages + stat.overflow_pages;
    pages as u64 * u64::from(stat.page_size)
}

fn records_in<'t>(
    txn: &'t RoTxn<'_, WithoutTls>,
    table: &TableStore,
    range: KeyRange<'_>,
    descending: bool,
) -> Result<Records<'t>> {
    let map = |item: heed::Result<(&'t [u8], &'t [u8])>| item.map_err(Error::from);
    Ok(if descending {
        Box::new(table.records.rev_range(txn, &range)?.map(map))
    } else {
        Box::new(table.records.range(txn, &range)?.map(map))
    })
}

fn index_entries_in<'t>(
    txn: &'t RoTxn<'_, WithoutTls>,
    table: &TableStore,
    range: KeyRange<'_>,
    descending: bool,
) -> Result<IndexEntries<'t>> {
    let map = |item: heed::Result<(&'t [u8], ())>| item.map(|(k, ())| k).map_err(Error::from);
    Ok(if descending {
        Box::new(table.index.rev_range(txn, &range)?.map(map))
    } else {
        Box::new(table.index.range(txn, &range)?.map(map))
    })
}

/// The write transaction of one logical transaction (one write job).
///
/// Every record change made through it, every table cleared or released, and every
/// catalog change its caller describes ([`WriteTxn::log_catalog`]) is appended to the
/// transaction log when the job succeeds, in the same LMDB transaction. Index entries
/// are not logged: they are derived from the records.
pub struct WriteTxn<'t, 'e> {
    txn: &'t mut RwTxn<'e>,
    db: &'t Database,
    batch: &'t BatchMemo,
    version: Version,
    changes: Vec<Change>,
    /// Metadata this job writes when its batch commits ([`WriteTxn::put_meta_at_commit`]).
    at_commit: Vec<(Vec<u8>, Vec<u8>)>,
    /// Whether anything was written (see the job contract in `writer`).
    wrote: bool,
}

/// What the jobs of one writer batch share besides its LMDB transaction: the
/// incarnations of the tables they have named (read once per batch, not once per
/// job), and the metadata they asked to write at the commit, the last value of each
/// key. So a batch of small writes to one table reads and writes its metadata once,
/// not once a job. The memo lives exactly as long as the batch's transaction, so it
/// is dropped with it when the batch is rolled back.
#[derive(Default)]
pub(crate) struct BatchMemo {
    /// By table name; a batch names few tables, so a list is quickest to search.
    incarnations: std::cell::RefCell<Vec<(Arc<str>, u64)>>,
    at_commit: std::cell::RefCell<BTreeMap<Vec<u8>, Vec<u8>>>,
}

impl BatchMemo {
    /// Notes `table`'s incarnation as the batch now sees it (`None`: read it again).
    fn remember_incarnation(&self, table: &Arc<str>, incarnation: Option<u64>) {
        let mut known = self.incarnations.borrow_mut();
        known.retain(|(name, _)| **name != **table);
        if let Some(incarnation) = incarnation {
            known.push((table.clone(), incarnation));
        }
    }

    /// Writes the metadata the batch's jobs asked for at the commit.
    pub(crate) fn write_at_commit(&self, txn: &mut RwTxn<'_>, db: &Database) -> Result<()> {
        for (key, value) in std::mem::take(&mut *self.at_commit.borrow_mut()) {
            db.inner.meta.put(txn, &key, &value).map_err(|e| classify(db, e))?;
        }
        Ok(())
    }
}

impl<'t, 'e> WriteTxn<'t, 'e> {
    pub(crate) fn new(txn: &'t mut RwTxn<'e>, db: &'t Database, batch: &'t BatchMemo, version: Version) -> Self {
        Self { txn, db, batch, version, changes: Vec::new(), at_commit: Vec::new(), wrote: false }
    }

    /// `table`'s incarnation as this transaction sees it: read once per batch (only
    /// this batch's jobs change it, through this type, which keeps the memo true).
    fn incarnation(&self, table: &Arc<str>) -> Result<u64> {
        let known = |(name, _): &&(Arc<str>, u64)| Arc::ptr_eq(name, table) || **name == **table;
        if let Some((_, incarnation)) = self.batch.incarnations.borrow().iter().find(known) {
            return Ok(*incarnation);
        }
        let incarnation = incarnation_in(&*self.txn, self.db, table)?;
        self.batch.remember_incarnation(table, Some(incarnation));
        Ok(incarnation)
    }

    /// The version every change in this transaction carries.
    pub fn version(&self) -> Version {
        self.version
    }

    /// Gives this transaction an explicit version instead of the writer's fresh one:
    /// a write replicated from elsewhere (or replayed) keeps the version it was made
    /// at, even when that is older than what is stored. Call before any change.
    pub fn set_version(&mut self, version: Version) {
        self.version = version;
    }

    /// Handles of `table`, with its incarnation as this transaction sees it, or
    /// `None` when its storage does not exist; see [`crate::Writer::prepare_table`].
    pub fn table(&self, table: &str) -> Result<Option<TableStore>> {
        let Some(mut store) = self.db.open_table(table) else { return Ok(None) };
        store.incarnation = Some(self.incarnation(&store.name)?);
        Ok(Some(store))
    }

    /// Starts a new incarnation of `table` (it is being created): changes logged
    /// through the returned handle name it. Returns the handle to use from now on.
    pub fn start_incarnation(&mut self, table: &TableStore) -> Result<TableStore> {
        let meta = self.db.inner.meta;
        let next = next_incarnation(&meta, self.writing()).map_err(|e| classify(self.db, e))?;
        let key = crate::names::incarnation_key(&table.name);
        meta.put(self.writing(), &key, &next.to_be_bytes()).map_err(|e| classify(self.db, e))?;
        self.batch.remember_incarnation(&table.name, Some(next));
        Ok(TableStore { incarnation: Some(next), ..table.clone() })
    }

    /// Removes every record and index entry of `table`, logged as one change (not
    /// record by record) when there was anything to remove.
    pub fn clear_table(&mut self, table: &TableStore) -> Result<()> {
        if self.empty(table)? {
            self.log(table, ChangeKind::Cleared, Vec::new(), None)?;
        }
        Ok(())
    }

    /// Empties `table`'s storage and gives its slot back, for the next table created
    /// (a dropped table must not keep its sub-databases for good); logged as the end
    /// of the table's incarnation.
    pub fn release_table(&mut self, table: &TableStore) -> Result<()> {
        self.empty(table)?;
        // Logged before the incarnation it names is deleted.
        self.log(table, ChangeKind::Released, Vec::new(), None)?;
        for key in [crate::names::slot_key(&table.name), crate::names::incarnation_key(&table.name)] {
            self.db.inner.meta.delete(self.writing(), &key).map_err(|e| classify(self.db, e))?;
        }
        self.batch.remember_incarnation(&table.name, None);
        Ok(())
    }

    /// Removes every record and index entry of `table`; returns whether it held any.
    fn empty(&mut self, table: &TableStore) -> Result<bool> {
        let held = table.records.len(&*self.txn)? + table.index.len(&*self.txn)?;
        table.records.clear(self.writing()).map_err(|e| classify(self.db, e))?;
        table.index.clear(self.writing()).map_err(|e| classify(self.db, e))?;
        Ok(held > 0)
    }

    /// Logs a change to `table`'s definition, described by the caller (`description`
    /// is opaque to the store), in this transaction's entry.
    pub fn log_catalog(&mut self, table: &TableStore, description: Vec<u8>) -> Result<()> {
        self.log(table, ChangeKind::Catalog, Vec::new(), Some(description))
    }

    /// Logs a message published to the record under `key` (which need not exist),
    /// in this transaction's entry; `message` is opaque to the store.
    pub fn log_message(&mut self, table: &TableStore, key: Vec<u8>, message: Vec<u8>) -> Result<()> {
        self.log(table, ChangeKind::Message, key, Some(message))
    }

    /// Adds a change of `table` to this transaction's entry, naming the table's
    /// incarnation (read in this transaction when the handle does not carry it).
    fn log(&mut self, table: &TableStore, kind: ChangeKind, key: Vec<u8>, record: Option<Vec<u8>>) -> Result<()> {
        let incarnation = match table.incarnation {
            Some(incarnation) => incarnation,
            None => self.incarnation(&table.name)?,
        };
        self.changes.push(Change { table: table.name.to_string(), incarnation, kind, key, record });
        Ok(())
    }

    /// The stored record with primary key `key`, as of this transaction.
    pub fn get_record(&self, table: &TableStore, key: &[u8]) -> Result<Option<&[u8]>> {
        Ok(table.records.get(&*self.txn, key)?)
    }

    /// Records whose primary key lies in `range`, ascending or descending.
    pub fn records(&self, table: &TableStore, range: KeyRange<'_>, descending: bool) -> Result<Records<'_>> {
        records_in(&*self.txn, table, range, descending)
    }

    /// Index entries in `range`.
    pub fn index_entries(&self, table: &TableStore, range: KeyRange<'_>) -> Result<IndexEntries<'_>> {
        index_entries_in(&*self.txn, table, range, false)
    }

    /// Writes `record` (header and body, see [`crate::encode_record`]) under `key`.
    pub fn put_record(&mut self, table: &TableStore, key: Vec<u8>, record: Vec<u8>) -> Result<()> {
        table.records.put(self.writing(), &key, &record).map_err(|e| classify(self.db, e))?;
        self.log(table, ChangeKind::Put, key, Some(record))
    }

    /// Deletes the record under `key`; returns whether it existed.
    pub fn delete_record(&mut self, table: &TableStore, key: &[u8]) -> Result<bool> {
        let existed = table.records.delete(self.writing(), key).map_err(|e| classify(self.db, e))?;
        if existed {
            self.log(table, ChangeKind::Delete, key.to_vec(), None)?;
        }
        Ok(existed)
    }

    /// Removes, from log entries in `scope` (made before its version, and not after
    /// its sequence bound), the changes to its table (every change when `None`),
    /// looking at entries from sequence `from`: at most `max` of them and about
    /// [`PRUNE_BYTES`] of their encoded size, so one call never holds the writer or
    /// memory for long. An entry left without changes is deleted, except the newest
    /// entry of the log, which keeps its place so sequence numbers are never reused.
    /// The log is in commit order, so the walk stops at the first entry out of scope.
    pub fn prune_log(&mut self, from: u64, scope: PruneScope<'_>, max: usize) -> Result<PruneProgress> {
        let PruneScope { before, table, through_seq } = scope;
        let last = logstore::last(&self.db.inner.txlog, &*self.txn)?.map(|(seq, _)| seq);
        // Entries to rewrite (`Some`: what is left of it) or delete (`None`).
        let mut edits: Vec<(u64, Option<LogEntry>)> = Vec::new();
        let (mut removed, mut seen, mut bytes_seen) = (0, 0, 0);
        let mut next = None;
        for item in logstore::from(&self.db.inner.txlog, &*self.txn, from)? {
            let (seq, bytes) = item?;
            if through_seq.is_some_and(|through| seq > through) {
                break;
            }
            if seen == max || bytes_seen >= PRUNE_BYTES {
                next = Some(seq);
                break;
            }
            seen += 1;
            bytes_seen += bytes.len();
            let mut entry = LogEntry::decode(&bytes)?;
            if entry.version >= before {
                break;
            }
            let before_len = entry.changes.len();
            let records_before = entry.changes.iter().filter(|c| c.kind.is_record()).count();
            entry.changes.retain(|c| table.is_some_and(|t| t != c.table));
            // What was removed is counted in record changes, as the audit log shows them.
            removed += (records_before - entry.changes.iter().filter(|c| c.kind.is_record()).count()) as u64;
            if entry.changes.is_empty() && Some(seq) != last {
                edits.push((seq, None)); // also an empty entry left by an earlier prune
            } else if entry.changes.len() != before_len {
                edits.push((seq, Some(entry)));
            }
        }
        for (seq, edit) in edits {
            match edit {
                None => logstore::delete(&self.db.inner.txlog, self.writing(), seq),
                Some(entry) => logstore::replace(&self.db.inner.txlog, self.writing(), seq, &entry.encode()?),
            }
            .map_err(|e| classify(self.db, e))?;
        }
        Ok(PruneProgress { removed, next })
    }

    /// Adds an index entry.
    pub fn put_index_entry(&mut self, table: &TableStore, entry: &[u8]) -> Result<()> {
        table.index.put(self.writing(), entry, &()).map_err(|e| classify(self.db, e))
    }

    /// Removes an index entry; returns whether it existed.
    pub fn delete_index_entry(&mut self, table: &TableStore, entry: &[u8]) -> Result<bool> {
        table.index.delete(self.writing(), entry).map_err(|e| classify(self.db, e))
    }

    /// Removes every index entry in `range`; returns how many.
    pub fn delete_index_range(&mut self, table: &TableStore, range: KeyRange<'_>) -> Result<usize> {
        table.index.delete_range(self.writing(), &range).map_err(|e| classify(self.db, e))
    }

    /// A catalog value.
    pub fn catalog(&self, key: &[u8]) -> Result<Option<&[u8]>> {
        Ok(self.db.inner.catalog.get(&*self.txn, key)?)
    }

    /// Writes a catalog value.
    pub fn put_catalog(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        self.db.inner.catalog.put(self.writing(), key, value).map_err(|e| classify(self.db, e))
    }

    /// Deletes a catalog value.
    pub fn delete_catalog(&mut self, key: &[u8]) -> Result<bool> {
        self.db.inner.catalog.delete(self.writing(), key).map_err(|e| classify(self.db, e))
    }

    /// A metadata value, as of this transaction.
    pub fn meta(&self, key: &[u8]) -> Result<Option<&[u8]>> {
        Ok(self.db.inner.meta.get(&*self.txn, key)?)
    }

    /// Writes a metadata value.
    pub fn put_meta(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        self.supersede_at_commit(key);
        self.db.inner.meta.put(self.writing(), key, value).map_err(|e| classify(self.db, e))
    }

    /// Writes a metadata value when this job's batch commits, if this job succeeds:
    /// once per key however many jobs of the batch set it, the last value winning.
    /// For a value every small write updates (a table's last-updated time), which
    /// would otherwise cost a B-tree write per job. Until the commit, [`Self::meta`]
    /// (here and in the batch's later jobs) reads the value stored before.
    pub fn put_meta_at_commit(&mut self, key: Vec<u8>, value: Vec<u8>) {
        self.at_commit.push((key, value));
    }

    /// Drops what this job and the batch's earlier jobs asked to write to `key` at
    /// the commit: a later direct write or delete of it wins, as it would have had
    /// theirs been written at once.
    fn supersede_at_commit(&mut self, key: &[u8]) {
        self.at_commit.retain(|(pending, _)| pending != key);
        self.batch.at_commit.borrow_mut().remove(key);
    }

    /// Deletes a metadata value; returns whether it existed.
    pub fn delete_meta(&mut self, key: &[u8]) -> Result<bool> {
        self.supersede_at_commit(key);
        self.db.inner.meta.delete(self.writing(), key).map_err(|e| classify(self.db, e))
    }

    /// Metadata entries whose key starts with `prefix`, as of this transaction.
    pub fn meta_prefix(&self, prefix: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        meta_prefix_in(&*self.txn, self.db, prefix)
    }

    /// A derived index's value, as of this transaction.
    pub fn derived(&self, key: &[u8]) -> Result<Option<&[u8]>> {
        Ok(self.db.inner.derived.get(&*self.txn, key)?)
    }

    /// Writes a derived index's value. Not logged: derived state is rebuilt from
    /// the records and the log, never replayed.
    pub fn put_derived(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        self.db.inner.derived.put(self.writing(), key, value).map_err(|e| classify(self.db, e))
    }

    /// Deletes a derived index's value; returns whether it existed.
    pub fn delete_derived(&mut self, key: &[u8]) -> Result<bool> {
        self.db.inner.derived.delete(self.writing(), key).map_err(|e| classify(self.db, e))
    }

    /// Deletes up to `max` derived-index entries whose key starts with `prefix`;
    /// returns how many it deleted (fewer than `max`: none are left).
    pub fn delete_derived_prefix(&mut self, prefix: &[u8], max: usize) -> Result<usize> {
        let keys: Vec<Vec<u8>> = {
            let mut keys = Vec::new();
            for item in self.db.inner.derived.prefix_iter(&*self.txn, prefix)?.take(max) {
                keys.push(item?.0.to_vec());
            }
            keys
        };
        for key in &keys {
            self.delete_derived(key)?;
        }
        Ok(keys.len())
    }

    /// The transaction, for a write: from here on, failing this job aborts its batch.
    fn writing(&mut self) -> &mut RwTxn<'e> {
        self.wrote = true;
        self.txn
    }

    /// Whether this job has written anything.
    pub(crate) fn has_written(&self) -> bool {
        self.wrote
    }

    /// Appends the log entry for this job, if it changed any record.
    pub(crate) fn finish(self, seq: &mut u64, meta: &JobMeta) -> Result<()> {
        if !self.changes.is_empty() {
            *seq += 1;
            let entry = WrittenEntry {
                seq: *seq,
                version: self.version.time,
                node: self.version.node,
                user: &meta.user,
                operation: &meta.operation,
                origin: meta.origin.as_deref(),
                changes: &self.changes,
            };
            let bytes = entry.encode()?;
            // Sequences only grow, so the entry goes after the last one: appending
            // fills each log page (a plain put splits the last page in half, leaving
            // the log's pages half empty: 2.0 KB of file per 1.25 KB entry).
            logstore::append(&self.db.inner.txlog, self.txn, *seq, &bytes).map_err(|e| classify(self.db, e))?;
        }
        // Kept for the commit only now that the job has succeeded.
        self.batch.at_commit.borrow_mut().extend(self.at_commit);
        Ok(())
    }
}

/// Converts a heed error, naming the map size when the map is full.
pub(crate) fn classify(db: &Database, err: heed::Error) -> Error {
    match err {
        heed::Error::Mdb(heed::MdbError::MapFull) => db.map_full(),
        other => other.into(),
    }
}
