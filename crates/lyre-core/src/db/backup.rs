//! The backup file: what `get_backup` and `lyre backup` write and a restore reads.
//!
//! A database without blob files is backed up as its compacted LMDB data file
//! alone (`.mdb`, the format before blobs existed). One with blob files is backed
//! up as a tar holding `data.mdb` and every blob file as
//! `blobs/<root index>/<shard>/<id>`, copied while the store holds its files in
//! place (no freed blob is removed until the copy ends, so every blob the data
//! file's snapshot references is there). A restore tells the two apart by the tar
//! magic and refuses a tar entry it would not write.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Component, Path, PathBuf};

use crate::blobs::BlobStore;
use crate::durable::sync_dir;
use crate::error::{Error, LifecycleError, Result};

/// The data file's name, in a tar backup and in a database directory.
const DATA_FILE: &str = "data.mdb";

/// How a backup is laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackupFormat {
    /// The LMDB data file alone.
    Mdb,
    /// A tar of the data file and the blob files.
    Tar,
}

impl BackupFormat {
    /// The format a backup of a database with blob store `blobs` takes now: a tar
    /// once it has any blob file.
    pub fn for_store(blobs: &BlobStore) -> Result<BackupFormat> {
        Ok(match blobs.has_files()? {
            false => BackupFormat::Mdb,
            true => BackupFormat::Tar,
        })
    }

    /// The file name extension (`mdb`, `tar`).
    pub fn extension(self) -> &'static str {
        match self {
            BackupFormat::Mdb => "mdb",
            BackupFormat::Tar => "tar",
        }
    }
}

/// Writes the backup of `store` (with its blobs from `blobs`) in `format` to `out`;
/// a tar's data file is first copied to an unnamed file in `scratch` (its length
/// goes before it).
pub(crate) fn write(
    store: &lyre_store::Database,
    blobs: &std::sync::Arc<BlobStore>,
    format: BackupFormat,
    scratch: &Path,
    out: &mut File,
) -> Result<()> {
    if format == BackupFormat::Mdb {
        return Ok(store.copy_to(out)?);
    }
    let _hold = blobs.hold();
    let mut data = tempfile::tempfile_in(scratch).map_err(io)?;
    store.copy_to(&mut data)?;
    let length = data.seek(SeekFrom::End(0)).map_err(io)?;
    data.seek(SeekFrom::Start(0)).map_err(io)?;
    let mut tar = tar::Builder::new(out);
    tar.follow_symlinks(false);
    let mut header = tar::Header::new_gnu();
    header.set_size(length);
    header.set_mode(0o600);
    header.set_entry_type(tar::EntryType::Regular);
    tar.append_data(&mut header, DATA_FILE, &mut data).map_err(io)?;
    for (root, relative) in blobs.files()? {
        let source = blobs.roots()[usize::from(root)].join(&relative);
        let name = Path::new("blobs").join(root.to_string()).join(&relative);
        match File::open(&source) {
            Ok(mut file) => tar.append_file(&name, &mut file).map_err(io)?,
            // Listed, then gone: an orphan the cleanup removed (a held store removes
            // nothing else).
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => continue,
            Err(err) => return Err(io(err)),
        }
    }
    tar.into_inner().map_err(io)?;
    Ok(())
}

/// Whether the file at `path` is a tar backup (the `ustar` magic of its first
/// header) rather than a data file.
pub(crate) fn is_tar(path: &Path) -> Result<bool> {
    let mut head = [0u8; 512];
    let mut file = File::open(path).map_err(|e| not_a_backup(path, &e.to_string()))?;
    let mut read = 0;
    while read < head.len() {
        match file.read(&mut head[read..]).map_err(io)? {
            0 => return Ok(false),
            n => read += n,
        }
    }
    Ok(&head[257..262] == b"ustar")
}

