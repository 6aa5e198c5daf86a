//! Making file-system changes durable: what every step that must survive a crash
//! (lifecycle markers, blob files) calls after it writes, renames or removes.

use std::fs::File;
use std::path::Path;

/// Flushes directory `dir`'s entries to disk, so a file created, renamed or removed
/// in it stays so after a crash.
pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}
