//! `set_configuration`'s change to the config file: Harper's flattened keys
//! (`logging_level`, `http_port`, matched case-insensitively to a path of the
//! configuration), each value checked against its key's type, the whole result
//! checked as a configuration, the previous file kept under `<root>/backup/`, and
//! the new one written beside it and renamed into place. A change that fails any
//! check leaves the file as it was.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::env::{collect_leaves, parse_scalar, set_path};
use super::{CONFIG_FILE, Config, ConfigError, merge, rename_legacy_keys};

/// What a successful change did.
#[derive(Debug, Clone, PartialEq)]
pub struct Updated {
    /// The dotted paths whose values changed (each takes effect at the next start).
    pub changed: Vec<String>,
    /// The copy of the previous file, when one was made.
    pub backup: Option<PathBuf>,
}

/// Why a change was refused.
#[derive(Debug, thiserror::Error)]
pub enum UpdateError {
    /// No configuration key is called this.
    #[error("unknown configuration key '{0}'")]
    UnknownKey(String),
    /// The value is not one the key takes.
    #[error("'{key}' {reason}")]
    BadValue {
        /// The key as given.
        key: String,
        /// What is wrong.
        reason: String,
    },
    /// The file could not be read or written.
    #[error(transparent)]
    File(#[from] ConfigError),
}

/// Applies `changes` (flattened key, value) to the config file under `root`. The
/// file is read, checked and replaced under one lock, so two changes at once never
/// lose one another.
pub fn set_configuration(root: &Path, changes: Vec<(String, Value)>) -> Result<Updated, UpdateError> {
    let defaults = serde_json::to_value(Config::default()).map_err(|e| ConfigError::Invalid(e.to_string()))?;
    let mut leaves = Vec::new();
    collect_leaves(&defaults, &mut Vec::new(), &mut leaves);
    static CHANGING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one_at_a_time = CHANGING.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let file = root.join(CONFIG_FILE);
    let current = read_tree(&file)?;
    let mut tree = current.clone();
    let mut changed = Vec::new();
    for (key, value) in changes {
        let wanted = key.to_ascii_lowercase();
        let path = leaves
            .iter()
            .find(|path| path.join("_").to_ascii_lowercase() == wanted)
            .ok_or_else(|| UpdateError::UnknownKey(key.clone()))?;
        let default = path.iter().try_fold(&defaults, |node, name| node.get(name)).unwrap_or(&Value::Null);
        let value = match value {
            // Text given for a key that is not text is read as Harper reads it.
            Value::String(text) if !default.is_string() => parse_scalar(&text),
            other => other,
        };
        check_value(&defaults, path, &value).map_err(|reason| UpdateError::BadValue { key: key.clone(), reason })?;
        let old = path.iter().try_fold(&current, |node, name| node.get(name));
        if old != Some(&value) {
            changed.push(path.join("."));
        }
        set_path(&mut tree, path, value);
    }
    // The whole file must still make a configuration (rules across keys).
    let mut whole = defaults.clone();
    merge(&mut whole, tree.clone());
    whole["rootPath"] = Value::String(root.to_string_lossy().into_owned());
    serde_json::from_value::<Config>(whole).map_err(|e| ConfigError::Invalid(e.to_string()))?;
    if changed.is_empty() {
        return Ok(Updated { changed, backup: None });
    }
    let backup = back_up(root, &file)?;
    write(&file, &tree)?;
    Ok(Updated { changed, backup })
}

/// Whether `value` at `path` makes a valid configuration on its own (so the error
/// names this key, not another).
fn check_value(defaults: &Value, path: &[String], value: &Value) -> Result<(), String> {
    let mut tree = defaults.clone();
    set_path(&mut tree, path, value.clone());
    serde_json::from_value::<Config>(tree).map(drop).map_err(|err| {
        let text = err.to_string();
        // serde's "invalid type: string \"x\", expected a boolean" reads better as
        // "must be a boolean: string \"x\"".
        match text.split_once(", expected ") {
            Some((found, expected)) => {
                format!("must be {expected}, not {}", found.trim_start_matches("invalid type: "))
            }
            None => text,
        }
    })
}

/// The config file's tree (empty when there is none).
fn read_tree(file: &Path) -> Result<Value, ConfigError> {
    match std::fs::read_to_string(file) {
        Ok(text) => {
            let tree: Value = serde_saphyr::from_str(&text)
                .map_err(|e| ConfigError::Yaml { path: file.to_path_buf(), message: e.to_string() })?;
            Ok(if tree.is_null() { Value::Object(Default::default()) } else { rename_legacy_keys(tree) })
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Value::Object(Default::default())),
        Err(source) => Err(ConfigError::Io { path: file.to_path_buf(), source }),
    }
}

/// Copies the current file to `<root>/backup/<time>-lyre-config.yaml.bak` (the
/// time as ISO 8601 with `-` for `:`, as Harper names its backups).
fn back_up(root: &Path, file: &Path) -> Result<Option<PathBuf>, ConfigError> {
    if !file.exists() {
        return Ok(None);
    }
    let dir = root.join("backup");
    let io = |source| ConfigError::Io { path: dir.clone(), source };
    std::fs::create_dir_all(&dir).map_err(io)?;
    let stamp = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true).replace(':', "-");
    // Two changes in one millisecond keep both backups.
    let mut backup = dir.join(format!("{stamp}-{CONFIG_FILE}.bak"));
    let mut n = 1;
    while backup.exists() {
        backup = dir.join(format!("{stamp}-{n}-{CONFIG_FILE}.bak"));
        n += 1;
    }
    std::fs::copy(file, &backup).map_err(io)?;
    Ok(Some(backup))
}

