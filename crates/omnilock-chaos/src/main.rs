//! `omnilock-chaos`: run a store under faults and check the history.
//!
//! ```sh
//! omnilock-chaos run --store "$OMNILOCK_TEST_ETCD_URL" --fault kill --fault pause --duration 2m
//! omnilock-chaos check target/chaos/history.jsonl
//! omnilock-chaos soak --store "$OMNILOCK_TEST_ETCD_URL" --store mem:// --duration 1h
//! ```
//! Exit status: 0 no safety violation (soak: nothing grew), 1 violations
//! (unless `--allow-violations`; soak: a series grew, or too few samples to
//! judge), 2 bad input or a store that cannot be reached, 130 a soak
//! interrupted.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use omnilock_chaos::checker::Report;
use omnilock_chaos::client::{self, ClientConfig};
use omnilock_chaos::documents::{DocumentKind, DocumentWrite};
use omnilock_chaos::logs::LogWrite;
use omnilock_chaos::primitive::Primitive;
use omnilock_chaos::run::{self, Fault, RunConfig};
use omnilock_chaos::soak::load::Workload;
use omnilock_chaos::soak::nemesis::{Schedule, SoakFault};
use omnilock_chaos::soak::{self, Leak, SoakConfig};

/// Counts the heap bytes held live, for the soak's memory verdict.
#[global_allocator]
static ALLOCATOR: omnilock_harness::heap::CountingAllocator =
    omnilock_harness::heap::CountingAllocator;

#[derive(Parser)]
#[command(name = "omnilock-chaos", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum RegisterMode {
    /// Refuses reads and writes whose token is below the highest seen.
    Fenced,
    /// Accepts everything (the violations show as accepted stale writes).
    Unfenced,
    /// A table in the lock's own SQL database, each write in a transaction
    /// that `omnilock::sql::TxGuard` keeps under the lock (mutexes).
    SqlGuarded,
    /// The same table, written without the guard (the control).
    SqlUnguarded,
    /// A log in the lock's own store (etcd, ZooKeeper, Redis one server,
    /// Sentinel or Cluster), appended through the store's guard: Redis
    /// `GuardedWrite`, etcd `is_owner` in a `Txn`, ZooKeeper `check_owner`
    /// in a `multi` (mutexes).
    LogGuarded,
    /// The same log on Redis, appended through `FencedKey` (refuses a token
    /// below the highest that appended).
    LogFenced,
    /// The same log, appended without a guard or fence (the control).
    LogUnguarded,
    /// A file per lock, rewritten whole through `fence::FencedFile`, in the
    /// run's output directory (any store).
    FileFenced,
    /// The same files, replaced by rename without the fence (the control).
    FileUnfenced,
    /// A row per lock of a `sql::FencedTable` in the lock's own SQL
    /// database, rewritten whole through it.
    TableFenced,
    /// The same rows, written without the fence (the control).
    TableUnfenced,
}

#[derive(Subcommand)]
enum Command {
    /// Runs clients against a store while the nemesis injects faults, then
    /// checks the history.
    Run(RunArgs),
    /// Checks a history file written by `run`.
    Check {
        /// The history.jsonl file.
        history: PathBuf,
    },
    /// Loads every store at once for a long time, faulting a store node
    /// every so often, and fails if memory, descriptors, sockets,
    /// connections or tasks keep growing after the warm-up.
    Soak(SoakArgs),
    /// Prints a markdown table of every `report.json` one level under DIR
    /// (each row labelled by its directory's name).
    Table {
        /// The directory holding one subdirectory per run.
        dir: PathBuf,
    },
    /// One client process (started by `run`; the store URL comes in
    /// OMNILOCK_CHAOS_STORE).
    #[command(hide = true)]
    Client(ClientArgs),
}

/// The options of `run`.
#[derive(Args)]
struct RunArgs {
    /// The store URL (as for `omnilock --store`).
    #[arg(long)]
    store: String,
    /// A fault to inject; repeat for several (taken in turn).
    #[arg(long = "fault", value_enum)]
    faults: Vec<Fault>,
    /// Client processes.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=256))]
    clients: u32,
    /// Locks the clients spread over.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    locks: u32,
    /// TTL of every acquisition.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    ttl: Duration,
    /// Longest random work under the lock.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    work: Duration,
    /// How long the clients run.
    #[arg(long, default_value = "1m", value_parser = parse_duration)]
    duration: Duration,
    /// Mean time between faults.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    interval: Duration,
    /// The protected register's mode.
    #[arg(long, value_enum, default_value = "fenced")]
    register: RegisterMode,
    /// Clients check the guard before writing and skip the write when
    /// the lock is gone (by default they write regardless, as a process
    /// paused between its check and its write would).
    #[arg(long)]
    careful: bool,
    /// What the clients take: `mutex`, `semaphore:N` (permits of one
    /// N-permit semaphore per lock name; more than N holders is a
    /// violation) or `rw` (a read-write lock per name, one acquisition
    /// in four a writer; a reader beside a writer is a violation) or
    /// `multi` (two of the --locks at once through lock_all, named in a
    /// random order; needs --locks 2 or more).
    #[arg(long, default_value = "mutex")]
    primitive: Primitive,
    /// Clients build the store on an application's own client or pool, as
    /// an application that shares its client does (etcd, ZooKeeper,
    /// PostgreSQL, MySQL/MariaDB, one Redis server), instead of from the URL.
    #[arg(long)]
    byo: bool,
    /// Where the history, client logs and report.json go.
    #[arg(long, default_value = "target/chaos")]
    out: PathBuf,
    /// Exit 0 even with safety violations (for stores expected to have
    /// them: Redlock under restarts, unfenced registers).
    #[arg(long)]
    allow_violations: bool,
}

