//! `omnilock run`.

use std::process::ExitStatus;
use std::time::Duration;

use omnilock::{AcquireOptions, ErrorKind, LockName, Owner};
use tokio::signal::unix::{Signal, SignalKind, signal};

use crate::args::RunArgs;
use crate::child;
use crate::exit::{self, fail};

/// How long CMD gets to exit after SIGTERM when the lock is lost.
const LOST_GRACE: Duration = Duration::from_secs(10);

/// The signals `run` passes on to the command. Each would otherwise kill
/// `omnilock` (the default action) and leave the command to the guardian's
/// SIGKILL instead of a clean stop. A signal `omnilock` was started with
/// ignored (`nohup`, a background job of a non-interactive shell) stays
/// ignored, for the command too, as with flock(1).
pub(crate) struct Signals(Vec<(Signal, i32)>);

impl Signals {
    pub(crate) fn install() -> std::io::Result<Self> {
        let mut installed = Vec::new();
        for (kind, number) in [
            (SignalKind::interrupt(), libc::SIGINT),
            (SignalKind::terminate(), libc::SIGTERM),
            (SignalKind::hangup(), libc::SIGHUP),
            (SignalKind::quit(), libc::SIGQUIT),
            (SignalKind::user_defined1(), libc::SIGUSR1),
            (SignalKind::user_defined2(), libc::SIGUSR2),
        ] {
            if !ignored(number) {
                installed.push((signal(kind)?, number));
            }
        }
        Ok(Signals(installed))
    }

    /// The next of these signals, as its number.
    pub(crate) async fn next(&mut self) -> i32 {
        std::future::poll_fn(|cx| {
            for (signal, number) in self.0.iter_mut() {
                if signal.poll_recv(cx).is_ready() {
                    return std::task::Poll::Ready(*number);
                }
            }
            std::task::Poll::Pending
        })
        .await
    }
}

/// Whether `signal` is ignored in this process (inherited across exec).
fn ignored(signal: i32) -> bool {
    // SAFETY: sigaction with a null new action only reads the current one.
    unsafe {
        let mut current: libc::sigaction = std::mem::zeroed();
        libc::sigaction(signal, std::ptr::null(), &mut current) == 0
            && current.sa_sigaction == libc::SIG_IGN
    }
}

/// Whether `signal`, received while the command runs, should be passed on.
/// A command that shares our terminal job already got the terminal's
/// signals (Ctrl-C, Ctrl-\\, hangup) itself: a second copy would run its
/// handlers twice.
fn forward(command: &child::Supervised, signal: i32) -> bool {
    command.own_group() || !matches!(signal, libc::SIGINT | libc::SIGQUIT | libc::SIGHUP)
}

/// What the user typed, checked before any I/O.
pub(crate) struct Checked {
    /// The TTL and owner asked for, as any request takes them.
    options: AcquireOptions,
}

pub(crate) fn check(args: &RunArgs) -> omnilock::Result<Checked> {
    LockName::new(&args.name)?;
    let mut options = AcquireOptions::new();
    if let Some(ttl) = args.ttl {
        options = options.ttl(ttl);
    }
    check_job_rules(args)?;
    options.check()?;
    if let Some(owner) = &args.owner {
        options = options.owner(&Owner::new(owner)?);
    }
    Ok(Checked { options })
}

/// `--min-hold`, `--max-hold` and `--once-per`, checked before any I/O.
/// The command line enforces the hold bounds itself (see [`Rules`]), so
/// that a run that never started its command lets go at once and a run
/// past its max-hold is stopped while its lock is still renewed.
fn check_job_rules(args: &RunArgs) -> omnilock::Result<()> {
    let flagged = |e: omnilock::Error| {
        omnilock::Error::config(
            e.message()
                .replace("min_hold", "--min-hold")
                .replace("max_hold", "--max-hold"),
        )
    };
    omnilock::check_hold_bounds(args.min_hold, args.max_hold).map_err(flagged)?;
    let longest = omnilock::MAX_RECORD_KEEP;
    let days = longest.as_secs() / 86_400;
    for (flag, value) in [("--min-hold", args.min_hold), ("--max-hold", args.max_hold)] {
        if value.is_some_and(|value| value > longest) {
            return Err(omnilock::Error::config(format!(
                "{flag} is at most {days} days"
            )));
        }
    }
    if let Some(period) = args.once_per
        && (period < Duration::from_secs(1) || period > longest)
    {
        return Err(omnilock::Error::config(format!(
            "--once-per takes a period from 1s to {days} days"
        )));
    }
    Ok(())
}