/// Writes `tree` as the config file, whole or not at all.
fn write(file: &Path, tree: &Value) -> Result<(), ConfigError> {
    let yaml = serde_saphyr::to_string(tree).map_err(|e| ConfigError::Invalid(e.to_string()))?;
    let text = format!("{}{yaml}", super::FILE_HEADER);
    crate::files::write_atomically(file, None, |out| std::io::Write::write_all(out, text.as_bytes()))
        .map_err(|source| ConfigError::Io { path: file.to_path_buf(), source })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(CONFIG_FILE), "http:\n  port: 9000\n").unwrap();
        dir
    }

    fn set(dir: &Path, changes: &[(&str, Value)]) -> Result<Updated, UpdateError> {
        set_configuration(dir, changes.iter().map(|(k, v)| (k.to_string(), v.clone())).collect())
    }

    #[test]
    fn keys_map_to_paths_and_the_file_keeps_its_other_values() {
        let dir = root();
        let updated = set(
            dir.path(),
            &[("logging_level", "trace".into()), ("HTTP_CORS", "false".into()), ("http_port", 9000.into())],
        )
        .unwrap();
        assert_eq!(updated.changed, ["logging.level", "http.cors"]);
        let backup = updated.backup.expect("a backup");
        assert_eq!(std::fs::read_to_string(backup).unwrap(), "http:\n  port: 9000\n");
        let config = Config::load(Some(dir.path().into()), &|_| None).unwrap();
        assert_eq!((config.http.port, config.http.cors, config.logging.level.as_str()), (9000, false, "trace"));
        // Nothing to change: nothing written, no backup.
        assert_eq!(set(dir.path(), &[("logging_level", "trace".into())]).unwrap().backup, None);
    }

    #[test]
    fn an_unknown_key_or_a_wrong_value_is_named_and_the_file_is_unchanged() {
        let dir = root();
        let before = std::fs::read_to_string(dir.path().join(CONFIG_FILE)).unwrap();
        let err = set(dir.path(), &[("logging_level", "debug".into()), ("http_colour", "blue".into())]).unwrap_err();
        assert_eq!(err.to_string(), "unknown configuration key 'http_colour'");
        let err = set(dir.path(), &[("http_cors", "sometimes".into())]).unwrap_err();
        assert_eq!(err.to_string(), "'http_cors' must be a boolean, not string \"sometimes\"");
        let err = set(dir.path(), &[("logging_level", "loud".into())]).unwrap_err();
        assert!(err.to_string().starts_with("'logging_level' must be one of `trace`"), "{err}");
        let err = set(dir.path(), &[("http_port", 70_000.into())]).unwrap_err();
        assert!(err.to_string().starts_with("'http_port' "), "{err}");
        assert_eq!(std::fs::read_to_string(dir.path().join(CONFIG_FILE)).unwrap(), before);
        assert!(!dir.path().join("backup").exists());
    }
}
