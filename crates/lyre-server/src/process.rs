//! Child processes (a component's install command), supervised race-free.
//!
//! A child is started in a process group of its own and identified by a pidfd, and
//! it is not reaped until its whole group has been killed: while the group leader is
//! unreaped its PID, which is also the group's id, cannot be recycled, so signalling
//! the group can never hit an unrelated process. Every child is bounded by a
//! timeout, and its tree (the group) is killed on timeout, when it finishes (no
//! stragglers outlive their command), and at server shutdown. A descendant that
//! deliberately leaves the group (`setsid`) is not followed.

use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::{Mutex, MutexGuard};
use rustix::process::{Pid, PidfdFlags, Signal, WaitId, WaitIdOptions, kill_process_group, pidfd_open, waitid};
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

/// How a supervised command ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    /// It exited with this status.
    Exited(i32),
    /// A signal killed it.
    Signalled(i32),
    /// It ran past its timeout; its whole process group was killed.
    TimedOut,
    /// The server shut down while it ran; its group was killed.
    Stopped,
}

/// The registry of running children, so shutdown can kill every tree.
#[derive(Default)]
pub struct Supervisor {
    running: Mutex<HashMap<u64, Pid>>,
    next: AtomicU64,
    stopping: std::sync::atomic::AtomicBool,
}

impl Supervisor {
    /// Runs `command` with `sh -c` in `dir`, output appended to `log`, for at most
    /// `timeout`.
    pub async fn run(&self, command: &str, dir: &Path, log: &Path, timeout: Duration) -> std::io::Result<Ended> {
        if self.stopping.load(Ordering::Acquire) {
            return Ok(Ended::Stopped);
        }
        if let Some(parent) = log.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let out = std::fs::OpenOptions::new().create(true).append(true).open(log)?;
        let child = Command::new("sh")
            .arg("-c")
            .arg(command)
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .process_group(0)
            .spawn()?;
        let pid = Pid::from_child(&child);
        // The child is never waited on through `child`: it stays unreaped (its PID and
        // group id reserved) until its group is killed, by `Started` at the latest.
        drop(child);
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.lock().insert(id, pid);
        let mut started = Started { supervisor: self, id, pid, pidfd: None, reaped: None };
        if self.stopping.load(Ordering::Acquire) {
            // `stop_all` may have run before the child was registered.
            return Ok(Ended::Stopped);
        }
        let pidfd = started.pidfd.insert(pidfd_open(pid, PidfdFlags::empty())?);
        let exited = wait_readable(pidfd, timeout).await;
        let status = started.finish()?;
        Ok(match (exited, status) {
            _ if self.stopping.load(Ordering::Acquire) => Ended::Stopped,
            (Ok(()), status) => status,
            (Err(_), _) => Ended::TimedOut,
        })
    }

    /// Kills every running child's tree and refuses new ones (server shutdown).
    pub fn stop_all(&self) {
        self.stopping.store(true, Ordering::Release);
        for pid in self.lock().values() {
            // Safe: a registered leader has not been reaped yet (see `run`).
            let _ = kill_process_group(*pid, Signal::KILL);
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<u64, Pid>> {
        self.running.lock()
    }
}

/// A registered child until its group has been killed and its leader reaped. If the
/// future running it is dropped (its request was cancelled) or a step fails, the drop
/// kills the group and reaps, so no tree outlives its command and no PID is held.
struct Started<'s> {
    supervisor: &'s Supervisor,
    id: u64,
    pid: Pid,
    pidfd: Option<OwnedFd>,
    reaped: Option<Ended>,
}

impl Started<'_> {
    /// Kills the group (stragglers of a finished command, the whole tree of a
    /// timed-out one; the leader is unreaped, so the id is still ours), unregisters
    /// and reaps the leader.
    fn finish(&mut self) -> std::io::Result<Ended> {
        if let Some(ended) = &self.reaped {
            return Ok(ended.clone());
        }
        let _ = kill_process_group(self.pid, Signal::KILL);
        self.supervisor.lock().remove(&self.id);
        let ended = reap(wait_id(self.pid, &self.pidfd))?;
        self.reaped = Some(ended.clone());
        Ok(ended)
    }
}

impl Drop for Started<'_> {
    /// Kills the group and reaps without blocking the (async) caller: a leader that
    /// does not die at once (stuck in uninterruptible sleep) is reaped by a thread of
    /// its own, so its PID stays reserved until then.
    fn drop(&mut self) {
        if self.reaped.is_some() {
            return;
        }
        let _ = kill_process_group(self.pid, Signal::KILL);
        self.supervisor.lock().remove(&self.id);
        let (pid, pidfd) = (self.pid, self.pidfd.take());
        let options = WaitIdOptions::EXITED | WaitIdOptions::NOHANG;
        if matches!(waitid(wait_id(pid, &pidfd), options), Ok(Some(_))) {
            return;
        }
        let _ = std::thread::Builder::new().name("reap-child".into()).spawn(move || {
            let _ = waitid(wait_id(pid, &pidfd), WaitIdOptions::EXITED);
        });
    }
}