/// Unpacks the tar backup at `backup` into `database_dir` (its data file) and
/// `blob_dirs` (blobs of root *i* into `blob_dirs[i]`), flushing each file and
/// directory. Refuses, as not a backup, any entry other than the data file and
/// blob files, and a blob of a root this server does not have.
pub(crate) fn extract(backup: &Path, database_dir: &Path, blob_dirs: &[PathBuf]) -> Result<()> {
    let refuse = |why: String| not_a_backup(backup, &why);
    let mut archive = tar::Archive::new(File::open(backup).map_err(io)?);
    let mut has_data = false;
    let mut touched_dirs = std::collections::BTreeSet::new();
    for entry in archive.entries().map_err(|e| refuse(e.to_string()))? {
        let mut entry = entry.map_err(|e| refuse(e.to_string()))?;
        let name = entry.path().map_err(|e| refuse(e.to_string()))?.into_owned();
        if entry.header().entry_type() != tar::EntryType::Regular {
            return Err(refuse(format!("{} is not a regular file", name.display())));
        }
        let target = match target_of(&name, database_dir, blob_dirs) {
            Some(target) => target,
            None => return Err(refuse(format!("it holds {}, which is neither data.mdb nor a blob", name.display()))),
        };
        has_data |= name == Path::new(DATA_FILE);
        let dir = target.parent().ok_or_else(|| refuse("a blob without a directory".into()))?.to_path_buf();
        std::fs::create_dir_all(&dir).map_err(io)?;
        let mut file = File::create(&target).map_err(io)?;
        std::io::copy(&mut entry, &mut file).map_err(|e| refuse(e.to_string()))?;
        file.sync_all().map_err(io)?;
        touched_dirs.insert(dir);
    }
    if !has_data {
        return Err(refuse("it has no data.mdb".into()));
    }
    for dir in touched_dirs {
        sync_dir(&dir).map_err(io)?;
        if let Some(parent) = dir.parent() {
            sync_dir(parent).map_err(io)?;
        }
    }
    Ok(())
}

/// Where entry `name` of a tar backup goes: `data.mdb` into the database directory,
/// `blobs/<root>/<2 hex digits>/<16 hex digits>` into that root's directory.
fn target_of(name: &Path, database_dir: &Path, blob_dirs: &[PathBuf]) -> Option<PathBuf> {
    let parts: Vec<&str> = name
        .components()
        .map(|c| match c {
            Component::Normal(part) => part.to_str(),
            _ => None,
        })
        .collect::<Option<_>>()?;
    let hex = |text: &str, len: usize| text.len() == len && text.bytes().all(|b| b.is_ascii_hexdigit());
    match parts.as_slice() {
        [DATA_FILE] => Some(database_dir.join(DATA_FILE)),
        ["blobs", root, shard, id] if hex(shard, 2) && hex(id, 16) => {
            let dir = blob_dirs.get(root.parse::<usize>().ok()?)?;
            Some(dir.join(shard).join(id))
        }
        _ => None,
    }
}

fn not_a_backup(path: &Path, reason: &str) -> Error {
    Error::Lifecycle(LifecycleError::NotABackup { path: path.display().to_string(), reason: reason.to_string() })
}

fn io(err: std::io::Error) -> Error {
    Error::Store(lyre_store::Error::from(err))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_data_file_and_blob_files_have_a_place() {
        let (db, blobs) = (Path::new("/d/db"), vec![PathBuf::from("/b/db")]);
        assert_eq!(target_of(Path::new("data.mdb"), db, &blobs), Some(PathBuf::from("/d/db/data.mdb")));
        assert_eq!(
            target_of(Path::new("blobs/0/ab/00000000000000ab"), db, &blobs),
            Some(PathBuf::from("/b/db/ab/00000000000000ab"))
        );
        for bad in [
            "blobs/1/ab/00000000000000ab",
            "blobs/0/../00000000000000ab",
            "blobs/0/ab/../../../../etc/passwd",
            "/data.mdb",
            "lock.mdb",
            "blobs/0/ab/not-hex-at-all!!",
        ] {
            assert_eq!(target_of(Path::new(bad), db, &blobs), None, "{bad}");
        }
    }
}
