//! The same workloads on every store given, through the same
//! `connect(url)` path applications use; a table on stdout, `results.json`
//! and SVG charts in `--out`.
//!
//! Every input is checked, and every store connected, before the first run:
//! a typo never costs a half-finished benchmark.

use std::fmt;
use std::time::{Duration, Instant};

use clap::ValueEnum;

use omnilock::Locks;
use omnilock_harness::Probe;

use crate::BenchArgs;
use crate::exit::{self, fail};
use crate::peer_runs::{peer_contended_apart, peer_handoff};
use crate::peers::{Peer, PeerProcess};
use crate::report::{charts, json, print_table};
use crate::workloads::{
    MANY_CLIENTS, SHARED_CLIENTS, contended, contended_apart, floor, handoff, herd, many_held,
    many_locks, new_names, rw, semaphore, uncontended,
};

/// The workloads, in the order they run by default. `--workload` is parsed
/// into these (clap's `ValueEnum`: an unknown name is a usage error), and
/// every `match` on them is exhaustive, so a new one cannot fall through to
/// another's code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Workload {
    /// The store's own cheapest lock-like round trip, without omnilock.
    Floor,
    /// Acquire and release of a lock nobody else wants, the same name again
    /// and again.
    Uncontended,
    /// The same with a new name every time (a store whose first use of a
    /// name costs more shows it here).
    NewNames,
    /// Several clients taking turns on one lock.
    Contended,
    /// The same, each client with its own connection (as separate processes).
    ContendedApart,
    /// Many clients over many lock names.
    ManyLocks,
    /// Two clients, each with its own connection: the time from the
    /// holder's release call to the blocked waiter's grant.
    Handoff,
    /// Store requests per hand-off as waiters grow.
    Herd,
    /// 16 clients on a semaphore of 4 permits.
    Semaphore,
    /// 16 clients on a read-write lock, 9 reads in 10.
    Rw,
    /// One process holding many locks: memory and renewal cost per lock.
    ManyHeld,
}

impl fmt::Display for Workload {
    /// The name `--workload` takes (`many-locks`), also used in the table
    /// and `results.json`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let value = self.to_possible_value().expect("no workload is hidden");
        f.write_str(value.get_name())
    }
}

impl serde::Serialize for Workload {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// The row of a peer's run that failed: omnilock's run goes on.
fn failed_peer(
    workload: Workload,
    clients: usize,
    peer: Option<&Peer>,
    err: &omnilock::Error,
) -> Row {
    let mut row = crate::workloads::failed(workload, clients, err);
    row.by = By::Peer(peer.map_or_else(|| "peer".to_string(), Peer::label));
    row
}

/// An executable file.
fn is_program(path: &std::path::Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// One store, connected every way a run measures it.
struct Connected<'a> {
    /// The URL without its password.
    shown: String,
    url: &'a String,
    locks: Locks,
    probe: Option<Probe>,
    peer: Option<Peer>,
}

/// Who made a row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum By {
    Omnilock,
    /// The store's floor, from a bare client.
    Floor,
    /// A peer library (its label).
    Peer(String),
}

/// One result row.
pub(crate) struct Row {
    pub(crate) store: String,
    pub(crate) workload: Workload,
    pub(crate) clients: usize,
    pub(crate) ops: usize,
    pub(crate) per_second: f64,
    /// Latency (uncontended: acquire + release; contended: wait for the
    /// grant; handoff: release → next grant).
    pub(crate) p50: Duration,
    pub(crate) p99: Duration,
    pub(crate) p999: Duration,
    /// Jain's fairness index over the clients' grant counts (contended).
    pub(crate) fairness: Option<f64>,
    /// p50 over the same store's floor p50 (uncontended), in the same run.
    pub(crate) ratio: Option<f64>,
    /// omnilock's p50 over the peer's (uncontended and handoff), in the
    /// same run.
    pub(crate) peer_ratio: Option<f64>,
    /// Who made the row: omnilock, a bare client (the floor) or a peer.
    pub(crate) by: By,
    /// Which repeat of the run (`--repeat`) made this row, from 1.
    pub(crate) run: usize,
    /// Store requests per hand-off, from the store's counters (herd).
    pub(crate) requests: Option<f64>,
    /// What a floor round does, or why a run was skipped.
    pub(crate) note: String,
}

