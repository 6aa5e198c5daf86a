//! Where everything lives under a root directory (Harper's `rootPath`).

use std::path::{Path, PathBuf};

/// Paths inside a Lyre root directory. Nothing else builds paths under the root.
#[derive(Debug, Clone)]
pub struct Layout {
    root: PathBuf,
}

impl Layout {
    /// A layout rooted at `root` (not created until needed).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
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
        self.root.join("database")
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
