//! The operator's commands: `status`, `ls`, `watch` and `break`. They read
//! (or, `break`, remove) what the store holds, for every process and
//! machine, and print it for a person or, with `--json`, for a script.
//!
//! The JSON shapes are stable: fields may be added, none renamed or
//! removed. docs/semantics.md ("Seeing who holds what") shows them.

use std::time::{Duration, SystemTime};

use omnilock::{Inspection, LockKind, LockName, Locks, Owner};
use serde_json::{Value, json};

use crate::args::{BreakArgs, KindArg, LsArgs, StatusArgs, WatchArgs};
use crate::exit::fail;

/// Connects to `store` after checking `name` (no I/O for a bad name).
async fn connect(store: &str, name: Option<&str>) -> Result<Locks, u8> {
    if let Some(name) = name
        && let Err(err) = LockName::new(name)
    {
        return Err(fail(&err));
    }
    omnilock::connect(store).await.map_err(|err| fail(&err))
}

/// The kinds `kind` selects that the store offers: one, or all offered.
fn kinds(locks: &Locks, kind: Option<KindArg>) -> Vec<LockKind> {
    let caps = locks.capabilities();
    match kind {
        Some(kind) => vec![kind.into()],
        None => LockKind::ALL
            .into_iter()
            .filter(|kind| match kind {
                LockKind::Semaphore => caps.semaphore,
                LockKind::RwLock => caps.rw_lock,
                _ => true,
            })
            .collect(),
    }
}

/// Inspects each of `kinds` of `name`.
async fn inspect_all(
    locks: &Locks,
    name: &str,
    kinds: &[LockKind],
) -> omnilock::Result<Vec<Inspection>> {
    let mut seen = Vec::with_capacity(kinds.len());
    for kind in kinds {
        seen.push(locks.inspect(name, *kind).await?);
    }
    Ok(seen)
}

/// `omnilock status NAME`: who holds NAME's locks and who waits.
pub(crate) async fn status(store: &str, args: StatusArgs) -> u8 {
    let locks = match connect(store, Some(&args.name)).await {
        Ok(locks) => locks,
        Err(code) => return code,
    };
    let kinds = kinds(&locks, args.kind);
    // A store that cannot report holders may still keep the job's record.
    let seen = match inspect_all(&locks, &args.name, &kinds).await {
        Err(err) if err.kind() != omnilock::ErrorKind::Unsupported => return fail(&err),
        seen => seen,
    };
    // The job's `--once-per` record, where the store keeps records.
    let record = if locks.capabilities().records && args.kind.is_none() {
        match locks.read_record(&args.name).await {
            Ok(record) => record,
            Err(err) => return fail(&err),
        }
    } else {
        None
    };
    let now = SystemTime::now();
    let record_line = record.as_ref().map(|record| {
        let left = record
            .left
            .map_or(String::new(), |left| format!(", kept {} more", short(left)));
        format!("--once-per record: {}{left}", record.value)
    });
    let seen = match seen {
        Ok(seen) => seen,
        Err(unsupported) => {
            if let Some(line) = record_line.filter(|_| !args.json) {
                println!("{line}");
            }
            return fail(&unsupported);
        }
    };
    if args.json {
        let mut shown = status_json(&locks, &args.name, &seen, now);
        shown["record"] = record.as_ref().map_or(
            Value::Null,
            |record| json!({"value": record.value, "left_ms": record.left.map(millis)}),
        );
        println!("{shown}");
    } else {
        print!("{}", status_text(&args.name, &seen, now));
        if let Some(line) = record_line {
            println!("{line}");
        }
    }
    0
}

