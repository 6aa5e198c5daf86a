//! Applications ("components"): directories with a `config.yaml` and GraphQL schema
//! files, under `<root>/components/<name>/` (or one directory given to `lyre dev`).
//!
//! Loading a component reads its schema files, creates or alters the tables they
//! define (in core), and publishes the `@export`ed tables for REST. A component that
//! fails to load (a malformed schema) is reported with the file, line and problem,
//! and every other component keeps serving. Deploying, changing or dropping a
//! component reloads it at once; no restart is needed. A component's JavaScript
//! (`jsResource`) is loaded by the script host (`script/`) after its tables are
//! defined; its exported classes are served beside the tables. Scripts that fail
//! to load leave the rest of their component serving ([`Status::ScriptsFailed`]).

mod config;
mod data_loader;
mod files;
pub mod ops;
mod roles;
mod statics;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use lyre_core::catalog::{TableDefinition, parse_sdl};
use lyre_core::{Context, Engine};
use parking_lot::RwLock;

use crate::cache::Source;
use crate::cache::source::CodeSource;
use crate::process::{Ended, Supervisor};
use crate::script::{ScriptComponent, ScriptExport, ScriptSource, Scripts, ScriptsLoaded};

pub use config::ComponentConfig;
pub use statics::{Found, Site};

/// A table served over REST.
#[derive(Debug, Clone, PartialEq)]
pub struct Export {
    /// The URL path segment (`@export(name:)`).
    pub name: String,
    /// The table's database.
    pub database: String,
    /// The table.
    pub table: String,
    /// The component that exports it.
    pub component: String,
    /// Its records are served with `Last-Modified` (`rest: {lastModified: true}`).
    pub last_modified: bool,
    /// Where its records come from when it is a caching table (`sources`).
    pub source: Option<Arc<Source>>,
}

/// Every exported table by URL name, and the static sites in component order.
/// Replaced whole on each reload.
#[derive(Debug, Default)]
pub struct Exports {
    by_name: BTreeMap<String, Export>,
    /// The resources scripts export, by path (each request to one shares it).
    scripts: BTreeMap<String, Arc<ScriptExport>>,
    sites: Vec<Arc<Site>>,
    graphql: bool,
}

impl Exports {
    /// Whether a loaded component turned GraphQL querying on (Harper's endpoint then
    /// answers for every export, whichever component made it).
    pub fn graphql(&self) -> bool {
        self.graphql
    }

    /// The components' static sites, in component order (the first with an answer
    /// for a path gives it).
    pub fn sites(&self) -> &[Arc<Site>] {
        &self.sites
    }

    /// The export served at `name`.
    pub fn get(&self, name: &str) -> Option<&Export> {
        self.by_name.get(name)
    }

    /// Every export, by name.
    pub fn iter(&self) -> impl Iterator<Item = &Export> {
        self.by_name.values()
    }

    /// Whether any script exports a resource (REST looks for one only then).
    pub fn has_scripts(&self) -> bool {
        !self.scripts.is_empty()
    }

    /// The resource a script exports at `path`.
    pub fn script(&self, path: &str) -> Option<&Arc<ScriptExport>> {
        self.scripts.get(path)
    }

    /// The script resource a request path (`/api/v1/Dog/1`) reaches through a
    /// nested export (`api/v1/Dog`), the longest first, and the rest of the path.
    pub fn nested_script<'p>(&self, path: &'p str) -> Option<(&Arc<ScriptExport>, &'p str)> {
        let path = path.strip_prefix('/')?;
        self.scripts
            .iter()
            .filter(|(name, _)| name.contains('/'))
            .filter_map(|(name, export)| {
                let rest = path.strip_prefix(name.as_str())?;
                (rest.is_empty() || rest.starts_with('/')).then_some((name.len(), export, rest))
            })
            .max_by_key(|(length, _, _)| *length)
            .map(|(_, export, rest)| (export, rest))
    }
}

/// What happened when a component was last loaded.
#[derive(Debug, Clone, PartialEq)]
pub enum Status {
    /// Loaded: what it publishes.
    Loaded(Loaded),
    /// Its tables, files, roles and data loaded but its scripts did not: it serves
    /// what needs no script (as Harper serves a component's tables when its
    /// JavaScript fails) and reports the scripts' error.
    ScriptsFailed(Loaded, String),
    /// Not loaded, with the reason (naming file and line for schema errors).
    Failed(String),
}

