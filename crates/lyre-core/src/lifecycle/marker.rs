//! The lifecycle marker: a small file saying "database X is being dropped (or
//! restored), and these are exactly the paths involved", published before anything is
//! closed or deleted so that a crash at any later point is finished (or refused) at the
//! next start from what the marker recorded, never from what the configuration says
//! then.
//!
//! Format (UTF-8, `\n` line ends):
//!
//! ```text
//! <database name>
//! <drop|restore> started <RFC 3339 time>
//! targets 1 {"database":"<absolute path>","staged":"<absolute path>"?,"previous":"<absolute path>"?,"blobRoots":["<absolute path>",…]}
//! ```
//!
//! Publication is crash-safe: write `<key>.marker.staged`, fsync it, rename it over
//! `<key>.marker`, fsync the directory. A reader treats anything it cannot fully
//! validate as unreadable and refuses to act on it (fails closed).

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::catalog::validate_database_name;

/// What the marker announces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The database is being deleted.
    Drop,
    /// The database is being replaced by a backup.
    Restore,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Drop => "drop",
            Kind::Restore => "restore",
        }
    }
}

/// The paths a marker records, absolute, resolved when it was written.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Targets {
    /// The database directory (deleted by a drop, replaced by a restore).
    pub database: PathBuf,
    /// A restore's prepared copy, moved into place at the end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub staged: Option<PathBuf>,
    /// Where a restore moves the replaced copy before deleting it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous: Option<PathBuf>,
    /// The database's blob directories (one per blob path, each named after the
    /// database): a drop deletes them after the database directory, a restore
    /// replaces them. A marker without them is unreadable (the configured paths at
    /// recovery time may not be the ones that held this database's blobs).
    #[serde(rename = "blobRoots", default, skip_serializing_if = "Option::is_none")]
    pub blob_roots: Option<Vec<PathBuf>>,
}

impl Targets {
    /// Where a restore prepares the new content of blob root `root` of database
    /// `name`: beside it, under a name no database can have.
    pub fn staged_blobs(root: &Path, name: &str) -> PathBuf {
        let parent = root.parent().unwrap_or(root);
        parent.join(format!("`restore`{}.staged", key(name)))
    }
}

/// A parsed, validated marker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Marker {
    /// The database it is about.
    pub name: String,
    /// Drop or restore.
    pub kind: Kind,
    /// When the operation started (as written).
    pub started: String,
    /// Exactly what the operation touches.
    pub targets: Targets,
}

/// Why a marker cannot be acted on.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MarkerError {
    /// Reading the file failed.
    #[error("the marker could not be read: {0}")]
    Io(String),
    /// The content is not a marker this version understands.
    #[error("the marker is unreadable: {0}")]
    Unreadable(String),
}

/// The file-name key of database `name`: a hash, so any legal name (up to its
/// maximum length) gives a short, fixed-length, collision-free file name.
pub fn key(name: &str) -> String {
    let digest = Sha256::digest(name.as_bytes());
    digest.iter().take(16).map(|b| format!("{b:02x}")).collect()
}

impl Marker {
    /// A marker for an operation starting now.
    pub fn new(name: &str, kind: Kind, targets: Targets) -> Self {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        let started = crate::time::iso8601(now.as_secs_f64() * 1000.0);
        Self { name: name.to_string(), kind, started, targets }
    }

    /// The file content.
    pub fn encode(&self) -> String {
        let targets = serde_json::to_string(&self.targets).unwrap_or_default();
        format!("{}\n{} started {}\ntargets 1 {targets}\n", self.name, self.kind.as_str(), self.started)
    }

    /// Parses and validates `text`, the marker file stored under `file_key`.
    pub fn parse(text: &str, file_key: &str) -> Result<Self, MarkerError> {
        let bad = |why: &str| MarkerError::Unreadable(why.to_string());
        let mut lines = text.split('\n');
        let name = lines.next().filter(|n| !n.is_empty()).ok_or_else(|| bad("no database name"))?;
        validate_database_name(name).map_err(|_| bad("the database name is not a legal name"))?;
        if key(name) != file_key {
            return Err(bad("the database name does not match the marker's file name"));
        }
        let header = lines.next().ok_or_else(|| bad("no operation line"))?;
        let (kind, started) = match header.split_once(" started ") {
            Some(("drop", at)) => (Kind::Drop, at),
            Some(("restore", at)) => (Kind::Restore, at),
            _ => return Err(bad("the operation line is not \"drop|restore started <time>\"")),
        };
        let targets = lines.next().ok_or_else(|| bad("no targets line"))?;
        let json = match targets.split_once(' ') {
            Some(("targets", rest)) => match rest.split_once(' ') {
                Some(("1", json)) => json,
                Some((version, _)) => return Err(bad(&format!("unknown targets version {version}"))),
                None => return Err(bad("the targets line has no version")),
            },
            _ => return Err(bad("the third line is not a targets line")),
        };
        let targets: Targets =
            serde_json::from_str(json).map_err(|e| bad(&format!("the targets are malformed JSON: {e}")))?;
        if lines.any(|rest| !rest.is_empty()) {
            return Err(bad("unexpected content after the targets"));
        }
        let marker = Marker { name: name.to_string(), kind, started: started.to_string(), targets };
        marker.check_paths()?;
        Ok(marker)
    }