/// The options of `soak`.
#[derive(Args)]
struct SoakArgs {
    /// A store URL; repeat for several, all loaded at once.
    #[arg(long = "store", required = true)]
    stores: Vec<String>,
    /// Clients per store, each with a `Locks` (and connections) of its own.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=1024))]
    clients: u32,
    /// Lock names per store: half mutexes, a quarter 3-permit semaphores,
    /// a quarter read-write locks.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(8..=1_000_000))]
    names: u32,
    /// How long the clients run.
    #[arg(long, default_value = "1h", value_parser = parse_duration)]
    duration: Duration,
    /// Time between two samples.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    sample_every: Duration,
    /// Time between two faults (the first comes one interval in).
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    fault_every: Duration,
    /// How long a faulted node stays paused or down.
    #[arg(long, default_value = "3s", value_parser = parse_duration)]
    fault_length: Duration,
    /// A kind of fault; repeat for several, taken in turn per store
    /// (default: restart, then pause).
    #[arg(long = "fault", value_enum)]
    faults: Vec<SoakFault>,
    /// No faults at all.
    #[arg(long, conflicts_with_all = ["faults", "fault_every"])]
    no_faults: bool,
    /// The longest a client holds a guard (1 ms up to this).
    #[arg(long, default_value = "10ms", value_parser = parse_duration)]
    hold: Duration,
    /// A client's mean pause between two operations.
    #[arg(long, default_value = "250ms", value_parser = parse_duration)]
    think: Duration,
    /// The lease of every acquisition.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    ttl: Duration,
    /// The longest an acquire waits.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    wait: Duration,
    /// Where samples.csv, summary.{json,md}, faults.csv and the SVG curves go.
    #[arg(long, default_value = "target/soak")]
    out: PathBuf,
    /// A test aid: leak one of these deliberately every --leak-every, to
    /// show that the verdict fails.
    #[arg(long, value_enum, hide = true)]
    leak: Option<Leak>,
    /// See --leak.
    #[arg(long, default_value = "1s", value_parser = parse_duration, hide = true)]
    leak_every: Duration,
}

/// The options of one client process.
#[derive(Args)]
struct ClientArgs {
    #[arg(long)]
    id: u32,
    #[arg(long)]
    register: String,
    #[arg(long)]
    locks: u32,
    #[arg(long, value_parser = parse_duration)]
    ttl: Duration,
    #[arg(long, value_parser = parse_duration)]
    work: Duration,
    #[arg(long)]
    careful: bool,
    #[arg(long, default_value = "mutex")]
    primitive: Primitive,
    #[arg(long)]
    byo: bool,
    /// The records mode: `guarded` or `unguarded` (see `--register`).
    #[arg(long)]
    records: Option<String>,
    /// The log mode: `guarded`, `fenced` or `unguarded` (see `--register`).
    #[arg(long)]
    log: Option<String>,
    /// The run the logs are named after.
    #[arg(long, default_value = "")]
    log_run: String,
    /// The documents mode: `fenced` or `unfenced` (see `--register`).
    #[arg(long)]
    document: Option<String>,
    /// The documents' directory (file documents); table documents without.
    #[arg(long)]
    documents_dir: Option<PathBuf>,
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    omnilock::parse_duration(text).map_err(|e| e.to_string())
}

