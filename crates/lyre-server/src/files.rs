//! Writing a file whole or not at all, the one way the server replaces files it
//! owns (token keys, the configuration, exports).

use std::fs::File;
use std::io::Write as _;
use std::path::{Path, PathBuf};

/// Writes `path` through `write`, whole or not at all: into a uniquely named file
/// beside it (created with permissions `mode` where given), synced, renamed into
/// place, and the directory synced so the rename lasts. On any failure the staged
/// file is removed and `path` is as it was.
pub fn write_atomically(
    path: &Path,
    mode: Option<u32>,
    write: impl FnOnce(&mut File) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let staged = staged_name(path);
    let written = (|| {
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        if let Some(mode) = mode {
            std::os::unix::fs::OpenOptionsExt::mode(&mut options, mode);
        }
        let mut file = options.open(&staged)?;
        write(&mut file)?;
        file.flush()?;
        file.sync_all()?;
        std::fs::rename(&staged, path)?;
        let dir = path.parent().filter(|dir| !dir.as_os_str().is_empty()).unwrap_or(Path::new("."));
        File::open(dir)?.sync_all()
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&staged);
    }
    written
}

/// `<dir>/.<name>.<unique>.partial`: unique, so two writers of the same file never
/// write into each other's staged copy.
fn staged_name(path: &Path) -> PathBuf {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    path.with_file_name(format!(".{name}.{}.partial", uuid::Uuid::new_v4().simple()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_write_leaves_the_old_file_and_no_staged_copy() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.yaml");
        write_atomically(&path, None, |f| f.write_all(b"old")).unwrap();
        let failed = write_atomically(&path, None, |f| {
            f.write_all(b"half")?;
            Err(std::io::Error::other("disk full"))
        });
        assert_eq!(failed.unwrap_err().to_string(), "disk full");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "old");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1, "no staged copy is left");
        write_atomically(&path, Some(0o600), |f| f.write_all(b"new")).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "new");
    }
}
