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

/// One glob or a list of them.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum Patterns {
    /// A single pattern.
    One(String),
    /// Several patterns.
    Many(Vec<String>),
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

    fn default_config() -> ComponentConfig {
        ComponentConfig { rest: Rest::default(), graphql_schema: None, install: None, sources: Default::default() }
    }

    /// The schema file patterns (`*.graphql` when none are configured).
    pub fn schema_patterns(&self) -> Vec<String> {
        match &self.graphql_schema {
            Some(SchemaFiles { files: Patterns::One(p) }) => vec![p.clone()],
            Some(SchemaFiles { files: Patterns::Many(ps) }) => ps.clone(),
            None => vec!["*.graphql".to_string()],
        }
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
        assert_eq!(config.schema_patterns(), ["schemas/*.graphql"]);
        std::fs::write(
            dir.path().join("config.yaml"),
            "graphqlSchema:\n  files: [a.graphql, b.graphql]\nrest: false\n",
        )
        .unwrap();
        let config = ComponentConfig::read(dir.path()).unwrap();
        assert!(!config.rest.enabled());
        assert_eq!(config.schema_patterns(), ["a.graphql", "b.graphql"]);
        std::fs::write(dir.path().join("config.yaml"), "rest:\n  lastModified: true\n  webSocket: false\n").unwrap();
        let config = ComponentConfig::read(dir.path()).unwrap();
        assert!(config.rest.enabled() && config.rest.last_modified());
        std::fs::write(dir.path().join("config.yaml"), "rest: [oops").unwrap();
        assert!(ComponentConfig::read(dir.path()).unwrap_err().contains("config.yaml"));
        let empty = tempfile::tempdir().unwrap();
        assert_eq!(ComponentConfig::read(empty.path()).unwrap().schema_patterns(), ["*.graphql"]);
    }
}
