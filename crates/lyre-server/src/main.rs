//! The `lyre` binary: parse the command line, load the configuration, run.

use clap::Parser;

fn main() -> anyhow::Result<()> {
    let cli = lyre_server::cli::Cli::parse();
    let args = cli.run_args();
    let config = lyre_server::config::Config::load(args.root, &|name| std::env::var(name).ok())?;
    let dev_app = match cli.dev_app() {
        Some(app) => Some(
            std::fs::canonicalize(&app).map_err(|e| anyhow::anyhow!("application directory {}: {e}", app.display()))?,
        ),
        None => None,
    };
    lyre_server::run(config, dev_app)
}