pub(crate) async fn bench(stores: &[String], args: BenchArgs) -> u8 {
    let workloads: Vec<Workload> = if args.workload.is_empty() {
        Workload::value_variants().to_vec()
    } else {
        args.workload.clone()
    };
    // A bad TTL for the many-held locks is refused before anything runs.
    if workloads.contains(&Workload::ManyHeld)
        && let Err(err) = omnilock::raw::check_ttl(args.held_ttl)
    {
        return fail(&err.with_operation(omnilock::Operation::Acquire));
    }
    if let Some(program) = &args.peer_process
        && !is_program(program)
    {
        eprintln!(
            "omnilock-bench: --peer-process {}: not a program that can be run (build it with \
             `cargo build --release` in tools/peer-distributed-lock)",
            program.display()
        );
        return exit::USAGE;
    }
    if args.duration.is_zero() {
        eprintln!("omnilock-bench: --duration must be longer than 0");
        return exit::USAGE;
    }
    // Connect to every store, and open its probe, before running anything.
    let mut connected: Vec<Connected> = Vec::new();
    for url in stores {
        let locks = match omnilock::connect(url).await {
            Ok(locks) => locks,
            Err(err) => return fail(&err),
        };
        let probe = match Probe::connect(url).await {
            Ok(probe) => probe,
            // No floor and no counter (a TLS URL): those rows say so.
            Err(err) if err.kind() == omnilock::ErrorKind::Unsupported => {
                eprintln!("omnilock-bench: {}: {err}", exit::shown(url));
                None
            }
            Err(err) => return fail(&err),
        };
        let peer = match Peer::connect(url).await {
            Ok(_) if args.no_peers => None,
            Ok(peer) => peer,
            Err(err) => return fail(&err),
        };
        connected.push(Connected {
            shown: exit::shown(url),
            url,
            locks,
            probe,
            peer,
        });
    }
    if let Some(out) = &args.out
        && let Err(err) = std::fs::create_dir_all(out)
    {
        eprintln!("omnilock-bench: cannot create {}: {err}", out.display());
        return exit::USAGE;
    }
    let interleaved =
        workloads.contains(&Workload::Floor) && workloads.contains(&Workload::Uncontended);
    let repeats = args.repeat as usize;
    let peer_process = args
        .peer_process
        .clone()
        .filter(|_| !args.no_peers)
        .map(|program| PeerProcess { program });
    let runs: usize = repeats
        * connected
            .iter()
            .map(|Connected { probe, .. }| {
                workloads
                    .iter()
                    .map(|w| match w {
                        Workload::Contended | Workload::ContendedApart => args.clients.len(),
                        Workload::Herd => args.herd_waiters.len(),
                        Workload::ManyHeld => args.held.len(),
                        Workload::Floor if interleaved && probe.is_some() => 0,
                        Workload::Floor
                        | Workload::Uncontended
                        | Workload::NewNames
                        | Workload::ManyLocks
                        | Workload::Handoff
                        | Workload::Semaphore
                        | Workload::Rw => 1,
                    })
                    .sum::<usize>()
            })
            .sum::<usize>();
    let mut done = 0;
    let mut rows = Vec::new();
    let mut failed: Option<u8> = None;
    let tag = std::process::id();
    for (run, store) in (1..=repeats).flat_map(|run| connected.iter().map(move |c| (run, c))) {
        let Connected {
            shown, url, locks, ..
        } = store;
        let (probe, peer) = (store.probe.as_ref(), store.peer.as_ref());
        for &workload in &workloads {
            let client_counts: Vec<usize> = match workload {
                Workload::Contended | Workload::ContendedApart => {
                    args.clients.iter().map(|n| *n as usize).collect()
                }
                Workload::Handoff => vec![2],
                Workload::Herd => args.herd_waiters.iter().map(|n| *n as usize).collect(),
                Workload::ManyHeld => args.held.iter().map(|n| *n as usize).collect(),
                Workload::ManyLocks => vec![MANY_CLIENTS],
                Workload::Semaphore | Workload::Rw => vec![SHARED_CLIENTS],
                Workload::Floor | Workload::Uncontended | Workload::NewNames => vec![1],
            };
            // The floor is then measured interleaved with the uncontended
            // run, so that drift on a shared machine hits both alike.
            if workload == Workload::Floor && interleaved && probe.is_some() {
                continue;
            }
            for clients in client_counts {
                done += 1;
                let label = format!("[{done}/{runs}] {shown}: {workload}, {clients} client(s)");
                let label = if repeats > 1 {
                    format!("{label}, repeat {run}")
                } else {
                    label
                };
                // The herd workload runs until its chain completes, not for
                // the duration.
                let expected = (workload != Workload::Herd).then_some(args.duration);
                let _progress = Progress::start(label, expected);
                let name = format!("omnilock-bench/{tag}/{run}/{workload}/{clients}");
                let one = |row: omnilock::Result<Row>| row.map(|row| vec![row]);
                let result = match workload {
                    Workload::Floor => one(floor(probe, args.duration).await),
                    Workload::Uncontended => {
                        let floor = probe.filter(|_| interleaved);
                        uncontended(locks, &name, args.duration, floor, peer).await
                    }
                    Workload::NewNames => one(new_names(locks, &name, args.duration).await),
                    Workload::Contended => {
                        one(contended(locks, &name, clients, args.duration).await)
                    }
                    Workload::ContendedApart => {
                        let peer_row = match peer {
                            Some(_) => {
                                peer_contended_apart(url, &name, clients, args.duration).await
                            }
                            None => Ok(None),
                        };
                        let peer_row = peer_row.unwrap_or_else(|err| {
                            Some(failed_peer(Workload::ContendedApart, clients, peer, &err))
                        });
                        contended_apart(url, &name, clients, args.duration)
                            .await
                            .map(|row| peer_row.into_iter().chain([row]).collect())
                    }
                    Workload::ManyLocks => one(many_locks(locks, &name, args.duration).await),
                    Workload::Handoff => {
                        let peer_handoff = async {
                            match peer {
                                Some(_) => peer_handoff(url, &name, args.hold, args.duration).await,
                                None => Ok(None),
                            }
                        };
                        let peer_row = peer_handoff.await.unwrap_or_else(|err| {
                            Some(failed_peer(Workload::Handoff, 2, peer, &err))
                        });
                        handoff(url, &name, args.hold, args.duration, probe)
                            .await
                            .map(|rows| peer_row.into_iter().chain(rows).collect())
                    }
                    Workload::Herd => one(herd(locks, probe, &name, clients).await),
                    Workload::Semaphore => one(semaphore(locks, &name, args.duration).await),
                    Workload::Rw => one(rw(locks, &name, args.duration).await),
                    Workload::ManyHeld => match omnilock::connect(url).await {
                        Ok(other) => one(many_held(
                            locks,
                            &other,
                            probe,
                            &name,
                            clients,
                            args.held_ttl,
                            args.duration,
                        )
                        .await),
                        Err(err) => Err(err),
                    },
                };
                // The peer that runs as a process of its own: after
                // omnilock's run, in the same repeat.
                let result = match (&peer_process, workload) {
                    (Some(process), Workload::Uncontended | Workload::Handoff)
                        if PeerProcess::serves(url) =>
                    {
                        let extra = process.row(workload, url, args.duration, args.hold).await;
                        result.map(|mut rows| {
                            rows.push(extra);
                            rows
                        })
                    }
                    _ => result,
                };
                // A run that fails (a store that stalls under 64 new
                // sessions, say) is a row saying why, and the other runs go
                // on: an hour of results is not thrown away for one. The
                // exit status still tells.
                let new = result.unwrap_or_else(|err| {
                    eprintln!(
                        "omnilock-bench: {shown}: {workload}, {clients} client(s) failed: {err}"
                    );
                    failed.get_or_insert(exit::code_for(&err));
                    vec![crate::workloads::failed(workload, clients, &err)]
                });
                rows.extend(new.into_iter().map(|mut row| {
                    row.store = shown.clone();
                    row.run = run;
                    row
                }));
            }
        }
    }
    ratios(&mut rows);
    print_table(&rows);
    if let Some(out) = &args.out {
        let path = out.join("results.json");
        if let Err(err) = std::fs::write(&path, json(&rows)) {
            eprintln!("omnilock-bench: cannot write {}: {err}", path.display());
            return exit::SOFTWARE;
        }
        eprintln!("omnilock-bench: wrote {}", path.display());
        for (file, svg) in charts(&rows) {
            let path = out.join(file);
            if let Err(err) = std::fs::write(&path, svg) {
                eprintln!("omnilock-bench: cannot write {}: {err}", path.display());
                return exit::SOFTWARE;
            }
            eprintln!("omnilock-bench: wrote {}", path.display());
        }
    }
    failed.unwrap_or(0)
}

