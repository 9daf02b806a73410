//! Command-line arguments.

use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use std::path::PathBuf;

/// `$OMNILOCK_STORE`, else the embedded default. An error when there is
/// neither: the in-process `mem://` store would exclude nothing between
/// processes, so it is never chosen for the user.
pub(crate) fn default_store() -> Result<String, String> {
    if let Some(store) = std::env::var("OMNILOCK_STORE")
        .ok()
        .filter(|s| !s.trim().is_empty())
    {
        return Ok(store);
    }
    embedded_default().ok_or_else(|| {
        if default_sqlite_path().is_some_and(|p| p.to_str().is_none()) {
            "no store: the embedded default's path (from HOME or XDG_DATA_HOME) is not \
             valid UTF-8; set --store or OMNILOCK_STORE"
                .to_string()
        } else if cfg!(feature = "sqlite") {
            "no store: set --store or OMNILOCK_STORE, or HOME (or XDG_DATA_HOME) to an \
             absolute path for the embedded default"
                .to_string()
        } else {
            "no store: set --store or OMNILOCK_STORE (this omnilock is built without the \
             `sqlite` feature, so it has no embedded default)"
                .to_string()
        }
    })
}

/// The store used when neither `--store` nor `$OMNILOCK_STORE` is given: a
/// SQLite file in the user's data directory, so that one user's processes on
/// one machine coordinate with no server. `None` without the `sqlite`
/// feature or without an absolute `XDG_DATA_HOME` or `HOME`.
pub(crate) fn embedded_default() -> Option<String> {
    if !cfg!(feature = "sqlite") {
        return None;
    }
    let path = default_sqlite_path()?;
    // Store URLs are UTF-8: a lossy path would name another file.
    let text = path.to_str()?;
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
    Some(format!("sqlite://{encoded}"))
}

/// `$XDG_DATA_HOME/omnilock/locks.db`, else `~/.local/share/omnilock/locks.db`.
pub(crate) fn default_sqlite_path() -> Option<PathBuf> {
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

/// Creates the embedded default's directory (mode 0700) and database file
/// (mode 0600) when it is the store in use: lock names and owners are the
/// user's business.
pub(crate) fn prepare_default(store: &str) -> Result<(), String> {
    if Some(store) != embedded_default().as_deref() {
        return Ok(());
    }
    let Some(path) = default_sqlite_path() else {
        return Ok(());
    };
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    if let Some(dir) = path.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(&path)
        .map(drop)
        .map_err(|e| format!("cannot create {}: {e}", path.display()))
}

fn after_help() -> String {
    format!(
        "{AFTER_HELP}\n\nEmbedded default store here: {}",
        embedded_default()
            .unwrap_or_else(|| "none (set HOME, or use --store or OMNILOCK_STORE)".into())
    )
}

const AFTER_HELP: &str = "\
Store URLs: mem://, etcd://h1:p1,h2:p2/prefix (etcds:// for TLS),
  zk://h1:p1,h2:p2/prefix (or zookeeper://; zks:// for TLS, when built with
  the zookeeper-tls feature), redis://[:pw@]host:port[/db]
  (rediss:// for TLS), redis+cluster://h1:p1,h2:p2,h3:p3 (rediss+cluster://),
  redis+sentinel://s1:p1,s2:p2,s3:p3/MASTER (rediss+sentinel://),
  redlock://h1:p1,h2:p2,h3:p3/, mysql://user:pw@host:port/db
  (or mariadb://), postgres://user@host:port/db (or postgresql://),
  sqlite:///abs/path.db. Options go in the query string, e.g. ?ttl=15s.
The default store is $OMNILOCK_STORE, else the embedded default: a SQLite file
in $XDG_DATA_HOME/omnilock (or ~/.local/share/omnilock), created on first use
(directory 0700, file 0600), which coordinates the processes of one user (one
HOME) on one machine with no server. Without HOME, give --store.

Exit status of `run`: the command's own (128+N if it died of signal N; 126
not executable, 127 not found); 75 lock not acquired in time (-E to change);
79 not run, --once-per found a run within the period;
64 bad arguments, name or URL; 65 a semaphore in use with another --permits;
69 store unreachable or failing; 70 lock lost while the command ran (its
process group gets SIGTERM first); 77 credentials refused or access denied;
78 TLS failed (a certificate that does not verify).
Exit status of `write`: 0 written; 73 refused, a later holder wrote since;
74 input or file not readable or writable; 64 no token, or FILE is a directory.
Without a terminal the command runs in its own process group: the lock is
kept until the whole group has exited, and the group dies with omnilock
(SIGKILL included). In a terminal it stays in omnilock's job. A *paused*
omnilock cannot stop it, nor can anything reach processes that leave the
group: fence writes with $OMNILOCK_TOKEN.
Durations: 500ms, 15s, 2m, 1h30m; a bare number is seconds (flock -w 10).
Logging: OMNILOCK_LOG=debug (or info, warn; a tracing filter such as
omnilock=debug) prints omnilock's log on stderr. Shell completions and a
manual page: `omnilock completions bash`, `omnilock man`.";

/// What `omnilock run --help` adds: the exit statuses a script tests.
const RUN_AFTER_HELP: &str = "\
Exit status: the command's own (128+N if it died of signal N; 126 not
executable, 127 not found); 75 lock not acquired in time (-E to change);
79 not run, --once-per found a run within the period;
64 bad arguments, name or URL; 65 a semaphore in use with another
--permits; 69 store unreachable or failing; 70 lock lost while the command
ran (its process group gets SIGTERM first); 77 credentials refused or
access denied; 78 TLS failed (a certificate that does not verify).";

