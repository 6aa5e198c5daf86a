//! Failpoints for crash and failure tests: named steps of crash-sensitive protocols
//! (the drop and restore lifecycle, log pruning) where a test can make the process die or the step
//! fail, through the environment variable `LYRE_FAILPOINT` (comma-separated):
//!
//! * `crash:<step>`: the process aborts at the step, as abruptly as `kill -9`.
//! * `fail:<step>`: the step returns an error.
//! * `panic:<step>`: the step panics (tests that no panic reaches a client).
//! * `stall:<step>=<ms>`: the step sleeps that long (a backend that falls behind;
//!   a second without `=<ms>`). [`hit_async`] sleeps without holding its thread,
//!   for a step on an async task (a caching table's `write-through-local`, between
//!   the origin's half of a write and the table's).
//!
//! Any of them followed by `*<n>` acts at the first `n` hits of the step only
//! (`panic:derived-apply*3`: a runner that dies three times, then works); every
//! point naming the step counts the hit. Several points at one step act in the
//! order listed: `stall:x=1000,fail:x` stalls, then fails.
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
/// [`Error::Failpoint`], an internal fault). Public for the server's own protocols
/// (the data loader's read-then-write).
pub fn hit(step: &str) -> Result<()> {
    for effect in effects(step) {
        match effect {
            Effect::Stall(duration) => std::thread::sleep(duration),
            Effect::Act(act) => act(step)?,
        }
    }
    Ok(())
}

/// [`hit`] for a step on an async task: a stall waits without holding its thread,
/// so the requests it races with run meanwhile (a caching table's write-through).
pub async fn hit_async(step: &str) -> Result<()> {
    for effect in effects(step) {
        match effect {
            Effect::Stall(duration) => tokio::time::sleep(duration).await,
            Effect::Act(act) => act(step)?,
        }
    }
    Ok(())
}

/// What one configured failpoint does at a hit, in the order configured (a stall
/// before a failure at the same step stalls first).
enum Effect {
    Stall(std::time::Duration),
    Act(fn(&str) -> Result<()>),
}

/// The effects of the failpoints configured for `step` at this hit.
fn effects(step: &str) -> Vec<Effect> {
    let mut effects = Vec::new();
    for point in configured() {
        let (point, times) = match point.rsplit_once('*') {
            Some((point, n)) => (point, n.parse::<u64>().ok()),
            None => (point.as_str(), None),
        };
        let Some((kind, rest)) = point.split_once(':') else { continue };
        let (named, stall_ms) = match rest.split_once('=') {
            Some((named, ms)) => (named, ms.parse::<u64>().ok()),
            None => (rest, None),
        };
        if named != step || !take_turn(point, times) {
            continue;
        }
        effects.push(match kind {
            "stall" => Effect::Stall(std::time::Duration::from_millis(stall_ms.unwrap_or(1_000))),
            "crash" => Effect::Act(crash),
            "fail" => Effect::Act(|step| Err(Error::Failpoint(step.to_string()))),
            "panic" => Effect::Act(|step| panic!("failpoint: panicking at {step}")),
            _ => continue,
        });
    }
    effects
}

fn crash(step: &str) -> Result<()> {
    eprintln!("failpoint: crashing at {step}");
    std::process::abort();
}

/// Whether the failpoint `point` acts at this hit: always without a count, else
/// at its first `times` hits.
fn take_turn(point: &str, times: Option<u64>) -> bool {
    let Some(times) = times else { return true };
    static HITS: OnceLock<parking_lot::Mutex<std::collections::HashMap<String, u64>>> = OnceLock::new();
    let mut hits = HITS.get_or_init(Default::default).lock();
    let count = hits.entry(point.to_string()).or_insert(0);
    *count += 1;
    *count <= times
}
