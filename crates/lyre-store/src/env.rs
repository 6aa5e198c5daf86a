//! The only code that opens an LMDB environment.

use std::path::Path;

use heed::{Env, EnvFlags, EnvOpenOptions, WithoutTls};

use crate::error::Result;
use crate::names::MAX_TABLES;

/// Opens (creating if needed) the environment in directory `dir`.
///
/// Read transactions are opened without thread-local storage so a snapshot can move
/// between threads (a streamed result is produced on a blocking thread).
pub(crate) fn open_env(dir: &Path, map_size: usize, durable: bool) -> Result<Env<WithoutTls>> {
    std::fs::create_dir_all(dir)?;
    let mut options = EnvOpenOptions::new().read_txn_without_tls();
    options
        .map_size(map_size)
        .max_dbs(2 * MAX_TABLES + 8)
        .max_readers(1024);
    if !durable {
        // SAFETY: NO_SYNC only weakens durability (the last commits may be lost on a
        // power failure); it never corrupts the environment.
        unsafe {
            options.flags(EnvFlags::NO_SYNC);
        }
    }
    // SAFETY: every environment is opened through the database registry in lyre-core,
    // which keeps at most one `Env` per directory per process, and nothing else in the
    // process maps or truncates these files.
    let env = unsafe { options.open(dir)? };
    // A process that died holding read slots (kill -9) leaves stale readers behind.
    env.clear_stale_readers()?;
    Ok(env)
}