/// Each store's uncontended p50 (omnilock's and the peer's) as a ratio of
/// its own floor, and omnilock's uncontended and hand-off p50 as a ratio of
/// the peer's: always between rows of the same repeat.
fn ratios(rows: &mut [Row]) {
    let p50_of = |rows: &[Row], r: &Row, workload: Workload, peer: bool| {
        rows.iter()
            .find(|o| {
                o.store == r.store
                    && o.run == r.run
                    && o.workload == workload
                    && matches!(o.by, By::Peer(_)) == peer
                    && o.ops > 0
            })
            .map(|o| o.p50.as_secs_f64().max(1e-9))
    };
    let ratios: Vec<(Option<f64>, Option<f64>)> = rows
        .iter()
        .map(|r| {
            let p50 = r.p50.as_secs_f64();
            let floor = (r.workload == Workload::Uncontended)
                .then(|| p50_of(rows, r, Workload::Floor, false))
                .flatten();
            let peer = (r.by == By::Omnilock
                && matches!(r.workload, Workload::Uncontended | Workload::Handoff))
            .then(|| p50_of(rows, r, r.workload, true))
            .flatten();
            (floor.map(|f| p50 / f), peer.map(|p| p50 / p))
        })
        .collect();
    for (r, (floor, peer)) in rows.iter_mut().zip(ratios) {
        r.ratio = floor;
        r.peer_ratio = peer;
    }
}

