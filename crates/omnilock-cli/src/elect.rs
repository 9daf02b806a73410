//! `omnilock elect`: campaign for the leadership of an election and run a
//! command while leader (as `etcdctl elect` does), or, with `--listen`,
//! print each leader as it changes.

use std::time::{Duration, SystemTime};

use omnilock::{ErrorKind, LockName, Locks};
use serde_json::json;

use crate::args::ElectArgs;
use crate::exit::{self, fail};
use crate::run::{Holding, Rules, Signals, failed, start, supervise};

/// Campaigns (or listens) as `args` says.
pub(crate) async fn elect(store: &str, args: ElectArgs) -> u8 {
    if let Err(err) = check(&args) {
        return fail(&err);
    }
    if let Err(err) = omnilock::raw::StoreUrl::parse(store) {
        return fail(&err);
    }
    let (locks, mut signals) = match start(store, args.unavailable_exit_code).await {
        Ok(started) => started,
        Err(code) => return code,
    };
    let failure = |err: &omnilock::Error| failed(err, args.unavailable_exit_code);
    if args.listen {
        return listen(&locks, &args, &mut signals).await;
    }
    let value = args
        .value
        .clone()
        .unwrap_or_else(|| omnilock::Owner::random().to_string());
    let election = locks.election(&args.name);
    let mut candidate = election.candidate(&value);
    if let Some(ttl) = args.ttl {
        candidate = candidate.ttl(ttl);
    }
    if let Some(wait) = args.wait {
        candidate = candidate.timeout(wait);
    }
    if args.verbose {
        let name = args.name.clone();
        candidate = candidate.on_wait(move || {
            eprintln!("omnilock: another candidate leads {name:?}; waiting to be elected")
        });
    }
    let campaign = tokio::select! {
        won = candidate.campaign() => won,
        signal = signals.next() => {
            locks.close().await;
            return exit::die_of(signal);
        }
    };
    let leadership = match campaign {
        Ok(leadership) => leadership,
        Err(err) if err.kind() == ErrorKind::Timeout => {
            locks.close().await;
            eprintln!(
                "omnilock: not elected leader of {:?} within {}",
                args.name,
                humantime::format_duration(args.wait.unwrap_or_default())
            );
            return args.conflict_exit_code;
        }
        // Not yet leader: the store's trouble, as for `run`.
        Err(err) if err.kind() == ErrorKind::LockLost => {
            locks.close().await;
            fail(&err);
            return args.unavailable_exit_code;
        }
        Err(err) => {
            locks.close().await;
            return failure(&err);
        }
    };
    if args.verbose {
        eprintln!(
            "omnilock: elected leader of {:?} as {value:?} (term {})",
            args.name,
            leadership.term()
        );
    }
    supervise(
        Holding::Leader(leadership),
        &args.name,
        &args.command,
        &mut signals,
        Rules::exits(args.lost_exit_code, args.unavailable_exit_code),
    )
    .await
}

/// Everything checked before any I/O: the name, the value, the TTL, and a
/// command unless listening.
fn check(args: &ElectArgs) -> omnilock::Result<()> {
    LockName::new(&args.name)?;
    if let Some(value) = &args.value
        && (value.is_empty()
            || value.len() > omnilock::MAX_ELECTION_VALUE_BYTES
            || value.chars().any(char::is_control))
    {
        return Err(omnilock::Error::config(format!(
            "the leader's value must be 1 to {} bytes with no control characters",
            omnilock::MAX_ELECTION_VALUE_BYTES
        )));
    }
    if let Some(ttl) = args.ttl {
        omnilock::AcquireOptions::new().ttl(ttl).check()?;
    }
    if args.listen && args.value.is_some() {
        return Err(omnilock::Error::config(
            "--listen prints the leaders and campaigns with no VALUE; leave it out",
        ));
    }
    match (args.listen, args.command.is_empty()) {
        (true, false) => Err(omnilock::Error::config(
            "--listen prints the leaders and runs no command; leave out `-- CMD`",
        )),
        (false, true) => Err(omnilock::Error::config(
            "give the command to run while leader after `--`, or --listen to print the leaders",
        )),
        _ => Ok(()),
    }
}

/// `--listen`: prints the leader now and at every change until
/// interrupted. Errors a retry may cure are printed and the watch goes on.
async fn listen(locks: &Locks, args: &ElectArgs, signals: &mut Signals) -> u8 {
    let mut observer = locks
        .election(&args.name)
        .with_poll_interval(Duration::from_millis(500))
        .observe();
    loop {
        let change = tokio::select! {
            change = observer.changed() => change,
            _ = signals.next() => return 0,
        };
        let now = SystemTime::now();
        match change {
            Ok(leader) if args.json => println!(
                "{}",
                json!({
                    "at": humantime::format_rfc3339_millis(now).to_string(),
                    "name": args.name,
                    "leader": leader.as_ref().map(|l| l.value.as_str()),
                    "term": leader.as_ref().map(|l| l.term),
                })
            ),
            Ok(Some(leader)) => println!("{} (term {})", leader.value, leader.term),
            Ok(None) => println!("(no leader)"),
            Err(err) if err.is_retryable() => eprintln!("omnilock: {err}; still watching"),
            Err(err) => return fail(&err),
        }
    }
}