/// What `omnilock elect --help` adds: the exit statuses a script tests.
const ELECT_AFTER_HELP: &str = "\
Exit status: the command's own (128+N if it died of signal N; 126 not
executable, 127 not found); 75 not elected within --wait (-E to change);
64 bad arguments, name or URL, or --listen on a store that cannot say who
leads; 69 store unreachable or failing; 70 leadership lost while the
command ran (its process group gets SIGTERM first); 77 credentials refused
or access denied; 78 TLS failed. --listen exits 0 when interrupted.";

/// Distributed locks from the command line: hold a lock while a command runs.
#[derive(Parser, Debug)]
#[command(name = "omnilock", version, after_help = after_help())]
pub(crate) struct Cli {
    /// Store URL [default: $OMNILOCK_STORE, else the embedded SQLite file]
    #[arg(long, global = true, value_name = "URL")]
    pub store: Option<String>,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub(crate) enum Command {
    /// Hold lock NAME while CMD runs (like flock(1) or `etcdctl lock`).
    ///
    /// CMD gets OMNILOCK_TOKEN (the fencing token) and OMNILOCK_LOCK in its
    /// environment (OMNILOCK_STORE is removed: it may hold a password).
    /// Without a terminal it runs in its own process group, which gets
    /// SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 sent to omnilock
    /// and dies with omnilock; the lock is released when the whole group has
    /// exited. In a terminal CMD stays in omnilock's job.
    #[command(after_help = RUN_AFTER_HELP)]
    Run(RunArgs),
    /// Let N workers contend for one lock and print every grant in order.
    Demo(DemoArgs),
    /// Campaign to lead election NAME and run CMD while leader (like
    /// `etcdctl elect`); with --listen, print each leader as it changes.
    ///
    /// VALUE is what observers see as the leader [default: host:pid:random];
    /// CMD gets the leader's term as OMNILOCK_TOKEN (a fencing token). Only
    /// one candidate leads at a time; the others wait in line where the
    /// store is fair. When leadership is lost, CMD's process group gets
    /// SIGTERM (SIGKILL 10 s later) and omnilock exits 70; when CMD ends,
    /// omnilock resigns and exits with its status. The election's lock is
    /// `election/NAME` (`omnilock status election/NAME`).
    #[command(after_help = ELECT_AFTER_HELP)]
    Elect(ElectArgs),
    /// Show who holds NAME and who waits, as the store sees it (every
    /// process and machine): owner, fencing token, how long held, lease
    /// left. Without --kind: the lock, and the semaphore and read-write lock
    /// of the same name where the store has them.
    Status(StatusArgs),
    /// List the held locks whose names start with PREFIX (all without one).
    Ls(LsArgs),
    /// Print the state of NAME, then every change of holders or waiters,
    /// until interrupted (Ctrl-C exits 0).
    Watch(WatchArgs),
    /// Remove the holds of NAME whatever their owner (administrative).
    ///
    /// Without --kind it breaks the lock (mutex) NAME: its holder is removed
    /// and the next waiter gets it. `--kind semaphore` removes the
    /// semaphore's permits and `--kind rw` the read-write lock's readers and
    /// writer; waiters stay in line and are admitted. With --owner only that
    /// owner's holds go. With --record it deletes NAME's `run --once-per`
    /// record instead. Each broken holder learns that its lock was lost
    /// (`omnilock run` stops its command and exits 70), at its next renewal
    /// at the latest.
    Break(BreakArgs),
    /// Replace FILE with stdin, fenced: refused (exit 73, FILE unchanged)
    /// when a holder with a higher fencing token has written FILE since.
    ///
    /// For a job under `omnilock run`, whose lock may be lost while it runs
    /// (a pause, a partition): `omnilock run NAME -- sh -c 'make-report |
    /// omnilock write report.csv'` writes report.csv only while no later
    /// holder of NAME has. The token is $OMNILOCK_TOKEN, which `run` sets,
    /// or --token. The highest token is kept in FILE.fence, and writers
    /// take turns on FILE.fence.lock (flock), so this fences the processes
    /// of one machine that all write FILE this way. Needs no store.
    /// Exit status: 0 written; 73 refused (stale token); 74 stdin or FILE
    /// could not be read or written; 64 no token, or FILE is a directory.
    Write(WriteArgs),
    /// Print the completion script of SHELL on stdout.
    ///
    /// bash: `omnilock completions bash > ~/.local/share/bash-completion/completions/omnilock`;
    /// zsh: `omnilock completions zsh > "${fpath[1]}/_omnilock"`;
    /// fish: `omnilock completions fish > ~/.config/fish/completions/omnilock.fish`.
    Completions(CompletionsArgs),
    /// Print omnilock's manual page (roff) on stdout, or write every page
    /// (omnilock.1, omnilock-run.1, ...) to DIR: `omnilock man
    /// ~/.local/share/man/man1`, then `man omnilock-run`.
    Man(ManArgs),
}

#[derive(Args, Debug)]
pub(crate) struct ManArgs {
    /// Write the pages here instead of printing the main one
    #[arg(value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub(crate) struct CompletionsArgs {
    /// The shell
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

#[derive(Args, Debug)]
pub(crate) struct WriteArgs {
    /// The fencing token [default: $OMNILOCK_TOKEN]
    #[arg(long, value_name = "N")]
    pub token: Option<u64>,

