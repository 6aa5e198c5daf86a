//! The engine: the registry of open databases, the version clock and the users.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use lyre_store::{DatabaseOptions, Layout, VersionClock, WriterOptions};
use parking_lot::{Mutex, RwLock};

use crate::access::{CatalogView, Context, Structure, require_structure, require_super_user, require_super_user_for};
use crate::blobs::BlobStore;
use crate::catalog::{
    SYSTEM_DATABASE, TableDefinition, TableSpec, check_name_length, validate_attribute_name, validate_database_name,
    validate_table_name,
};
use crate::db::Db;
use crate::error::{Error, LifecycleError, Result};
use crate::failpoint;
use crate::lifecycle::files::{self, FileLock};
use crate::lifecycle::marker::{Kind, Targets};
use crate::lifecycle::{self, Blocked};
use crate::record::computed::{AttributeComputer, Computers};
use crate::task::blocking;
use crate::users::{AdminBootstrap, LoginLimit, Users};

/// How to start the engine.
#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// The root directory (Harper's `rootPath`).
    pub root: PathBuf,
    /// This node's id (breaks version ties between nodes).
    pub node_id: u16,
    /// How databases are opened.
    pub storage: DatabaseOptions,
    /// How writers batch.
    pub writer: WriterOptions,
    /// The first super user.
    pub admin: AdminBootstrap,
    /// How long a verified login is trusted without re-hashing.
    pub auth_cache_ttl: Duration,
    /// The bound on failed logins per user name and per address.
    pub login_limit: LoginLimit,
    /// Where databases live (Harper's `storage.path`); `<root>/database` when `None`.
    pub databases_dir: Option<PathBuf>,
    /// How long a drop or restore waits for a database's users to leave before it
    /// gives up with 409.
    pub release_timeout: Duration,
    /// Where blobs live (Harper's `storage.blobPaths`), each database under its
    /// name; `<root>/blobs` when empty.
    pub blob_paths: Vec<PathBuf>,
}

#[cfg(any(test, feature = "testing"))]
impl EngineOptions {
    /// Options for a root at `root` with a 1 GiB map and no flushing (tests that
    /// crash the engine set `storage.durable`); the bootstrap user is
    /// admin/password.
    pub fn for_tests(root: &std::path::Path) -> Self {
        Self {
            root: root.to_path_buf(),
            node_id: 1,
            storage: DatabaseOptions { map_size: 1 << 30, durable: false },
            writer: Default::default(),
            admin: AdminBootstrap { username: "admin".into(), password: Some("password".into()) },
            auth_cache_ttl: Duration::from_secs(30),
            login_limit: Default::default(),
            databases_dir: None,
            release_timeout: Duration::from_secs(5),
            blob_paths: Vec::new(),
        }
    }
}

/// Everything that is open: databases and users. One per process.
pub struct Engine {
    layout: Layout,
    options: EngineOptions,
    /// The blob paths, absolute (see [`EngineOptions::blob_paths`]).
    blob_paths: Vec<PathBuf>,
    clock: Arc<VersionClock>,
    databases: RwLock<BTreeMap<String, Arc<Db>>>,
    /// Databases not loaded because an interrupted drop or restore could not be
    /// finished safely, with the reason.
    blocked: RwLock<Blocked>,
    /// Databases whose storage did not close when a drop or restore closed them: their
    /// files may still be open in this process, so only a restart may finish the job.
    unclosed: Mutex<std::collections::BTreeSet<String>>,
    /// Serializes creating, dropping and restoring databases.
    lifecycle: tokio::sync::Mutex<()>,
    /// Databases with a drop or restore running now: a second one of the same name
    /// is refused at once (409) instead of waiting behind it.
    in_progress: Mutex<std::collections::BTreeSet<String>>,
    users: Users,
    /// What computes `@computed` attributes, once the server installs it.
    computers: Computers,
    /// Held while the engine runs: one process per root.
    _server_lock: FileLock,
}

/// The blob store of database `name` under `paths`.
fn blob_store(paths: &[PathBuf], name: &str, storage: &DatabaseOptions) -> Arc<BlobStore> {
    BlobStore::new(paths.iter().map(|path| path.join(name)).collect(), storage.durable)
}

