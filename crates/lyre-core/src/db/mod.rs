//! One open database: its store, its writer (the only way to it is [`Db::write`]),
//! its published schema and the leases of those using it. Table DDL is in `ddl.rs`;
//! the transaction log's reading API and durable cursors are in `log.rs`.

pub mod backup;
mod blobs;
mod ddl;
pub mod derived;
pub mod log;

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use lyre_store::{Database, DatabaseOptions, JobMeta, ReadTxn, VersionClock, WriteTxn, Writer, WriterOptions};
use parking_lot::{Mutex, RwLock};
use tokio::sync::watch;

pub use ddl::CatalogChange;

use crate::access::{Context, require_super_user};
use crate::blobs::BlobStore;
use crate::catalog::{DatabaseSchema, SYSTEM_DATABASE, SchemaState, TableSchema};
use crate::error::{Error, Result};
use crate::record::computed::{Computers, Computing};

/// An open database. Shared behind an `Arc` by everything using it: every `Arc`
/// is a handle a drop waits for, and long-lived users name themselves with a
/// [`Lease`] so a refused drop can say who holds the database.
pub struct Db {
    name: String,
    store: Database,
    writer: Writer<SchemaState>,
    published: Arc<RwLock<SchemaState>>,
    /// Hashed rather than ordered: a map that empties after every request keeps its
    /// table, where a B-tree gives its node back and takes a new one each time.
    leases: Mutex<HashMap<u64, Holder, foldhash::fast::RandomState>>,
    next_lease: AtomicU64,
    /// Set while a drop or restore waits for users to leave: long-running readers
    /// stop, new requests are refused.
    closing: AtomicBool,
    /// The same, for tasks that wait (log consumers): told the moment it changes.
    closing_signal: watch::Sender<bool>,
    /// The log cursors whose consumers are running now (see `log.rs`).
    attached: Mutex<std::collections::BTreeSet<String>>,
    /// When this database was opened (ms since the epoch): a durable cursor whose
    /// consumer has not attached since counts as gone from this moment at the latest.
    opened_at: f64,
    /// The live derived (vector) indexes, installed by their runners.
    derived: derived::DerivedIndexes,
    /// The database's blob files.
    blobs: Arc<BlobStore>,
    /// What computes `@computed` attributes (the engine's).
    computers: Computers,
}

/// Who holds a lease. Described only when asked (a refused drop naming its
/// holders): every request and search takes a lease, so none formats text up front.
type Holder = Box<dyn std::fmt::Display + Send + Sync>;

/// A lease holder `<what> for <user>`, from handles that are cheap to clone.
pub struct ForUser<W> {
    /// What holds the database: an operation, a method and path, a search.
    pub what: W,
    /// On whose behalf.
    pub user: Arc<crate::access::User>,
}

impl<W: std::fmt::Display> std::fmt::Display for ForUser<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} for {}", self.what, self.user.username)
    }
}

/// A named hold on an open database (a request, a backup, a search stream, a job).
/// Released when dropped.
pub struct Lease {
    db: Arc<Db>,
    id: u64,
}

impl Lease {
    /// The database held.
    pub fn db(&self) -> &Arc<Db> {
        &self.db
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.db.leases.lock().remove(&self.id);
    }
}

/// Storage figures for `describe_table`.
#[derive(Debug, Clone)]
pub struct TableStats {
    /// The table's schema when described.
    pub schema: Arc<TableSchema>,
    /// Records in the table.
    pub record_count: u64,
    /// Bytes the table's records and indexes occupy.
    pub table_size: u64,
    /// Bytes the whole database file occupies.
    pub db_size: u64,
    /// Bytes the database's transaction log occupies.
    pub db_audit_size: u64,
    /// Version of the table's last write, if any.
    pub last_updated_record: Option<f64>,
    /// Its vector indexes as they stand, by attribute.
    pub vector_indexes: Vec<derived::IndexStatus>,
}

