//! Command-line arguments.

use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use std::path::PathBuf;

/// `$OMNILOCK_STORE`, else the embedded default.
pub fn default_store() -> String {
    std::env::var("OMNILOCK_STORE")
        .ok()
        .filter(|s| !s.trim().is_empty())
        .unwrap_or_else(embedded_default)
}

/// The store used when neither `--store` nor `$OMNILOCK_STORE` is given: a
/// SQLite file in the user's data directory, so that processes on one
/// machine coordinate with no server. Without the `sqlite` feature, `mem://`.
pub fn embedded_default() -> String {
    match default_sqlite_path() {
        Some(path) if cfg!(feature = "sqlite") => {
            let text = path.to_string_lossy();
            let encoded: String = text
                .chars()
                .map(|c| match c {
                    '%' => "%25".to_string(),
                    '?' => "%3F".to_string(),
                    '#' => "%23".to_string(),
                    ' ' => "%20".to_string(),
                    c => c.to_string(),
                })
                .collect();
            format!("sqlite://{encoded}")
        }
        _ => "mem://".to_string(),
    }
}

/// `$XDG_DATA_HOME/omnilock/locks.db`, else `~/.local/share/omnilock/locks.db`.
pub fn default_sqlite_path() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_DATA_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| {
            std::env::var_os("HOME")
                .map(PathBuf::from)
                .filter(|p| p.is_absolute())
                .map(|home| home.join(".local").join("share"))
        })?;
    Some(base.join("omnilock").join("locks.db"))
}

/// Creates the embedded default's directory when it is the store in use.
pub fn prepare_default(store: &str) {
    if store == embedded_default() {
        if let Some(dir) = default_sqlite_path().as_deref().and_then(|p| p.parent()) {
            let _ = std::fs::create_dir_all(dir);
        }
    }
}

fn after_help() -> String {
    format!(
        "{AFTER_HELP}\n\nEmbedded default store here: {}",
        embedded_default()
    )
}

const AFTER_HELP: &str = "\
Store URLs: mem://, etcd://h1:p1,h2:p2/prefix, zk://h1:p1,h2:p2/prefix,
  redis://[:pw@]host:port[/db], redlock://h1:p1,h2:p2,h3:p3/,
  mysql://user:pw@host:port/db, postgres://user@host:port/db, sqlite:///abs/path.db
  Options go in the query string, e.g. ?ttl=15s.
The default store is $OMNILOCK_STORE, else the embedded default: a SQLite file
in $XDG_DATA_HOME/omnilock (or ~/.local/share/omnilock), created on first use,
which coordinates the processes of one machine with no server.

Exit status of `run`: the command's own; 75 lock not acquired in time;
64 bad arguments, name or URL; 69 store unreachable; 70 lock lost while the
command ran (the command gets SIGTERM first).";

/// Distributed locks from the command line: hold a lock while a command runs.
#[derive(Parser, Debug)]
#[command(name = "omnilock", version, after_help = after_help())]
pub struct Cli {
    /// Store URL [default: $OMNILOCK_STORE, else the embedded SQLite file];
    /// `bench` takes it several times
    #[arg(long, global = true, value_name = "URL", action = clap::ArgAction::Append)]
    pub store: Vec<String>,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Hold lock NAME while CMD runs (like flock(1) or `etcdctl lock`).
    ///
    /// CMD gets OMNILOCK_TOKEN (the fencing token) and OMNILOCK_LOCK in its
    /// environment. SIGINT and SIGTERM are passed on to CMD; the lock is
    /// released when CMD ends.
    Run(RunArgs),
    /// Let N workers contend for one lock and print every grant in order.
    Demo(DemoArgs),
    /// Remove lock NAME whatever its owner (administrative; the holder is
    /// told its lock was lost).
    Break(BreakArgs),
    /// Run the same workloads on every --store given and compare them: a
    /// table on stdout, results.json in --out.
    Bench(BenchArgs),
}

#[derive(Args, Debug)]
pub struct RunArgs {
    /// Lease TTL: a crashed holder's lock frees after this long [default: the
    /// store URL's ttl option, else 15s]
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    pub ttl: Option<Duration>,

    /// Give up (exit 75) if the lock is not acquired within DUR [default: wait forever]
    #[arg(long, value_name = "DUR", value_parser = parse_duration, conflicts_with = "no_wait")]
    pub wait: Option<Duration>,

    /// Fail at once (exit 75) if the lock is held
    #[arg(long, short = 'n')]
    pub no_wait: bool,

    /// Acquire as this owner (a stable name lets separate processes re-enter
    /// each other's hold on stores that support it) [default: random]
    #[arg(long, value_name = "NAME")]
    pub owner: Option<String>,

    /// Print a line on stderr when the lock is busy and omnilock starts waiting
    #[arg(long, short = 'v')]
    pub verbose: bool,

    /// The lock's name (UTF-8, 1 to 256 bytes, no control characters)
    pub name: String,

    /// The command to run, and its arguments
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

#[derive(Args, Debug)]
pub struct DemoArgs {
    /// How many workers contend
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub workers: u32,

    /// How many times each worker takes the lock
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub rounds: u32,

    /// How long each grant holds the lock
    #[arg(long, value_name = "DUR", default_value = "20ms", value_parser = parse_duration)]
    pub hold: Duration,

    /// The lock's name
    #[arg(long, default_value = "omnilock-demo")]
    pub name: String,
}

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Workloads to run: floor, uncontended, contended, many-locks, handoff,
    /// herd (repeat the flag or separate with commas) [default: all]
    #[arg(long, value_name = "NAME")]
    pub workload: Vec<String>,

    /// Client counts for the contended workload
    #[arg(long, value_name = "N,...", value_delimiter = ',', default_values_t = vec![1, 4, 16],
          value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub clients: Vec<u32>,

    /// Waiters in the handoff workload
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(2..=1024))]
    pub waiters: u32,

    /// Waiter counts for the herd workload (store requests per hand-off)
    #[arg(long, value_name = "N,...", value_delimiter = ',', default_values_t = vec![2, 16, 64],
          value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub herd_waiters: Vec<u32>,

    /// How long each workload runs on each store
    #[arg(long, value_name = "DUR", default_value = "5s", value_parser = parse_duration)]
    pub duration: Duration,

    /// Directory for results.json (created if missing)
    #[arg(long, value_name = "DIR")]
    pub out: Option<std::path::PathBuf>,
}

#[derive(Args, Debug)]
pub struct BreakArgs {
    /// The lock's name
    pub name: String,
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    omnilock::parse_duration(text).map_err(|e| e.message().to_string())
}