pub(crate) async fn run(store: &str, args: RunArgs) -> u8 {
    // Everything the user typed is checked before any I/O.
    let checked = match check(&args).and_then(|c| omnilock::raw::StoreUrl::parse(store).map(|_| c))
    {
        Ok(checked) => checked,
        Err(err) => return fail(&err),
    };
    let (locks, mut signals) = match start(store, args.unavailable_exit_code).await {
        Ok(started) => started,
        Err(code) => return code,
    };
    let failure = |err: &omnilock::Error| failed(err, args.unavailable_exit_code);

    if args.once_per.is_some() && !locks.capabilities().records {
        locks.close().await;
        eprintln!(
            "omnilock: --once-per needs a store that keeps a record after omnilock exits, \
             and {} cannot",
            exit::shown(store)
        );
        return exit::USAGE;
    }
    let mut request = match (args.permits, args.read, args.write) {
        (Some(permits), _, _) => locks.semaphore(&args.name, permits),
        (None, true, _) => locks.rw_lock(&args.name).read(),
        (None, false, true) => locks.rw_lock(&args.name).write(),
        (None, false, false) => locks.lock(&args.name),
    }
    .options(checked.options)
    // A record read and written under a hold that another process of the
    // same --owner could share would not stop a second run.
    .reentrant(args.once_per.is_none());
    if args.verbose {
        let (name, shown) = (args.name.clone(), exit::shown(store));
        request =
            request.on_wait(move || eprintln!("omnilock: waiting for lock {name:?} on {shown}"));
    }
    let acquired = if args.no_wait || args.wait == Some(Duration::ZERO) {
        request.try_acquire().await
    } else {
        let request = match args.wait {
            Some(wait) => request.timeout(wait),
            None => request,
        };
        // Dropping the acquire on a signal leaves nothing behind in the
        // store: `close` waits for what the dropped acquire gives back (a
        // fair waiter's place in line) before the runtime goes away.
        tokio::select! {
            guard = request.acquire() => guard.map(Some),
            signal = signals.next() => {
                locks.close().await;
                return exit::die_of(signal);
            }
        }
    };
    if !matches!(acquired, Ok(Some(_))) {
        locks.close().await;
    }
    let guard = match acquired {
        Ok(Some(guard)) => guard,
        Ok(None) => {
            match args.permits {
                Some(permits) => eprintln!(
                    "omnilock: all {permits} permits of semaphore {:?} are held",
                    args.name
                ),
                None => eprintln!("omnilock: lock {:?} is held by another owner", args.name),
            }
            return args.conflict_exit_code;
        }
        Err(err) if err.kind() == ErrorKind::Timeout => {
            eprintln!(
                "omnilock: lock {:?} not acquired within {}",
                args.name,
                humantime::format_duration(args.wait.unwrap_or_default())
            );
            return args.conflict_exit_code;
        }
        // Before the command ran, a loss is the store's trouble (it dropped
        // this waiter's place again and again), not a lock lost under a
        // running command: the unavailable status, not the lost one.
        Err(err) if err.kind() == ErrorKind::LockLost => {
            exit::fail(&err);
            return args.unavailable_exit_code;
        }
        Err(err) => return failure(&err),
    };

    let done = match args.once_per {
        Some(period) => match DoneRecord::check(&locks, &args.name, period, &guard).await {
            Ok(Some(done)) => Some(done),
            Ok(None) => {
                let _ = guard.release().await;
                return args.done_exit_code;
            }
            Err(err) => {
                let _ = guard.release().await;
                return failure(&err);
            }
        },
        None => None,
    };
    let acquired = tokio::time::Instant::now();
    let rules = Rules {
        lost_exit_code: args.lost_exit_code,
        unavailable_exit_code: args.unavailable_exit_code,
        keep_until: args.min_hold.map(|min| acquired + min),
        stop_at: args.max_hold.map(|max| acquired + max),
        verbose: args.verbose,
        done,
    };
    supervise(
        Holding::Lock(guard),
        &args.name,
        &args.command,
        &mut signals,
        rules,
    )
    .await
}

/// `--once-per`: the record of the last successful run, read under the
/// lock before the command runs and written under it after a success.
pub(crate) struct DoneRecord {
    locks: omnilock::Locks,
    name: String,
    period: Duration,
    started: std::time::Instant,
    value: String,
}

impl DoneRecord {
    /// Reads the record of `name`: `None` (after saying so) when a run
    /// within `period` left one, else what to write after a success.
    async fn check(
        locks: &omnilock::Locks,
        name: &str,
        period: Duration,
        guard: &omnilock::LockGuard,
    ) -> omnilock::Result<Option<DoneRecord>> {
        if let Some(last) = locks.read_record(name).await? {
            let again = last.left.map_or(String::new(), |left| {
                format!(
                    "; it may run again in {}",
                    humantime::format_duration(Duration::from_secs(left.as_secs() + 1))
                )
            });
            eprintln!(
                "omnilock: {name:?} already ran within --once-per {} ({}){again}; not running it",
                humantime::format_duration(period),
                last.value
            );
            return Ok(None);
        }
        let now = humantime::format_rfc3339_seconds(std::time::SystemTime::now());
        Ok(Some(DoneRecord {
            locks: locks.clone(),
            name: name.to_string(),
            period,
            started: std::time::Instant::now(),
            value: format!("last run started {now} by {}", guard.owner()),
        }))
    }

