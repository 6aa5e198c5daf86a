//! An open database: its environment, its fixed sub-databases and its tables' handles.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use heed::types::{Bytes, Unit};
use heed::{CommitOrAbort, Env, WithoutTls};
use parking_lot::RwLock;
use tokio::sync::watch;

use crate::env::open_env;
use crate::error::{Error, Result};
use crate::logstore::LogDb;
use crate::names;
use crate::txn::ReadTxn;

pub(crate) type BytesDb = heed::Database<'static, Bytes, Bytes>;
pub(crate) type IndexDb = heed::Database<'static, Bytes, Unit>;

/// How to open a database.
#[derive(Debug, Clone)]
pub struct DatabaseOptions {
    /// Size of the memory map: the most the database may ever hold, in bytes. It is
    /// address space, not disk.
    pub map_size: usize,
    /// Whether each commit is flushed to disk before it is acknowledged.
    pub durable: bool,
}

impl Default for DatabaseOptions {
    fn default() -> Self {
        Self { map_size: 256 << 30, durable: true }
    }
}

/// Handles to one table's two sub-databases. Cheap to clone.
#[derive(Clone, Debug)]
pub struct TableStore {
    pub(crate) name: Arc<str>,
    /// The storage slot (sub-database pair) the table occupies.
    pub(crate) slot: String,
    pub(crate) records: BytesDb,
    pub(crate) index: IndexDb,
    /// The table's incarnation as the write transaction that looked the handle up
    /// sees it ([`crate::WriteTxn::table`]); `None` in cached and read handles, for
    /// which a write transaction that logs through them reads it itself.
    pub(crate) incarnation: Option<u64>,
}

/// A sub-database pair not assigned to any table (its table was dropped; it is
/// empty), reused by the next table created.
#[derive(Clone, Debug)]
pub(crate) struct FreeSlot {
    slot: String,
    records: BytesDb,
    index: IndexDb,
}

impl TableStore {
    /// The table's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The table's incarnation, when the handle came from [`crate::WriteTxn::table`]
    /// or [`crate::WriteTxn::start_incarnation`].
    pub fn incarnation(&self) -> Option<u64> {
        self.incarnation
    }
}

/// Waits for an environment to close.
pub struct Closing(heed::EnvClosingEvent);

impl Closing {
    /// Waits up to `timeout`; returns whether the environment closed.
    pub fn wait(&self, timeout: std::time::Duration) -> bool {
        self.0.wait_timeout(timeout)
    }
}

/// An open database. Cheap to clone; the environment closes when the last clone (and
/// every read transaction) is gone.
#[derive(Clone)]
pub struct Database {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) name: String,
    pub(crate) dir: PathBuf,
    pub(crate) env: Env<WithoutTls>,
    pub(crate) options: DatabaseOptions,
    pub(crate) catalog: BytesDb,
    pub(crate) meta: BytesDb,
    pub(crate) txlog: LogDb,
    pub(crate) derived: BytesDb,
    /// Handles of tables opened so far. Only committed handles enter this map; a
    /// dropped table's entry is moved to `free` when the next table is created.
    pub(crate) tables: RwLock<HashMap<String, TableStore, foldhash::fast::RandomState>>,
    /// Emptied slots of dropped tables, for reuse: LMDB never forgets a named
    /// sub-database, so without reuse every table name ever created would use up a
    /// slot for good.
    pub(crate) free: RwLock<Vec<FreeSlot>>,
    /// The sequence number of the last committed log entry.
    pub(crate) committed: watch::Sender<u64>,
    /// Read transactions kept for the next reads while nothing committed.
    pub(crate) snapshots: crate::txn::Snapshots,
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Database").field("name", &self.inner.name).field("dir", &self.inner.dir).finish()
    }
}

impl Database {
    /// Opens the database `name` stored in directory `dir`, creating it if absent.
    pub fn open(name: &str, dir: &Path, options: DatabaseOptions) -> Result<Self> {
        let env = open_env(dir, options.map_size, options.durable)?;
        let wtxn = env.write_txn()?;
        let (catalog, meta, txlog, derived): (BytesDb, BytesDb, LogDb, BytesDb) = env
            .create_databases_and_commit(wtxn, |opener, wtxn| {
                let catalog = opener.create_database(wtxn, Some(names::CATALOG))?;
                let meta = opener.create_database(wtxn, Some(names::META))?;
                let txlog = opener.create_database(wtxn, Some(names::TXLOG))?;
                let derived = opener.create_database(wtxn, Some(names::DERIVED))?;
                Ok::<_, heed::Error>(CommitOrAbort::<_, ()>::Commit((catalog, meta, txlog, derived)))
            })?
            .unwrap_commit();
        let last_seq = {
            let rtxn = env.read_txn()?;
            crate::logstore::last(&txlog, &rtxn)?.map(|(seq, _)| seq).unwrap_or(0)
        };
        let (committed, _) = watch::channel(last_seq);
        let db = Self {
            inner: Arc::new(Inner {
                name: name.to_string(),
                dir: dir.to_path_buf(),
                env,
                options,
                catalog,
                meta,
                txlog,
                derived,
                tables: RwLock::new(HashMap::default()),
                free: RwLock::new(Vec::new()),
                committed,
                snapshots: Default::default(),
            }),
        };
        db.open_existing_tables()?;
        let has_epoch = {
            let rtxn = db.inner.env.read_txn()?;
            db.inner.meta.get(&rtxn, names::LOG_EPOCH)?.is_some()
        };
        if !has_epoch {
            db.renew_log_epoch()?;
        }
        Ok(db)
    }