/// `omnilock ls [PREFIX]`: the held locks under PREFIX.
pub(crate) async fn ls(store: &str, args: LsArgs) -> u8 {
    if !args.prefix.is_empty()
        && let Err(err) = LockName::new(&args.prefix)
    {
        return fail(&err);
    }
    let locks = match connect(store, None).await {
        Ok(locks) => locks,
        Err(code) => return code,
    };
    let listed = match locks.list(&args.prefix).await {
        Ok(listed) => listed,
        Err(err) => return fail(&err),
    };
    if !args.long && !args.json {
        for lock in &listed {
            println!("{:<9} {}", lock.kind, lock.name);
        }
        return 0;
    }
    let mut seen = Vec::with_capacity(listed.len());
    if args.long {
        for lock in &listed {
            match locks.inspect(&lock.name, lock.kind).await {
                Ok(inspection) => seen.push(Some(inspection)),
                Err(err) => return fail(&err),
            }
        }
    } else {
        seen.resize(listed.len(), None);
    }
    let now = SystemTime::now();
    if args.json {
        let entries: Vec<Value> = listed
            .iter()
            .zip(&seen)
            .map(|(lock, seen)| match seen {
                Some(seen) => inspection_json(seen, now),
                None => json!({"name": lock.name, "kind": lock.kind.as_str()}),
            })
            .collect();
        println!(
            "{}",
            json!({"store": locks.backend_kind(), "locks": entries})
        );
    } else {
        for seen in seen.iter().flatten() {
            println!("{:<9} {}  {}", seen.kind, seen.name, summary(seen, now));
        }
    }
    0
}

/// `omnilock watch NAME`: the state now, then each change, until
/// interrupted.
pub(crate) async fn watch(store: &str, args: WatchArgs) -> u8 {
    let locks = match connect(store, Some(&args.name)).await {
        Ok(locks) => locks,
        Err(code) => return code,
    };
    let kinds = kinds(&locks, args.kind);
    let mut last: Option<Vec<Key>> = None;
    // Installed once, before the first read: a Ctrl-C at any moment (a
    // read that hangs on a stalled store included) ends the watch with 0.
    let mut interrupted = match Interrupted::install() {
        Ok(interrupted) => interrupted,
        Err(err) => {
            eprintln!("omnilock: cannot install signal handlers: {err}");
            return crate::exit::SOFTWARE;
        }
    };
    loop {
        let seen = tokio::select! {
            seen = inspect_all(&locks, &args.name, &kinds) => seen,
            _ = interrupted.next() => return 0,
        };
        let seen = match seen {
            Ok(seen) => seen,
            // A store that is down for a moment: say so and keep watching.
            Err(err) if err.is_retryable() => {
                eprintln!("omnilock: {err}; still watching");
                last = None;
                tokio::select! {
                    _ = tokio::time::sleep(args.interval) => continue,
                    _ = interrupted.next() => return 0,
                }
            }
            Err(err) => return fail(&err),
        };
        let key: Vec<Key> = seen.iter().map(Key::of).collect();
        if last.as_ref() != Some(&key) {
            let now = SystemTime::now();
            if args.json {
                let mut line = status_json(&locks, &args.name, &seen, now);
                line["at"] = json!(humantime::format_rfc3339_millis(now).to_string());
                println!("{line}");
            } else {
                println!("{}", humantime::format_rfc3339_seconds(now));
                print!("{}", status_text(&args.name, &seen, now));
            }
            last = Some(key);
        }
        tokio::select! {
            _ = tokio::time::sleep(args.interval) => {}
            _ = interrupted.next() => return 0,
        }
    }
}

/// SIGINT or SIGTERM, which end `watch` cleanly.
struct Interrupted(tokio::signal::unix::Signal, tokio::signal::unix::Signal);

impl Interrupted {
    fn install() -> std::io::Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Interrupted(
            signal(SignalKind::interrupt())?,
            signal(SignalKind::terminate())?,
        ))
    }

    async fn next(&mut self) {
        tokio::select! {
            _ = self.0.recv() => {}
            _ = self.1.recv() => {}
        }
    }
}