impl Engine {
    /// Opens every database under the root and the user store. Returns the engine and
    /// the super user's generated password when one was created.
    pub async fn open(options: EngineOptions) -> Result<(Arc<Engine>, Option<String>)> {
        let mut layout = Layout::new(options.root.clone());
        if let Some(dir) = &options.databases_dir {
            layout = layout.with_databases_dir(dir.clone());
        }
        std::fs::create_dir_all(layout.databases_dir()).map_err(lyre_store::Error::from)?;
        let server_lock = lifecycle::server_lock(&layout)?;
        // Interrupted drops and restores are finished (or refused) before any database
        // is opened, so a half-deleted database never loads as healthy.
        let blocked = lifecycle::recover(&layout)?;
        let blob_paths = crate::blobs::resolve_paths(layout.root(), &options.blob_paths)?;
        let clock = Arc::new(VersionClock::new(options.node_id, 0.0));
        let mut databases = BTreeMap::new();
        let computers = Computers::default();
        for entry in std::fs::read_dir(layout.databases_dir()).map_err(lyre_store::Error::from)? {
            let entry = entry.map_err(lyre_store::Error::from)?;
            // A link to a directory elsewhere is a database too (a drop refuses it).
            if !entry.path().is_dir() {
                continue;
            }
            let Some(name) = entry.file_name().to_str().map(str::to_string) else {
                continue;
            };
            if !lifecycle::is_database_dir_name(&name) || blocked.contains_key(&name) {
                continue;
            }
            let blobs = blob_store(&blob_paths, &name, &options.storage);
            let db = Db::open(
                &name,
                &entry.path(),
                options.storage.clone(),
                options.writer.clone(),
                clock.clone(),
                blobs,
                computers.clone(),
            )?;
            databases.insert(name, db);
        }
        let system = match databases.get(SYSTEM_DATABASE) {
            Some(db) => db.clone(),
            None => {
                let db = Db::open(
                    SYSTEM_DATABASE,
                    &layout.database_dir(SYSTEM_DATABASE),
                    options.storage.clone(),
                    options.writer.clone(),
                    clock.clone(),
                    blob_store(&blob_paths, SYSTEM_DATABASE, &options.storage),
                    computers.clone(),
                )?;
                databases.insert(SYSTEM_DATABASE.to_string(), db.clone());
                db
            }
        };
        let (users, generated) =
            Users::bootstrap(system, &options.admin, options.auth_cache_ttl, options.login_limit).await?;
        let engine = Engine {
            layout,
            options,
            blob_paths,
            clock,
            databases: RwLock::new(databases),
            blocked: RwLock::new(blocked),
            unclosed: Mutex::new(Default::default()),
            lifecycle: tokio::sync::Mutex::new(()),
            in_progress: Mutex::new(Default::default()),
            users,
            computers,
            _server_lock: server_lock,
        };
        // The engine starts no background work: that is the services' (`services/`).
        Ok((Arc::new(engine), generated))
    }

    /// Installs the code that computes `@computed` attributes, for every database
    /// (the server's JavaScript engine).
    pub fn install_attribute_computer(&self, computer: Arc<dyn AttributeComputer>) {
        self.computers.install(computer);
    }

    /// Database `name`'s blob store: its directory under each blob path.
    fn blob_store(&self, name: &str) -> Arc<BlobStore> {
        blob_store(&self.blob_paths, name, &self.options.storage)
    }

    /// Database `name`'s blob directories (a drop deletes them, a restore replaces
    /// them).
    pub fn blob_roots(&self, name: &str) -> Vec<PathBuf> {
        self.blob_paths.iter().map(|path| path.join(name)).collect()
    }

    /// The user store.
    pub fn users(&self) -> &Users {
        &self.users
    }

    /// The root directory's layout.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// An open database. Refused while it is being dropped or restored, and when
    /// start-up could not safely finish an interrupted drop or restore of it.
    pub fn database(&self, name: &str) -> Result<Arc<Db>> {
        self.check_not_blocked(name)?;
        let databases = self.databases.read();
        let db = databases.get(name).cloned().ok_or_else(|| Error::DatabaseNotFound(name.to_string()))?;
        if db.is_closing() {
            return Err(LifecycleError::Closing { database: name.to_string() }.into());
        }
        Ok(db)
    }

    /// Databases that are not loaded, with the reason (an interrupted drop or restore
    /// start-up refused to act on).
    pub fn blocked_databases(&self) -> Blocked {
        self.blocked.read().clone()
    }

    fn check_not_blocked(&self, name: &str) -> Result<()> {
        match self.blocked.read().get(name) {
            Some(reason) => Err(blocked(name, reason)),
            None => Ok(()),
        }
    }

    /// User databases (not `system`), by name.
    pub fn databases(&self) -> Vec<Arc<Db>> {
        let databases = self.databases.read();
        databases.iter().filter(|(name, _)| name.as_str() != SYSTEM_DATABASE).map(|(_, db)| db.clone()).collect()
    }

