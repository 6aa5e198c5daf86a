//! Crash-safe database lifecycle: dropping and restoring a database through a
//! marker, and finishing (or refusing) an interrupted one at start-up.
//!
//! The protocol, for a drop:
//!
//! 1. Refuse a database directory that is a symbolic link, before anything changes.
//! 2. Take the database's lifecycle lock (an OS file lock, so another process, such
//!    as `lyre restore`, cannot interleave).
//! 3. Publish the marker (see [`marker`]) recording the absolute path to delete.
//! 4. Tell the database's users it is going away and refuse new ones; wait a bounded
//!    time for every lease to end, else undo 3–4 and answer 409 naming the holders.
//! 5. Close the database, delete the recorded directory strictly, fsync its parent.
//! 6. Remove the marker.
//!
//! A crash after 3 leaves the marker; [`recover`] finishes the drop at the next start
//! from the recorded path (not from the configuration, which may have changed). A
//! marker that cannot be fully validated is never acted on: the database stays
//! unloaded ("blocked") with the reason, and nothing is deleted. A restore follows the
//! same steps, preparing the backup beside the database and swapping it in at 5.
//!
//! A database's blob directories (one under each blob path) are part of it: the
//! marker records them, a drop deletes them after the database directory, and a
//! restore prepares their new content beside them and swaps it in right after the
//! database directory (the moment a restore commits to its new content).

pub(crate) mod files;
pub mod marker;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use lyre_store::{DatabaseOptions, Layout};

use crate::catalog::{DatabaseSchema, validate_database_name};
use crate::error::{Error, LifecycleError, Result};
use files::{FileLock, refuse_symlink, remove_dir_strictly};
use marker::{Kind, Marker, MarkerError, Targets, sync_dir};

/// Databases recovery refused to load, by name, with the reason.
pub(crate) type Blocked = BTreeMap<String, String>;

/// The lifecycle lock of database `name`, if no other process holds it.
pub(crate) fn lock(layout: &Layout, name: &str) -> Result<FileLock> {
    let path = layout.lifecycle_dir().join(format!("{}.lock", marker::key(name)));
    FileLock::try_acquire(&path)?.ok_or_else(|| {
        Error::Lifecycle(LifecycleError::Busy(format!(
            "a drop or restore of database '{name}' is in progress in another process"
        )))
    })
}

/// The lock every running server holds on its root, so two processes never serve
/// (or restore into) the same root.
pub(crate) fn server_lock(layout: &Layout) -> Result<FileLock> {
    FileLock::try_acquire(&layout.lifecycle_dir().join("server.lock"))?
        .ok_or_else(|| busy(format!("another Lyre process is using the root {}", layout.root().display())))
}

/// The absolute form of `path`, without `.` or `..` (markers record such paths
/// only): its parent directory is resolved by the file system, its last component is
/// kept as it is, so a symbolic link there is still seen (and refused) as a link.
pub(crate) fn absolute(path: &Path) -> Result<PathBuf> {
    let io = |e: std::io::Error| LifecycleError::failed(format_args!("resolving {}", path.display()), e);
    match (path.parent(), path.file_name()) {
        (Some(parent), Some(name)) if !parent.as_os_str().is_empty() => {
            Ok(std::fs::canonicalize(parent).map_err(io)?.join(name))
        }
        _ => std::path::absolute(path).map_err(io),
    }
}

/// Where a restore prepares `name`'s copy, and where the replaced copy waits to be
/// deleted: beside the database directories, under names no database can have (a
/// backtick is not allowed in a database name), so a scan never loads them. Its
/// blob directories are `blob_roots`.
pub(crate) fn restore_targets(layout: &Layout, name: &str, blob_roots: Vec<PathBuf>) -> Result<Targets> {
    let dir = absolute(&layout.databases_dir())?;
    let key = marker::key(name);
    Ok(Targets {
        database: dir.join(name),
        staged: Some(dir.join(format!("`restore`{key}.staged"))),
        previous: Some(dir.join(format!("`restore`{key}.previous"))),
        blob_roots: Some(blob_roots),
    })
}

/// The blob directories `marker` records.
fn blob_roots(marker: &Marker) -> &[PathBuf] {
    marker.targets.blob_roots.as_deref().unwrap_or_default()
}

/// Where a restore prepares the new content of each of `marker`'s blob roots.
fn staged_blob_dirs(marker: &Marker) -> Vec<PathBuf> {
    blob_roots(marker).iter().map(|root| Targets::staged_blobs(root, &marker.name)).collect()
}

