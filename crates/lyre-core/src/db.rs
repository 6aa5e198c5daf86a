//! One open database: its store, its writer and its published schema.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use lyre_store::{Database, DatabaseOptions, JobMeta, VersionClock, WriteTxn, Writer, WriterOptions};

use crate::access::require_super_user;
use crate::catalog::define;
use crate::catalog::{
    AttributeSpec, DatabaseSchema, TableDefinition, TableSchema, TableSpec, validate_attribute_name,
    validate_definition_names,
};
use crate::context::Context;
use crate::error::{Error, Result};
use crate::index;
use crate::table::Table;

/// The writer's state: the database schema, copied on write.
pub(crate) type SchemaState = Arc<DatabaseSchema>;

/// An open database. Shared behind an `Arc` by everything using it: every `Arc`
/// is a handle a drop waits for, and long-lived users name themselves with a
/// [`Lease`] so a refused drop can say who holds the database.
pub struct Db {
    name: String,
    store: Database,
    writer: Writer<SchemaState>,
    published: Arc<RwLock<SchemaState>>,
    leases: Mutex<BTreeMap<u64, Holder>>,
    next_lease: AtomicU64,
    /// Set while a drop or restore waits for users to leave: long-running readers
    /// stop, new requests are refused.
    closing: AtomicBool,
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
        self.db.leases.lock().unwrap_or_else(|e| e.into_inner()).remove(&self.id);
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
}

