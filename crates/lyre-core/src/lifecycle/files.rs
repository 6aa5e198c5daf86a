//! File-system steps of the lifecycle protocol: locks, strict removal, copies.

use std::fs::{File, OpenOptions};
use std::path::Path;

use crate::error::{Error, LifecycleError, Result};
use crate::lifecycle::marker::sync_dir;

/// An exclusive OS file lock (`flock`), released when dropped or when the process
/// dies. Only whether it is held matters; the file itself stays.
#[derive(Debug)]
pub struct FileLock {
    _file: File,
}

impl FileLock {
    /// Takes the lock at `path` without waiting; `None` when someone else holds it.
    pub fn try_acquire(path: &Path) -> Result<Option<FileLock>> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        let file = OpenOptions::new().create(true).truncate(false).write(true).open(path).map_err(io)?;
        match file.try_lock() {
            Ok(()) => Ok(Some(FileLock { _file: file })),
            Err(std::fs::TryLockError::WouldBlock) => Ok(None),
            Err(std::fs::TryLockError::Error(err)) => Err(io(err)),
        }
    }
}

/// Refuses `path` if it is a symbolic link: a drop deletes exactly the directories it
/// recorded, never what a link points at.
pub fn refuse_symlink(path: &Path) -> Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => Err(Error::Lifecycle(LifecycleError::Refused(format!(
            "{} is a symbolic link; refusing to delete through it (nothing was changed)",
            path.display()
        )))),
        _ => Ok(()),
    }
}

/// Removes the directory `path` and everything in it (never following links inside
/// it), then makes the removal durable. A missing directory is already removed. The
/// first failure is returned: the caller keeps its marker so a retry or the next
/// start finishes the job.
pub fn remove_dir_strictly(path: &Path) -> Result<()> {
    refuse_symlink(path)?;
    crate::failpoint::hit("drop-remove")?;
    match std::fs::remove_dir_all(path) {
        Ok(()) => {}
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(err) => return Err(LifecycleError::failed(format_args!("removing {}", path.display()), err)),
    }
    if let Some(parent) = path.parent() {
        sync_dir(parent).map_err(io)?;
    }
    Ok(())
}

fn io(err: std::io::Error) -> Error {
    Error::Store(lyre_store::Error::from(err))
}
