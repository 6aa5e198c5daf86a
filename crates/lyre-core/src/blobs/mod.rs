//! Blobs: large values kept in files beside the database, with a reference
//! ([`BlobRef`], a MessagePack extension) in the record.
//!
//! A database's blobs live under its roots, `<blobPath>/<database>/` for each of
//! `storage.blobPaths` (`<rootPath>/blobs` by default), one file per blob at
//! `<root>/<first byte of the id, hex>/<id, 16 hex digits>`, holding exactly the
//! blob's bytes.
//!
//! The life of a blob, and why no crash loses one a record references:
//!
//! 1. Written first ([`BlobStore::create`], streamed, at most a size limit), then
//!    flushed with its directory ([`BlobWriter::finish`]), *before* the writer job
//!    that stores the reference is queued. Until that job has run, the file is
//!    [`PendingBlob`]: a job that fails, or is never run, removes it; a job that runs
//!    keeps it (whether its batch then commits or not: deleting a file a committed
//!    record names would lose data; a file no record names is only an orphan).
//! 2. A write job that replaces or deletes a value holding a reference (or drops
//!    its table) queues the blob for removal in the database's metadata
//!    ([`queue_freed`]), in the same transaction: the queue commits exactly when the
//!    change does. The services' reclaimer ([`BlobStore::reclaim`]) removes the
//!    queued files and then their queue entries.
//! 3. What a crash leaves between 1 and the commit is an orphan: a file no record
//!    names. `cleanup_orphan_blobs` ([`BlobStore::orphans`]) finds and removes them.
//!
//! A reference is never shared: a write that brings a reference it did not make
//! (a SQL `INSERT … SELECT` copying a record) gets its own copy of the file (a hard
//! link), so freeing one record's blob never takes another's.

use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use lyre_store::WriteTxn;
use parking_lot::Mutex;

use crate::catalog::TableSchema;
use crate::durable::sync_dir;
use crate::error::{Error, Result};
use crate::value::{BlobRef, Object, Value};

/// The media type of a blob written without one.
pub const DEFAULT_CONTENT_TYPE: &str = "application/octet-stream";

/// The longest media type a blob may carry (it is stored in every reference).
pub const MAX_CONTENT_TYPE: usize = 200;

/// The declared attribute type whose values are stored as blobs.
pub const BLOB_TYPE: &str = "Blob";

/// Values given whole for a `Blob` attribute (text or bytes in a record) shorter
/// than this stay in the record, as Harper keeps them (its `FILE_STORAGE_THRESHOLD`):
/// a file per small value would cost more than it holds, and JSON shows them as
/// the text they are. Uploads always go to a file.
pub const INLINE_LIMIT: usize = 8192;

/// The media type Harper gives a blob made from text or bytes in a record.
pub const INLINE_CONTENT_TYPE: &str = "text/plain";

/// Metadata keys of blobs queued for removal: the prefix, then the root's index
/// and the id.
const FREED_PREFIX: &[u8] = b"blob-freed/";

/// Metadata key marking a table that has held a blob (so dropping it looks for
/// blobs to free, and dropping any other skips the scan).
pub(crate) fn holder_key(table: &str) -> Vec<u8> {
    format!("blob-holder/{table}").into_bytes()
}

/// Whether `table` has held a blob: a record of it may reference one.
pub(crate) fn held_by(txn: &WriteTxn<'_, '_>, table: &str) -> Result<bool> {
    Ok(txn.meta(&holder_key(table))?.is_some())
}

/// How long a new file is left alone by the orphan cleanup: the moments between a
/// write job keeping a file and its batch committing, and uploads still arriving.
const ORPHAN_GRACE: Duration = Duration::from_secs(60);

/// One database's blob files.
#[derive(Debug)]
pub struct BlobStore {
    /// Absolute directories, each named after the database; a reference's `root`
    /// indexes this list (the configured order of `storage.blobPaths`).
    roots: Vec<PathBuf>,
    /// Flush each file and its directory before the write that references it.
    durable: bool,
    /// Blobs written and not yet kept or discarded by their write job.
    pending: Mutex<HashSet<(u8, u64)>>,
    /// Backups copying the files now: while any runs, no file is removed (a
    /// backup's snapshot may reference a blob a later write freed).
    holds: std::sync::atomic::AtomicUsize,
    /// Taken shared by each removal (which checks `holds` under it) and exclusively
    /// by [`BlobStore::hold`]: once a hold is taken, no removal is under way or
    /// starts.
    removal: parking_lot::RwLock<()>,
}

