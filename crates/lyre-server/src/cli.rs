//! The command line: `lyre run`, `lyre dev`, `lyre backup`, `lyre restore`; and as
//! a client of a running server (`crate::client`): `lyre status`, `lyre stop`,
//! `lyre restart`, `lyre load`, and `lyre <operation> key=value …`.

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
    /// Say whether a server runs on the root (its pid file).
    Status {
        /// Root directory [default: ./lyre-data, or $ROOTPATH].
        #[arg(long, value_name = "DIR")]
        root: Option<PathBuf>,
    },
    /// Stop the server running on the root (gracefully) and wait until it has.
    Stop {
        /// Root directory [default: ./lyre-data, or $ROOTPATH].
        #[arg(long, value_name = "DIR")]
        root: Option<PathBuf>,
    },
    /// Restart a running server (the `restart` operation).
    Restart(ClientArgs),
    /// Load a CSV file into a table of a running server, showing progress.
    Load {
        /// The CSV file (with a header row).
        #[arg(value_name = "FILE")]
        file: PathBuf,
        /// The table.
        #[arg(long)]
        table: String,
        /// The database.
        #[arg(long, default_value = "data")]
        database: String,
        /// insert, update or upsert.
        #[arg(long, default_value = "insert")]
        action: String,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Any Operations API operation: `lyre describe_all`, `lyre search_by_value
    /// table=dog search_attribute=name search_value=Penny json=true`. Values that
    /// read as JSON are JSON; `target=URL`, `username=`, `password=` say where and
    /// who.
    #[command(external_subcommand)]
    Operation(Vec<String>),
}

/// Where a client command finds its server, and as whom.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ClientArgs {
    /// The server's Operations API URL [default: $CLI_TARGET, else the root's
    /// configured port on this machine].
    #[arg(long)]
    pub target: Option<String>,
    /// The user [default: $HARPER_CLI_USERNAME, $CLI_TARGET_USERNAME or
    /// $HDB_ADMIN_USERNAME].
    #[arg(long)]
    pub username: Option<String>,
    /// The password [default: $HARPER_CLI_PASSWORD, $CLI_TARGET_PASSWORD or
    /// $HDB_ADMIN_PASSWORD].
    #[arg(long)]
    pub password: Option<String>,
    /// Root directory of a local server [default: ./lyre-data, or $ROOTPATH].
    #[arg(long, value_name = "DIR")]
    pub root: Option<PathBuf>,
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
            _ => RunArgs::default(),
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