impl Db {
    /// Opens (creating if absent) the database `name` in `dir`.
    pub(crate) fn open(
        name: &str,
        dir: &Path,
        options: DatabaseOptions,
        writer: WriterOptions,
        clock: Arc<VersionClock>,
        blobs: Arc<BlobStore>,
        computers: Computers,
    ) -> Result<Arc<Db>> {
        let store = Database::open(name, dir, options)?;
        let schema = {
            let txn = store.read()?;
            DatabaseSchema::load(name, txn.catalog_entries()?)?
        };
        let published = Arc::new(RwLock::new(Arc::new(schema)));
        let state = published.read().clone();
        let sink = published.clone();
        let on_commit = Box::new(move |state: &SchemaState, _seq: u64| {
            let mut current = sink.write();
            if !Arc::ptr_eq(&current, state) {
                *current = state.clone();
            }
        });
        let writer = Writer::spawn(store.clone(), clock, state, on_commit, writer)?;
        Ok(Arc::new(Db {
            name: name.to_string(),
            store,
            writer,
            published,
            leases: Mutex::new(HashMap::default()),
            next_lease: AtomicU64::new(0),
            closing: AtomicBool::new(false),
            closing_signal: watch::Sender::new(false),
            attached: Mutex::new(Default::default()),
            opened_at: crate::time::now_ms(),
            derived: Default::default(),
            blobs,
            computers,
        }))
    }

    /// What computes this database's `@computed` attributes, for one job.
    pub(crate) fn computing(&self) -> Computing {
        self.computers.for_database(&self.name)
    }

    /// The database's blob files.
    pub fn blobs(&self) -> &Arc<BlobStore> {
        &self.blobs
    }

    /// The database's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The last published schema.
    pub fn schema(&self) -> SchemaState {
        self.published.read().clone()
    }

    /// The live derived (vector) indexes: what queries read and what decides
    /// whether a write must wait for one to catch up.
    pub fn derived(&self) -> &derived::DerivedIndexes {
        &self.derived
    }

    /// The storage handle (crate-internal: protocols go through `Table`).
    pub(crate) fn store(&self) -> &Database {
        &self.store
    }

    /// A consistent read snapshot of the whole database (crate-internal: protocols
    /// read through `Table`).
    pub(crate) fn snapshot(&self) -> Result<ReadTxn> {
        Ok(self.store.read()?)
    }

    /// The `system` database's tables are Lyre's own (users, roles, jobs): their
    /// shape is not the client's to change.
    pub(crate) fn refuse_system_change(&self) -> Result<()> {
        if self.name == SYSTEM_DATABASE {
            return Err(Error::invalid("the system database's tables cannot be created, dropped or altered"));
        }
        Ok(())
    }

    pub(crate) fn table_not_found(&self, table: &str) -> Error {
        Error::TableNotFound { database: self.name.clone(), table: table.to_string() }
    }

    /// Runs `work` as one logical transaction on the writer.
    pub(crate) async fn write<T, F>(&self, ctx: &Context, operation: &str, work: F) -> Result<T>
    where
        F: FnOnce(&mut WriteTxn<'_, '_>, &mut SchemaState) -> Result<T> + Send + 'static,
        T: Send + 'static,
    {
        let meta = JobMeta {
            user: ctx.username().to_string(),
            operation: operation.to_string(),
            origin: ctx.origin().map(str::to_string),
        };
        self.writer.submit(meta, work).await
    }

    /// [`Db::write`], answering once the job is queued with a future that resolves
    /// when it is committed (see `Writer::enqueue`).
    pub(crate) async fn write_queued<T, F>(
        &self,
        ctx: &Context,
        operation: &str,
        work: F,
    ) -> Result<impl Future<Output = Result<T>> + Send + 'static>
    where
        F: FnOnce(&mut WriteTxn<'_, '_>, &mut SchemaState) -> Result<T> + Send + 'static,
        T: Send + 'static,
    {
        let meta = JobMeta {
            user: ctx.username().to_string(),
            operation: operation.to_string(),
            origin: ctx.origin().map(str::to_string),
        };
        self.writer.enqueue(meta, work).await
    }

    /// Makes sure table `name` has storage (committed on its own, before the job that
    /// names it in the catalog; see `Writer::prepare_table`).
    pub(crate) async fn prepare_table(&self, name: &str) -> Result<()> {
        Ok(self.writer.prepare_table(name).await?)
    }

    /// What this database's writer has done since it opened (commits, batch
    /// sizes, time committing), for metrics.
    pub fn writer_stats(&self) -> lyre_store::WriterCounts {
        self.writer.stats()
    }

    /// Drops this process's resident pages of the database's map, which stay in
    /// the operating system's cache: what a long write (a bulk load touching every
    /// index) leaves mapped otherwise counts in the process's resident memory until
    /// the kernel needs it. Answers the bytes of mappings released. Runs on the
    /// blocking pool.
    pub async fn release_resident_pages(&self) -> Result<usize> {
        let store = self.store.clone();
        crate::task::blocking(move || Ok(store.release_resident_pages()?)).await
    }