    /// The names of every open database, `system` included.
    pub fn database_names(&self) -> Vec<String> {
        self.databases.read().keys().cloned().collect()
    }

    /// Creates a database. Fails if it exists.
    /// Super users and structure users of every database may.
    pub async fn create_database(&self, ctx: &Context, name: &str) -> Result<Arc<Db>> {
        require_all_structure(ctx, "create_database")?;
        validate_database_name(name)?;
        let _guard = self.lifecycle.lock().await;
        self.check_not_blocked(name)?;
        if self.database(name).is_ok() {
            return Err(Error::DatabaseExists(name.to_string()));
        }
        self.open_database(name)
    }

    /// Database `name`, created when it does not exist (as Harper's `create_table`
    /// does). A blocked or closing database is an error, never silently reopened.
    fn database_or_create(&self, name: &str) -> Result<Arc<Db>> {
        match self.database(name) {
            Err(Error::DatabaseNotFound(_)) => self.open_database(name),
            found => found,
        }
    }

    fn open_database(&self, name: &str) -> Result<Arc<Db>> {
        self.check_not_blocked(name)?;
        let db = Db::open(
            name,
            &self.layout.database_dir(name),
            self.options.storage.clone(),
            self.options.writer.clone(),
            self.clock.clone(),
            self.blob_store(name),
            self.computers.clone(),
        )?;
        let mut databases = self.databases.write();
        databases.insert(name.to_string(), db.clone());
        Ok(db)
    }

    /// Creates a table, creating its database first if needed (as Harper does).
    pub async fn create_table(&self, ctx: &Context, database: &str, spec: TableSpec) -> Result<()> {
        require_structure(ctx, database, "create_table")?;
        validate_database_name(database)?;
        validate_table_name(&spec.name)?;
        check_name_length("primary_key", &spec.primary_key)?;
        validate_attribute_name(&spec.primary_key).map_err(|_| {
            Error::invalid("'primary_key' names cannot include backticks or forward slashes and cannot be empty")
        })?;
        let db = {
            let _guard = self.lifecycle.lock().await;
            self.database_or_create(database)?
        };
        db.refuse_system_change()?;
        db.create_table(ctx, spec).await
    }

    /// Creates or alters the tables a `schema.graphql` defines, creating databases as
    /// needed. Returns the names (`db.table`) of tables that changed. Every definition
    /// is checked against the catalog before any is applied, so a schema that cannot
    /// be applied (a changed primary key, a bad name) changes nothing; a storage
    /// failure or a concurrent schema change can still stop it part-way.
    pub async fn define_tables(&self, ctx: &Context, definitions: Vec<TableDefinition>) -> Result<Vec<String>> {
        require_super_user(ctx)?;
        for definition in &definitions {
            match self.database(&definition.database) {
                Ok(db) => db.check_definition(definition)?,
                Err(Error::DatabaseNotFound(_)) => crate::catalog::validate_definition_names(definition)?,
                Err(err) => return Err(err),
            }
        }
        let mut changed = Vec::new();
        for definition in definitions {
            let db = {
                let _guard = self.lifecycle.lock().await;
                self.database_or_create(&definition.database)?
            };
            let name = format!("{}.{}", definition.database, definition.table);
            if db.define_table(ctx, definition).await? {
                changed.push(name);
            }
        }
        Ok(changed)
    }

    /// Drops a database through the crash-safe protocol in [`crate::lifecycle`]: a
    /// marker first, then users are told to leave (409 naming the holders if they do
    /// not within the release timeout, with nothing changed), then the recorded
    /// directory is deleted strictly and the marker removed.
    pub async fn drop_database(&self, ctx: &Context, name: &str) -> Result<()> {
        require_all_structure(ctx, "drop_database")?;
        if name == SYSTEM_DATABASE {
            return Err(Error::invalid("the system database cannot be dropped"));
        }
        validate_database_name(name)?;
        let _running = self.claim(name, "drop")?;
        let _guard = self.lifecycle.lock().await;
        let _lock = lifecycle::lock(&self.layout, name)?;
        let blocked = self.blocked.read().get(name).cloned();
        if let Some(reason) = blocked {
            return self.retry_blocked_drop(name, reason).await;
        }
        let db = self.database(name)?;
        let dir = lifecycle::absolute(db.store().dir())?;
        let targets = Targets { database: dir, staged: None, previous: None, blob_roots: Some(self.blob_roots(name)) };
        lifecycle::refuse_links(&targets)?;
        let (marker, resumed) = lifecycle::begin(&self.layout, name, Kind::Drop, targets)?;
        failpoint::hit("drop-marked")?;
        if let Err(err) = self.release(&db).await {
            if !resumed {
                lifecycle::end(&self.layout, name)?;
            }
            return Err(err);
        }
        self.close_or_block(name, db, "drop").await?;
        failpoint::hit("drop-closed")?;
        if let Err(err) = blocking(move || lifecycle::delete_recorded(&marker)).await {
            // The marker stays: the next start (or a retried drop) finishes the job.
            self.block(name, format!("its drop did not finish ({err}); retry drop_database or restart"));
            return Err(err);
        }
        failpoint::hit("drop-deleted")?;
        lifecycle::end(&self.layout, name)
    }