/// Publishes a new marker for `name`, or resumes the one left by an earlier attempt
/// of the same kind (its recorded targets are kept byte for byte). Returns the marker
/// in force and whether it was already there.
pub(crate) fn begin(layout: &Layout, name: &str, kind: Kind, targets: Targets) -> Result<(Marker, bool)> {
    let dir = layout.lifecycle_dir();
    let key = marker::key(name);
    match marker::read(&dir, &key) {
        Ok(Some(existing)) if existing.kind == kind => return Ok((existing, true)),
        Ok(Some(existing)) => {
            return Err(busy(format!(
                "an unfinished {} of database '{name}' must complete first (it is finished at the next start)",
                if existing.kind == Kind::Drop { "drop" } else { "restore" }
            )));
        }
        Ok(None) => {}
        Err(err) => {
            return Err(Error::Lifecycle(LifecycleError::Refused(format!(
                "database '{name}': {err}; refusing to proceed"
            ))));
        }
    }
    let marker = Marker::new(name, kind, targets);
    marker::publish(&dir, &marker).map_err(|e| LifecycleError::failed("writing the lifecycle marker", e))?;
    Ok((marker, false))
}

/// Publishes the marker of a restore. A restore marker left by an earlier attempt is
/// settled first (its swap completed or undone, as at start-up), so a new attempt never
/// inherits a half-finished one's directories.
pub(crate) fn begin_restore(layout: &Layout, name: &str, targets: Targets) -> Result<Marker> {
    let (marker, resumed) = begin(layout, name, Kind::Restore, targets.clone())?;
    if !resumed {
        return Ok(marker);
    }
    settle(layout, &marker)?;
    Ok(begin(layout, name, Kind::Restore, targets)?.0)
}

/// Removes `name`'s marker: the operation is complete (or was undone).
pub(crate) fn end(layout: &Layout, name: &str) -> Result<()> {
    marker::remove(&layout.lifecycle_dir(), &marker::key(name))
        .map_err(|e| LifecycleError::failed("removing the lifecycle marker", e))
}

/// Step 5 of a drop: deletes exactly the recorded directories: the database's,
/// then its blob roots.
pub(crate) fn delete_recorded(marker: &Marker) -> Result<()> {
    crate::failpoint::hit("drop-delete")?;
    remove_dir_strictly(&marker.targets.database)?;
    for root in blob_roots(marker) {
        crate::failpoint::hit("drop-remove-blobs")?;
        remove_dir_strictly(root)?;
    }
    Ok(())
}

/// Refuses a recorded database directory or blob root that is a symbolic link,
/// before anything is closed or deleted.
pub(crate) fn refuse_links(targets: &Targets) -> Result<()> {
    refuse_symlink(&targets.database)?;
    targets.blob_roots.iter().flatten().try_for_each(|root| refuse_symlink(root))
}

