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
    options.map_size(map_size).max_dbs(2 * MAX_TABLES + 8).max_readers(1024);
    if !durable {
        // SAFETY: WRITE_MAP makes LMDB write pages through a writable map instead of
        // copying them with write(2); only LMDB writes into the map (Rust code never
        // gets a mutable view of it). NO_SYNC and MAP_ASYNC skip the flush at commit:
        // a process crash loses nothing (the pages are in the OS cache), but an
        // operating-system crash or power failure may lose the last commits or damage
        // the file. This is the documented meaning of `storage.writeAsync`.
        //
        // Durable environments do not use WRITE_MAP: flushing a writable map is an
        // msync over the whole map, which made every commit of a 100,000-record
        // database cost milliseconds (YCSB A: 1,736 req/s with it, 23,459 without,
        // side by side); write(2) plus fdatasync flushes only the pages written.
        //
        // NO_READ_AHEAD (madvise MADV_RANDOM) is not about safety: through a writable
        // map, a write that takes a page past the file's written end faults on a hole,
        // and with read-ahead the kernel zeroed a whole read-ahead window of holes for
        // it, in the writer's fault. That was the largest single cost of a write (18%
        // of a PUT's CPU), and the faults that waited on it put PUT's p99 at 17-28 ms;
        // without read-ahead, 1.3-7 ms (`bench/results/2026-12-02-write-path.md`). The
        // cost: a read of pages not in memory (a cold scan) faults them in one at a
        // time. Durable environments write with write(2), never fault on holes, and
        // keep read-ahead.
        unsafe {
            options.flags(EnvFlags::WRITE_MAP | EnvFlags::NO_SYNC | EnvFlags::MAP_ASYNC | EnvFlags::NO_READ_AHEAD);
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

/// This process's resident pages of shared file mappings, in bytes (`statm`'s
/// third field: LMDB maps, the binary and its libraries).
pub(crate) fn shared_resident_bytes() -> std::io::Result<usize> {
    let statm = std::fs::read_to_string("/proc/self/statm")?;
    let pages: usize = statm
        .split_whitespace()
        .nth(2)
        .and_then(|field| field.parse().ok())
        .ok_or_else(|| std::io::Error::other("an unreadable /proc/self/statm"))?;
    Ok(pages * rustix::param::page_size())
}

/// Drops this process's resident pages of the environment in `dir` (its map of
/// `data.mdb`), answering how many bytes of mappings were released: the memory a
/// long write (a bulk load walking every index) left mapped. The pages stay in the
/// operating system's cache, and the next access maps them again from there.
///
/// The mappings are found in `/proc/self/maps` by the file's path, so this works
/// whether or not LMDB was given a fixed address.
pub(crate) fn release_resident_pages(dir: &Path) -> std::io::Result<usize> {
    let file = dir.join("data.mdb").canonicalize()?;
    let maps = std::fs::read_to_string("/proc/self/maps")?;
    let mut released = 0;
    for line in maps.lines() {
        // `start-end perms offset dev inode path` (the path may hold spaces).
        let mut fields = line.splitn(6, ' ');
        let (Some(range), Some(path)) = (fields.next(), fields.nth(4)) else { continue };
        if Path::new(path.trim_start()) != file {
            continue;
        }
        let Some((start, end)) = range.split_once('-') else { continue };
        let (Ok(start), Ok(end)) = (usize::from_str_radix(start, 16), usize::from_str_radix(end, 16)) else {
            continue;
        };
        // SAFETY: the range is a shared mapping of the environment's file, made by
        // LMDB and alive while the environment is open (the caller holds it).
        // MADV_DONTNEED on a shared file mapping removes only this process's page
        // table entries: every page, written or not, stays in the page cache (the
        // file's up-to-date contents), and the next access faults it back in with the
        // same bytes. No pointer into the map becomes invalid and nothing is lost.
        unsafe {
            rustix::mm::madvise(start as *mut std::ffi::c_void, end - start, rustix::mm::Advice::LinuxDontNeed)?;
        }
        released += end - start;
    }
    Ok(released)
}
