//! Where everything lives under a root directory (Harper's `rootPath`).

use std::path::{Path, PathBuf};

/// Paths inside a Lyre root directory. Nothing else builds paths under the root.
#[derive(Debug, Clone)]
pub struct Layout {
    root: PathBuf,
    databases: Option<PathBuf>,
}

impl Layout {
    /// A layout rooted at `root` (not created until needed).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into(), databases: None }
    }

    /// The same layout with databases kept in `dir` instead of `<root>/database`
    /// (Harper's `storage.path`).
    pub fn with_databases_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.databases = Some(dir.into());
        self
    }

    /// The root directory itself.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `lyre-config.yaml`, the configuration file.
    pub fn config_file(&self) -> PathBuf {
        self.root.join("lyre-config.yaml")
    }

    /// The directory holding one environment per database.
    pub fn databases_dir(&self) -> PathBuf {
        self.databases.clone().unwrap_or_else(|| self.root.join("database"))
    }

    /// Lifecycle markers and locks (drop, restore) and the server's lock. Under the
    /// root rather than beside the databases, so a marker outlives a change of
    /// `storage.path` and names what it was about to delete.
    pub fn lifecycle_dir(&self) -> PathBuf {
        self.root.join("lifecycle")
    }

    /// The environment directory of database `name`.
    pub fn database_dir(&self, name: &str) -> PathBuf {
        self.databases_dir().join(name)
    }

    /// Log files.
    pub fn log_dir(&self) -> PathBuf {
        self.root.join("log")
    }

    /// Component (application) directories.
    pub fn components_dir(&self) -> PathBuf {
        self.root.join("components")
    }
}
