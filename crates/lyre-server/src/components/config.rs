//! A component's `config.yaml`: which plugins it uses (Harper's keys).

use std::path::Path;

use serde::Deserialize;

/// The parts of a component's `config.yaml` Lyre acts on.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ComponentConfig {
    /// `rest: true` (or `rest: {lastModified: true}`) serves the exported tables over REST.
    #[serde(default)]
    pub rest: Rest,
    /// `graphqlSchema: {files: ...}`: the schema files (globs, relative).
    #[serde(default)]
    pub graphql_schema: Option<SchemaFiles>,
    /// `install: {command, timeout}` (Lyre's): a shell command run in the
    /// component's directory before each load (Harper runs `npm install` for
    /// packages); the load fails if it fails or outlives its timeout.
    #[serde(default)]
    pub install: Option<Install>,
    /// `sources` (Lyre's): the origins of caching tables, by table name (see
    /// `cache/source.rs`).
    #[serde(default)]
    pub sources: std::collections::BTreeMap<String, crate::cache::SourceConfig>,
    /// `graphql: true`: GraphQL queries over the exported tables at `/graphql` on the
    /// REST port (`http/graphql/`); options, when given as a map, turn it on too.
    #[serde(default)]
    pub graphql: Option<serde_json::Value>,
    /// `static`: files served over the REST port (see `components/statics.rs`).
    #[serde(default, rename = "static")]
    pub static_files: Option<StaticOptions>,
    /// `dataLoader`: JSON or YAML files of records loaded into tables at each load
    /// (see `components/data_loader.rs`).
    #[serde(default)]
    pub data_loader: Option<PluginFiles>,
    /// `roles`: YAML files defining roles at each load (see `components/roles.rs`).
    #[serde(default)]
    pub roles: Option<PluginFiles>,
    /// `jsResource`: JavaScript modules whose exported classes are served as
    /// resources (see `script/`); Harper's default loads `resources.js`.
    #[serde(default)]
    pub js_resource: Option<PluginFiles>,
    /// `fastifyRoutes`: Fastify route files, which Lyre cannot run; a component whose
    /// pattern matches a file fails to load, naming the plugin.
    #[serde(default)]
    pub fastify_routes: Option<PluginFiles>,
}

/// A plugin that only takes files (`{files: ...}`).
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct PluginFiles {
    /// The file patterns.
    pub files: Patterns,
}

/// Options of the `static` plugin (Harper's `server/static.ts`).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StaticOptions {
    /// Which files are served (`web/**`).
    pub files: Patterns,
    /// Where they are served: `/` by default; `./x` is `/<component>/x/`.
    #[serde(default)]
    pub url_path: Option<String>,
    /// `dir/` serves `dir/index.html`, and `dir` redirects to `dir/` (default on).
    #[serde(default = "yes")]
    pub index: bool,
    /// Extensions tried in order when a path names no file (`[html]`: `/about` serves
    /// `about.html`).
    #[serde(default)]
    pub extensions: Vec<String>,
    /// A path that names no file goes on to the REST interface (default on); off, it
    /// is answered with `notFound`, or 404.
    #[serde(default = "yes")]
    pub fallthrough: bool,
    /// What a miss serves when `fallthrough` is off: a file, or a file and a status
    /// (an application with client-side routing serves its `index.html` with 200).
    #[serde(default)]
    pub not_found: Option<NotFound>,
}

fn yes() -> bool {
    true
}

/// `static.notFound`: a file (served with 404), or a file and the status to serve it with.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum NotFound {
    /// `notFound: 404.html`.
    File(String),
    /// `notFound: {file: index.html, statusCode: 200}`.
    WithStatus {
        /// The file, relative to the component.
        file: String,
        /// The status it is served with.
        #[serde(rename = "statusCode")]
        status_code: u16,
    },
}

/// The `rest` plugin: `true`/`false`, or its options (which also turn it on).
#[derive(Debug, Clone, Copy, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum Rest {
    /// `rest: true` or `rest: false`.
    Enabled(bool),
    /// `rest: {lastModified: true, ...}`.
    Options(RestOptions),
}

/// Options of the `rest` plugin (Harper's keys; others are ignored).
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RestOptions {
    /// Send `Last-Modified` (the record's version as an HTTP date) with records.
    #[serde(default)]
    pub last_modified: bool,
}

impl Default for Rest {
    fn default() -> Self {
        Rest::Enabled(true)
    }
}

impl Rest {
    /// Whether the exported tables are served.
    pub fn enabled(&self) -> bool {
        !matches!(self, Rest::Enabled(false))
    }

    /// Whether responses carry `Last-Modified`.
    pub fn last_modified(&self) -> bool {
        matches!(self, Rest::Options(RestOptions { last_modified: true }))
    }
}

/// A component's install step.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Install {
    /// Run with `sh -c` in the component's directory.
    pub command: String,
    /// Seconds it may run before its whole process tree is killed.
    #[serde(default = "default_install_timeout")]
    pub timeout: u64,
}

fn default_install_timeout() -> u64 {
    300
}