impl Db {
    /// Opens (creating if absent) the database `name` in `dir`.
    pub(crate) fn open(
        name: &str,
        dir: &Path,
        options: DatabaseOptions,
        writer: WriterOptions,
        clock: Arc<VersionClock>,
    ) -> Result<Arc<Db>> {
        let store = Database::open(name, dir, options)?;
        let schema = {
            let txn = store.read()?;
            DatabaseSchema::load(name, txn.catalog_entries()?)?
        };
        let published = Arc::new(RwLock::new(Arc::new(schema)));
        let state = read_lock(&published).clone();
        let sink = published.clone();
        let on_commit = Box::new(move |state: &SchemaState, _seq: u64| {
            let mut current = sink.write().unwrap_or_else(|e| e.into_inner());
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
            leases: Mutex::new(BTreeMap::new()),
            next_lease: AtomicU64::new(0),
            closing: AtomicBool::new(false),
        }))
    }

    /// The database's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The last published schema.
    pub fn schema(&self) -> SchemaState {
        read_lock(&self.published).clone()
    }

    /// The storage handle (crate-internal: protocols go through [`Table`]).
    pub(crate) fn store(&self) -> &Database {
        &self.store
    }

    /// A handle on table `name`.
    pub fn table(self: &Arc<Self>, name: &str) -> Result<Table> {
        let schema = self.schema();
        let table = schema.table(name).cloned().ok_or_else(|| self.table_not_found(name))?;
        Ok(Table::new(self.clone(), table))
    }

    /// The `system` database's tables are Lyre's own (users, roles, jobs): their
    /// shape is not the client's to change.
    pub(crate) fn refuse_system_change(&self) -> Result<()> {
        if self.name == crate::engine::SYSTEM_DATABASE {
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
        let meta = JobMeta { user: ctx.username().to_string(), operation: operation.to_string() };
        self.writer.submit(meta, work).await
    }

    /// Creates a table. Fails if it exists.
    pub async fn create_table(&self, ctx: &Context, spec: TableSpec) -> Result<()> {
        require_super_user(ctx)?;
        if self.schema().table(&spec.name).is_some() {
            return Err(Error::TableExists { database: self.name.clone(), table: spec.name });
        }
        self.writer.prepare_table(&spec.name).await?;
        let database = self.name.clone();
        self.write(ctx, "create_table", move |txn, state| {
            if state.table(&spec.name).is_some() {
                return Err(Error::TableExists { database, table: spec.name });
            }
            let store = txn
                .table(&spec.name)?
                .ok_or_else(|| Error::Corrupt(format!("storage of table '{}' is missing", spec.name)))?;
            // Storage left by an earlier table of the same name is emptied first.
            txn.clear_table(&store)?;
            let schema = Arc::make_mut(state);
            let table = schema.new_table(&spec);
            txn.put_catalog(&TableSchema::catalog_key(&table.name), &table.encode()?)?;
            txn.put_catalog(crate::catalog::COUNTERS_KEY, &schema.encode_counters()?)?;
            schema.tables.insert(table.name.clone(), Arc::new(table));
            Ok(())
        })
        .await
    }

    /// Creates or alters a table to match a schema definition (`schema.graphql`):
    /// missing attributes are added and new indexes built over existing records in
    /// one write; readers keep reading their snapshots meanwhile. Attributes the
    /// definition no longer names are kept (their data stays). Returns whether
    /// anything changed.
    pub async fn define_table(&self, ctx: &Context, definition: TableDefinition) -> Result<bool> {
        require_super_user(ctx)?;
        self.check_definition(&definition)?;
        self.writer.prepare_table(&definition.table).await?;
        self.write(ctx, "define_table", move |txn, state| define::apply(txn, state, definition)).await
    }

    /// Fails when `definition` cannot be applied to this database as it is now: a
    /// system database, a bad name, or a primary key other than the existing table's.
    /// Lets a schema of several tables be checked whole before any of it is applied.
    pub(crate) fn check_definition(&self, definition: &TableDefinition) -> Result<()> {
        self.refuse_system_change()?;
        validate_definition_names(definition)?;
        match self.schema().table(&definition.table) {
            Some(current) => current.check_primary_key(definition),
            None => Ok(()),
        }
    }

    /// Drops a table and all its records.
    pub async fn drop_table(&self, ctx: &Context, table: &str) -> Result<()> {
        require_super_user(ctx)?;
        self.refuse_system_change()?;
        let name = table.to_string();
        let database = self.name.clone();
        self.write(ctx, "drop_table", move |txn, state| {
            if state.table(&name).is_none() {
                return Err(Error::TableNotFound { database, table: name });
            }
            if let Some(store) = txn.table(&name)? {
                txn.release_table(&store)?;
            }
            txn.delete_catalog(&TableSchema::catalog_key(&name))?;
            Arc::make_mut(state).tables.shift_remove(&name);
            Ok(())
        })
        .await
    }

    /// Adds an attribute to a table and indexes the existing records for it.
    pub async fn create_attribute(&self, ctx: &Context, table: &str, spec: AttributeSpec) -> Result<()> {
        require_super_user(ctx)?;
        self.refuse_system_change()?;
        validate_attribute_name(&spec.name)?;
        let table = table.to_string();
        let database = self.name.clone();
        self.write(ctx, "create_attribute", move |txn, state| {
            let existing = state
                .table(&table)
                .ok_or_else(|| Error::TableNotFound { database: database.clone(), table: table.clone() })?;
            if existing.attribute(&spec.name).is_some() {
                return Err(Error::AttributeExists { database, table, attribute: spec.name });
            }
            let schema = Arc::make_mut(state);
            let attribute = schema.add_attribute(&table, spec)?;
            let updated = schema.table(&table).cloned().ok_or_else(|| Error::Corrupt("table vanished".into()))?;
            if attribute.indexed {
                let multi = index::build_attribute_index(txn, &updated, &attribute)?;
                if multi {
                    schema.mark_multi_valued(&table, &attribute.name)?;
                }
            }
            let updated = schema.table(&table).cloned().ok_or_else(|| Error::Corrupt("table vanished".into()))?;
            txn.put_catalog(&TableSchema::catalog_key(&table), &updated.encode()?)?;
            txn.put_catalog(crate::catalog::COUNTERS_KEY, &schema.encode_counters()?)?;
            Ok(())
        })
        .await
    }

    /// Removes an attribute: its index, and (in dynamic tables) its values.
    pub async fn drop_attribute(&self, ctx: &Context, table: &str, attribute: &str) -> Result<()> {
        require_super_user(ctx)?;
        self.refuse_system_change()?;
        let table = table.to_string();
        let attribute = attribute.to_string();
        let database = self.name.clone();
        self.write(ctx, "drop_attribute", move |txn, state| {
            let existing =
                state.table(&table).ok_or_else(|| Error::TableNotFound { database, table: table.clone() })?;
            let found = existing.attribute(&attribute).ok_or_else(|| Error::AttributeNotFound(attribute.clone()))?;
            if found.is_primary_key {
                return Err(Error::invalid(format!("cannot drop the primary key attribute: {attribute}")));
            }
            if existing.has_timestamps()
                && (attribute == crate::catalog::CREATED_TIME || attribute == crate::catalog::UPDATED_TIME)
            {
                return Err(Error::invalid(format!("cannot drop internal timestamp attribute: {attribute}")));
            }
            let dropped = found.clone();
            let existing = existing.clone();
            index::drop_attribute_values(txn, &existing, &dropped)?;
            let schema = Arc::make_mut(state);
            schema.remove_attribute(&table, &attribute)?;
            let updated = schema.table(&table).cloned().ok_or_else(|| Error::Corrupt("table vanished".into()))?;
            txn.put_catalog(&TableSchema::catalog_key(&table), &updated.encode()?)?;
            Ok(())
        })
        .await
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
        })
    }

    /// Takes a lease naming `holder` (e.g. "a backup of 'dev' for admin", or a
    /// [`ForUser`]).
    pub fn lease(self: &Arc<Self>, holder: impl std::fmt::Display + Send + Sync + 'static) -> Lease {
        let id = self.next_lease.fetch_add(1, Ordering::Relaxed);
        self.leases.lock().unwrap_or_else(|e| e.into_inner()).insert(id, Box::new(holder));
        Lease { db: self.clone(), id }
    }

    /// Who holds leases now.
    pub fn lease_holders(&self) -> Vec<String> {
        self.leases.lock().unwrap_or_else(|e| e.into_inner()).values().map(|holder| holder.to_string()).collect()
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
    }

    /// Writes a compacted, consistent copy of the database (one snapshot; writes
    /// carry on) to `file`: what `get_backup` streams and `restore` reads back.
    pub fn backup_to(&self, ctx: &Context, file: &mut std::fs::File) -> Result<()> {
        require_super_user(ctx)?;
        Ok(self.store.copy_to(file)?)
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

fn read_lock(lock: &RwLock<SchemaState>) -> SchemaState {
    lock.read().unwrap_or_else(|e| e.into_inner()).clone()
}