/// Keeps every file of a [`BlobStore`] in place while it lives ([`BlobStore::hold`]).
pub struct BlobHold(Arc<BlobStore>);

impl Drop for BlobHold {
    fn drop(&mut self) {
        self.0.holds.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

/// The configured blob paths made absolute (created if absent, so they resolve):
/// `<root>/blobs` when none is configured. At most 256 (a reference names its
/// path in one byte).
pub fn resolve_paths(root: &Path, configured: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let default = [root.join("blobs")];
    let paths = if configured.is_empty() { &default[..] } else { configured };
    if paths.len() > 256 {
        return Err(Error::invalid("storage.blobPaths may name at most 256 paths"));
    }
    paths
        .iter()
        .map(|path| {
            std::fs::create_dir_all(path).map_err(io)?;
            std::fs::canonicalize(path).map_err(io)
        })
        .collect()
}

impl BlobStore {
    /// The store of the database whose blob roots are `roots` (absolute, each ending
    /// in the database's name; at most 256). Nothing is created until a blob is
    /// written.
    pub fn new(roots: Vec<PathBuf>, durable: bool) -> Arc<BlobStore> {
        Arc::new(BlobStore {
            roots,
            durable,
            pending: Mutex::new(HashSet::new()),
            holds: Default::default(),
            removal: Default::default(),
        })
    }

    /// The roots, in reference order.
    pub fn roots(&self) -> &[PathBuf] {
        &self.roots
    }

    /// Keeps every file in place until the hold is dropped (a backup copying them).
    pub fn hold(self: &Arc<Self>) -> BlobHold {
        let _no_removal = self.removal.write();
        self.holds.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        BlobHold(self.clone())
    }

    /// Removes the unused blob file `path` unless a backup holds the files or a
    /// write is using blob `(root, id)`; answers whether it is gone (a file
    /// already gone counts).
    pub fn remove_unused(&self, path: &Path, root: u8, id: u64) -> std::io::Result<bool> {
        let _removing = self.removal.read();
        if self.held() || self.pending.lock().contains(&(root, id)) {
            return Ok(false);
        }
        match std::fs::remove_file(path) {
            Ok(()) => Ok(true),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(true),
            Err(err) => Err(err),
        }
    }

    /// Whether any blob file exists under the roots (stops at the first).
    pub fn has_files(&self) -> Result<bool> {
        for root in &self.roots {
            let shards = match std::fs::read_dir(root) {
                Ok(shards) => shards,
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => continue,
                Err(err) => return Err(io(err)),
            };
            for shard in shards.flatten() {
                if let Ok(mut files) = std::fs::read_dir(shard.path())
                    && files.next().is_some()
                {
                    return Ok(true);
                }
            }
        }
        Ok(false)
    }

    fn held(&self) -> bool {
        self.holds.load(std::sync::atomic::Ordering::Acquire) > 0
    }

    /// Every blob file under the roots, as (root index, path relative to the root).
    pub fn files(&self) -> Result<Vec<(u8, PathBuf)>> {
        let mut found = Vec::new();
        self.walk(&mut |root, shard, file, _| {
            found.push((root, PathBuf::from(shard).join(file)));
        })?;
        Ok(found)
    }

    /// The file of `blob`.
    pub fn path(&self, blob: &BlobRef) -> Result<PathBuf> {
        let root = self.roots.get(usize::from(blob.root)).ok_or_else(|| {
            Error::Corrupt(format!("a blob names root {} of {} configured blob paths", blob.root, self.roots.len()))
        })?;
        Ok(root.join(format!("{:02x}", blob.id >> 56)).join(format!("{:016x}", blob.id)))
    }

    /// Starts a new blob of media type `content_type` (the default when empty) that
    /// may grow to `limit` bytes, in the root with the most free space.
    pub fn create(self: &Arc<Self>, content_type: &str, limit: u64) -> Result<BlobWriter> {
        let content_type = match content_type.trim() {
            "" => DEFAULT_CONTENT_TYPE.to_string(),
            given if given.len() > MAX_CONTENT_TYPE => {
                return Err(Error::invalid(format!("a blob's content type is limited to {MAX_CONTENT_TYPE} bytes")));
            }
            given => given.to_string(),
        };
        let root = self.roomiest_root()?;
        loop {
            let blob = BlobRef { root, id: rand::random(), size: 0, content_type: content_type.clone() };
            let path = self.path(&blob)?;
            let dir = path.parent().ok_or_else(|| Error::Corrupt("a blob path has no directory".into()))?;
            let created_dir = make_dirs(dir)?;
            match OpenOptions::new().write(true).create_new(true).open(&path) {
                Ok(file) => {
                    let pending = self.pend(blob);
                    return Ok(BlobWriter { file, pending, limit, created_dir });
                }
                // A random 64-bit id met an existing one: draw again.
                Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(err) => return Err(io(err)),
            }
        }
    }

    /// Writes `bytes` as a new blob (a value given whole, in a record).
    pub fn write_whole(self: &Arc<Self>, bytes: &[u8], content_type: &str) -> Result<PendingBlob> {
        let mut writer = self.create(content_type, u64::MAX)?;
        writer.write(bytes)?;
        writer.finish()
    }

    /// A new blob with the same bytes as `blob`: a hard link to its file (a copy
    /// where a link cannot be made).
    pub fn copy(self: &Arc<Self>, blob: &BlobRef) -> Result<PendingBlob> {
        let source = self.path(blob)?;
        loop {
            let copy = BlobRef { id: rand::random(), ..blob.clone() };
            let target = self.path(&copy)?;
            let dir = target.parent().ok_or_else(|| Error::Corrupt("a blob path has no directory".into()))?;
            let created = make_dirs(dir)?;
            let linked = std::fs::hard_link(&source, &target)
                .or_else(|err| match err.kind() {
                    std::io::ErrorKind::AlreadyExists => Err(err),
                    std::io::ErrorKind::NotFound => Err(err),
                    // Another file system (or one without links): a real copy, flushed.
                    _ => std::fs::copy(&source, &target).and_then(|_| File::open(&target)?.sync_all()),
                })
                // A link shares its source's modification time, which may be old: made
                // new, the orphan cleanup's grace covers the copy until its write commits.
                .and_then(|()| OpenOptions::new().write(true).open(&target)?.set_modified(SystemTime::now()));
            match linked {
                Ok(()) => {
                    let pending = self.pend(copy);
                    if self.durable {
                        sync_created(dir, &created).map_err(io)?;
                    }
                    return Ok(pending);
                }
                Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                    return Err(Error::invalid(format!("a blob being copied ({} bytes) no longer exists", blob.size)));
                }
                Err(err) => return Err(io(err)),
            }
        }
    }

    /// Opens `blob`'s file for reading.
    pub fn open(&self, blob: &BlobRef) -> Result<File> {
        File::open(self.path(blob)?).map_err(|err| match err.kind() {
            std::io::ErrorKind::NotFound => Error::Missing("the blob's file is missing".into()),
            _ => io(err),
        })
    }

    /// Removes the files of the queued blobs `queued` (metadata entries under
    /// [`freed_prefix`]) and answers the keys whose files are gone (a file already
    /// gone included), for the caller to remove from the queue in one writer job.
    /// A blob some write is still using is left for a later round.
    pub fn reclaimable(&self, queued: &[(Vec<u8>, Vec<u8>)]) -> Vec<Vec<u8>> {
        let mut done = Vec::with_capacity(queued.len());
        if self.held() {
            return done;
        }
        for (key, _) in queued {
            let Some((root, id)) = parse_freed_key(key) else {
                done.push(key.clone()); // not a key this build writes: drop it
                continue;
            };
            let blob = BlobRef { root, id, size: 0, content_type: String::new() };
            match self.path(&blob).map(|path| self.remove_unused(&path, root, id)) {
                Ok(Ok(true)) => done.push(key.clone()),
                Ok(Ok(false)) => {}
                Ok(Err(err)) => {
                    tracing::warn!(error = %err, "a freed blob's file could not be removed; retrying later")
                }
                Err(err) => {
                    tracing::warn!(error = %err, "a freed blob names a root that is not configured; forgetting it");
                    done.push(key.clone());
                }
            }
        }
        done
    }

    /// Every blob file under the roots that no write is using now and that is older
    /// than the grace period: candidates for the orphan cleanup, which removes those
    /// no record names.
    pub fn candidates(&self) -> Result<Vec<(BlobRef, PathBuf)>> {
        let now = SystemTime::now();
        let mut found = Vec::new();
        if self.held() {
            return Ok(found);
        }
        self.walk(&mut |root, _, name, entry| {
            let Some(id) = name.to_str().and_then(|n| u64::from_str_radix(n, 16).ok()) else {
                return; // not a blob file: never touched
            };
            let Ok(meta) = entry.metadata() else { return };
            // A copy (a hard link) renews the time when it is made: see `copy`.
            let age = meta.modified().ok().and_then(|modified| now.duration_since(modified).ok());
            if age.is_none_or(|age| age < ORPHAN_GRACE) || self.pending.lock().contains(&(root, id)) {
                return;
            }
            let blob = BlobRef { root, id, size: meta.len(), content_type: String::new() };
            found.push((blob, entry.path()));
        })?;
        Ok(found)
    }

    /// Calls `found` with every regular file two levels under each root: its root's
    /// index, its shard directory's name, its own name and its entry.
    fn walk(&self, found: &mut dyn FnMut(u8, &std::ffi::OsStr, &std::ffi::OsStr, &std::fs::DirEntry)) -> Result<()> {
        for (index, root) in self.roots.iter().enumerate() {
            let Ok(root_index) = u8::try_from(index) else { break };
            let shards = match std::fs::read_dir(root) {
                Ok(shards) => shards,
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => continue,
                Err(err) => return Err(io(err)),
            };
            for shard in shards {
                let shard = shard.map_err(io)?;
                if !shard.file_type().map_err(io)?.is_dir() {
                    continue;
                }
                for file in std::fs::read_dir(shard.path()).map_err(io)? {
                    let file = file.map_err(io)?;
                    if file.file_type().map_err(io)?.is_file() {
                        found(root_index, &shard.file_name(), &file.file_name(), &file);
                    }
                }
            }
        }
        Ok(())
    }

    /// The configured root with the most free space (new blobs spread over the
    /// roots as Harper spreads them, by free space).
    fn roomiest_root(&self) -> Result<u8> {
        if self.roots.len() <= 1 {
            return match self.roots.is_empty() {
                true => Err(Error::invalid("no blob path is configured")),
                false => Ok(0),
            };
        }
        let mut best = (0u8, 0u64);
        for (index, root) in self.roots.iter().enumerate().take(256) {
            let free = free_space(root).unwrap_or(0);
            if free > best.1 {
                best = (index as u8, free);
            }
        }
        Ok(best.0)
    }

    fn pend(self: &Arc<Self>, blob: BlobRef) -> PendingBlob {
        self.pending.lock().insert((blob.root, blob.id));
        PendingBlob { store: self.clone(), blob: Some(blob) }
    }
}

/// Creates `dir` and any missing ancestors; answers those it created, deepest first.
fn make_dirs(dir: &Path) -> Result<Vec<PathBuf>> {
    let missing: Vec<PathBuf> = dir.ancestors().take_while(|d| !d.exists()).map(Path::to_path_buf).collect();
    std::fs::create_dir_all(dir).map_err(io)?;
    Ok(missing)
}

/// Flushes `dir` (which holds a new file) and the parent of every directory in
/// `created`, so each new entry on the way to the file survives a crash.
fn sync_created(dir: &Path, created: &[PathBuf]) -> std::io::Result<()> {
    sync_dir(dir)?;
    for made in created {
        if let Some(parent) = made.parent() {
            sync_dir(parent)?;
        }
    }
    Ok(())
}

/// Bytes free for an unprivileged writer in the file system holding `path` (or its
/// nearest existing ancestor).
fn free_space(path: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let existing = path.ancestors().find(|p| p.exists())?;
    let c_path = std::ffi::CString::new(existing.as_os_str().as_bytes()).ok()?;
    let mut stats = std::mem::MaybeUninit::<libc::statvfs>::zeroed();
    // SAFETY: `c_path` is a NUL-terminated string that outlives the call, and
    // `stats` points to writable memory of the type statvfs fills.
    let status = unsafe { libc::statvfs(c_path.as_ptr(), stats.as_mut_ptr()) };
    if status != 0 {
        return None;
    }
    // SAFETY: statvfs returned 0, so it filled `stats`.
    let stats = unsafe { stats.assume_init() };
    Some(stats.f_bavail.saturating_mul(stats.f_frsize))
}

/// A blob being written. Dropped before [`BlobWriter::finish`], its file is removed.
pub struct BlobWriter {
    file: File,
    pending: PendingBlob,
    limit: u64,
    /// The directories making this blob created (whose entries must be flushed too).
    created_dir: Vec<PathBuf>,
}

impl BlobWriter {
    /// Appends `bytes`; past the size limit, fails with 413 (and the file goes when
    /// the writer is dropped).
    pub fn write(&mut self, bytes: &[u8]) -> Result<()> {
        let Some(blob) = self.pending.blob.as_mut() else { return Err(Error::Corrupt("a finished blob".into())) };
        let size = blob.size.saturating_add(bytes.len() as u64);
        if size > self.limit {
            return Err(Error::TooLarge(format!(
                "the blob is larger than the {} bytes allowed (storage.maxBlobSize)",
                self.limit
            )));
        }
        self.file.write_all(bytes).map_err(io)?;
        blob.size = size;
        Ok(())
    }