    /// Gives the log a new random epoch (see [`names::LOG_EPOCH`]) and returns it: a
    /// restore calls it on the restored copy before swapping it in, while no writer
    /// runs on that copy.
    pub fn renew_log_epoch(&self) -> Result<u64> {
        use std::hash::{BuildHasher, Hasher};
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u128(
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos(),
        );
        let epoch = hasher.finish();
        let mut wtxn = self.inner.env.write_txn()?;
        self.inner.meta.put(&mut wtxn, names::LOG_EPOCH, &epoch.to_be_bytes())?;
        wtxn.commit()?;
        Ok(epoch)
    }

    /// Opens the handles of every table's storage, and of every free slot.
    ///
    /// LMDB only lets a transaction use sub-database handles opened before it began,
    /// so every handle is opened up front: here for existing tables, and by
    /// [`Database::create_table_storage`] before the catalog names a new table. Which
    /// slot holds which table is recorded in the metadata sub-database
    /// (`slot:<table>` → slot); a slot no table maps to is free.
    fn open_existing_tables(&self) -> Result<()> {
        let env = &self.inner.env;
        let main: Option<heed::Database<'static, Bytes, heed::types::DecodeIgnore>> = env
            .open_databases_and_commit(env.read_txn()?, |opener, rtxn| {
                opener.open_database(rtxn, None).map(CommitOrAbort::<_, ()>::Commit)
            })?
            .unwrap_commit();
        let Some(main) = main else { return Ok(()) };
        let (slots, mut assigned, slotted) = {
            let rtxn = env.read_txn()?;
            let mut slots = Vec::new();
            for item in main.prefix_iter(&rtxn, names::RECORDS_PREFIX.as_bytes())? {
                let (name, ()) = item?;
                if let Ok(slot) = std::str::from_utf8(&name[names::RECORDS_PREFIX.len()..]) {
                    slots.push(slot.to_string());
                }
            }
            (slots, self.slot_assignments(&rtxn)?, self.inner.meta.get(&rtxn, names::SLOTTED)?.is_some())
        };
        if !slotted {
            let mut wtxn = env.write_txn()?;
            if assigned.is_empty() {
                // Written before slots existed: each sub-database is named after its
                // table. (A slotted database whose tables were all dropped also has
                // no assignments, hence the explicit format key.)
                assigned = slots.iter().map(|s| (s.clone(), s.clone())).collect();
                for (table, slot) in &assigned {
                    self.inner.meta.put(&mut wtxn, &names::slot_key(table), slot.as_bytes())?;
                }
            }
            self.inner.meta.put(&mut wtxn, names::SLOTTED, b"1")?;
            wtxn.commit()?;
        }
        self.give_incarnations(&assigned)?;
        for slot in slots {
            let opened: Option<(BytesDb, IndexDb)> = env
                .open_databases_and_commit(env.read_txn()?, |opener, rtxn| {
                    let records = opener.open_database(rtxn, Some(&names::records(&slot)))?;
                    let index = opener.open_database(rtxn, Some(&names::index(&slot)))?;
                    Ok::<_, heed::Error>(CommitOrAbort::<_, ()>::Commit(records.zip(index)))
                })?
                .unwrap_commit();
            let Some((records, index)) = opened else { continue };
            match assigned.iter().find(|(_, s)| **s == slot) {
                Some((table, _)) => {
                    self.remember_table(table, FreeSlot { slot, records, index });
                }
                None => self.inner.free.write().push(FreeSlot { slot, records, index }),
            }
        }
        Ok(())
    }