/// Copies the backup file `backup` (a data file, or a tar with blobs) into the
/// marker's staging directories and checks it is a Lyre database that opens,
/// before anything live is touched. Every blob root gets a staged directory, empty
/// when the backup has no blobs for it.
pub(crate) fn stage(marker: &Marker, backup: &Path, options: &DatabaseOptions) -> Result<()> {
    let staged = staged_dir(marker)?;
    remove_dir_strictly(staged)?;
    let staged_blobs = staged_blob_dirs(marker);
    for dir in &staged_blobs {
        remove_dir_strictly(dir)?;
    }
    let io =
        |e: std::io::Error| LifecycleError::failed(format_args!("preparing the restore in {}", staged.display()), e);
    std::fs::create_dir_all(staged).map_err(io)?;
    for dir in &staged_blobs {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    let data = staged.join("data.mdb");
    if crate::db::backup::is_tar(backup)? {
        crate::db::backup::extract(backup, staged, &staged_blobs)?;
    } else {
        std::fs::copy(backup, &data).map_err(io)?;
    }
    crate::failpoint::hit("restore-copied")?;
    std::fs::File::open(&data).and_then(|f| f.sync_all()).map_err(io)?;
    sync_dir(staged).map_err(io)?;
    for dir in &staged_blobs {
        sync_dir(dir).map_err(io)?;
        sync_parent(dir).map_err(io)?;
    }
    let check = lyre_store::Database::open(&marker.name, staged, options.clone())
        .map_err(Error::from)
        .and_then(|db| {
            let txn = db.read()?;
            DatabaseSchema::load(&marker.name, txn.catalog_entries()?)?;
            // Its log's sequence numbers may repeat ones the live database already
            // gave out: a new epoch tells its readers the log started over.
            db.renew_log_epoch()?;
            Ok(db)
        })
        .map_err(|e| match e {
            // What the file holds is not a Lyre database: the client's mistake.
            Error::Store(lyre_store::Error::Corrupt(_)) | Error::Corrupt(_) => {
                Error::Lifecycle(LifecycleError::NotABackup {
                    path: backup.display().to_string(),
                    reason: e.to_string(),
                })
            }
            // Anything else (space, permissions, the map size) is the server's.
            other => LifecycleError::failed("checking the restored copy", other),
        })?;
    let closing = check.closing();
    drop(check);
    if !closing.wait(std::time::Duration::from_secs(10)) {
        return Err(Error::Lifecycle(LifecycleError::Failed(
            "the checked backup copy did not close within 10 s".into(),
        )));
    }
    // Only a copy carrying this (durable) sentinel may be swapped in by recovery; a
    // crash before it leaves a torn copy that recovery deletes instead.
    let ready = staged.join(STAGED_READY);
    std::fs::File::create(&ready).and_then(|f| f.sync_all()).map_err(io)?;
    sync_dir(staged).map_err(io)
}

/// The file that marks a staged restore copy as complete and checked.
const STAGED_READY: &str = "restore-ready";

/// Step 5 of a restore: the prepared copy replaces the live directory (which must be
/// closed), then the prepared blob directories replace the live ones. Each rename is
/// made durable before the next. The copy's ready sentinel, moved in with it, stays
/// until the blobs are in place: recovery finds it there and finishes the blobs.
pub(crate) fn swap(marker: &Marker) -> Result<()> {
    let (live, staged, previous) = (&marker.targets.database, staged_dir(marker)?, previous_dir(marker)?);
    let io = |e: std::io::Error| LifecycleError::failed("swapping in the restored database", e);
    refuse_links(&marker.targets)?;
    remove_dir_strictly(previous)?;
    if live.exists() {
        std::fs::rename(live, previous).map_err(io)?;
        sync_parent(live).map_err(io)?;
    }
    crate::failpoint::hit("restore-swap")?;
    std::fs::rename(staged, live).map_err(io)?;
    sync_parent(live).map_err(io)?;
    swap_blobs(marker)?;
    remove_dir_strictly(previous)
}

/// After the restored database is in place: each staged blob directory replaces
/// its live one (whose blobs only the replaced database referenced), then the
/// ready sentinel goes. Safe to repeat after a crash at any step: a staged
/// directory still there has not been moved in yet.
fn swap_blobs(marker: &Marker) -> Result<()> {
    let io = |e: std::io::Error| LifecycleError::failed("swapping in the restored blobs", e);
    for root in blob_roots(marker) {
        let staged = Targets::staged_blobs(root, &marker.name);
        if !staged.exists() {
            continue;
        }
        remove_dir_strictly(root)?;
        crate::failpoint::hit("restore-swap-blobs")?;
        std::fs::rename(&staged, root).map_err(io)?;
        sync_parent(root).map_err(io)?;
    }
    let ready = marker.targets.database.join(STAGED_READY);
    match std::fs::remove_file(&ready) {
        Ok(()) => sync_dir(&marker.targets.database).map_err(io),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(err) => Err(io(err)),
    }
}

/// Deletes a restore's staged blob directories (the restore was undone).
pub(crate) fn remove_staged_blobs(marker: &Marker) -> Result<()> {
    staged_blob_dirs(marker).iter().try_for_each(|dir| remove_dir_strictly(dir))
}

/// `lyre restore`: replaces database `name` under a root no server is running on
/// with the backup file `backup` (its blobs going under `blob_paths`, the
/// configured `storage.blobPaths`), through the marker protocol.
pub fn restore_offline(
    layout: &Layout,
    name: &str,
    backup: &Path,
    options: &DatabaseOptions,
    blob_paths: &[PathBuf],
) -> Result<()> {
    validate_database_name(name)?;
    let _server = server_lock(layout).map_err(|_| {
        busy(format!("a server is running on {}; use the restore_backup operation instead", layout.root().display()))
    })?;
    let _lock = lock(layout, name)?;
    let roots = crate::blobs::resolve_paths(layout.root(), blob_paths)?.iter().map(|p| p.join(name)).collect();
    let marker = begin_restore(layout, name, restore_targets(layout, name, roots)?)?;
    if let Err(err) = stage(&marker, backup, options) {
        let _ = remove_dir_strictly(staged_dir(&marker)?);
        let _ = remove_staged_blobs(&marker);
        end(layout, name)?;
        return Err(err);
    }
    swap(&marker)?;
    end(layout, name)
}

/// `lyre backup`: writes a compacted, consistent copy of database `name` (with its
/// blobs, from under `blob_paths`: then a tar) to `out`; answers the format written.
/// Safe while a server runs on the root (LMDB allows readers in other processes).
pub fn backup_offline(
    layout: &Layout,
    name: &str,
    out: &Path,
    options: &DatabaseOptions,
    blob_paths: &[PathBuf],
) -> Result<crate::db::backup::BackupFormat> {
    validate_database_name(name)?;
    let dir = layout.database_dir(name);
    if !dir.join("data.mdb").exists() {
        return Err(Error::DatabaseNotFound(name.to_string()));
    }
    let db = lyre_store::Database::open(name, &dir, options.clone())?;
    let roots = crate::blobs::resolve_paths(layout.root(), blob_paths)?.iter().map(|p| p.join(name)).collect();
    let blobs = crate::blobs::BlobStore::new(roots, options.durable);
    let format = crate::db::backup::BackupFormat::for_store(&blobs)?;
    // A running server may remove a freed blob while this process copies them (its
    // hold on the files is in its own memory): blobs are backed up through it.
    if format == crate::db::backup::BackupFormat::Tar && server_lock(layout).is_err() {
        return Err(busy(format!(
            "database '{name}' has blobs and a server is running on {}; use the get_backup operation instead",
            layout.root().display()
        )));
    }
    let mut file = std::fs::File::create(out).map_err(|e| Error::Store(lyre_store::Error::from(e)))?;
    crate::db::backup::write(&db, &blobs, format, layout.databases_dir().as_path(), &mut file)?;
    file.sync_all().map_err(|e| Error::Store(lyre_store::Error::from(e)))?;
    Ok(format)
}

/// Finishes or undoes every interrupted drop and restore under `layout`, before any
/// database is opened. Returns the databases that must not load.
pub(crate) fn recover(layout: &Layout) -> Result<Blocked> {
    let dir = layout.lifecycle_dir();
    let mut blocked = Blocked::new();
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(blocked),
        Err(err) => return Err(Error::Store(lyre_store::Error::from(err))),
    };
    // Unreadable markers are known only by key; map keys back to directory names.
    let mut by_key: BTreeMap<String, String> = BTreeMap::new();
    if let Ok(names) = std::fs::read_dir(layout.databases_dir()) {
        for name in names.flatten().filter_map(|e| e.file_name().to_str().map(str::to_string)) {
            by_key.insert(marker::key(&name), name);
        }
    }
    for entry in entries.flatten() {
        let file = entry.file_name().to_string_lossy().to_string();
        if file.ends_with(".marker.staged") {
            // Publication never completed: the operation never started.
            let _ = std::fs::remove_file(entry.path());
            continue;
        }
        let Some(key) = file.strip_suffix(".marker") else { continue };
        let key = key.to_string();
        match marker::read(&dir, &key) {
            Ok(Some(found)) => {
                let name = found.name.clone();
                if let Err(err) = finish(layout, &found) {
                    tracing::error!(database = %name, error = %err, "an interrupted lifecycle operation could not be finished");
                    blocked.insert(name, err.to_string());
                }
            }
            Ok(None) => {}
            Err(err) => {
                let name = by_key.get(&key).cloned().unwrap_or_else(|| format!("(marker {key})"));
                let reason = match err {
                    MarkerError::Io(e) => format!("its lifecycle marker could not be read ({e}); nothing was deleted"),
                    MarkerError::Unreadable(e) => {
                        format!(
                            "its lifecycle marker {} is unreadable ({e}); nothing was deleted",
                            marker::path(&dir, &key).display()
                        )
                    }
                };
                tracing::error!(database = %name, reason = %reason, "refusing to load a database");
                blocked.insert(name, reason);
            }
        }
    }
    Ok(blocked)
}

