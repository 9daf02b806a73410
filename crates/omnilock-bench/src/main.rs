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
mod peer_runs;
mod peers;
mod plots;
mod report;
mod run;
mod workloads;

use std::process::ExitCode;

use clap::Parser;

pub(crate) use args::BenchArgs;

/// Counts live heap bytes for the many-held workload's memory per lock.
#[global_allocator]
static ALLOCATOR: omnilock_harness::heap::CountingAllocator =
    omnilock_harness::heap::CountingAllocator;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
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
    ExitCode::from(run::bench(&cli.store, cli.bench).await)
}
