//! An open database: its environment, its fixed sub-databases and its tables' handles.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use heed::types::{Bytes, U64, Unit};
use heed::{CommitOrAbort, Env, WithoutTls, byteorder::BigEndian};
use tokio::sync::watch;

use crate::env::open_env;
use crate::error::{Error, Result};
use crate::names;
use crate::txn::ReadTxn;

pub(crate) type BytesDb = heed::Database<'static, Bytes, Bytes>;
pub(crate) type IndexDb = heed::Database<'static, Bytes, Unit>;
pub(crate) type LogDb = heed::Database<'static, U64<BigEndian>, Bytes>;

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
    pub(crate) records: BytesDb,
    pub(crate) index: IndexDb,
}

impl TableStore {
    /// The table's name.
    pub fn name(&self) -> &str {
        &self.name
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
    /// Handles of tables opened so far. Only committed handles enter this map.
    pub(crate) tables: RwLock<HashMap<String, TableStore>>,
    /// The sequence number of the last committed log entry.
    pub(crate) committed: watch::Sender<u64>,
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
        let (catalog, meta, txlog): (BytesDb, BytesDb, LogDb) = env
            .create_databases_and_commit(wtxn, |opener, wtxn| {
                let catalog = opener.create_database(wtxn, Some(names::CATALOG))?;
                let meta = opener.create_database(wtxn, Some(names::META))?;
                let txlog = opener.create_database(wtxn, Some(names::TXLOG))?;
                Ok::<_, heed::Error>(CommitOrAbort::<_, ()>::Commit((catalog, meta, txlog)))
            })?
            .unwrap_commit();
        let last_seq = {
            let rtxn = env.read_txn()?;
            txlog.last(&rtxn)?.map(|(seq, _)| seq).unwrap_or(0)
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
                tables: RwLock::new(HashMap::new()),
                committed,
            }),
        };
        db.open_existing_tables()?;
        Ok(db)
    }

    /// Opens the handles of every table's storage.
    ///
    /// LMDB only lets a transaction use sub-database handles opened before it began,
    /// so every handle is opened up front: here for existing tables, and by
    /// [`Database::create_table_storage`] before the catalog names a new table.
    fn open_existing_tables(&self) -> Result<()> {
        let env = &self.inner.env;
        let main: Option<heed::Database<'static, Bytes, heed::types::DecodeIgnore>> = env
            .open_databases_and_commit(env.read_txn()?, |opener, rtxn| {
                opener.open_database(rtxn, None).map(CommitOrAbort::<_, ()>::Commit)
            })?
            .unwrap_commit();
        let Some(main) = main else { return Ok(()) };
        let tables: Vec<String> = {
            let rtxn = env.read_txn()?;
            let mut names = Vec::new();
            for item in main.prefix_iter(&rtxn, names::RECORDS_PREFIX.as_bytes())? {
                let (name, ()) = item?;
                if let Ok(name) = std::str::from_utf8(&name[names::RECORDS_PREFIX.len()..]) {
                    names.push(name.to_string());
                }
            }
            names
        };
        for table in tables {
            let opened: Option<(BytesDb, IndexDb)> = env
                .open_databases_and_commit(env.read_txn()?, |opener, rtxn| {
                    let records = opener.open_database(rtxn, Some(&names::records(&table)))?;
                    let index = opener.open_database(rtxn, Some(&names::index(&table)))?;
                    Ok::<_, heed::Error>(CommitOrAbort::<_, ()>::Commit(records.zip(index)))
                })?
                .unwrap_commit();
            if let Some((records, index)) = opened {
                self.remember_table(&table, records, index);
            }
        }
        Ok(())
    }

    /// The database's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The environment directory.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
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

    /// Creates the table's sub-databases in a transaction of their own. Called by the
    /// writer thread only, between batches.
    pub(crate) fn create_table_storage(&self, table: &str) -> Result<TableStore> {
        if let Some(found) = self.cached_table(table) {
            return Ok(found);
        }
        let env = &self.inner.env;
        let wtxn = env.write_txn()?;
        let (records, index): (BytesDb, IndexDb) = env
            .create_databases_and_commit(wtxn, |opener, wtxn| {
                let records = opener.create_database(wtxn, Some(&names::records(table)))?;
                let index = opener.create_database(wtxn, Some(&names::index(table)))?;
                Ok::<_, heed::Error>(CommitOrAbort::<_, ()>::Commit((records, index)))
            })
            .map_err(|e| crate::txn::classify(self, e))?
            .unwrap_commit();
        Ok(self.remember_table(table, records, index))
    }

    fn cached_table(&self, table: &str) -> Option<TableStore> {
        let tables = self.inner.tables.read().unwrap_or_else(|e| e.into_inner());
        tables.get(table).cloned()
    }

    fn remember_table(&self, table: &str, records: BytesDb, index: IndexDb) -> TableStore {
        let store = TableStore { name: table.into(), records, index };
        let mut tables = self.inner.tables.write().unwrap_or_else(|e| e.into_inner());
        tables.insert(table.to_string(), store.clone());
        store
    }

    pub(crate) fn map_full(&self) -> Error {
        Error::MapFull { map_size: self.inner.options.map_size }
    }
}