    /// Bytes written so far.
    pub fn size(&self) -> u64 {
        self.pending.blob.as_ref().map_or(0, |b| b.size)
    }

    /// Flushes the file (and, durably stored, its directory) and hands back the
    /// blob, still pending until a write job keeps it.
    pub fn finish(self) -> Result<PendingBlob> {
        let BlobWriter { file, pending, created_dir, .. } = self;
        if pending.store.durable {
            file.sync_all().map_err(io)?;
            let path = pending.path()?;
            if let Some(dir) = path.parent() {
                sync_created(dir, &created_dir).map_err(io)?;
            }
        }
        Ok(pending)
    }
}

/// A blob file no committed record names yet. Dropped, it is removed; kept (by
/// the write job that stores its reference), it stays.
pub struct PendingBlob {
    store: Arc<BlobStore>,
    blob: Option<BlobRef>,
}

impl PendingBlob {
    /// The reference to store.
    pub fn reference(&self) -> Option<&BlobRef> {
        self.blob.as_ref()
    }

    /// Keeps the file: the write job storing its reference ran.
    pub fn keep(mut self) {
        if let Some(blob) = self.blob.take() {
            self.store.pending.lock().remove(&(blob.root, blob.id));
        }
    }

    fn path(&self) -> Result<PathBuf> {
        self.store.path(self.blob.as_ref().ok_or_else(|| Error::Corrupt("a kept blob".into()))?)
    }
}

impl Drop for PendingBlob {
    fn drop(&mut self) {
        let Some(blob) = self.blob.take() else { return };
        if let Ok(path) = self.store.path(&blob)
            && let Err(err) = std::fs::remove_file(&path)
            && err.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(path = %path.display(), error = %err, "an unused blob file could not be removed");
        }
        self.store.pending.lock().remove(&(blob.root, blob.id));
    }
}

