//! Failpoints for crash and failure tests: named steps of crash-sensitive protocols
//! (the drop and restore lifecycle, log pruning) where a test can make the process die or the step
//! fail, through the environment variable `LYRE_FAILPOINT` (comma-separated):
//!
//! * `crash:<step>`: the process aborts at the step, as abruptly as `kill -9`.
//! * `fail:<step>`: the step returns an error.
//! * `panic:<step>`: the step panics (tests that no panic reaches a client).
//!
//! Unset (always, outside tests) it costs one read of a cached string.

use std::sync::OnceLock;

use crate::error::{Error, Result};

fn configured() -> &'static [String] {
    static POINTS: OnceLock<Vec<String>> = OnceLock::new();
    POINTS.get_or_init(|| {
        std::env::var("LYRE_FAILPOINT")
            .map(|v| v.split(',').map(|p| p.trim().to_string()).filter(|p| !p.is_empty()).collect())
            .unwrap_or_default()
    })
}

/// Marks the step `step` of an I/O sequence (where errors are `std::io::Error`): dies
/// or fails here when a test asked for it.
pub(crate) fn hit_io(step: &str) -> std::io::Result<()> {
    hit(step).map_err(|e| std::io::Error::other(e.to_string()))
}

/// Marks the step `step`: dies or fails here when a test asked for it (a failure is
/// [`Error::Failpoint`], an internal fault).
pub(crate) fn hit(step: &str) -> Result<()> {
    for point in configured() {
        if point.strip_prefix("crash:") == Some(step) {
            eprintln!("failpoint: crashing at {step}");
            std::process::abort();
        }
        if point.strip_prefix("fail:") == Some(step) {
            return Err(Error::Failpoint(step.to_string()));
        }
        if point.strip_prefix("panic:") == Some(step) {
            panic!("failpoint: panicking at {step}");
        }
    }
    Ok(())
}