    /// The file to replace (atomically, by rename)
    #[arg(value_name = "FILE")]
    pub path: PathBuf,
}

#[derive(Args, Debug)]
pub(crate) struct RunArgs {
    /// Lease TTL: a crashed holder's lock frees after this long [default: the
    /// store URL's ttl option, else 15s]
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    pub ttl: Option<Duration>,

    /// Give up (exit 75) if the lock is not acquired within DUR [default: wait forever]
    #[arg(long, short = 'w', visible_alias = "timeout", value_name = "DUR",
          value_parser = parse_duration, conflicts_with = "no_wait")]
    pub wait: Option<Duration>,

    /// Fail at once (exit 75) if the lock is held
    #[arg(long, short = 'n')]
    pub no_wait: bool,

    /// Acquire as this owner: the holder's name that operators see (say
    /// `backup@db-3`); a stable one lets separate processes re-enter each
    /// other's hold on stores that support it [default: host:pid:random]
    #[arg(long, value_name = "NAME")]
    pub owner: Option<String>,

    /// Take one permit of the counting semaphore NAME, which admits N
    /// holders at once (every user must give the same N) instead of the lock
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..),
          conflicts_with_all = ["read", "write"])]
    pub permits: Option<u32>,

    /// Take the shared (read) side of the read-write lock NAME: readers run
    /// together, never beside a writer
    #[arg(long, conflicts_with = "write")]
    pub read: bool,

    /// Take the exclusive (write) side of the read-write lock NAME
    #[arg(long)]
    pub write: bool,

    /// Keep the lock at least DUR after it was taken, even when the command
    /// ends sooner: omnilock waits (holding it) before it exits, so that a
    /// machine whose clock or schedule is late cannot start the same job
    /// again at once. If omnilock is killed meanwhile, the lease frees it
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    pub min_hold: Option<Duration>,

    /// Stop the command DUR after the lock was taken: its process group gets
    /// SIGTERM (SIGKILL 10 s later) while the lock is still renewed, the lock
    /// is released once the group has exited, and omnilock exits with the
    /// lost status (70), so a hung job cannot keep the lock for ever
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    pub max_hold: Option<Duration>,

    /// Run at most once per DUR across machines: after a run that exits 0,
    /// a record of its start is kept in the store for DUR from the start;
    /// a later start within DUR finds it (under the lock), does not run the
    /// command, says when the last run started, and exits 79
    /// (--done-exit-code). A failed run leaves no record. Needs the lock or
    /// --write (a hold no other process shares)
    #[arg(long, value_name = "DUR", value_parser = parse_duration,
          conflicts_with_all = ["permits", "read"])]
    pub once_per: Option<Duration>,

    /// Exit status when --once-per finds that the command already ran
    /// within the period
    #[arg(long, value_name = "N", default_value_t = crate::exit::DONE)]
    pub done_exit_code: u8,

    /// Print a line on stderr when the lock is busy and omnilock starts waiting
    #[arg(long, short = 'v')]
    pub verbose: bool,

    /// Exit status when the lock is busy (--no-wait) or --wait runs out, so
    /// that it cannot be mistaken for the command's own
    #[arg(long, short = 'E', value_name = "N", default_value_t = crate::exit::TEMPFAIL)]
    pub conflict_exit_code: u8,

    /// Exit status when the lock is lost while the command runs
    #[arg(long, value_name = "N", default_value_t = crate::exit::SOFTWARE)]
    pub lost_exit_code: u8,

    /// Exit status when the store is unreachable or fails
    #[arg(long, value_name = "N", default_value_t = crate::exit::UNAVAILABLE)]
    pub unavailable_exit_code: u8,

    /// The lock's name (UTF-8, 1 to 256 bytes, no control characters)
    pub name: String,

    /// The command to run, and its arguments
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