/// What `waitid` waits on: the pidfd when there is one, else the (unreaped, so
/// still ours) PID.
fn wait_id(pid: Pid, pidfd: &Option<OwnedFd>) -> WaitId<'_> {
    match pidfd {
        Some(fd) => WaitId::PidFd(fd.as_fd()),
        None => WaitId::Pid(pid),
    }
}

/// Waits until the pidfd says the process exited, or `timeout`.
async fn wait_readable(pidfd: &OwnedFd, timeout: Duration) -> Result<(), tokio::time::error::Elapsed> {
    let Ok(duplicate) = pidfd.try_clone() else {
        // Cannot watch it: wait out the timeout (the group is killed after).
        tokio::time::sleep(timeout).await;
        return Ok(());
    };
    // SAFETY: the AsyncFd owns `duplicate`, an open descriptor that stays open and
    // the same until the AsyncFd is dropped.
    let Ok(watch) = (unsafe { AsyncFd::register_with_interest(duplicate, Interest::READABLE) }) else {
        tokio::time::sleep(timeout).await;
        return Ok(());
    };
    tokio::time::timeout(timeout, async {
        loop {
            match watch.readable().await {
                Ok(mut ready) if exited(pidfd) => {
                    ready.retain_ready();
                    return;
                }
                Ok(mut ready) => ready.clear_ready(),
                Err(_) => return,
            }
        }
    })
    .await
}

/// Whether the process has exited (without reaping it).
fn exited(pidfd: &OwnedFd) -> bool {
    let options = WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT;
    matches!(waitid(WaitId::PidFd(pidfd.as_fd()), options), Ok(Some(_)))
}

/// Reaps the (killed or exited) leader and reports how it ended.
fn reap(id: WaitId<'_>) -> std::io::Result<Ended> {
    let status = waitid(id, WaitIdOptions::EXITED)?;
    Ok(match status {
        Some(s) if s.exited() => Ended::Exited(s.exit_status().unwrap_or(-1)),
        Some(s) => Ended::Signalled(s.terminating_signal().unwrap_or(-1)),
        None => Ended::Signalled(-1),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alive(pid: i32) -> bool {
        // A zombie is dead for our purposes.
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|stat| stat.rsplit(')').next().is_some_and(|rest| !rest.trim_start().starts_with('Z')))
            .unwrap_or(false)
    }

    #[tokio::test]
    async fn a_timed_out_tree_is_killed_and_an_unrelated_process_survives() {
        let dir = tempfile::tempdir().unwrap();
        let mut unrelated = Command::new("sleep").arg("30").spawn().unwrap();
        let supervisor = Supervisor::default();
        let command = "sleep 30 & echo $! > grandchild.pid; sh -c 'sleep 30' & echo $! > child.pid; wait";
        let ended = supervisor.run(command, dir.path(), &dir.path().join("log"), Duration::from_millis(500)).await;
        assert_eq!(ended.unwrap(), Ended::TimedOut);
        for file in ["grandchild.pid", "child.pid"] {
            let pid: i32 = std::fs::read_to_string(dir.path().join(file)).unwrap().trim().parse().unwrap();
            let deadline = std::time::Instant::now() + Duration::from_secs(5);
            while alive(pid) && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            assert!(!alive(pid), "{file} {pid} outlived the timeout");
        }
        assert!(alive(unrelated.id() as i32), "an unrelated process was killed");
        unrelated.kill().unwrap();
        unrelated.wait().unwrap();
    }

    #[tokio::test]
    async fn a_cancelled_run_kills_its_tree() {
        let dir = tempfile::tempdir().unwrap();
        let supervisor = Supervisor::default();
        let command = "sleep 30 & echo $! > child.pid; wait";
        let log = dir.path().join("log");
        let run = supervisor.run(command, dir.path(), &log, Duration::from_secs(60));
        // The caller gives up (as a dropped request handler does) long before the timeout.
        assert!(tokio::time::timeout(Duration::from_millis(500), run).await.is_err());
        let pid: i32 = std::fs::read_to_string(dir.path().join("child.pid")).unwrap().trim().parse().unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while alive(pid) && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(!alive(pid), "the child {pid} outlived its cancelled command");
        assert!(supervisor.lock().is_empty(), "a cancelled child stayed registered");
    }

    #[tokio::test]
    async fn exit_codes_and_stragglers() {
        let dir = tempfile::tempdir().unwrap();
        let supervisor = Supervisor::default();
        let log = dir.path().join("log");
        assert_eq!(
            supervisor.run("echo hi", dir.path(), &log, Duration::from_secs(10)).await.unwrap(),
            Ended::Exited(0)
        );
        assert_eq!(
            supervisor.run("exit 3", dir.path(), &log, Duration::from_secs(10)).await.unwrap(),
            Ended::Exited(3)
        );
        assert_eq!(std::fs::read_to_string(&log).unwrap(), "hi\n");
        // A command that leaves a background process behind: the straggler is killed.
        let ended = supervisor.run("sleep 30 & echo $! > bg.pid", dir.path(), &log, Duration::from_secs(10)).await;
        assert_eq!(ended.unwrap(), Ended::Exited(0));
        let pid: i32 = std::fs::read_to_string(dir.path().join("bg.pid")).unwrap().trim().parse().unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while alive(pid) && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(!alive(pid));
    }
}
