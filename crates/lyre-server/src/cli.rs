//! The command line: `lyre run`, `lyre dev`, `lyre backup`, `lyre restore`.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// Lyre: a database, cache, pub/sub broker and API server in one binary,
/// wire-compatible with Harper.
#[derive(Debug, Parser)]
#[command(name = "lyre", version, about, long_about = None)]
pub struct Cli {
    /// What to do; `run` when omitted.
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the server in the foreground until SIGINT or SIGTERM.
    Run(RunArgs),
    /// Run the server with one application directory loaded from where it is (as
    /// `harperdb dev .`); the directory's name is the component's name.
    Dev {
        /// The application directory (with `config.yaml` and `schema.graphql`).
        #[arg(value_name = "APP_DIR", default_value = ".")]
        app: PathBuf,
        /// Root directory for data, logs and configuration.
        #[arg(long, value_name = "DIR")]
        root: Option<PathBuf>,
    },
    /// Write a compacted, consistent copy of a database to a file (safe while the
    /// server runs).
    Backup {
        /// Root directory [default: ./lyre-data, or $ROOTPATH].
        #[arg(long, value_name = "DIR")]
        root: Option<PathBuf>,
        /// The database to copy.
        #[arg(long)]
        database: String,
        /// The file to write.
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
    },
    /// Replace a database with a backup file (the server must not be running on the
    /// root; a running server takes the `restore_backup` operation instead).
    Restore {
        /// Root directory [default: ./lyre-data, or $ROOTPATH].
        #[arg(long, value_name = "DIR")]
        root: Option<PathBuf>,
        /// The database to replace (created if absent).
        #[arg(long)]
        database: String,
        /// The backup file (from `get_backup` or `lyre backup`).
        #[arg(long, value_name = "FILE")]
        from: PathBuf,
    },
}

/// Flags of `lyre run`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct RunArgs {
    /// Root directory for data, logs and configuration [default: ./lyre-data, or
    /// $ROOTPATH].
    #[arg(long, value_name = "DIR")]
    pub root: Option<PathBuf>,
}

impl Cli {
    /// The run arguments, whether `run` was given or not.
    pub fn run_args(&self) -> RunArgs {
        match &self.command {
            Some(Command::Run(args)) => args.clone(),
            Some(Command::Dev { root, .. } | Command::Backup { root, .. } | Command::Restore { root, .. }) => {
                RunArgs { root: root.clone() }
            }
            None => RunArgs::default(),
        }
    }

    /// The application directory `lyre dev` was given.
    pub fn dev_app(&self) -> Option<PathBuf> {
        match &self.command {
            Some(Command::Dev { app, .. }) => Some(app.clone()),
            _ => None,
        }
    }
}
