//! `omnilock run` and `omnilock break`.

use std::process::ExitStatus;
use std::time::Duration;

use omnilock::{ErrorKind, LockName, Owner};
use tokio::signal::unix::{signal, Signal, SignalKind};

use crate::args::RunArgs;
use crate::child;
use crate::exit::{self, fail};

/// How long CMD gets to exit after SIGTERM when the lock is lost.
const LOST_GRACE: Duration = Duration::from_secs(10);

/// The signals `run` passes on to the command's process group. Each would
/// otherwise kill `omnilock` (the default action) and leave the command to
/// the guardian's SIGKILL instead of a clean stop.
struct Signals {
    interrupt: Signal,
    terminate: Signal,
    hangup: Signal,
    quit: Signal,
    user1: Signal,
    user2: Signal,
}

impl Signals {
    fn install() -> std::io::Result<Self> {
        Ok(Signals {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
            hangup: signal(SignalKind::hangup())?,
            quit: signal(SignalKind::quit())?,
            user1: signal(SignalKind::user_defined1())?,
            user2: signal(SignalKind::user_defined2())?,
        })
    }

    /// The next forwarded signal, as its number.
    async fn next(&mut self) -> i32 {
        tokio::select! {
            _ = self.interrupt.recv() => libc::SIGINT,
            _ = self.terminate.recv() => libc::SIGTERM,
            _ = self.hangup.recv() => libc::SIGHUP,
            _ = self.quit.recv() => libc::SIGQUIT,
            _ = self.user1.recv() => libc::SIGUSR1,
            _ = self.user2.recv() => libc::SIGUSR2,
        }
    }
}

/// What the user typed, checked before any I/O.
pub(crate) struct Checked {
    owner: Option<Owner>,
}

pub(crate) fn check(args: &RunArgs) -> omnilock::Result<Checked> {
    LockName::new(&args.name)?;
    if let Some(ttl) = args.ttl {
        omnilock::check_ttl(ttl)?;
    }
    let owner = args.owner.as_deref().map(Owner::new).transpose()?;
    Ok(Checked { owner })
}

pub async fn run(store: &str, args: RunArgs) -> u8 {
    // Everything the user typed is checked before any I/O.
    let checked = match check(&args).and_then(|c| omnilock::StoreUrl::parse(store).map(|_| c)) {
        Ok(checked) => checked,
        Err(err) => return fail(&err),
    };
    if let Err(message) = crate::args::prepare_default(store) {
        eprintln!("omnilock: {message}");
        return args.unavailable_exit_code;
    }
    let failed = |err: &omnilock::Error| match exit::code_for(err) {
        exit::UNAVAILABLE => {
            exit::fail(err);
            args.unavailable_exit_code
        }
        _ => fail(err),
    };
    let mut signals = match Signals::install() {
        Ok(signals) => signals,
        Err(err) => {
            eprintln!("omnilock: cannot install signal handlers: {err}");
            return exit::SOFTWARE;
        }
    };
    let locks = tokio::select! {
        locks = omnilock::connect(store) => match locks {
            Ok(locks) => locks,
            Err(err) => return failed(&err),
        },
        signal = signals.next() => return 128 + signal as u8,
    };

    let mut request = locks.lock(&args.name);
    if let Some(ttl) = args.ttl {
        request = request.ttl(ttl);
    }
    if let Some(owner) = &checked.owner {
        request = request.owner(owner);
    }
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
        // Dropping the acquire on a signal leaves nothing behind in the store.
        tokio::select! {
            guard = request.acquire() => guard.map(Some),
            signal = signals.next() => return 128 + signal as u8,
        }
    };
    let guard = match acquired {
        Ok(Some(guard)) => guard,
        Ok(None) => {
            eprintln!("omnilock: lock {:?} is held by another owner", args.name);
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
        Err(err) => return failed(&err),
    };

    let (program, rest) = args.command.split_first().expect("clap requires CMD");
    let env = [
        ("OMNILOCK_TOKEN", guard.token().to_string()),
        ("OMNILOCK_LOCK", args.name.clone()),
    ];
    let mut command = match child::spawn(program, rest, &env) {
        Ok(command) => command,
        Err(err) => {
            eprintln!("omnilock: cannot run {program:?}: {err}");
            let _ = guard.release().await;
            return if err.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            };
        }
    };

    let lost = guard.lost();
    tokio::pin!(lost);
    let status = loop {
        tokio::select! {
            status = command.child.wait() => break status,
            loss = &mut lost => {
                eprintln!("omnilock: {loss}; stopping the command");
                command.stop(LOST_GRACE).await;
                command.finish().await;
                // Says what the store answered, so that scripts (and the
                // tests) see that the stale release touched nothing.
                if let Err(err) = guard.release().await {
                    eprintln!("omnilock: release after the loss: {err}");
                }
                return args.lost_exit_code;
            }
            signal = signals.next() => command.signal(signal),
        }
    };
    command.finish().await;
    let status = match status {
        Ok(status) => status,
        Err(err) => {
            eprintln!("omnilock: lost track of the command: {err}");
            let _ = guard.release().await;
            return exit::SOFTWARE;
        }
    };
    match guard.release().await {
        Ok(()) => exit_status(status),
        Err(err) if matches!(err.kind(), ErrorKind::NotOwner | ErrorKind::LockLost) => {
            eprintln!("omnilock: the lock was lost while the command ran: {err}");
            args.lost_exit_code
        }
        Err(err) => {
            // The command finished under the lock; the lease frees it soon.
            eprintln!("omnilock: warning: {err}");
            exit_status(status)
        }
    }
}

pub async fn break_lock(store: &str, name: &str) -> u8 {
    if let Err(err) = LockName::new(name) {
        return fail(&err);
    }
    let locks = match omnilock::connect(store).await {
        Ok(locks) => locks,
        Err(err) => return fail(&err),
    };
    match locks.break_lock(name).await {
        Ok(true) => {
            eprintln!("omnilock: broke lock {name:?}");
            0
        }
        Ok(false) => {
            eprintln!("omnilock: lock {name:?} was not held");
            0
        }
        Err(err) => fail(&err),
    }
}

fn exit_status(status: ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => code as u8,
        (None, Some(signal)) => 128u8.saturating_add(signal as u8),
        (None, None) => exit::SOFTWARE,
    }
}