#[derive(Args, Debug)]
pub(crate) struct DemoArgs {
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
pub(crate) struct ElectArgs {
    /// Print the leader now and at every change, until interrupted
    #[arg(long, short = 'l')]
    pub listen: bool,

    /// With --listen: one JSON object per change ("at", "name", "leader", "term")
    #[arg(long, requires = "listen")]
    pub json: bool,

    /// The leadership's lease: a dead leader is replaced this long after it
    /// stopped renewing [default: the store URL's ttl option, else 15s]
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    pub ttl: Option<Duration>,

    /// Give up (exit 75) if not elected within DUR [default: wait forever]
    #[arg(long, short = 'w', visible_alias = "timeout", value_name = "DUR",
          value_parser = parse_duration)]
    pub wait: Option<Duration>,

    /// Print a line on stderr when waiting behind a leader, and when elected
    #[arg(long, short = 'v')]
    pub verbose: bool,

    /// Exit status when --wait runs out
    #[arg(long, short = 'E', value_name = "N", default_value_t = crate::exit::TEMPFAIL)]
    pub conflict_exit_code: u8,

    /// Exit status when leadership is lost while the command runs
    #[arg(long, value_name = "N", default_value_t = crate::exit::SOFTWARE)]
    pub lost_exit_code: u8,

    /// Exit status when the store is unreachable or fails
    #[arg(long, value_name = "N", default_value_t = crate::exit::UNAVAILABLE)]
    pub unavailable_exit_code: u8,

    /// The election's name
    pub name: String,

    /// The value observers see as the leader [default: host:pid:random]
    pub value: Option<String>,

    /// The command to run while leader, and its arguments
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// Which of a name's locks: `--kind mutex|semaphore|rw`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum KindArg {
    /// The lock that `run` takes by default
    Mutex,
    /// The counting semaphore (`run --permits N`)
    Semaphore,
    /// The read-write lock (`run --read`, `run --write`)
    Rw,
}