    /// Records a successful run, for the rest of its period from its start.
    async fn write(&self) -> omnilock::Result<()> {
        let left = self.period.saturating_sub(self.started.elapsed());
        if left < Duration::from_millis(1) {
            return Ok(());
        }
        self.locks.write_record(&self.name, &self.value, left).await
    }
}

/// What `supervise` applies besides running the command: exit statuses,
/// `--min-hold` (`keep_until`), `--max-hold` (`stop_at`) and `--once-per`.
pub(crate) struct Rules {
    pub(crate) lost_exit_code: u8,
    pub(crate) unavailable_exit_code: u8,
    /// Keep the lock until then after the command ended.
    pub(crate) keep_until: Option<tokio::time::Instant>,
    /// Stop the command then (the lock still renewed until it has exited).
    pub(crate) stop_at: Option<tokio::time::Instant>,
    pub(crate) verbose: bool,
    pub(crate) done: Option<DoneRecord>,
}

impl Rules {
    /// Just the exit statuses (`elect`).
    pub(crate) fn exits(lost_exit_code: u8, unavailable_exit_code: u8) -> Self {
        Rules {
            lost_exit_code,
            unavailable_exit_code,
            keep_until: None,
            stop_at: None,
            verbose: false,
            done: None,
        }
    }
}

/// What `run` and `elect` do once the input is checked: create the
/// embedded default's file if it is the store, install the signal
/// handlers, connect (a signal meanwhile ends omnilock as it would have).
/// `Err` holds the exit status.
pub(crate) async fn start(store: &str, unavailable: u8) -> Result<(omnilock::Locks, Signals), u8> {
    if let Err(message) = crate::args::prepare_default(store) {
        eprintln!("omnilock: {message}");
        return Err(unavailable);
    }
    let mut signals = match Signals::install() {
        Ok(signals) => signals,
        Err(err) => {
            eprintln!("omnilock: cannot install signal handlers: {err}");
            return Err(exit::SOFTWARE);
        }
    };
    tokio::select! {
        locks = omnilock::connect(store) => match locks {
            Ok(locks) => Ok((locks, signals)),
            Err(err) => Err(failed(&err, unavailable)),
        },
        signal = signals.next() => Err(exit::die_of(signal)),
    }
}

/// Prints `err` and returns its exit status, `unavailable` for a store
/// that is unreachable or failing.
pub(crate) fn failed(err: &omnilock::Error, unavailable: u8) -> u8 {
    match exit::code_for(err) {
        exit::UNAVAILABLE => {
            exit::fail(err);
            unavailable
        }
        _ => fail(err),
    }
}

/// What the command runs under: a lock (or permit, or side of a
/// read-write lock) or a leadership.
pub(crate) enum Holding {
    Lock(omnilock::LockGuard),
    Leader(omnilock::Leadership),
}

impl Holding {
    /// The fencing token: the lock's, or the leader's term.
    fn token(&self) -> u64 {
        match self {
            Holding::Lock(guard) => guard.token(),
            Holding::Leader(leadership) => leadership.term(),
        }
    }

    fn lost(&self) -> impl std::future::Future<Output = omnilock::Error> + Send + 'static + use<> {
        match self {
            Holding::Lock(guard) => boxed_loss(guard.lost()),
            Holding::Leader(leadership) => boxed_loss(leadership.lost()),
        }
    }

    async fn release(self) -> omnilock::Result<()> {
        match self {
            Holding::Lock(guard) => guard.release().await,
            Holding::Leader(leadership) => leadership.resign().await,
        }
    }
}

/// Boxes a lost signal, so that both kinds of holding return one type.
fn boxed_loss(
    lost: impl std::future::Future<Output = omnilock::Error> + Send + 'static,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = omnilock::Error> + Send>> {
    Box::pin(lost)
}

