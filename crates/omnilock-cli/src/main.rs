//! `omnilock`: hold a distributed lock while a command runs, across machines.
//!
//! Exit status (sysexits-style, so scripts can tell cases apart):
//! the command's own status when it ran; 75 when the lock was not acquired
//! in time; 64 for bad arguments, lock names or store URLs; 69 when the store
//! is unreachable; 70 when the lock was lost while the command ran; 73
//! when `write` refused a stale fencing token. docs/semantics.md has the
//! full table.

mod args;
mod child;
mod demo;
mod elect;
mod exit;
mod manual;
mod operator;
mod run;
mod write;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    if std::env::args_os().nth(1).as_deref() == Some(std::ffi::OsStr::new(child::GUARD_ARG)) {
        return ExitCode::from(child::guardian_main());
    }
    let cli = match args::Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => {
            let _ = err.print();
            return ExitCode::from(match err.kind() {
                clap::error::ErrorKind::DisplayHelp
                | clap::error::ErrorKind::DisplayVersion
                | clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => 0,
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
            eprintln!("omnilock: cannot start the async runtime: {err}");
            return ExitCode::from(exit::SOFTWARE);
        }
    };
    let code = runtime.block_on(async move {
        // `write`, `completions` and `man` need no store.
        let command = match cli.command {
            args::Command::Write(w) => return write::write(w).await,
            args::Command::Completions(c) => return manual::print_completions(c.shell),
            args::Command::Man(m) => return manual::print_man_page(m.dir.as_deref()),
            command => command,
        };
        let store = match cli.store {
            Some(store) => store,
            None => match args::default_store() {
                Ok(store) => store,
                Err(message) => {
                    eprintln!("omnilock: {message}");
                    return exit::USAGE;
                }
            },
        };
        // `run` checks its own arguments first and prepares the store after.
        if !matches!(command, args::Command::Run(_) | args::Command::Elect(_))
            && let Err(message) = args::prepare_default(&store)
        {
            eprintln!("omnilock: {message}");
            return exit::UNAVAILABLE;
        }
        match command {
            args::Command::Run(run) => run::run(&store, run).await,
            args::Command::Demo(demo) => demo::demo(&store, demo).await,
            args::Command::Elect(e) => elect::elect(&store, e).await,
            args::Command::Status(s) => operator::status(&store, s).await,
            args::Command::Ls(l) => operator::ls(&store, l).await,
            args::Command::Watch(w) => operator::watch(&store, w).await,
            args::Command::Break(b) => operator::break_holds(&store, b).await,
            args::Command::Write(w) => write::write(w).await,
            args::Command::Completions(c) => manual::print_completions(c.shell),
            args::Command::Man(m) => manual::print_man_page(m.dir.as_deref()),
        }
    });
    runtime.shutdown_timeout(std::time::Duration::from_secs(2));
    exit::raise_if_asked();
    ExitCode::from(code)
}