/// `omnilock break NAME`: removes the mutex's holder, or a semaphore's
/// permits or a read-write lock's holds, whatever their owner.
pub(crate) async fn break_holds(store: &str, args: BreakArgs) -> u8 {
    let owner = match args.owner.as_deref().map(Owner::new).transpose() {
        Ok(owner) => owner,
        Err(err) => return fail(&err),
    };
    let locks = match connect(store, Some(&args.name)).await {
        Ok(locks) => locks,
        Err(code) => return code,
    };
    if args.record {
        return match locks.delete_record(&args.name).await {
            Ok(true) => {
                eprintln!(
                    "omnilock: deleted the --once-per record of {:?}; the job may run again",
                    args.name
                );
                0
            }
            Ok(false) => {
                eprintln!("omnilock: {:?} had no --once-per record", args.name);
                0
            }
            Err(err) => fail(&err),
        };
    }
    let kind = args.kind.map_or(LockKind::Mutex, LockKind::from);
    let what = describe(kind, &args.name);
    let whose = owner
        .as_ref()
        .map_or(String::new(), |owner| format!(" of {owner}"));
    match locks.break_holds(&args.name, kind, owner.as_ref()).await {
        Ok(0) => {
            eprintln!("omnilock: {what} had no holds{whose}; nothing broken");
            if args.kind.is_none() {
                hint_other_kinds(&locks, &args.name).await;
            }
            0
        }
        Ok(broken) => {
            let holds = if broken == 1 { "hold" } else { "holds" };
            eprintln!("omnilock: broke {broken} {holds}{whose} of {what}");
            0
        }
        Err(err) => fail(&err),
    }
}

/// After a `break` of a free mutex: says which other kind of NAME is held,
/// so that an operator who meant the semaphore is not told all is well.
async fn hint_other_kinds(locks: &Locks, name: &str) {
    if !locks.capabilities().inspect {
        return;
    }
    for kind in kinds(locks, None) {
        if kind == LockKind::Mutex {
            continue;
        }
        if let Ok(seen) = locks.inspect(name, kind).await
            && !seen.is_free()
        {
            let flag = match kind {
                LockKind::Semaphore => "semaphore",
                _ => "rw",
            };
            eprintln!(
                "omnilock: {} has {} holder(s); break them with --kind {flag}",
                describe(kind, name),
                seen.holders.len()
            );
        }
    }
}

fn describe(kind: LockKind, name: &str) -> String {
    match kind {
        LockKind::Semaphore => format!("semaphore {name:?}"),
        LockKind::RwLock => format!("read-write lock {name:?}"),
        _ => format!("lock {name:?}"),
    }
}