/// Finishes one interrupted operation from its marker.
fn finish(layout: &Layout, found: &Marker) -> Result<()> {
    let _lock = lock(layout, &found.name)?;
    settle(layout, found)
}

/// Completes or undoes the operation `found` records and removes its marker; the
/// caller holds the database's lifecycle lock.
fn settle(layout: &Layout, found: &Marker) -> Result<()> {
    match found.kind {
        Kind::Drop => {
            delete_recorded(found)?;
            tracing::info!(database = %found.name, dir = %found.targets.database.display(), "finished an interrupted drop");
        }
        Kind::Restore => {
            let (live, staged) = (&found.targets.database, staged_dir(found)?);
            if live.join(STAGED_READY).exists() {
                // It crashed after the restored database went in: put its blobs in.
                swap_blobs(found)?;
                tracing::info!(database = %found.name, "finished an interrupted restore's blobs");
            } else if !live.exists() && staged.join(STAGED_READY).exists() {
                // It crashed mid-swap: complete it.
                std::fs::rename(staged, live).map_err(|e| LifecycleError::failed("finishing a restore", e))?;
                sync_parent(live).map_err(|e| LifecycleError::failed("finishing a restore", e))?;
                swap_blobs(found)?;
                tracing::info!(database = %found.name, "finished an interrupted restore");
            } else if !live.exists() && previous_dir(found)?.exists() {
                // The replaced database was moved aside but no checked copy is ready
                // (a marker from an older build, or a lost sentinel): put it back.
                std::fs::rename(previous_dir(found)?, live)
                    .map_err(|e| LifecycleError::failed("undoing a restore", e))?;
                sync_parent(live).map_err(|e| LifecycleError::failed("undoing a restore", e))?;
                remove_dir_strictly(staged)?;
                remove_staged_blobs(found)?;
                tracing::info!(database = %found.name, "undid an interrupted restore; the database was put back");
            } else {
                // It never reached the swap: the live database is intact.
                remove_dir_strictly(staged)?;
                remove_staged_blobs(found)?;
                tracing::info!(database = %found.name, "undid an interrupted restore; the database is unchanged");
            }
            remove_dir_strictly(previous_dir(found)?)?;
        }
    }
    end(layout, &found.name)
}

