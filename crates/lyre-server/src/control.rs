//! The running server as the administration operations see it: the configuration
//! it started with, how to ask it to stop or restart, whether a configuration
//! change is waiting for a restart, and its pid file.
//!
//! A restart is a graceful stop (in-flight requests finish, the services stop,
//! every writer commits its queue) followed by the binary executing itself again
//! with the same arguments and environment (`listen.rs`): the process keeps its
//! id, reads its configuration afresh, and binds its listeners again.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::SystemTime;

use tokio::sync::watch;

use crate::config::Config;

/// How the server's run ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Stop (a signal).
    Stop,
    /// Stop, then start again (`restart`, `restart_service`).
    Restart,
}

/// The server's control state, shared by the handlers.
pub struct Control {
    /// The configuration the server started with.
    pub config: Config,
    /// When it started.
    pub started: SystemTime,
    /// Set once the config file changed after the start.
    restart_required: AtomicBool,
    exit: watch::Sender<Option<Exit>>,
}

impl Control {
    /// The control state of a server started with `config`.
    pub fn new(config: Config) -> Control {
        Control {
            config,
            started: SystemTime::now(),
            restart_required: AtomicBool::new(false),
            exit: watch::channel(None).0,
        }
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        self.config.root()
    }

    /// Asks the server to restart, once the current requests are answered.
    pub fn request_restart(&self) {
        self.exit.send_replace(Some(Exit::Restart));
    }

    /// Waits until a stop or restart is asked for; answers which.
    pub async fn exit_requested(&self) -> Exit {
        let mut requests = self.exit.subscribe();
        loop {
            if let Some(exit) = *requests.borrow_and_update() {
                return exit;
            }
            if requests.changed().await.is_err() {
                return Exit::Stop;
            }
        }
    }

    /// Records that the config file changed since the start.
    pub fn config_changed(&self) {
        self.restart_required.store(true, Ordering::Relaxed);
    }

    /// Whether the config file changed since the start.
    pub fn restart_required(&self) -> bool {
        self.restart_required.load(Ordering::Relaxed)
    }
}

/// `<root>/lyre.pid`: the running server's process id, for `lyre status` and
/// `lyre stop`.
pub fn pid_file(root: &Path) -> PathBuf {
    root.join("lyre.pid")
}