    /// Gives every assigned table that has no incarnation yet (written before
    /// incarnations existed) one, so every live table's changes name one.
    fn give_incarnations(&self, assigned: &HashMap<String, String>) -> Result<()> {
        let env = &self.inner.env;
        let missing: Vec<&String> = {
            let rtxn = env.read_txn()?;
            let mut missing = Vec::new();
            for table in assigned.keys() {
                if self.inner.meta.get(&rtxn, &names::incarnation_key(table))?.is_none() {
                    missing.push(table);
                }
            }
            missing
        };
        if missing.is_empty() {
            return Ok(());
        }
        let mut wtxn = env.write_txn()?;
        for table in missing {
            let next = next_incarnation(&self.inner.meta, &mut wtxn)?;
            self.inner.meta.put(&mut wtxn, &names::incarnation_key(table), &next.to_be_bytes())?;
        }
        wtxn.commit()?;
        Ok(())
    }

    /// The highest version this database holds: the clock's mark recorded at the last
    /// commit, or (for databases written before the mark existed) the newest log
    /// entry's version.
    pub(crate) fn highest_version(&self) -> Result<f64> {
        let rtxn = self.inner.env.read_txn()?;
        let recorded = match self.inner.meta.get(&rtxn, names::HIGHEST_VERSION)? {
            Some(bytes) => bytes.try_into().map(|b| f64::from_bits(u64::from_be_bytes(b))).unwrap_or(0.0),
            None => 0.0,
        };
        let logged = match crate::logstore::last(&self.inner.txlog, &rtxn)? {
            Some((_, bytes)) => crate::txlog::LogEntry::decode(&bytes)?.version,
            None => 0.0,
        };
        Ok(recorded.max(logged))
    }

    /// Records `version` as the highest issued, inside the committing transaction.
    pub(crate) fn record_highest_version(&self, txn: &mut heed::RwTxn<'_>, version: f64) -> heed::Result<()> {
        self.inner.meta.put(txn, names::HIGHEST_VERSION, &version.to_bits().to_be_bytes())
    }

    /// `table → slot` as committed in `txn`'s snapshot.
    fn slot_assignments(&self, txn: &heed::RoTxn<'_, WithoutTls>) -> Result<HashMap<String, String>> {
        let mut out = HashMap::new();
        for item in self.inner.meta.prefix_iter(txn, names::SLOT_PREFIX.as_bytes())? {
            let (key, value) = item?;
            if let (Ok(table), Ok(slot)) =
                (std::str::from_utf8(&key[names::SLOT_PREFIX.len()..]), std::str::from_utf8(value))
            {
                out.insert(table.to_string(), slot.to_string());
            }
        }
        Ok(out)
    }

    /// The database's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The environment directory.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// Drops this process's resident pages of the database's map (they stay in the
    /// operating system's cache); answers the bytes of mappings released. See
    /// `env::release_resident_pages`.
    pub fn release_resident_pages(&self) -> Result<usize> {
        Ok(crate::env::release_resident_pages(&self.inner.dir)?)
    }

    /// [`Database::release_resident_pages`] when this process's resident pages of
    /// shared file mappings exceed `budget` bytes; answers the bytes released (0
    /// when under the budget).
    pub fn release_resident_pages_over(&self, budget: usize) -> Result<usize> {
        if crate::env::shared_resident_bytes()? <= budget {
            return Ok(0);
        }
        self.release_resident_pages()
    }

    /// Opens a read snapshot.
    pub fn read(&self) -> Result<ReadTxn> {
        ReadTxn::new(self.clone())
    }

    /// The sequence number of the last committed transaction-log entry, and a receiver
    /// that sees every later one.
    pub fn committed_seq(&self) -> watch::Receiver<u64> {
        self.inner.committed.subscribe()
    }

    /// A handle that tells when the environment has closed, once every clone of this
    /// database and every read transaction is gone.
    pub fn closing(&self) -> Closing {
        Closing(self.inner.env.clone().prepare_for_closing())
    }

    /// How many handles on this database are alive (clones, read transactions,
    /// table handles in flight): what a drop waits on.
    pub fn open_handles(&self) -> usize {
        Arc::strong_count(&self.inner)
    }

    /// Writes a compacted, consistent copy of the environment's data file to `file`
    /// (one read snapshot; writes carry on meanwhile).
    pub fn copy_to(&self, file: &mut std::fs::File) -> Result<()> {
        Ok(self.inner.env.copy_to_file(file, heed::CompactionOption::Enabled)?)
    }

    /// Bytes the environment's pages occupy (the data file itself is sized to the
    /// map and sparse, so its length says nothing).
    pub fn disk_size(&self) -> Result<u64> {
        let env = &self.inner.env;
        let pages = env.info().last_page_number as u64 + 1;
        Ok(pages * u64::from(env.unnamed_database_stat().page_size))
    }

    /// The table's handles when the table's storage exists.
    pub(crate) fn open_table(&self, table: &str) -> Option<TableStore> {
        self.cached_table(table)
    }