fn staged_dir(marker: &Marker) -> Result<&Path> {
    marker.targets.staged.as_deref().ok_or_else(|| malformed("a restore marker without a staging path"))
}

fn previous_dir(marker: &Marker) -> Result<&Path> {
    marker.targets.previous.as_deref().ok_or_else(|| malformed("a restore marker without a previous path"))
}

fn malformed(what: &str) -> Error {
    Error::Lifecycle(LifecycleError::Failed(what.to_string()))
}

fn busy(message: String) -> Error {
    Error::Lifecycle(LifecycleError::Busy(message))
}

fn sync_parent(path: &Path) -> std::io::Result<()> {
    match path.parent() {
        Some(parent) => sync_dir(parent),
        None => Ok(()),
    }
}

/// Whether `name` may be a database directory a scan loads (lifecycle work areas
/// carry a backtick, which no database name may).
pub(crate) fn is_database_dir_name(name: &str) -> bool {
    validate_database_name(name).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recorded_paths_carry_no_dot_dot_and_keep_a_link_as_a_link() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir_all(root.join("database")).unwrap();
        // A root given as `…/x/../root` (e.g. `--root ../data`) still yields markers
        // that validate when read back.
        std::fs::create_dir(dir.path().join("x")).unwrap();
        let layout = Layout::new(dir.path().join("x/../root"));
        let targets = restore_targets(&layout, "sales", Vec::new()).unwrap();
        assert!(!targets.database.to_string_lossy().contains(".."), "{}", targets.database.display());
        let marker = Marker::new("sales", Kind::Restore, targets);
        assert!(Marker::parse(&marker.encode(), &marker::key("sales")).is_ok());
        // The last component is not resolved: a link there stays visible to the refusal.
        let link = root.join("database/linked");
        std::os::unix::fs::symlink(dir.path(), &link).unwrap();
        assert_eq!(absolute(&link).unwrap().file_name(), link.file_name());
        assert!(refuse_symlink(&absolute(&link).unwrap()).is_err());
    }

    #[test]
    fn recovery_puts_back_a_database_moved_aside_without_a_ready_copy() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path());
        std::fs::create_dir_all(layout.databases_dir()).unwrap();
        let targets = restore_targets(&layout, "sales", Vec::new()).unwrap();
        let previous = targets.previous.clone().unwrap();
        let staged = targets.staged.clone().unwrap();
        // Crashed after moving the live database aside, with an unchecked staged copy.
        std::fs::create_dir_all(&previous).unwrap();
        std::fs::write(previous.join("data.mdb"), b"the only copy").unwrap();
        std::fs::create_dir_all(&staged).unwrap();
        std::fs::write(staged.join("data.mdb"), b"torn").unwrap();
        marker::publish(&layout.lifecycle_dir(), &Marker::new("sales", Kind::Restore, targets.clone())).unwrap();
        let blocked = recover(&layout).unwrap();
        assert!(blocked.is_empty(), "{blocked:?}");
        assert_eq!(std::fs::read(targets.database.join("data.mdb")).unwrap(), b"the only copy");
        assert!(!staged.exists() && !previous.exists());
        assert!(marker::read(&layout.lifecycle_dir(), &marker::key("sales")).unwrap().is_none());
    }
}