    /// A drop of a database left blocked by an earlier failed removal: finish it from
    /// its marker (not when its storage failed to close: its files may still be open).
    async fn retry_blocked_drop(&self, name: &str, reason: String) -> Result<()> {
        let refused = || Err(blocked(name, &reason));
        if self.unclosed.lock().contains(name) {
            return refused();
        }
        match lifecycle::marker::read(&self.layout.lifecycle_dir(), &lifecycle::marker::key(name)) {
            Ok(Some(marker)) if marker.kind == Kind::Drop => {
                blocking(move || lifecycle::delete_recorded(&marker)).await?;
                lifecycle::end(&self.layout, name)?;
                self.blocked.write().remove(name);
                Ok(())
            }
            _ => refused(),
        }
    }

    /// Replaces database `name` (created if absent) with the backup file `backup`,
    /// through the same marker protocol as a drop: the backup is copied beside the
    /// database and checked first, users are told to leave (409 if they do not), and
    /// the copy is swapped in.
    pub async fn restore_database(&self, ctx: &Context, name: &str, backup: &std::path::Path) -> Result<()> {
        require_super_user(ctx)?;
        validate_database_name(name)?;
        if name == SYSTEM_DATABASE {
            return Err(Error::invalid("the system database cannot be restored while the server runs"));
        }
        let _running = self.claim(name, "restore")?;
        let _guard = self.lifecycle.lock().await;
        let _lock = lifecycle::lock(&self.layout, name)?;
        self.check_not_blocked(name)?;
        let targets = lifecycle::restore_targets(&self.layout, name, self.blob_roots(name))?;
        lifecycle::refuse_links(&targets)?;
        let layout = self.layout.clone();
        let restoring = name.to_string();
        let marker = blocking(move || lifecycle::begin_restore(&layout, &restoring, targets)).await?;
        let (staging, backup) = (marker.clone(), backup.to_path_buf());
        let options = self.options.storage.clone();
        if let Err(err) = blocking(move || lifecycle::stage(&staging, &backup, &options)).await {
            self.abandon_restore(name, &marker).await?;
            return Err(err);
        }
        failpoint::hit("restore-staged")?;
        if let Ok(db) = self.database(name) {
            if let Err(err) = self.release(&db).await {
                self.abandon_restore(name, &marker).await?;
                return Err(err);
            }
            self.close_or_block(name, db, "restore").await?;
        }
        let swapping = marker.clone();
        if let Err(err) = blocking(move || lifecycle::swap(&swapping)).await {
            // The marker stays: the next start completes or undoes the swap from it.
            self.block(name, format!("its restore did not finish ({err}); restart to complete it"));
            return Err(err);
        }
        lifecycle::end(&self.layout, name)?;
        self.open_database(name).map(|_| ())
    }