/// What `watch` compares: who holds and who waits, not the lease left.
#[derive(PartialEq)]
struct Key {
    holders: Vec<(String, u64, &'static str)>,
    waiters: Option<Vec<(Option<String>, &'static str)>>,
}

impl Key {
    fn of(seen: &Inspection) -> Key {
        Key {
            holders: seen
                .holders
                .iter()
                .map(|h| (h.owner.to_string(), h.token, h.side.as_str()))
                .collect(),
            waiters: seen.waiters.as_ref().map(|waiters| {
                waiters
                    .iter()
                    .map(|w| (w.owner.as_ref().map(Owner::to_string), w.side.as_str()))
                    .collect()
            }),
        }
    }
}

/// The text `status` and `watch` print: one block per kind in use, or one
/// line saying the name is free.
fn status_text(name: &str, seen: &[Inspection], now: SystemTime) -> String {
    let mut out = String::new();
    let used: Vec<&Inspection> = seen
        .iter()
        .filter(|s| !s.is_free() || s.waiters.as_ref().is_some_and(|w| !w.is_empty()))
        .collect();
    if used.is_empty() {
        out.push_str(&format!("{name}: free\n"));
        return out;
    }
    for seen in used {
        out.push_str(&format!(
            "{} ({}): {}\n",
            seen.name,
            seen.kind,
            summary(seen, now)
        ));
        for held in &seen.holders {
            out.push_str(&format!(
                "  {:<9} {}  token {}{}{}\n",
                held.side,
                held.owner,
                held.token,
                held.since.map_or(String::new(), |since| format!(
                    "  held {}",
                    short(now.duration_since(since).unwrap_or_default())
                )),
                held.lease_left.map_or(String::new(), |left| format!(
                    "  lease {} left",
                    short(left)
                )),
            ));
        }
        for (place, waiter) in seen.waiters.iter().flatten().enumerate() {
            let owner = waiter
                .owner
                .as_ref()
                .map_or("(owner not recorded)".to_string(), Owner::to_string);
            let label = if seen.waiters_ordered {
                format!("in line {}", place + 1)
            } else {
                "waiting".to_string()
            };
            out.push_str(&format!("  {label:<9} {:<9} {owner}\n", waiter.side));
        }
        if !seen.exact {
            out.push_str("  (estimated: the store's nodes may disagree)\n");
        }
    }
    out
}

/// One line: who holds, how many wait.
fn summary(seen: &Inspection, _now: SystemTime) -> String {
    let holders = match (seen.kind, seen.permits) {
        (LockKind::Semaphore, Some(permits)) => {
            format!("{} of {permits} permits held", seen.holders.len())
        }
        _ if seen.holders.is_empty() => "free".to_string(),
        (LockKind::Mutex, _) => format!("held by {}", seen.holders[0].owner),
        _ => {
            let writer = seen.holders.iter().any(|h| h.side == omnilock::Side::Write);
            if writer {
                "write-locked".to_string()
            } else {
                format!("{} reader(s)", seen.holders.len())
            }
        }
    };
    let waiting = match &seen.waiters {
        Some(waiters) => format!("{} waiting", waiters.len()),
        None => "waiters not recorded by this store".to_string(),
    };
    format!("{holders}, {waiting}")
}

/// A duration as an operator reads it: `3m12s`, `850ms`.
fn short(duration: Duration) -> String {
    if duration < Duration::from_secs(1) {
        return format!("{}ms", duration.as_millis());
    }
    humantime::format_duration(Duration::from_secs(duration.as_secs())).to_string()
}

/// The JSON of `status` (and each line of `watch --json`).
fn status_json(locks: &Locks, name: &str, seen: &[Inspection], now: SystemTime) -> Value {
    json!({
        "name": name,
        "store": locks.backend_kind(),
        "locks": seen.iter().map(|s| inspection_json(s, now)).collect::<Vec<_>>(),
    })
}

/// One inspection as JSON: times as RFC 3339 and milliseconds, absent
/// values as `null`.
fn inspection_json(seen: &Inspection, now: SystemTime) -> Value {
    let holders: Vec<Value> = seen
        .holders
        .iter()
        .map(|held| {
            json!({
                "owner": held.owner.as_str(),
                "token": held.token,
                "side": held.side.as_str(),
                "since": held.since.map(|t| humantime::format_rfc3339_millis(t).to_string()),
                "held_ms": held.since.map(|t| millis(now.duration_since(t).unwrap_or_default())),
                "lease_left_ms": held.lease_left.map(millis),
            })
        })
        .collect();
    let waiters: Option<Vec<Value>> = seen.waiters.as_ref().map(|waiters| {
        waiters
            .iter()
            .map(|w| json!({"owner": w.owner.as_ref().map(Owner::as_str), "side": w.side.as_str()}))
            .collect()
    });
    json!({
        "name": seen.name,
        "kind": seen.kind.as_str(),
        "permits": seen.permits,
        "free_permits": seen.free_permits(),
        "holders": holders,
        "waiters": waiters,
        "waiters_ordered": seen.waiters_ordered,
        "exact": seen.exact,
    })
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

impl From<KindArg> for LockKind {
    fn from(kind: KindArg) -> LockKind {
        match kind {
            KindArg::Mutex => LockKind::Mutex,
            KindArg::Semaphore => LockKind::Semaphore,
            KindArg::Rw => LockKind::RwLock,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_durations_read_as_an_operator_would() {
        assert_eq!(short(Duration::from_millis(850)), "850ms");
        assert_eq!(short(Duration::from_secs(192)), "3m 12s");
        assert_eq!(short(Duration::from_millis(1_999)), "1s");
    }

    #[test]
    fn exit_code_of_a_bad_kind_is_usage() {
        let err = "queue".parse::<LockKind>().unwrap_err();
        assert_eq!(crate::exit::code_for(&err), crate::exit::USAGE);
    }
}