impl Status {
    /// What the component serves, if anything loaded.
    pub fn serving(&self) -> Option<&Loaded> {
        match self {
            Status::Loaded(loaded) | Status::ScriptsFailed(loaded, _) => Some(loaded),
            Status::Failed(_) => None,
        }
    }

    /// Why the component, or its scripts, failed to load.
    pub fn failure(&self) -> Option<&str> {
        match self {
            Status::Loaded(_) => None,
            Status::ScriptsFailed(_, reason) | Status::Failed(reason) => Some(reason),
        }
    }

    /// Records that the component's scripts failed for `reason`: it serves what it
    /// loaded without them (nothing, when it had failed already).
    fn fail_scripts(&mut self, reason: String) {
        *self = match std::mem::replace(self, Status::Failed(String::new())) {
            Status::Loaded(loaded) | Status::ScriptsFailed(loaded, _) => {
                Status::ScriptsFailed(loaded.without_scripts(), reason)
            }
            Status::Failed(_) => Status::Failed(reason),
        };
    }
}

/// What a loaded component publishes.
#[derive(Debug, Clone, PartialEq)]
pub struct Loaded {
    /// Its exported tables, with what its scripts add (their table classes'
    /// paths, the sources they give tables).
    pub exports: Vec<Export>,
    /// Its exported tables as its schema and `config.yaml` alone define them: what
    /// it serves if its scripts stop loading.
    tables: Vec<Export>,
    /// Its static files, when it has any.
    pub site: Option<Arc<Site>>,
    /// It turns GraphQL querying on.
    pub graphql: bool,
    /// The resources its scripts export.
    pub scripts: Vec<ScriptExport>,
}

impl Loaded {
    /// What the component serves without its scripts: its tables, but none at a
    /// path one of its scripts' classes served (a class of a table may have
    /// narrowed who reads it; that path fails closed rather than open).
    fn without_scripts(self) -> Loaded {
        let tables =
            self.tables.iter().filter(|table| !self.scripts.iter().any(|script| script.path == table.name)).cloned();
        Loaded { exports: tables.collect(), scripts: Vec::new(), ..self }
    }
}

/// The loaded components and the exports they publish.
pub struct Components {
    engine: Arc<Engine>,
    dir: PathBuf,
    /// Component name to directory, for components outside `dir` (`lyre dev`).
    extra: BTreeMap<String, PathBuf>,
    status: RwLock<BTreeMap<String, Status>>,
    exports: RwLock<Arc<Exports>>,
    /// Serializes loads, so two reloads never interleave their table changes.
    loading: tokio::sync::Mutex<()>,
    /// Install commands in flight (killed at shutdown).
    processes: Supervisor,
    /// Where install commands' output goes.
    log_dir: PathBuf,
    /// Runs the components' JavaScript.
    scripts: Arc<Scripts>,
    /// The components with scripts, as the script host last loaded them.
    scripted: parking_lot::Mutex<BTreeMap<String, ScriptComponent>>,
    /// While every component loads at start-up: the scripted ones whose scripts
    /// wait to load all together, in one generation, once every table is defined.
    deferred: parking_lot::Mutex<Option<BTreeMap<String, Deferred>>>,
}

/// What a component whose scripts wait (see [`Components::load_all`]) needs to
/// publish them once they loaded.
struct Deferred {
    rest: config::Rest,
    sources: BTreeMap<String, Arc<Source>>,
}

impl Components {
    /// Components under `dir`, plus `extra` directories loaded by name; their
    /// scripts run on `scripts`.
    pub fn new(engine: Arc<Engine>, dir: PathBuf, extra: BTreeMap<String, PathBuf>, scripts: Arc<Scripts>) -> Self {
        let log_dir = dir.parent().map_or_else(|| PathBuf::from("log"), |root| root.join("log"));
        Self {
            engine,
            dir,
            extra,
            processes: Supervisor::default(),
            log_dir,
            scripts,
            scripted: parking_lot::Mutex::new(BTreeMap::new()),
            deferred: parking_lot::Mutex::new(None),
            status: RwLock::new(BTreeMap::new()),
            exports: RwLock::new(Arc::new(Exports::default())),
            loading: tokio::sync::Mutex::new(()),
        }
    }

    /// Kills every install command still running and stops the scripts (server shutdown).
    pub fn stop_processes(&self) {
        self.processes.stop_all();
        self.scripts.stop();
    }

    /// The script host, which answers requests for the resources scripts export.
    pub fn scripts(&self) -> &Scripts {
        &self.scripts
    }