/// A progress bar on standard error while one run executes: redrawn in place
/// on a terminal, one line per run otherwise (logs, CI). Stops when dropped.
struct Progress {
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Progress {
    fn start(label: String, expected: Option<Duration>) -> Progress {
        use std::io::{IsTerminal, Write};
        if !std::io::stderr().is_terminal() {
            eprintln!("{label}");
            return Progress { task: None };
        }
        let started = Instant::now();
        let task = tokio::spawn(async move {
            loop {
                let elapsed = started.elapsed();
                let bar = match expected {
                    Some(total) => {
                        let done = (elapsed.as_secs_f64() / total.as_secs_f64().max(1e-9)).min(1.0);
                        let filled = (done * 30.0).round() as usize;
                        format!(
                            "{}{} {:>3.0}%",
                            "█".repeat(filled),
                            "░".repeat(30 - filled),
                            done * 100.0
                        )
                    }
                    None => format!("{:.1} s", elapsed.as_secs_f64()),
                };
                {
                    let mut err = std::io::stderr().lock();
                    let _ = write!(err, "\r\x1b[2K{label} {bar}");
                    let _ = err.flush();
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        });
        Progress { task: Some(task) }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
            eprintln!();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workloads_are_named_as_the_flag_takes_them() {
        let names: Vec<String> = Workload::value_variants()
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            names,
            [
                "floor",
                "uncontended",
                "new-names",
                "contended",
                "contended-apart",
                "many-locks",
                "handoff",
                "herd",
                "semaphore",
                "rw",
                "many-held"
            ]
        );
    }
}
