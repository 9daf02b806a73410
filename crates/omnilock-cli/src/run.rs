//! `omnilock run` and `omnilock break`.

use std::process::ExitStatus;
use std::time::Duration;

use omnilock::{ErrorKind, LockName, Owner};
use tokio::process::{Child, Command};
use tokio::signal::unix::{signal, Signal, SignalKind};

use crate::args::RunArgs;
use crate::exit::{self, fail};

/// How long CMD gets to exit after SIGTERM when the lock is lost.
const LOST_GRACE: Duration = Duration::from_secs(10);

struct Signals {
    interrupt: Signal,
    terminate: Signal,
}

impl Signals {
    fn install() -> std::io::Result<Self> {
        Ok(Signals {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
        })
    }

    /// The next SIGINT or SIGTERM, as its number.
    async fn next(&mut self) -> i32 {
        tokio::select! {
            _ = self.interrupt.recv() => libc::SIGINT,
            _ = self.terminate.recv() => libc::SIGTERM,
        }
    }
}

pub async fn run(store: &str, args: RunArgs) -> u8 {
    // Everything the user typed is checked before any I/O.
    if let Err(err) = LockName::new(&args.name) {
        return fail(&err);
    }
    let owner = match args.owner.as_deref().map(Owner::new).transpose() {
        Ok(owner) => owner,
        Err(err) => return fail(&err),
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
            Err(err) => return fail(&err),
        },
        signal = signals.next() => return 128 + signal as u8,
    };

    let mut request = locks.lock(&args.name);
    if let Some(ttl) = args.ttl {
        request = request.ttl(ttl);
    }
    if let Some(owner) = &owner {
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
            return exit::TEMPFAIL;
        }
        Err(err) if err.kind() == ErrorKind::Timeout => {
            eprintln!(
                "omnilock: lock {:?} not acquired within {}",
                args.name,
                humantime::format_duration(args.wait.unwrap_or_default())
            );
            return exit::TEMPFAIL;
        }
        Err(err) => return fail(&err),
    };

    let (program, rest) = args.command.split_first().expect("clap requires CMD");
    let spawned = Command::new(program)
        .args(rest)
        .env("OMNILOCK_TOKEN", guard.token().to_string())
        .env("OMNILOCK_LOCK", &args.name)
        .spawn();
    let mut child = match spawned {
        Ok(child) => child,
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
            status = child.wait() => break status,
            loss = &mut lost => {
                eprintln!("omnilock: {loss}; stopping the command");
                stop(&mut child).await;
                // Says what the store answered, so that scripts (and the
                // tests) see that the stale release touched nothing.
                if let Err(err) = guard.release().await {
                    eprintln!("omnilock: release after the loss: {err}");
                }
                return exit::SOFTWARE;
            }
            signal = signals.next() => forward(&child, signal),
        }
    };
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
            exit::SOFTWARE
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

fn forward(child: &Child, signal: i32) {
    if let Some(pid) = child.id() {
        // SAFETY: kill(2) with a pid we spawned and have not reaped yet.
        unsafe {
            libc::kill(pid as libc::pid_t, signal);
        }
    }
}

/// SIGTERM, then SIGKILL after a grace period.
async fn stop(child: &mut Child) {
    forward(child, libc::SIGTERM);
    if tokio::time::timeout(LOST_GRACE, child.wait())
        .await
        .is_err()
    {
        let _ = child.kill().await;
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