    /// The directory holding deployed components.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The exports now served.
    pub fn exports(&self) -> Arc<Exports> {
        self.exports.read().clone()
    }

    /// Each component's last load outcome.
    pub fn status(&self) -> BTreeMap<String, Status> {
        self.status.read().clone()
    }

    /// The directory of component `name`, if it exists.
    pub fn component_dir(&self, name: &str) -> PathBuf {
        self.extra.get(name).cloned().unwrap_or_else(|| self.dir.join(name))
    }

    /// Loads every component (at start-up).
    pub async fn load_all(&self) {
        let mut names: Vec<String> = self.extra.keys().cloned().collect();
        if let Ok(entries) = std::fs::read_dir(&self.dir) {
            for entry in entries.flatten() {
                if entry.file_type().is_ok_and(|t| t.is_dir())
                    && let Some(name) = entry.file_name().to_str()
                    && !name.starts_with('.')
                {
                    names.push(name.to_string());
                }
            }
        }
        names.sort();
        names.dedup();
        // Scripts load once, all together, after every component's tables exist
        // (one generation, not one per component).
        *self.deferred.lock() = Some(BTreeMap::new());
        for name in names {
            self.reload(&name).await;
        }
        let deferred = self.deferred.lock().take().unwrap_or_default();
        if deferred.is_empty() {
            return;
        }
        let _guard = self.loading.lock().await;
        let all = self.scripted.lock().values().cloned().collect();
        let mut report = self.scripts.load(all).await;
        let mut status = self.status.write();
        for (name, waiting) in deferred {
            let outcome = report.remove(&name).unwrap_or_else(|| Err(format!("{name}: its scripts were not loaded")));
            match (outcome, status.get_mut(&name)) {
                (Ok(scripts), Some(Status::Loaded(loaded))) => {
                    let Deferred { rest, mut sources } = waiting;
                    loaded.scripts = self.attach_scripts(&name, &mut loaded.exports, &mut sources, scripts, rest);
                }
                (Err(message), Some(entry)) => {
                    tracing::error!(component = %name, error = %message, "a component's scripts failed to load");
                    self.scripted.lock().remove(&name);
                    entry.fail_scripts(message);
                }
                _ => {}
            }
        }
        drop(status);
        self.publish();
    }

    /// (Re)loads component `name` from its directory, or forgets it when the
    /// directory is gone. Returns the outcome, also kept in [`Components::status`].
    pub async fn reload(&self, name: &str) -> Status {
        let _guard = self.loading.lock().await;
        let dir = self.component_dir(name);
        let status = if dir.is_dir() {
            match self.load(name, &dir).await {
                Ok(status) => status,
                Err(message) => {
                    tracing::error!(component = name, error = %message, "component failed to load");
                    self.unload_scripts(name).await;
                    Status::Failed(message)
                }
            }
        } else {
            self.unload_scripts(name).await;
            let mut status = self.status.write();
            status.remove(name);
            drop(status);
            self.publish();
            return Status::Failed(format!("component '{name}' does not exist"));
        };
        self.status.write().insert(name.to_string(), status.clone());
        self.publish();
        status
    }