/// The blobs a write brings, kept or discarded together with its job.
#[derive(Default)]
pub struct PendingBlobs(Vec<PendingBlob>);

impl From<PendingBlob> for PendingBlobs {
    fn from(blob: PendingBlob) -> Self {
        PendingBlobs(vec![blob])
    }
}

impl PendingBlobs {
    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Keeps every file (the job ran: the answer, [`KeptBlobs`], still shields them
    /// from the orphan cleanup until it is dropped after the commit) or removes
    /// them all (the job failed before writing).
    pub fn settle<T>(self, outcome: &Result<T>) -> KeptBlobs {
        let mut kept = KeptBlobs::default();
        if outcome.is_ok() {
            for mut blob in self.0 {
                if let Some(reference) = blob.blob.take() {
                    kept.0.push((blob.store.clone(), reference.root, reference.id));
                }
            }
        }
        kept
    }
}

/// Blob files a write job kept, still counted as in use (so the orphan cleanup
/// passes over them) until dropped: after the job's commit, whether anyone waits
/// for its answer or not.
#[derive(Default)]
pub struct KeptBlobs(Vec<(Arc<BlobStore>, u8, u64)>);

impl Drop for KeptBlobs {
    fn drop(&mut self) {
        for (store, root, id) in self.0.drain(..) {
            store.pending.lock().remove(&(root, id));
        }
    }
}

/// Stores the blobs `records` bring before their write is queued: a value of a
/// `Blob` attribute given as text or bytes of [`INLINE_LIMIT`] or more becomes a new
/// blob file (of type `text/plain`, as Harper types them), and a reference
/// anywhere in a record that the write did not make (a copied record) becomes a
/// reference to a copy of the file. Answers the new files, pending.
pub fn materialize<'r>(
    store: &Arc<BlobStore>,
    table: &TableSchema,
    records: impl IntoIterator<Item = &'r mut Object>,
) -> Result<PendingBlobs> {
    let blob_attributes: Vec<&str> = table
        .attributes
        .iter()
        .filter(|a| a.type_name.as_deref() == Some(BLOB_TYPE))
        .map(|a| a.name.as_str())
        .collect();
    let mut pending = PendingBlobs::default();
    for record in records {
        for (name, value) in record.iter_mut() {
            if blob_attributes.contains(&name.as_str()) {
                let written = match value {
                    Value::String(text) if text.len() >= INLINE_LIMIT => {
                        Some(store.write_whole(text.as_bytes(), INLINE_CONTENT_TYPE)?)
                    }
                    Value::Bytes(bytes) if bytes.len() >= INLINE_LIMIT => {
                        Some(store.write_whole(bytes, INLINE_CONTENT_TYPE)?)
                    }
                    _ => None,
                };
                if let Some(written) = written {
                    if let Some(blob) = written.reference() {
                        *value = Value::Blob(Box::new(blob.clone()));
                    }
                    pending.0.push(written);
                    continue;
                }
            }
            copy_references(store, value, &mut pending)?;
        }
    }
    Ok(pending)
}

