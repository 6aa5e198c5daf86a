//! The command line: `lyre run` and its flags.

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
            None => RunArgs::default(),
        }
    }
}