    /// Loads a component: its install step, its plugins' files checked, its tables
    /// defined, then its roles and data applied (they name its tables), then its
    /// scripts. Scripts that fail leave the rest loaded ([`Status::ScriptsFailed`]).
    async fn load(&self, name: &str, dir: &Path) -> Result<Status, String> {
        let config = ComponentConfig::read(dir)?;
        if let Some(install) = &config.install {
            self.install(name, dir, install).await?;
        }
        if let Some(routes) = &config.fastify_routes
            && let Some(file) = routes.files.globs()?.files(dir)?.first()
        {
            return Err(format!(
                "{name}: the fastifyRoutes plugin is not supported by Lyre ({} is a Fastify route file); \
                 serve the endpoint from a table or a JavaScript resource instead",
                file.display()
            ));
        }
        let site = match &config.static_files {
            Some(options) => {
                let site = Site::build(name, dir, options).map_err(|e| format!("{name}: {e}"))?;
                (!site.is_empty() || !options.fallthrough).then(|| Arc::new(site))
            }
            None => None,
        };
        let data = match &config.data_loader {
            Some(plugin) => data_loader::read_files(dir, &plugin.files).map_err(|e| format!("{name}: {e}"))?,
            None => Vec::new(),
        };
        let roles = match &config.roles {
            Some(plugin) => roles::read_files(dir, &plugin.files).map_err(|e| format!("{name}: {e}"))?,
            None => Vec::new(),
        };
        let mut definitions: Vec<TableDefinition> = Vec::new();
        for file in config.schema_files().globs()?.files(dir)? {
            let file = dir.join(file);
            let text = std::fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))?;
            let shown = file.strip_prefix(dir.parent().unwrap_or(dir)).unwrap_or(&file).display().to_string();
            definitions.extend(parse_sdl(&text, &shown).map_err(|e| e.to_string())?);
        }
        let sources = resolve_sources(&config, &definitions)?;
        let exports: Vec<Export> = if config.rest.enabled() {
            definitions
                .iter()
                .filter_map(|d| {
                    d.export.as_ref().map(|export| Export {
                        name: export.clone(),
                        database: d.database.clone(),
                        table: d.table.clone(),
                        component: name.to_string(),
                        last_modified: config.rest.last_modified(),
                        source: sources.get(&d.table).cloned(),
                    })
                })
                .collect()
        } else {
            Vec::new()
        };
        let changed =
            self.engine.define_tables(&Context::system(), definitions).await.map_err(|e| format!("{name}: {e}"))?;
        if !changed.is_empty() {
            tracing::info!(component = name, tables = ?changed, "applied schema changes");
        }
        // Every data file is checked before the roles or any record are written.
        let mut checked = Vec::with_capacity(data.len());
        for file in data {
            checked.push(data_loader::check(&self.engine, file).await.map_err(|e| format!("{name}: {e}"))?);
        }
        roles::apply(&self.engine, roles).await.map_err(|e| format!("{name}: {e}"))?;
        for file in checked {
            let outcome = data_loader::load(&self.engine, file).await.map_err(|e| format!("{name}: {e}"))?;
            tracing::info!(component = name, "{outcome}");
        }
        let script_files = match &config.js_resource {
            Some(plugin) => plugin.files.globs()?.files(dir)?,
            None => Vec::new(),
        };
        let without_scripts =
            Loaded { exports: exports.clone(), tables: exports, site, graphql: config.graphql(), scripts: Vec::new() };
        let mut sources = sources;
        let from_scripts = if script_files.is_empty() {
            self.unload_scripts(name).await;
            ScriptsLoaded::default()
        } else {
            let wanted = ScriptComponent { name: name.to_string(), dir: dir.to_path_buf(), files: script_files };
            if let Some(deferred) = self.deferred.lock().as_mut() {
                self.scripted.lock().insert(name.to_string(), wanted);
                deferred.insert(name.to_string(), Deferred { rest: config.rest, sources });
                return Ok(Status::Loaded(without_scripts));
            }
            match self.load_scripts(wanted).await {
                Ok(loaded) => loaded,
                Err(message) => {
                    tracing::error!(component = name, error = %message, "a component's scripts failed to load");
                    return Ok(Status::ScriptsFailed(without_scripts, message));
                }
            }
        };
        let mut loaded = without_scripts;
        loaded.scripts = self.attach_scripts(name, &mut loaded.exports, &mut sources, from_scripts, config.rest);
        Ok(Status::Loaded(loaded))
    }

    /// Publishes what a component's scripts loaded: a table a script gave a source
    /// (`sourcedFrom`) becomes a caching table, and a script's class of a table
    /// serves the table's own handlers at its path; the scripts' exports.
    fn attach_scripts(
        &self,
        name: &str,
        exports: &mut Vec<Export>,
        sources: &mut BTreeMap<String, Arc<Source>>,
        loaded: ScriptsLoaded,
        rest: config::Rest,
    ) -> Vec<ScriptExport> {
        let ScriptsLoaded { exports: scripts, sources: coded, .. } = loaded;
        for declared in coded {
            let table = declared.table.clone();
            let source = Arc::new(Source::Code(CodeSource(Arc::new(ScriptSource::new(&self.scripts, declared)))));
            for export in exports.iter_mut().filter(|e| e.table == table) {
                export.source = Some(source.clone());
            }
            sources.insert(table, source);
        }
        if rest.enabled() {
            for script in &scripts {
                if let Some((database, table)) = &script.table
                    && !exports.iter().any(|e| e.name == script.path)
                {
                    exports.push(Export {
                        name: script.path.clone(),
                        database: database.clone(),
                        table: table.clone(),
                        component: name.to_string(),
                        last_modified: rest.last_modified(),
                        source: sources.get(table).cloned(),
                    });
                }
            }
        }
        scripts
    }

    /// Loads the scripts of every scripted component, `wanted` among them, into a
    /// new generation of the script host; what `wanted`'s publish, or its load error.
    async fn load_scripts(&self, wanted: ScriptComponent) -> Result<ScriptsLoaded, String> {
        let name = wanted.name.clone();
        let all = {
            let mut scripted = self.scripted.lock();
            scripted.insert(name.clone(), wanted);
            scripted.values().cloned().collect()
        };
        let mut report = self.scripts.load(all).await;
        self.fail_others(&name, &report);
        match report.remove(&name) {
            Some(Ok(loaded)) => Ok(loaded),
            Some(Err(message)) => {
                // A component whose scripts fail serves none of them; the others go on.
                self.scripted.lock().remove(&name);
                Err(message)
            }
            None => Err(format!("{name}: its scripts were not loaded")),
        }
    }

    /// Marks every other component whose scripts did not load in a new generation
    /// (they loaded before; now they serve none) as serving without its scripts,
    /// so its status says so.
    fn fail_others(&self, loading: &str, report: &crate::script::LoadReport) {
        let mut status = self.status.write();
        for (name, outcome) in report {
            if let (true, Err(message)) = (name != loading, outcome) {
                tracing::error!(component = %name, error = %message, "a component's scripts failed to load again");
                self.scripted.lock().remove(name);
                if let Some(entry) = status.get_mut(name) {
                    entry.fail_scripts(message.clone());
                }
            }
        }
    }

    /// Stops serving component `name`'s scripts, when it had any.
    async fn unload_scripts(&self, name: &str) {
        let remaining = {
            let mut scripted = self.scripted.lock();
            if scripted.remove(name).is_none() {
                return;
            }
            scripted.values().cloned().collect()
        };
        let report = self.scripts.load(remaining).await;
        self.fail_others(name, &report);
    }

    /// Runs a component's install command under supervision.
    async fn install(&self, name: &str, dir: &Path, install: &config::Install) -> Result<(), String> {
        let log = self.log_dir.join(format!("install-{name}.log"));
        let timeout = Duration::from_secs(install.timeout);
        let ended = self.processes.run(&install.command, dir, &log, timeout).await;
        let failed = |how: String| Err(format!("{name}: the install command {how} (output in {})", log.display()));
        match ended {
            Ok(Ended::Exited(0)) => Ok(()),
            Ok(Ended::Exited(code)) => failed(format!("exited with status {code}")),
            Ok(Ended::Signalled(signal)) => failed(format!("was killed by signal {signal}")),
            Ok(Ended::TimedOut) => {
                failed(format!("ran past its {} s timeout; its processes were killed", install.timeout))
            }
            Ok(Ended::Stopped) => failed("was stopped by the server shutting down".to_string()),
            Err(err) => Err(format!("{name}: the install command could not be run: {err}")),
        }
    }

    /// Rebuilds the export map from every loaded component.
    fn publish(&self) {
        let status = self.status.read();
        let mut exports = Exports::default();
        for outcome in status.values() {
            if let Some(loaded) = outcome.serving() {
                for export in &loaded.exports {
                    exports.by_name.insert(export.name.clone(), export.clone());
                }
                for script in &loaded.scripts {
                    exports.scripts.insert(script.path.clone(), Arc::new(script.clone()));
                }
                exports.sites.extend(loaded.site.clone());
                exports.graphql |= loaded.graphql;
            }
        }
        drop(status);
        *self.exports.write() = Arc::new(exports);
    }
}

/// The sources `config` declares, checked: each names a table the component
/// defines, and a table source one of the same database.
fn resolve_sources(
    config: &ComponentConfig,
    definitions: &[TableDefinition],
) -> Result<BTreeMap<String, Arc<Source>>, String> {
    let env = |name: &str| std::env::var(name).ok();
    let mut sources = BTreeMap::new();
    for (table, declared) in &config.sources {
        let Some(definition) = definitions.iter().find(|d| &d.table == table) else {
            return Err(format!("sources.{table}: the component defines no table '{table}'"));
        };
        let source = declared.resolve(table, &env)?;
        if let Source::Table(other) = &source
            && !definitions.iter().any(|d| &d.table == other && d.database == definition.database)
        {
            return Err(format!(
                "sources.{table}: the component defines no table '{other}' in database '{}'",
                definition.database
            ));
        }
        sources.insert(table.clone(), Arc::new(source));
    }
    Ok(sources)
}