    /// Every recorded path must be absolute and named after the database (so a
    /// marker can only ever delete that database's own directories).
    fn check_paths(&self) -> Result<(), MarkerError> {
        let database = &self.targets.database;
        if !database.is_absolute() {
            return Err(MarkerError::Unreadable(format!("the recorded path {} is not absolute", database.display())));
        }
        if database.file_name().and_then(|n| n.to_str()) != Some(self.name.as_str()) {
            return Err(MarkerError::Unreadable(format!(
                "the recorded path {} is not named after database '{}'",
                database.display(),
                self.name
            )));
        }
        if database.components().any(|c| c == std::path::Component::ParentDir) {
            return Err(MarkerError::Unreadable(format!("the recorded path {} contains '..'", database.display())));
        }
        let Some(blob_roots) = &self.targets.blob_roots else {
            return Err(MarkerError::Unreadable("the marker does not record the database's blob roots".into()));
        };
        for root in blob_roots {
            if !root.is_absolute() || root.components().any(|c| c == std::path::Component::ParentDir) {
                return Err(MarkerError::Unreadable(format!(
                    "the recorded blob root {} is not an absolute path without '..'",
                    root.display()
                )));
            }
            if root.file_name().and_then(|n| n.to_str()) != Some(self.name.as_str()) {
                return Err(MarkerError::Unreadable(format!(
                    "the recorded blob root {} is not named after database '{}'",
                    root.display(),
                    self.name
                )));
            }
        }
        if self.kind == Kind::Restore && (self.targets.staged.is_none() || self.targets.previous.is_none()) {
            return Err(MarkerError::Unreadable("a restore marker must record its staging paths".into()));
        }
        // A restore's work areas sit beside the database under the exact names
        // `restore_targets` gives them, so a marker cannot point a deletion elsewhere.
        let key = key(&self.name);
        let expected = [(&self.targets.staged, "staged"), (&self.targets.previous, "previous")];
        for (path, suffix) in expected.into_iter().filter_map(|(path, suffix)| Some((path.as_ref()?, suffix))) {
            let name = format!("`restore`{key}.{suffix}");
            if path.parent() != database.parent() || path.file_name().and_then(|n| n.to_str()) != Some(name.as_str()) {
                return Err(MarkerError::Unreadable(format!(
                    "the recorded path {} is not database '{}''s {suffix} restore area",
                    path.display(),
                    self.name
                )));
            }
        }
        Ok(())
    }
}

/// The marker file of `key` in `dir`.
pub fn path(dir: &Path, key: &str) -> PathBuf {
    dir.join(format!("{key}.marker"))
}

/// Reads the marker of `key`, if there is one.
pub fn read(dir: &Path, key: &str) -> Result<Option<Marker>, MarkerError> {
    match std::fs::read(path(dir, key)) {
        Ok(bytes) => {
            let text = String::from_utf8(bytes).map_err(|_| MarkerError::Unreadable("not UTF-8".into()))?;
            Marker::parse(&text, key).map(Some)
        }
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(err) => Err(MarkerError::Io(err.to_string())),
    }
}