#[tokio::main]
async fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Run(args) => {
            let (out, allow_violations) = (args.out.clone(), args.allow_violations);
            let config = RunConfig {
                store: args.store,
                faults: args.faults,
                clients: args.clients,
                locks: args.locks,
                ttl: args.ttl,
                work: args.work,
                duration: args.duration,
                interval: args.interval,
                fenced: matches!(args.register, RegisterMode::Fenced),
                records: match args.register {
                    RegisterMode::SqlGuarded => Some(true),
                    RegisterMode::SqlUnguarded => Some(false),
                    _ => None,
                },
                document: match args.register {
                    RegisterMode::FileFenced => Some((DocumentKind::File, DocumentWrite::Fenced)),
                    RegisterMode::FileUnfenced => {
                        Some((DocumentKind::File, DocumentWrite::Unfenced))
                    }
                    RegisterMode::TableFenced => Some((DocumentKind::Table, DocumentWrite::Fenced)),
                    RegisterMode::TableUnfenced => {
                        Some((DocumentKind::Table, DocumentWrite::Unfenced))
                    }
                    _ => None,
                },
                log: match args.register {
                    RegisterMode::LogGuarded => Some(LogWrite::Guarded),
                    RegisterMode::LogFenced => Some(LogWrite::Fenced),
                    RegisterMode::LogUnguarded => Some(LogWrite::Unguarded),
                    _ => None,
                },
                careful: args.careful,
                primitive: args.primitive,
                byo: args.byo,
                out: args.out,
            };
            match run::run(config).await {
                Ok(report) => {
                    let json = serde_json::to_string_pretty(&report).expect("report");
                    if let Err(e) = std::fs::write(out.join("report.json"), json + "\n") {
                        eprintln!("omnilock-chaos: {}: {e}", out.display());
                    }
                    verdict(&report, allow_violations)
                }
                Err(err) => {
                    eprintln!("omnilock-chaos: {err}");
                    ExitCode::from(2)
                }
            }
        }
        Command::Soak(args) => {
            let config = SoakConfig {
                stores: args.stores,
                clients: args.clients,
                workload: Workload {
                    names: args.names,
                    hold: args.hold,
                    think: args.think,
                    ttl: args.ttl,
                    wait: args.wait,
                },
                duration: args.duration,
                sample_every: args.sample_every,
                schedule: (!args.no_faults).then(|| Schedule {
                    every: args.fault_every,
                    length: args.fault_length,
                    faults: if args.faults.is_empty() {
                        vec![SoakFault::Restart, SoakFault::Pause]
                    } else {
                        args.faults
                    },
                }),
                out: args.out,
                leak: args.leak.map(|leak| (leak, args.leak_every)),
            };
            match soak::run(config).await {
                Ok(outcome) => {
                    println!("{}", outcome.markdown);
                    if outcome.interrupted {
                        ExitCode::from(130)
                    } else if outcome.flat() {
                        println!("nothing grew after the warm-up");
                        ExitCode::SUCCESS
                    } else {
                        for finding in outcome.findings.iter().filter(|f| !f.flat()) {
                            println!("LEAK: {}: {}", finding.series, finding.grew.join("; "));
                        }
                        for problem in &outcome.problems {
                            println!("NO VERDICT: {problem}");
                        }
                        ExitCode::from(1)
                    }
                }
                Err(err) => {
                    eprintln!("omnilock-chaos soak: {err}");
                    ExitCode::from(2)
                }
            }
        }
        Command::Check { history } => match run::check_file(&history) {
            Ok(report) => verdict(&report, false),
            Err(err) => {
                eprintln!("omnilock-chaos: {err}");
                ExitCode::from(2)
            }
        },
        Command::Table { dir } => match table(&dir) {
            Ok(table) => {
                println!("{table}");
                ExitCode::SUCCESS
            }
            Err(err) => {
                eprintln!("omnilock-chaos: {err}");
                ExitCode::from(2)
            }
        },
        Command::Client(args) => {
            let Ok(store) = std::env::var("OMNILOCK_CHAOS_STORE") else {
                eprintln!("omnilock-chaos client: OMNILOCK_CHAOS_STORE is not set");
                return ExitCode::from(2);
            };
            let config = ClientConfig {
                id: args.id,
                store,
                register: args.register,
                locks: args.locks,
                ttl: args.ttl,
                work: args.work,
                careful: args.careful,
                primitive: args.primitive,
                byo: args.byo,
                records: args.records.map(|mode| mode == "guarded"),
                document: args.document.map(|how| {
                    let how = if how == "fenced" {
                        DocumentWrite::Fenced
                    } else {
                        DocumentWrite::Unfenced
                    };
                    (how, args.documents_dir)
                }),
                log: match args.log.as_deref().map(LogWrite::parse) {
                    Some(Some(how)) => Some((how, args.log_run)),
                    Some(None) => {
                        eprintln!("omnilock-chaos client: unknown --log mode");
                        return ExitCode::from(2);
                    }
                    None => None,
                },
            };
            match client::run(config).await {
                Ok(()) => ExitCode::SUCCESS,
                Err(err) => {
                    eprintln!("omnilock-chaos: {err}");
                    ExitCode::from(2)
                }
            }
        }
    }
}

fn verdict(report: &Report, allow_violations: bool) -> ExitCode {
    println!("{}", report.table());
    let violations = report.violations();
    if violations.is_empty() {
        println!("no safety violation");
        ExitCode::SUCCESS
    } else {
        println!("SAFETY VIOLATIONS: {}", violations.join(", "));
        if allow_violations {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        }
    }
}

fn table(dir: &std::path::Path) -> Result<String, String> {
    let mut runs: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(|entry| Some(entry.ok()?.path()))
        .filter(|path| path.join("report.json").is_file())
        .collect();
    runs.sort();
    let mut lines = vec![omnilock_chaos::checker::markdown_header()];
    for run in runs {
        let path = run.join("report.json");
        let text =
            std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let report: Report =
            serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        let label = run.file_name().unwrap_or_default().to_string_lossy();
        lines.push(report.markdown_row(&label));
    }
    Ok(lines.join("\n"))
}