/// Runs `command` (program and arguments) while `held` lasts, with
/// OMNILOCK_TOKEN and OMNILOCK_LOCK (`name`) in its environment: passes
/// signals on, stops it (SIGTERM, then SIGKILL after a grace) and exits
/// `lost_exit_code` when the holding is lost, and otherwise releases once
/// the command (and what it left in its process group) has exited, with
/// the command's status.
pub(crate) async fn supervise(
    held: Holding,
    name: &str,
    command: &[String],
    signals: &mut Signals,
    rules: Rules,
) -> u8 {
    let lost_exit_code = rules.lost_exit_code;
    let mut done = rules.done;
    let (program, rest) = command.split_first().expect("clap requires CMD");
    let env = [
        ("OMNILOCK_TOKEN", held.token().to_string()),
        ("OMNILOCK_LOCK", name.to_string()),
    ];
    let mut command = match child::spawn(program, rest, &env).await {
        Ok(command) => command,
        Err(err) => {
            eprintln!("omnilock: cannot run {program:?}: {err}");
            let _ = held.release().await;
            return if err.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            };
        }
    };

    let lost = held.lost();
    tokio::pin!(lost);
    let mut status = None;
    let group = command.group();
    let too_long = sleep_until_opt(rules.stop_at);
    tokio::pin!(too_long);
    loop {
        tokio::select! {
            ended = command.child.wait(), if status.is_none() => {
                match ended {
                    Ok(ended) => status = Some(ended),
                    Err(err) => {
                        eprintln!("omnilock: lost track of the command: {err}");
                        command.stop(LOST_GRACE).await;
                        command.finish().await;
                        let _ = held.release().await;
                        return exit::SOFTWARE;
                    }
                }
                if command.own_group() {
                    // What it started in its group works under the lock too.
                    tokio::select! {
                        _ = child::emptied(group) => break,
                        _ = tokio::time::sleep(Duration::from_secs(1)) => eprintln!(
                            "omnilock: the command exited; the lock is kept until what \
                             it left running in its process group has exited"
                        ),
                    }
                }
            }
            _ = child::emptied(group), if status.is_some() => break,
            _ = &mut too_long => {
                // The lock is still renewed while the command stops, so no
                // other holder starts beside it; released once it is gone.
                eprintln!("omnilock: --max-hold reached; stopping the command");
                command.stop(LOST_GRACE).await;
                command.finish().await;
                if let Err(err) = held.release().await {
                    eprintln!("omnilock: release after --max-hold: {err}");
                }
                return lost_exit_code;
            }
            loss = &mut lost => {
                eprintln!("omnilock: {loss}; stopping the command");
                command.stop(LOST_GRACE).await;
                command.finish().await;
                // The command had already succeeded (what it left in its
                // group was still running): its run is recorded, which can
                // only prevent a run, never add one.
                if let (Some(done), Some(ended)) = (done.take(), status)
                    && ended.success()
                {
                    let _ = done.write().await;
                }
                // Says what the store answered, so that scripts (and the
                // tests) see that the stale release touched nothing.
                if let Err(err) = held.release().await {
                    eprintln!("omnilock: release after the loss: {err}");
                }
                return lost_exit_code;
            }
            signal = signals.next() => {
                if forward(&command, signal) {
                    command.signal(signal);
                }
            }
        }
    }
    command.finish().await;
    let status = status.expect("the loop ends after the command");
    if let Some(done) = done
        && status.success()
        && let Err(err) = done.write().await
    {
        eprintln!(
            "omnilock: the command succeeded, but its run could not be recorded for \
             --once-per; a later start within the period may run it again"
        );
        let _ = held.release().await;
        return failed(&err, rules.unavailable_exit_code);
    }
    if let Some(until) = rules
        .keep_until
        .filter(|until| *until > tokio::time::Instant::now())
    {
        if rules.verbose {
            eprintln!("omnilock: the command ended; keeping the lock until --min-hold has passed");
        }
        // Still renewed meanwhile; a loss or a signal ends the wait (the
        // lease then frees the lock).
        tokio::select! {
            _ = tokio::time::sleep_until(until) => {}
            loss = &mut lost => {
                eprintln!("omnilock: {loss} during --min-hold");
                let _ = held.release().await;
                return exit_status(status);
            }
            signal = signals.next() => return exit::die_of(signal),
        }
    }
    let released = held.release().await;
    match released {
        Ok(()) => exit_status(status),
        Err(err) if matches!(err.kind(), ErrorKind::NotOwner | ErrorKind::LockLost) => {
            eprintln!("omnilock: the lock was lost while the command ran: {err}");
            lost_exit_code
        }
        Err(err) => {
            // The command finished under the lock; the lease frees it soon.
            eprintln!("omnilock: warning: {err}");
            exit_status(status)
        }
    }
}

/// Sleeps until `at`, or for ever without one.
async fn sleep_until_opt(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The command's status as ours: its code, or 128 + the signal that killed
/// it. A command killed by SIGINT or SIGQUIT makes `omnilock` die of the same
/// signal, so that a shell running it in a loop stops as it would for the
/// command alone.
fn exit_status(status: ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => code as u8,
        (None, Some(signal @ (libc::SIGINT | libc::SIGQUIT))) => exit::die_of(signal),
        (None, Some(signal)) => 128u8.saturating_add(signal as u8),
        (None, None) => exit::SOFTWARE,
    }
}
