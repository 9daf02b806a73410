//! `omnilock-bench`: the same workloads on every store given, through the
//! same `omnilock::connect(url)` path applications use, each beside the
//! store's raw floor measured by a bare client in the same run
//! (`omnilock_harness::Probe`). A table on stdout; `results.json` and SVG
//! charts in `--out`.
//!
//! ```sh
//! cargo run --release -p omnilock-bench -- --store redis://127.0.0.1:6379 --store etcd://127.0.0.1:2379
//! ```
//!
//! A tool of the workspace, not part of the library: the `omnilock`
//! command and the crates applications link carry none of it.

mod args;
mod exit;
mod heap;
mod plots;
mod report;
mod run;
mod workloads;

use std::process::ExitCode;

use clap::Parser;

pub(crate) use args::BenchArgs;

/// Counts live heap bytes for the many-held workload's memory per lock.
#[global_allocator]
static ALLOCATOR: heap::Counting = heap::Counting;

fn main() -> ExitCode {
    let cli = match args::Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => {
            let _ = err.print();
            return ExitCode::from(match err.kind() {
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => 0,
                _ => exit::USAGE,
            });
        }
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("OMNILOCK_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("off")),
        )
        .with_writer(std::io::stderr)
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("omnilock-bench: cannot start the async runtime: {err}");
            return ExitCode::from(exit::SOFTWARE);
        }
    };
    let code = runtime.block_on(run::bench(&cli.store, cli.bench));
    runtime.shutdown_timeout(std::time::Duration::from_secs(2));
    ExitCode::from(code)
}
