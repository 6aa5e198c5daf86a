//! `lyre status` and `lyre stop`: the server of a root, found by its pid file
//! (`<root>/lyre.pid`, written once its listeners are up, removed when it stops).

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

use crate::control::pid_file;

/// How long `lyre stop` waits for the server to finish.
const STOP_WAIT: Duration = Duration::from_secs(90);

/// The pid of the server running on `root`, if one is.
pub fn running(root: &Path) -> Option<i32> {
    let pid: i32 = std::fs::read_to_string(pid_file(root)).ok()?.trim().parse().ok()?;
    alive(pid).then_some(pid)
}

/// Whether process `pid` exists, has not exited (a zombie, exited but not yet
/// reaped by its parent, has), and runs this program: a pid file left by a crash
/// may name a number the system has since given to another program, which must
/// never be signalled.
fn alive(pid: i32) -> bool {
    let ours = std::env::current_exe().ok().and_then(|exe| exe.canonicalize().ok());
    let theirs = std::fs::read_link(format!("/proc/{pid}/exe")).ok();
    if ours.is_none() || ours != theirs {
        return false;
    }
    let Some(process) = rustix::process::Pid::from_raw(pid) else { return false };
    if rustix::process::test_kill_process(process).is_err() {
        return false;
    }
    // /proc/<pid>/stat: the state follows the command's closing parenthesis.
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.rsplit_once(") ").is_none_or(|(_, rest)| !rest.starts_with('Z'))
}

/// `lyre status`: whether a server runs on `root`, in Harper's YAML.
pub fn status(root: &Path) -> String {
    match running(root) {
        Some(pid) => format!("lyre:\n  status: running\n  pid: {pid}"),
        None => "lyre:\n  status: stopped".to_string(),
    }
}

/// `lyre stop`: asks the server on `root` to stop (SIGTERM: in-flight requests
/// finish, queued writes commit) and waits until it has.
pub fn stop(root: &Path) -> anyhow::Result<()> {
    let Some(pid) = running(root) else { bail!("no Lyre server is running on {}", root.display()) };
    let process = rustix::process::Pid::from_raw(pid).context("a pid")?;
    println!("Stopping Lyre.");
    rustix::process::kill_process(process, rustix::process::Signal::TERM)
        .with_context(|| format!("signalling process {pid}"))?;
    let deadline = Instant::now() + STOP_WAIT;
    while alive(pid) {
        if Instant::now() >= deadline {
            bail!("the server (pid {pid}) has not stopped after {} s", STOP_WAIT.as_secs());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}