#[derive(Args, Debug)]
pub(crate) struct BreakArgs {
    /// Which of NAME's locks to break [default: mutex]
    #[arg(long, value_enum)]
    pub kind: Option<KindArg>,

    /// Break only the holds of this owner (as `status` shows it): with
    /// --kind semaphore or rw
    #[arg(long, value_name = "OWNER", requires = "kind")]
    pub owner: Option<String>,

    /// Delete NAME's `run --once-per` record instead, so that the job may
    /// run again within its period (the lock is left alone)
    #[arg(long, conflicts_with_all = ["kind", "owner"])]
    pub record: bool,

    /// The lock's name
    pub name: String,
}

#[derive(Args, Debug)]
pub(crate) struct StatusArgs {
    /// Only this kind of lock [default: every kind the store has]
    #[arg(long, value_enum)]
    pub kind: Option<KindArg>,

    /// Print JSON (a stable shape: see docs/semantics.md)
    #[arg(long)]
    pub json: bool,

    /// The lock's name
    pub name: String,
}

#[derive(Args, Debug)]
pub(crate) struct LsArgs {
    /// Also show each lock's holders and waiters (one read per lock)
    #[arg(long, short = 'l')]
    pub long: bool,

    /// Print JSON (a stable shape: see docs/semantics.md)
    #[arg(long)]
    pub json: bool,

    /// Only names that start with this
    #[arg(default_value = "")]
    pub prefix: String,
}

#[derive(Args, Debug)]
pub(crate) struct WatchArgs {
    /// Only this kind of lock [default: every kind the store has]
    #[arg(long, value_enum)]
    pub kind: Option<KindArg>,

    /// How often to read the store
    #[arg(long, value_name = "DUR", default_value = "1s", value_parser = parse_interval)]
    pub interval: Duration,

    /// Print one JSON object per change (the shape of `status --json`,
    /// with "at")
    #[arg(long)]
    pub json: bool,

    /// The lock's name
    pub name: String,
}

/// A polling interval: a duration of 50ms to 1h.
fn parse_interval(text: &str) -> Result<Duration, String> {
    let interval = parse_duration(text)?;
    if !(Duration::from_millis(50)..=Duration::from_secs(3600)).contains(&interval) {
        return Err(format!("{text:?} is outside 50ms to 1h"));
    }
    Ok(interval)
}

/// A duration as the library reads it (`500ms`, `15s`), or a bare number
/// of seconds, as flock(1) takes `-w 10` or `-w 0.5`.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let bare = text.trim();
    if !bare.is_empty() && bare.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return bare
            .parse::<f64>()
            .ok()
            .and_then(|secs| Duration::try_from_secs_f64(secs).ok())
            .ok_or_else(|| {
                format!("invalid duration {text:?} (try 500ms, 15s, 2m, or 10 for seconds)")
            });
    }
    omnilock::parse_duration(text).map_err(|e| e.message().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Words a tired operator might type, flags and values mixed at random.
    fn word() -> impl Strategy<Value = String> {
        prop_oneof![
            prop::sample::select(vec![
                "run",
                "demo",
                "break",
                "bench",
                "--",
                "--store",
                "--ttl",
                "--wait",
                "-n",
                "--no-wait",
                "--owner",
                "-v",
                "-E",
                "--conflict-exit-code",
                "--lost-exit-code",
                "--workload",
                "--clients",
                "--duration",
                "--out",
                "--help",
                "-",
                "",
                "mem://",
                "1ms",
                "15s",
                "-1",
                "999999999999",
                "300",
                "herd",
                "0",
            ])
            .prop_map(str::to_string),
            any::<String>(),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(3000))]

        /// No argument list panics the parser or the checks `run` makes
        /// before any I/O; every refusal is a clap error or a typed error.
        #[test]
        fn any_arguments_parse_or_fail_cleanly(words in prop::collection::vec(word(), 0..8)) {
            let argv = std::iter::once("omnilock".to_string()).chain(words);
            if let Ok(Cli { command: Command::Run(run), .. }) = Cli::try_parse_from(argv)
                && let Err(err) = crate::run::check(&run) {
                    prop_assert!(matches!(
                        err.kind(),
                        omnilock::ErrorKind::InvalidName | omnilock::ErrorKind::InvalidConfig
                    ));
                }
        }
    }
}