    /// Gives `table` storage: a free slot (emptied when its table was dropped) or a
    /// new one, and records the assignment, in a transaction of its own. Called by
    /// the writer thread only, between batches, so the committed state is current.
    pub(crate) fn create_table_storage(&self, table: &str) -> Result<TableStore> {
        let env = &self.inner.env;
        let assigned = self.slot_assignments(&env.read_txn()?)?;
        self.reclaim_dropped(&assigned);
        if let Some(found) = self.cached_table(table) {
            return Ok(found);
        }
        let reused = self.inner.free.write().pop();
        let slot = match reused {
            Some(free) => {
                let mut wtxn = env.write_txn()?;
                self.inner.meta.put(&mut wtxn, &names::slot_key(table), free.slot.as_bytes())?;
                if let Err(err) = wtxn.commit() {
                    self.inner.free.write().push(free);
                    return Err(crate::txn::classify(self, err));
                }
                free
            }
            None => {
                let slot = self.next_slot_name(&assigned);
                let wtxn = env.write_txn()?;
                let meta = self.inner.meta;
                let (records, index): (BytesDb, IndexDb) = env
                    .create_databases_and_commit(wtxn, |opener, wtxn| {
                        let records = opener.create_database(wtxn, Some(&names::records(&slot)))?;
                        let index = opener.create_database(wtxn, Some(&names::index(&slot)))?;
                        meta.put(wtxn, &names::slot_key(table), slot.as_bytes())?;
                        Ok::<_, heed::Error>(CommitOrAbort::<_, ()>::Commit((records, index)))
                    })
                    .map_err(|e| crate::txn::classify(self, e))?
                    .unwrap_commit();
                FreeSlot { slot, records, index }
            }
        };
        Ok(self.remember_table(table, slot))
    }

    /// Moves the handles of tables whose assignment is gone (dropped, and emptied by
    /// the drop) to the free pool.
    fn reclaim_dropped(&self, assigned: &HashMap<String, String>) {
        let mut tables = self.inner.tables.write();
        let dropped: Vec<String> = tables
            .iter()
            .filter(|(name, store)| assigned.get(name.as_str()) != Some(&store.slot))
            .map(|(name, _)| name.clone())
            .collect();
        let mut free = self.inner.free.write();
        for name in dropped {
            if let Some(store) = tables.remove(&name) {
                free.push(FreeSlot { slot: store.slot, records: store.records, index: store.index });
            }
        }
    }

    /// A slot name no sub-database has yet: the next number.
    fn next_slot_name(&self, assigned: &HashMap<String, String>) -> String {
        let tables = self.inner.tables.read();
        let free = self.inner.free.read();
        let used = tables.values().map(|t| t.slot.as_str()).chain(free.iter().map(|f| f.slot.as_str()));
        let highest = used.chain(assigned.values().map(String::as_str)).filter_map(|s| s.parse::<u32>().ok()).max();
        highest.map_or(0, |n| n + 1).to_string()
    }

    fn cached_table(&self, table: &str) -> Option<TableStore> {
        let tables = self.inner.tables.read();
        tables.get(table).cloned()
    }

    fn remember_table(&self, table: &str, slot: FreeSlot) -> TableStore {
        let store = TableStore {
            name: table.into(),
            slot: slot.slot,
            records: slot.records,
            index: slot.index,
            incarnation: None,
        };
        let mut tables = self.inner.tables.write();
        tables.insert(table.to_string(), store.clone());
        // A kept read transaction must know every handle a reader may be given. Each
        // handle opened after start-up comes with a commit (the slot assignment), so
        // kept transactions are stale by id anyway; dropping them here says so.
        self.inner.snapshots.clear();
        store
    }

    /// Storage slots in use and free (for tests of handle hygiene).
    pub fn slot_counts(&self) -> (usize, usize) {
        let tables = self.inner.tables.read().len();
        (tables, self.inner.free.read().len())
    }

    pub(crate) fn map_full(&self) -> Error {
        Error::MapFull { map_size: self.inner.options.map_size }
    }
}

/// A big-endian u64 stored value (an incarnation), if `bytes` is one.
pub(crate) fn stored_u64(bytes: &[u8]) -> Option<u64> {
    bytes.try_into().ok().map(u64::from_be_bytes)
}

/// Takes the next incarnation number from the counter in `meta`, inside `txn`.
pub(crate) fn next_incarnation(meta: &BytesDb, txn: &mut heed::RwTxn<'_>) -> heed::Result<u64> {
    let last = meta.get(txn, crate::names::LAST_INCARNATION)?.and_then(stored_u64).unwrap_or(0);
    let next = last + 1;
    meta.put(txn, crate::names::LAST_INCARNATION, &next.to_be_bytes())?;
    Ok(next)
}