    /// [`Db::release_resident_pages`] once the process's resident pages of mapped
    /// files pass `budget` bytes (a long write calls this as it goes: it releases
    /// only as often as its working set needs).
    pub async fn release_resident_pages_over(&self, budget: usize) -> Result<usize> {
        let store = self.store.clone();
        crate::task::blocking(move || Ok(store.release_resident_pages_over(budget)?)).await
    }

    /// Figures for every table of the database now (sizes for metrics, analytics
    /// and `system_information`); a table whose figures cannot be read is left out.
    pub fn all_table_stats(&self) -> Vec<TableStats> {
        self.schema().tables.values().filter_map(|table| self.table_stats(table).ok()).collect()
    }

    /// Figures for `describe_table`.
    pub fn table_stats(&self, table: &Arc<TableSchema>) -> Result<TableStats> {
        let txn = self.store.read()?;
        let (record_count, table_size) = match txn.table(&table.name)? {
            Some(store) => (txn.count_records(&store)?, txn.table_size(&store)?),
            None => (0, 0),
        };
        let last_updated_record =
            txn.meta(&last_updated_key(&table.name))?.and_then(|b| b.try_into().ok()).map(f64::from_be_bytes);
        Ok(TableStats {
            schema: table.clone(),
            record_count,
            table_size,
            db_size: self.store.disk_size()?,
            db_audit_size: txn.log_size()?,
            last_updated_record,
            vector_indexes: self.derived.status_of(table),
        })
    }

    /// Takes a lease naming `holder` (e.g. "a backup of 'dev' for admin", or a
    /// [`ForUser`]).
    pub fn lease(self: &Arc<Self>, holder: impl std::fmt::Display + Send + Sync + 'static) -> Lease {
        let id = self.next_lease.fetch_add(1, Ordering::Relaxed);
        self.leases.lock().insert(id, Box::new(holder));
        Lease { db: self.clone(), id }
    }

    /// Who holds leases now.
    pub fn lease_holders(&self) -> Vec<String> {
        let leases = self.leases.lock();
        let mut holders: Vec<_> = leases.iter().collect();
        holders.sort_unstable_by_key(|(id, _)| **id); // oldest first
        holders.into_iter().map(|(_, holder)| holder.to_string()).collect()
    }

    /// Handles on the database's storage (this database's own, the writer's, and
    /// every open snapshot): what must reach its baseline before the files can go.
    pub fn open_handles(&self) -> usize {
        self.store.open_handles()
    }

    /// Whether the database is going away (a drop or restore is waiting for its
    /// users): long-running readers stop at their next step.
    pub fn is_closing(&self) -> bool {
        self.closing.load(Ordering::Acquire)
    }

    pub(crate) fn set_closing(&self, closing: bool) {
        self.closing.store(closing, Ordering::Release);
        self.closing_signal.send_replace(closing);
    }

    /// Tells its holder the moment the database starts (or stops) going away, for
    /// tasks that wait on it rather than read it step by step.
    pub(crate) fn closing_signal(&self) -> watch::Receiver<bool> {
        self.closing_signal.subscribe()
    }

    /// The format a backup of this database takes now: a tar once it has blob
    /// files, or a table that declares a `Blob` attribute (so a first blob
    /// committed while the backup starts is not left out) ([`backup`]). Reads the
    /// blob directories: call it off the async workers.
    pub fn backup_format(&self) -> Result<backup::BackupFormat> {
        let declares_blobs = self
            .schema()
            .tables
            .values()
            .any(|table| table.attributes.iter().any(|a| a.type_name.as_deref() == Some(crate::blobs::BLOB_TYPE)));
        match declares_blobs {
            true => Ok(backup::BackupFormat::Tar),
            false => backup::BackupFormat::for_store(&self.blobs),
        }
    }

    /// Writes a compacted, consistent copy of the database (one snapshot; writes
    /// carry on), in `format` (with its blob files when a tar), to `file`: what
    /// `get_backup` streams and `restore` reads back.
    pub fn backup_to(&self, ctx: &Context, format: backup::BackupFormat, file: &mut std::fs::File) -> Result<()> {
        require_super_user(ctx)?;
        let scratch = self.store.dir().parent().unwrap_or(self.store.dir()).to_path_buf();
        backup::write(&self.store, &self.blobs, format, &scratch, file)
    }

    /// Stops the writer after the queued writes are applied.
    pub(crate) fn shutdown(&self) {
        self.writer.shutdown();
    }
}

/// Meta key holding the version of a table's last write.
pub(crate) fn last_updated_key(table: &str) -> Vec<u8> {
    format!("updated:{table}").into_bytes()
}
