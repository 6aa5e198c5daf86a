//! The `lyre` binary: parse the command line, load the configuration, run.

use clap::Parser;
use lyre_server::cli::Command;

/// mimalloc instead of glibc malloc (`alloc.rs` says why, and how it is asked).
#[global_allocator]
static ALLOCATOR: lyre_server::alloc::Allocator = lyre_server::alloc::Allocator;

fn main() -> anyhow::Result<()> {
    let cli = lyre_server::cli::Cli::parse();
    if let Some(command) = &cli.command
        && lyre_server::client::is_client_command(command)
    {
        return lyre_server::client::run(command);
    }
    let args = cli.run_args();
    let config = lyre_server::config::Config::load(args.root, &|name| std::env::var(name).ok())?;
    match &cli.command {
        Some(Command::Backup { database, out, .. }) => {
            let format = lyre_server::backup(&config, database, out)?;
            println!("wrote a backup of '{database}' ({}) to {}", format.extension(), out.display());
            return Ok(());
        }
        Some(Command::Restore { database, from, .. }) => {
            lyre_server::restore(&config, database, from)?;
            println!("restored '{database}' from {}", from.display());
            return Ok(());
        }
        _ => {}
    }
    let dev_app = match cli.dev_app() {
        Some(app) => Some(
            std::fs::canonicalize(&app).map_err(|e| anyhow::anyhow!("application directory {}: {e}", app.display()))?,
        ),
        None => None,
    };
    lyre_server::run(config, dev_app)
}