/// `graphqlSchema.files`: one pattern or several.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct SchemaFiles {
    /// The file patterns.
    pub files: Patterns,
}

/// A plugin's `files`: one glob, a list of them, or `{source, ignore}` (Harper's forms).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum Patterns {
    /// A single pattern.
    One(String),
    /// Several patterns.
    Many(Vec<String>),
    /// Patterns with exceptions.
    Detailed {
        /// What to take.
        source: PatternList,
        /// What to leave out of it.
        #[serde(default)]
        ignore: Option<PatternList>,
    },
}

/// One glob or a list of them.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum PatternList {
    /// A single pattern.
    One(String),
    /// Several patterns.
    Many(Vec<String>),
}

impl PatternList {
    fn to_vec(&self) -> Vec<String> {
        match self {
            PatternList::One(p) => vec![p.clone()],
            PatternList::Many(ps) => ps.clone(),
        }
    }
}

impl Patterns {
    /// The patterns to take.
    pub fn sources(&self) -> Vec<String> {
        match self {
            Patterns::One(p) => vec![p.clone()],
            Patterns::Many(ps) => ps.clone(),
            Patterns::Detailed { source, .. } => source.to_vec(),
        }
    }

    /// The patterns to leave out.
    pub fn ignored(&self) -> Vec<String> {
        match self {
            Patterns::Detailed { ignore: Some(ignore), .. } => ignore.to_vec(),
            _ => Vec::new(),
        }
    }

    /// Compiled, to match against a component's files.
    pub fn globs(&self) -> Result<super::files::Globs, String> {
        super::files::Globs::new(&self.sources(), &self.ignored())
    }
}

impl ComponentConfig {
    /// Reads `config.yaml` in `dir`; a component without one uses Harper's defaults
    /// (REST on, `*.graphql` schemas).
    pub fn read(dir: &Path) -> Result<ComponentConfig, String> {
        let path = dir.join("config.yaml");
        match std::fs::read_to_string(&path) {
            Ok(text) => serde_saphyr::from_str::<Option<ComponentConfig>>(&text)
                .map(|c| c.unwrap_or_else(ComponentConfig::default_config))
                .map_err(|e| format!("{}: {e}", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(ComponentConfig::default_config()),
            Err(e) => Err(format!("{}: {e}", path.display())),
        }
    }

    /// Harper's configuration for a component without `config.yaml`: REST, schemas
    /// in `*.graphql`, roles in `roles.yaml`, static files under `web/`, JavaScript
    /// resources in `resources.js`, Fastify routes in `routes/*.js`.
    fn default_config() -> ComponentConfig {
        let files = |pattern: &str| PluginFiles { files: Patterns::One(pattern.to_string()) };
        ComponentConfig {
            rest: Rest::default(),
            graphql_schema: None,
            install: None,
            sources: Default::default(),
            graphql: None,
            static_files: Some(StaticOptions {
                files: Patterns::One("web/**".to_string()),
                url_path: None,
                index: true,
                extensions: Vec::new(),
                fallthrough: true,
                not_found: None,
            }),
            data_loader: None,
            roles: Some(files("roles.yaml")),
            js_resource: Some(files("resources.js")),
            fastify_routes: Some(files("routes/*.js")),
        }
    }

    /// Whether the component turns GraphQL querying on (`graphql: true`, or options).
    pub fn graphql(&self) -> bool {
        !matches!(self.graphql, None | Some(serde_json::Value::Bool(false)) | Some(serde_json::Value::Null))
    }

    /// The schema files' patterns (`*.graphql` when none are configured).
    pub fn schema_files(&self) -> Patterns {
        self.graphql_schema.as_ref().map_or_else(|| Patterns::One("*.graphql".to_string()), |s| s.files.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn harper_config_files_are_read() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("config.yaml"),
            "rest: true\ngraphqlSchema:\n  files: 'schemas/*.graphql'\njsResource:\n  files: resources.js\n",
        )
        .unwrap();
        let config = ComponentConfig::read(dir.path()).unwrap();
        assert!(config.rest.enabled() && !config.rest.last_modified());
        assert_eq!(config.schema_files().sources(), ["schemas/*.graphql"]);
        std::fs::write(
            dir.path().join("config.yaml"),
            "graphqlSchema:\n  files: [a.graphql, b.graphql]\nrest: false\n",
        )
        .unwrap();
        let config = ComponentConfig::read(dir.path()).unwrap();
        assert!(!config.rest.enabled());
        assert_eq!(config.schema_files().sources(), ["a.graphql", "b.graphql"]);
        std::fs::write(dir.path().join("config.yaml"), "rest:\n  lastModified: true\n  webSocket: false\n").unwrap();
        let config = ComponentConfig::read(dir.path()).unwrap();
        assert!(config.rest.enabled() && config.rest.last_modified());
        std::fs::write(dir.path().join("config.yaml"), "rest: [oops").unwrap();
        assert!(ComponentConfig::read(dir.path()).unwrap_err().contains("config.yaml"));
        let empty = tempfile::tempdir().unwrap();
        assert_eq!(ComponentConfig::read(empty.path()).unwrap().schema_files().sources(), ["*.graphql"]);
    }
}