    /// Marks a drop or restore of `name` as running until the returned guard drops;
    /// refused while another one of the same database runs.
    fn claim(&self, name: &str, operation: &str) -> Result<Running<'_>> {
        if !self.in_progress.lock().insert(name.to_string()) {
            return Err(LifecycleError::Busy(format!(
                "a drop or restore of database '{name}' is in progress; this {operation} was refused"
            ))
            .into());
        }
        Ok(Running { engine: self, name: name.to_string() })
    }

    /// Undoes a restore that has not touched the live database: its staged copy is
    /// deleted (best effort; the next restore clears it anyway) and its marker removed.
    async fn abandon_restore(&self, name: &str, marker: &lifecycle::marker::Marker) -> Result<()> {
        if let Some(staged) = marker.targets.staged.clone() {
            let _ = blocking(move || files::remove_dir_strictly(&staged)).await;
        }
        let staged_blobs = marker.clone();
        let _ = blocking(move || lifecycle::remove_staged_blobs(&staged_blobs)).await;
        lifecycle::end(&self.layout, name)
    }

    /// Tells `db`'s users it is going away and waits (bounded) until only the
    /// registry and the caller hold it. On timeout, undoes the "going away" and
    /// answers 409 naming who still holds it.
    async fn release(&self, db: &Arc<Db>) -> Result<()> {
        db.set_closing(true);
        let now = tokio::time::Instant::now();
        let deadline = now.checked_add(self.options.release_timeout).unwrap_or(now + Duration::from_secs(86_400));
        // The registry's handle and the caller's.
        while Arc::strong_count(db) > 2 {
            if tokio::time::Instant::now() >= deadline {
                db.set_closing(false);
                // Every lease holds one handle; handles beyond those belong to leased
                // requests' own work (or, briefly, to requests between steps).
                let mut named = db.lease_holders();
                let others = (Arc::strong_count(db) - 2).saturating_sub(named.len());
                if named.is_empty() {
                    named.push(format!("requests in flight ({others} handle(s))"));
                }
                return Err(LifecycleError::InUse { database: db.name().to_string(), holders: named.join(", ") }.into());
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(())
    }

    /// [`Engine::close`]; when the storage does not close, `name` is blocked (its
    /// marker stays, so the next start finishes the `operation`) rather than left
    /// unregistered for a later request to reopen.
    async fn close_or_block(&self, name: &str, db: Arc<Db>, operation: &str) -> Result<()> {
        let closed = self.close(name, db).await;
        if let Err(err) = &closed {
            self.unclosed.lock().insert(name.to_string());
            self.block(name, format!("its {operation} did not finish ({err}); restart to complete it"));
        }
        closed
    }

    /// Refuses every further use of database `name` until a restart (or, for a drop,
    /// a retried drop) settles it.
    fn block(&self, name: &str, reason: String) {
        self.blocked.write().insert(name.to_string(), reason);
    }

    /// Removes `db` from the registry, stops its writer and waits for its storage
    /// to close.
    async fn close(&self, name: &str, db: Arc<Db>) -> Result<()> {
        self.databases.write().remove(name);
        tokio::task::spawn_blocking(move || {
            db.shutdown();
            let closing = db.store().closing();
            drop(db);
            if !closing.wait(Duration::from_secs(10)) {
                return Err(LifecycleError::Failed("the database's storage did not close within 10 s".into()).into());
            }
            Ok(())
        })
        .await
        .map_err(|e| LifecycleError::failed("closing the database", e))?
    }

    /// Open handles and leases of every open database (what a drop would wait for).
    pub fn handles(&self) -> Vec<(String, usize, Vec<String>)> {
        let databases = self.databases.read();
        databases.values().map(|db| (db.name().to_string(), db.open_handles(), db.lease_holders())).collect()
    }

    /// Stops every writer after its queued writes commit. Later writes fail as
    /// "database closed" (retryable), never half-applied.
    pub async fn shutdown(&self) {
        let databases: Vec<Arc<Db>> = self.databases.read().values().cloned().collect();
        let stopped = tokio::task::spawn_blocking(move || databases.iter().for_each(|db| db.shutdown())).await;
        if let Err(err) = stopped {
            tracing::error!(error = %err, "stopping the writers failed");
        }
    }
}

/// A drop or restore of one database in progress (see `Engine::claim`).
struct Running<'a> {
    engine: &'a Engine,
    name: String,
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.engine.in_progress.lock().remove(&self.name);
    }
}

/// The refusal of a blocked database.
fn blocked(name: &str, reason: &str) -> Error {
    LifecycleError::Blocked { database: name.to_string(), reason: reason.to_string() }.into()
}

/// Roles are checked against the databases and tables open now.
impl CatalogView for Engine {
    fn has_database(&self, name: &str) -> bool {
        self.databases.read().contains_key(name)
    }

    fn table_attributes(&self, database: &str, table: &str) -> Option<Vec<String>> {
        let db = self.databases.read().get(database).cloned()?;
        let schema = db.schema();
        let table = schema.table(table)?;
        let attributes = table.attributes.iter().map(|a| a.name.clone());
        Some(attributes.chain(table.relationships.iter().map(|r| r.name.clone())).collect())
    }
}

/// Fails unless the user may change the structure of every database (create and
/// drop databases): a super user or a `structure_user: true` role. A role whose
/// `structure_user` lists databases may not, as in Harper.
fn require_all_structure(ctx: &Context, operation: &str) -> Result<()> {
    if ctx.user.role.permissions.structure == Structure::All {
        return Ok(());
    }
    require_super_user_for(ctx, operation)
}
