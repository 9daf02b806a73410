//! Command-line arguments.

use std::time::Duration;

use clap::{Args, Parser};

use crate::run::Workload;

/// Runs the same lock workloads on every --store given, each beside the
/// store's raw floor measured by a bare client in the same run: a table on
/// stdout, results.json and SVG charts in --out.
#[derive(Parser, Debug)]
#[command(name = "omnilock-bench", version)]
pub(crate) struct Cli {
    /// Store URL, as `omnilock::connect` takes it; repeat to compare stores
    #[arg(long, value_name = "URL", required = true, action = clap::ArgAction::Append)]
    pub store: Vec<String>,

    #[command(flatten)]
    pub bench: BenchArgs,
}

#[derive(Args, Debug)]
pub(crate) struct BenchArgs {
    /// Workloads to run (repeat the flag or separate with commas)
    /// [default: all]
    #[arg(long, value_name = "NAME", value_enum, value_delimiter = ',')]
    pub workload: Vec<Workload>,

    /// Client counts for the contended and contended-apart workloads
    #[arg(long, value_name = "N,...", value_delimiter = ',', default_values_t = vec![1, 4, 16],
          value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub clients: Vec<u32>,

    /// How long the holder keeps the lock in the handoff workload, while
    /// the waiter is blocked in `acquire()`
    #[arg(long, value_name = "DUR", default_value = "250ms", value_parser = parse_duration)]
    pub hold: Duration,

    /// Waiter counts for the herd workload (store requests per hand-off)
    #[arg(long, value_name = "N,...", value_delimiter = ',', default_values_t = vec![2, 16, 64],
          value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub herd_waiters: Vec<u32>,

    /// How long each workload runs on each store
    #[arg(long, value_name = "DUR", default_value = "5s", value_parser = parse_duration)]
    pub duration: Duration,

    /// Lock counts for the many-held workload (one process holding them all)
    #[arg(long, value_name = "N,...", value_delimiter = ',', default_values_t = vec![10_000],
          value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub held: Vec<u32>,

    /// The TTL of the locks the many-held workload holds
    #[arg(long, value_name = "DUR", default_value = "10s", value_parser = parse_duration)]
    pub held_ttl: Duration,

    /// Runs every workload this many times over, each repeat's rows (and
    /// its ratios to the floor and to the peer) kept apart, so that a
    /// figure can be given as the median of the repeats
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=100))]
    pub repeat: u32,

    /// Leaves the peer libraries out (rslock, etcd's Lock RPC, and the
    /// `--peer-process` one): omnilock and the floor only
    #[arg(long)]
    pub no_peers: bool,

    /// The `distributed-lock` crate's runner (tools/peer-distributed-lock,
    /// built with `cargo build --release` there), run as a peer beside
    /// uncontended and handoff on PostgreSQL, MySQL/MariaDB and Redis
    #[arg(long, value_name = "PATH")]
    pub peer_process: Option<std::path::PathBuf>,

    /// Directory for results.json (created if missing)
    #[arg(long, value_name = "DIR")]
    pub out: Option<std::path::PathBuf>,
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    omnilock::parse_duration(text).map_err(|e| e.message().to_string())
}
