//! The engine: the registry of open databases, the version clock and the users.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use lyre_store::{DatabaseOptions, Layout, VersionClock, WriterOptions};

use crate::access::{AdminBootstrap, Users, require_super_user};
use crate::catalog::{
    TableDefinition, TableSpec, validate_attribute_name, validate_database_name, validate_table_name,
};
use crate::context::Context;
use crate::db::Db;
use crate::error::{Error, Result};

/// The database holding users and roles.
pub const SYSTEM_DATABASE: &str = "system";

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
}

/// Everything that is open: databases and users. One per process.
pub struct Engine {
    layout: Layout,
    options: EngineOptions,
    clock: Arc<VersionClock>,
    databases: RwLock<BTreeMap<String, Arc<Db>>>,
    /// Serializes creating and dropping databases.
    lifecycle: tokio::sync::Mutex<()>,
    users: Users,
}

impl Engine {
    /// Opens every database under the root and the user store. Returns the engine and
    /// the super user's generated password when one was created.
    pub async fn open(options: EngineOptions) -> Result<(Arc<Engine>, Option<String>)> {
        let layout = Layout::new(options.root.clone());
        std::fs::create_dir_all(layout.databases_dir()).map_err(lyre_store::Error::from)?;
        let clock = Arc::new(VersionClock::new(options.node_id, 0.0));
        let mut databases = BTreeMap::new();
        for entry in std::fs::read_dir(layout.databases_dir()).map_err(lyre_store::Error::from)? {
            let entry = entry.map_err(lyre_store::Error::from)?;
            if !entry.file_type().map_err(lyre_store::Error::from)?.is_dir() {
                continue;
            }
            let Some(name) = entry.file_name().to_str().map(str::to_string) else {
                continue;
            };
            let db = Db::open(&name, &entry.path(), options.storage.clone(), options.writer.clone(), clock.clone())?;
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
                )?;
                databases.insert(SYSTEM_DATABASE.to_string(), db.clone());
                db
            }
        };
        let (users, generated) = Users::bootstrap(system, &options.admin, options.auth_cache_ttl).await?;
        let engine = Engine {
            layout,
            options,
            clock,
            databases: RwLock::new(databases),
            lifecycle: tokio::sync::Mutex::new(()),
            users,
        };
        Ok((Arc::new(engine), generated))
    }

    /// The user store.
    pub fn users(&self) -> &Users {
        &self.users
    }

    /// The root directory's layout.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// An open database.
    pub fn database(&self, name: &str) -> Result<Arc<Db>> {
        let databases = self.databases.read().unwrap_or_else(|e| e.into_inner());
        databases.get(name).cloned().ok_or_else(|| Error::DatabaseNotFound(name.to_string()))
    }

    /// User databases (not `system`), by name.
    pub fn databases(&self) -> Vec<Arc<Db>> {
        let databases = self.databases.read().unwrap_or_else(|e| e.into_inner());
        databases.iter().filter(|(name, _)| name.as_str() != SYSTEM_DATABASE).map(|(_, db)| db.clone()).collect()
    }

    /// Creates a database. Fails if it exists.
    pub async fn create_database(&self, ctx: &Context, name: &str) -> Result<Arc<Db>> {
        require_super_user(ctx)?;
        validate_database_name(name)?;
        let _guard = self.lifecycle.lock().await;
        if self.database(name).is_ok() {
            return Err(Error::DatabaseExists(name.to_string()));
        }
        self.open_database(name)
    }

    fn open_database(&self, name: &str) -> Result<Arc<Db>> {
        let db = Db::open(
            name,
            &self.layout.database_dir(name),
            self.options.storage.clone(),
            self.options.writer.clone(),
            self.clock.clone(),
        )?;
        let mut databases = self.databases.write().unwrap_or_else(|e| e.into_inner());
        databases.insert(name.to_string(), db.clone());
        Ok(db)
    }

    /// Creates a table, creating its database first if needed (as Harper does).
    pub async fn create_table(&self, ctx: &Context, database: &str, spec: TableSpec) -> Result<()> {
        require_super_user(ctx)?;
        validate_database_name(database)?;
        validate_table_name(&spec.name)?;
        validate_attribute_name(&spec.primary_key).map_err(|_| {
            Error::invalid("'primary_key' names cannot include backticks or forward slashes and cannot be empty")
        })?;
        let db = {
            let _guard = self.lifecycle.lock().await;
            match self.database(database) {
                Ok(db) => db,
                Err(_) => self.open_database(database)?,
            }
        };
        db.create_table(ctx, spec).await
    }

    /// Creates or alters the tables a `schema.graphql` defines, creating databases as
    /// needed. Returns the names (`db.table`) of tables that changed.
    pub async fn define_tables(&self, ctx: &Context, definitions: Vec<TableDefinition>) -> Result<Vec<String>> {
        require_super_user(ctx)?;
        let mut changed = Vec::new();
        for definition in definitions {
            validate_database_name(&definition.database)?;
            let db = {
                let _guard = self.lifecycle.lock().await;
                match self.database(&definition.database) {
                    Ok(db) => db,
                    Err(_) => self.open_database(&definition.database)?,
                }
            };
            let name = format!("{}.{}", definition.database, definition.table);
            if db.define_table(ctx, definition).await? {
                changed.push(name);
            }
        }
        Ok(changed)
    }

    /// Drops a database: stops its writer, closes it, deletes its directory.
    pub async fn drop_database(&self, ctx: &Context, name: &str) -> Result<()> {
        require_super_user(ctx)?;
        if name == SYSTEM_DATABASE {
            return Err(Error::invalid("the system database cannot be dropped"));
        }
        let _guard = self.lifecycle.lock().await;
        let db = {
            let mut databases = self.databases.write().unwrap_or_else(|e| e.into_inner());
            databases.remove(name).ok_or_else(|| Error::DatabaseNotFound(name.to_string()))?
        };
        let dir = self.layout.database_dir(name);
        tokio::task::spawn_blocking(move || close_and_remove(db, dir))
            .await
            .map_err(|e| Error::invalid(format!("dropping the database failed: {e}")))?
    }

    /// Stops every writer after its queued writes commit. Later writes fail as
    /// "database closed" (retryable), never half-applied.
    pub async fn shutdown(&self) {
        let databases: Vec<Arc<Db>> = {
            let databases = self.databases.read().unwrap_or_else(|e| e.into_inner());
            databases.values().cloned().collect()
        };
        let stopped = tokio::task::spawn_blocking(move || databases.iter().for_each(|db| db.shutdown())).await;
        if let Err(err) = stopped {
            tracing::error!(error = %err, "stopping the writers failed");
        }
    }
}

/// Waits (bounded) for the environment to close, then removes its directory.
fn close_and_remove(db: Arc<Db>, dir: PathBuf) -> Result<()> {
    db.shutdown();
    let closing = db.store().closing();
    drop(db);
    if !closing.wait(Duration::from_secs(10)) {
        tracing::warn!(dir = %dir.display(), "database still in use by readers; removing its files anyway");
    }
    std::fs::remove_dir_all(&dir).map_err(lyre_store::Error::from)?;
    Ok(())
}