/// Replaces every reference inside `value` with a reference to a new copy.
fn copy_references(store: &Arc<BlobStore>, value: &mut Value, pending: &mut PendingBlobs) -> Result<()> {
    match value {
        Value::Blob(blob) => {
            let copy = store.copy(blob)?;
            if let Some(reference) = copy.reference() {
                **blob = reference.clone();
            }
            pending.0.push(copy);
        }
        Value::Array(items) => {
            for item in items {
                copy_references(store, item, pending)?;
            }
        }
        Value::Object(object) => {
            for item in object.values_mut() {
                copy_references(store, item, pending)?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// Whether any record of `records` holds a blob or a value for a `Blob` attribute
/// (the write then goes through [`materialize`]).
pub fn brings_blobs<'r>(table: &TableSchema, mut records: impl Iterator<Item = &'r Object>) -> bool {
    let declared: Vec<&str> = table
        .attributes
        .iter()
        .filter(|a| a.type_name.as_deref() == Some(BLOB_TYPE))
        .map(|a| a.name.as_str())
        .collect();
    records.any(|record| {
        record.iter().any(|(name, value)| {
            let large = match value {
                Value::String(text) => text.len() >= INLINE_LIMIT,
                Value::Bytes(bytes) => bytes.len() >= INLINE_LIMIT,
                _ => false,
            };
            (large && declared.contains(&name.as_str())) || holds_blob(value)
        })
    })
}

/// Whether `value` is or contains a blob reference.
pub fn holds_blob(value: &Value) -> bool {
    match value {
        Value::Blob(_) => true,
        Value::Array(items) => items.iter().any(holds_blob),
        Value::Object(object) => object.values().any(holds_blob),
        _ => false,
    }
}

/// Calls `found` for every blob reference inside `value`.
pub fn each_blob<'v>(value: &'v Value, found: &mut impl FnMut(&'v BlobRef)) {
    match value {
        Value::Blob(blob) => found(blob),
        Value::Array(items) => items.iter().for_each(|item| each_blob(item, found)),
        Value::Object(object) => object.values().for_each(|item| each_blob(item, found)),
        _ => {}
    }
}

/// Inside a write job: queues for removal the blobs `old` references that `new`
/// (the record replacing it, if any) does not, and marks `table` as one that holds
/// blobs when `new` does. Returns whether `new` holds a blob.
pub(crate) fn queue_freed(
    txn: &mut WriteTxn<'_, '_>,
    table: &str,
    old: Option<&Object>,
    new: Option<&Object>,
) -> Result<bool> {
    let mut kept = HashSet::new();
    if let Some(new) = new {
        new.values().for_each(|value| {
            each_blob(value, &mut |blob| {
                kept.insert((blob.root, blob.id));
            })
        });
        if !kept.is_empty() && txn.meta(&holder_key(table))?.is_none() {
            txn.put_meta(&holder_key(table), &[])?;
        }
    }
    let Some(old) = old else { return Ok(!kept.is_empty()) };
    let mut freed = Vec::new();
    old.values().for_each(|value| {
        each_blob(value, &mut |blob| {
            if !kept.contains(&(blob.root, blob.id)) {
                freed.push(freed_key(blob));
            }
        })
    });
    for key in freed {
        txn.put_meta(&key, &[])?;
    }
    Ok(!kept.is_empty())
}

/// Inside the job that drops `table` (before its records go): queues every blob
/// its records reference, when the table ever held one.
pub(crate) fn queue_table_freed(txn: &mut WriteTxn<'_, '_>, store: &lyre_store::TableStore, table: &str) -> Result<()> {
    if !held_by(txn, table)? {
        return Ok(());
    }
    let mut freed = Vec::new();
    for item in txn.records(store, (std::ops::Bound::Unbounded, std::ops::Bound::Unbounded), false)? {
        let (_, stored) = item?;
        let entry = crate::record::entry::decode_entry(stored)?;
        entry.record.values().for_each(|value| each_blob(value, &mut |blob| freed.push(freed_key(blob))));
    }
    for key in freed {
        txn.put_meta(&key, &[])?;
    }
    txn.delete_meta(&holder_key(table))?;
    Ok(())
}

/// The metadata prefix the reclaimer reads.
pub fn freed_prefix() -> &'static [u8] {
    FREED_PREFIX
}

fn freed_key(blob: &BlobRef) -> Vec<u8> {
    let mut key = Vec::with_capacity(FREED_PREFIX.len() + 9);
    key.extend_from_slice(FREED_PREFIX);
    key.push(blob.root);
    key.extend_from_slice(&blob.id.to_be_bytes());
    key
}

fn parse_freed_key(key: &[u8]) -> Option<(u8, u64)> {
    let rest = key.strip_prefix(FREED_PREFIX)?;
    let (&root, id) = rest.split_first()?;
    Some((root, u64::from_be_bytes(id.try_into().ok()?)))
}

fn io(err: std::io::Error) -> Error {
    Error::Store(lyre_store::Error::from(err))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store(dir: &Path) -> Arc<BlobStore> {
        BlobStore::new(vec![dir.join("blobs/db")], true)
    }

    #[test]
    fn a_pending_blob_is_removed_unless_kept() {
        let dir = tempfile::tempdir().unwrap();
        let store = store(dir.path());
        let dropped = store.write_whole(b"gone", "").unwrap();
        let dropped_path = dropped.path().unwrap();
        assert!(dropped_path.exists());
        drop(dropped);
        assert!(!dropped_path.exists());
        let kept = store.write_whole(b"stays", "text/plain").unwrap();
        let blob = kept.reference().unwrap().clone();
        kept.keep();
        assert_eq!(std::fs::read(store.path(&blob).unwrap()).unwrap(), b"stays");
        assert_eq!((blob.size, blob.content_type.as_str()), (5, "text/plain"));
    }

    #[test]
    fn a_writer_past_its_limit_fails_and_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store = store(dir.path());
        let mut writer = store.create("", 10).unwrap();
        writer.write(b"12345").unwrap();
        let err = writer.write(b"678901").unwrap_err();
        assert!(matches!(err, Error::TooLarge(_)), "{err}");
        drop(writer);
        let files: Vec<_> = walk(&dir.path().join("blobs/db"));
        assert!(files.is_empty(), "{files:?}");
    }

    #[test]
    fn a_copy_is_a_separate_file_with_the_same_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let store = store(dir.path());
        let original = store.write_whole(b"shared bytes", "image/png").unwrap();
        let blob = original.reference().unwrap().clone();
        original.keep();
        let copy = store.copy(&blob).unwrap();
        let copied = copy.reference().unwrap().clone();
        copy.keep();
        assert_ne!(copied.id, blob.id);
        std::fs::remove_file(store.path(&blob).unwrap()).unwrap();
        assert_eq!(std::fs::read(store.path(&copied).unwrap()).unwrap(), b"shared bytes");
    }

    #[test]
    fn freed_keys_read_back() {
        let blob = BlobRef { root: 3, id: 0x0102_0304_0506_0708, size: 1, content_type: String::new() };
        assert_eq!(parse_freed_key(&freed_key(&blob)), Some((3, 0x0102_0304_0506_0708)));
        assert_eq!(parse_freed_key(b"blob-freed/x"), None);
    }

    fn walk(dir: &Path) -> Vec<PathBuf> {
        let mut out = Vec::new();
        if let Ok(entries) = std::fs::read_dir(dir) {
            for entry in entries.flatten() {
                match entry.path().is_dir() {
                    true => out.extend(walk(&entry.path())),
                    false => out.push(entry.path()),
                }
            }
        }
        out
    }
}
