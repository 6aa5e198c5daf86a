//! The `lyre-bench` binary: parse the command line and run the workload.

use clap::Parser;

fn main() -> anyhow::Result<()> {
    let cli = lyre_bench::cli::Cli::parse();
    let runtime =
        tokio::runtime::Builder::new_multi_thread().worker_threads(cli.threads.max(1)).enable_all().build()?;
    runtime.block_on(lyre_bench::cli::run(cli)).map(|_| ())
}