/// Publishes `marker` crash-safely: staged file, fsync, rename, directory fsync. If
/// the directory fsync fails the just-published marker is removed again (a marker
/// that might not be durable must not outlive an operation reported as failed).
pub fn publish(dir: &Path, marker: &Marker) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let key = key(&marker.name);
    let staged = dir.join(format!("{key}.marker.staged"));
    let target = path(dir, &key);
    let written = (|| {
        let encoded = marker.encode();
        let (head, tail) = encoded.as_bytes().split_at(encoded.len() / 2);
        let mut file = File::create(&staged)?;
        file.write_all(head)?;
        // A test's failing write stops here, half-written (a full disk would too).
        crate::failpoint::hit_io("marker-write")?;
        file.write_all(tail)?;
        file.sync_all()
    })();
    if let Err(err) = written {
        // A torn staged file is not a marker; none is left behind.
        let _ = std::fs::remove_file(&staged);
        return Err(err);
    }
    std::fs::rename(&staged, &target)?;
    if let Err(err) = crate::failpoint::hit_io("marker-dir-sync").and_then(|()| sync_dir(dir)) {
        let _ = std::fs::remove_file(&target);
        return Err(err);
    }
    Ok(())
}

/// Removes the marker of `key` and makes the removal durable.
pub fn remove(dir: &Path, key: &str) -> std::io::Result<()> {
    match std::fs::remove_file(path(dir, key)) {
        Ok(()) => sync_dir(dir),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(err) => Err(err),
    }
}

pub use crate::durable::sync_dir;

#[cfg(test)]
mod tests {
    use super::*;

    fn drop_marker(name: &str) -> Marker {
        Marker::new(
            name,
            Kind::Drop,
            Targets {
                database: PathBuf::from(format!("/data/database/{name}")),
                staged: None,
                previous: None,
                blob_roots: Some(vec![PathBuf::from(format!("/data/blobs/{name}"))]),
            },
        )
    }

    #[test]
    fn round_trips_and_keys_are_fixed_length() {
        let marker = drop_marker("sales");
        assert_eq!(Marker::parse(&marker.encode(), &key("sales")), Ok(marker));
        assert_eq!(key("sales").len(), 32);
        assert_eq!(key(&"x".repeat(250)).len(), 32);
        assert_ne!(key("orders"), key("orders.restoring"));
    }

    #[test]
    fn refuses_anything_it_cannot_validate() {
        let good = drop_marker("sales").encode();
        let k = key("sales");
        let unreadable = |text: &str| matches!(Marker::parse(text, &k), Err(MarkerError::Unreadable(_)));
        assert!(unreadable(""), "empty");
        assert!(unreadable(&good[..good.len() / 2]), "torn");
        assert!(unreadable(&good.replace("targets 1", "targets 2")), "unknown version");
        assert!(unreadable(&good.replace("drop started", "purge started")), "unknown kind");
        assert!(unreadable(&good.replace("/data/database/sales", "data/database/sales")), "relative path");
        assert!(unreadable(&good.replace("/data/database/sales", "/data/database/other")), "foreign path");
        assert!(unreadable(&good.replace("{\"database\"", "{\"databse\"")), "unknown field");
        assert!(unreadable(&format!("{good}extra\n")), "trailing content");
        assert!(Marker::parse(&good, &key("other")).is_err(), "the name must match the file key");
        assert!(unreadable(&good.replace("/data/database/sales", "/data/x/../database/sales")), "'..'");
        // The blob roots: recorded, absolute, named after the database.
        assert!(unreadable(&good.replace(",\"blobRoots\":[\"/data/blobs/sales\"]", "")), "no blob roots");
        assert!(unreadable(&good.replace("/data/blobs/sales", "blobs/sales")), "a relative blob root");
        assert!(unreadable(&good.replace("/data/blobs/sales", "/data/blobs/other")), "a foreign blob root");
        assert!(unreadable(&good.replace("/data/blobs/sales", "/data/x/../blobs/sales")), "'..' in a blob root");
    }

    #[test]
    fn a_restore_marker_may_only_name_its_own_work_areas() {
        let k = key("sales");
        let area = |suffix: &str| PathBuf::from(format!("/data/database/`restore`{k}.{suffix}"));
        let restore = |staged: PathBuf, previous: PathBuf| {
            let targets = Targets {
                database: "/data/database/sales".into(),
                staged: Some(staged),
                previous: Some(previous),
                blob_roots: Some(Vec::new()),
            };
            Marker::parse(&Marker::new("sales", Kind::Restore, targets).encode(), &k)
        };
        assert!(restore(area("staged"), area("previous")).is_ok());
        assert!(restore("/srv".into(), area("previous")).is_err(), "a foreign staging path");
        assert!(restore(area("staged"), "/data/database/other".into()).is_err(), "a foreign previous path");
        assert!(restore(area("previous"), area("staged")).is_err(), "swapped roles");
        let elsewhere = PathBuf::from(format!("/tmp/`restore`{k}.staged"));
        assert!(restore(elsewhere, area("previous")).is_err(), "not beside the database");
    }
}
