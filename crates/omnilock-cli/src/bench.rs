//! `omnilock bench`: the same workloads on every store given, through the
//! same `connect(url)` path applications use; a table on stdout,
//! `results.json` and SVG charts in `--out`.
//!
//! Every input is checked, and every store connected, before the first run:
//! a typo never costs a half-finished benchmark.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::ValueEnum;
use omnilock::Locks;

use crate::args::BenchArgs;
use crate::exit::{self, fail};
use crate::plots;

/// The workloads, in the order they run by default. `--workload` is parsed
/// into these (clap's `ValueEnum`: an unknown name is a usage error), and
/// every `match` on them is exhaustive, so a new one cannot fall through to
/// another's code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Workload {
    /// The store's own cheapest lock-like round trip, without omnilock.
    Floor,
    /// Acquire and release of a lock nobody else wants.
    Uncontended,
    /// Several clients taking turns on one lock.
    Contended,
    /// Many clients over many lock names.
    ManyLocks,
    /// Release → next waiter's grant latency.
    Handoff,
    /// Store requests per hand-off as waiters grow.
    Herd,
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

/// Clients of the many-locks workload, and the names they spread over.
const MANY_CLIENTS: usize = 64;
const MANY_NAMES: usize = 10_000;
/// How long a herd chain may take before the run reports it stuck.
const HERD_LIMIT: Duration = Duration::from_secs(60);

/// One result row.
struct Row {
    store: String,
    workload: Workload,
    clients: usize,
    ops: usize,
    per_second: f64,
    /// Latency (uncontended: acquire + release; contended: wait for the
    /// grant; handoff: release → next grant).
    p50: Duration,
    p99: Duration,
    p999: Duration,
    /// Jain's fairness index over the clients' grant counts (contended).
    fairness: Option<f64>,
    /// p50 over the same store's floor p50 (uncontended).
    ratio: Option<f64>,
    /// Store requests per hand-off, from the store's counters (herd).
    requests: Option<f64>,
    /// What a floor round does, or why a run was skipped.
    note: String,
}

pub async fn bench(stores: &[String], args: BenchArgs) -> u8 {
    let workloads: Vec<Workload> = if args.workload.is_empty() {
        Workload::value_variants().to_vec()
    } else {
        args.workload.clone()
    };
    // Connect to every store before running anything.
    let mut connected = Vec::new();
    for url in stores {
        match omnilock::connect(url).await {
            Ok(locks) => connected.push((exit::shown(url), locks)),
            Err(err) => return fail(&err),
        }
    }
    if let Some(out) = &args.out {
        if let Err(err) = std::fs::create_dir_all(out) {
            eprintln!("omnilock: cannot create {}: {err}", out.display());
            return exit::USAGE;
        }
    }
    let interleaved =
        workloads.contains(&Workload::Floor) && workloads.contains(&Workload::Uncontended);
    let runs: usize = connected
        .iter()
        .map(|(_, locks)| {
            workloads
                .iter()
                .map(|w| match w {
                    Workload::Contended => args.clients.len(),
                    Workload::Herd => args.herd_waiters.len(),
                    Workload::Floor if interleaved && locks.measure().is_some() => 0,
                    Workload::Floor
                    | Workload::Uncontended
                    | Workload::ManyLocks
                    | Workload::Handoff => 1,
                })
                .sum::<usize>()
        })
        .sum();
    let mut done = 0;
    let mut rows = Vec::new();
    let tag = std::process::id();
    for (shown, locks) in &connected {
        for &workload in &workloads {
            let client_counts: Vec<usize> = match workload {
                Workload::Contended => args.clients.iter().map(|n| *n as usize).collect(),
                Workload::Handoff => vec![args.waiters as usize],
                Workload::Herd => args.herd_waiters.iter().map(|n| *n as usize).collect(),
                Workload::ManyLocks => vec![MANY_CLIENTS],
                Workload::Floor | Workload::Uncontended => vec![1],
            };
            // The floor is then measured interleaved with the uncontended
            // run, so that drift on a shared machine hits both alike.
            if workload == Workload::Floor && interleaved && locks.measure().is_some() {
                continue;
            }
            for clients in client_counts {
                done += 1;
                let label = format!("[{done}/{runs}] {shown}: {workload}, {clients} client(s)");
                // The herd workload runs until its chain completes, not for
                // the duration.
                let expected = (workload != Workload::Herd).then_some(args.duration);
                let _progress = Progress::start(label, expected);
                let name = format!("omnilock-bench/{tag}/{workload}/{clients}");
                let one = |row: omnilock::Result<Row>| row.map(|row| vec![row]);
                let result = match workload {
                    Workload::Floor => one(floor(locks, args.duration).await),
                    Workload::Uncontended => {
                        uncontended(locks, &name, args.duration, interleaved).await
                    }
                    Workload::Contended => {
                        one(contended(locks, &name, clients, args.duration).await)
                    }
                    Workload::ManyLocks => one(many_locks(locks, &name, args.duration).await),
                    Workload::Handoff => one(handoff(locks, &name, clients, args.duration).await),
                    Workload::Herd => one(herd(locks, &name, clients).await),
                };
                match result {
                    Ok(new) => rows.extend(new.into_iter().map(|mut row| {
                        row.store = shown.clone();
                        row
                    })),
                    Err(err) => return fail(&err),
                }
            }
        }
    }
    // Each store's uncontended p50 as a ratio of its own floor.
    let floors: Vec<(String, Duration)> = rows
        .iter()
        .filter(|r| r.workload == Workload::Floor && r.ops > 0)
        .map(|r| (r.store.clone(), r.p50))
        .collect();
    for r in rows
        .iter_mut()
        .filter(|r| r.workload == Workload::Uncontended)
    {
        if let Some((_, floor)) = floors.iter().find(|(s, _)| *s == r.store) {
            r.ratio = Some(r.p50.as_secs_f64() / floor.as_secs_f64().max(1e-9));
        }
    }
    print_table(&rows);
    if let Some(out) = &args.out {
        let path = out.join("results.json");
        if let Err(err) = std::fs::write(&path, json(&rows)) {
            eprintln!("omnilock: cannot write {}: {err}", path.display());
            return exit::SOFTWARE;
        }
        eprintln!("omnilock: wrote {}", path.display());
        for (file, svg) in charts(&rows) {
            let path = out.join(file);
            if let Err(err) = std::fs::write(&path, svg) {
                eprintln!("omnilock: cannot write {}: {err}", path.display());
                return exit::SOFTWARE;
            }
            eprintln!("omnilock: wrote {}", path.display());
        }
    }
    0
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

/// The SVG charts of a run: one per workload that produced rows.
fn charts(rows: &[Row]) -> Vec<(&'static str, String)> {
    let mut stores: Vec<&str> = Vec::new();
    for r in rows {
        if !stores.contains(&r.store.as_str()) {
            stores.push(&r.store);
        }
    }
    let find = |store: &str, workload: Workload| {
        rows.iter()
            .find(move |r| r.store == store && r.workload == workload && r.ops > 0)
    };
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let mut charts = Vec::new();
    let latency: Vec<(String, Vec<f64>)> = stores
        .iter()
        .filter_map(|s| {
            let lock = find(s, Workload::Uncontended)?;
            let floor = find(s, Workload::Floor).map_or(0.0, |f| ms(f.p50));
            Some((s.to_string(), vec![floor, ms(lock.p50), ms(lock.p99)]))
        })
        .collect();
    if !latency.is_empty() {
        let series = ["store floor p50", "omnilock p50", "omnilock p99"].map(String::from);
        charts.push((
            "uncontended.svg",
            plots::bars("Uncontended acquire + release", "ms", &series, &latency),
        ));
    }
    let by_clients = |workload: Workload, value: &dyn Fn(&Row) -> Option<f64>| {
        stores
            .iter()
            .map(|s| plots::Series {
                name: s.to_string(),
                points: rows
                    .iter()
                    .filter(|r| r.store == *s && r.workload == workload && r.ops > 0)
                    .filter_map(|r| Some((r.clients as f64, value(r)?)))
                    .collect(),
            })
            .filter(|s| !s.points.is_empty())
            .collect::<Vec<_>>()
    };
    let contended = by_clients(Workload::Contended, &|r| Some(r.per_second));
    if !contended.is_empty() {
        charts.push((
            "contended.svg",
            plots::lines(
                "Contended: one lock",
                "clients",
                "grants per second",
                &contended,
                true,
            ),
        ));
    }
    let herd = by_clients(Workload::Herd, &|r| r.requests);
    if !herd.is_empty() {
        charts.push((
            "herd.svg",
            plots::lines(
                "Store requests per hand-off (flat = no herd)",
                "waiters",
                "requests per hand-off",
                &herd,
                true,
            ),
        ));
    }
    let handoff: Vec<(String, Vec<f64>)> = stores
        .iter()
        .filter_map(|s| {
            let r = find(s, Workload::Handoff)?;
            Some((s.to_string(), vec![ms(r.p50), ms(r.p99)]))
        })
        .collect();
    if !handoff.is_empty() {
        let series = ["p50", "p99"].map(String::from);
        charts.push((
            "handoff.svg",
            plots::bars("Hand-off: release → next grant", "ms", &series, &handoff),
        ));
    }
    let many: Vec<(String, Vec<f64>)> = stores
        .iter()
        .filter_map(|s| {
            Some((
                s.to_string(),
                vec![find(s, Workload::ManyLocks)?.per_second],
            ))
        })
        .collect();
    if !many.is_empty() {
        charts.push((
            "many-locks.svg",
            plots::bars(
                "64 clients over 10,000 locks",
                "grants per second",
                &["grants/s".to_string()],
                &many,
            ),
        ));
    }
    charts
}

/// The raw store operations the backend's algorithm needs, made with the
/// same client library and connection ([`omnilock::Measure`]).
async fn floor(locks: &Locks, duration: Duration) -> omnilock::Result<Row> {
    let Some(measure) = locks.measure() else {
        return Ok(skipped(Workload::Floor, 1, "no floor hook for this store"));
    };
    let started = Instant::now();
    let mut samples = Vec::new();
    while started.elapsed() < duration {
        let at = Instant::now();
        measure.floor_round().await?;
        samples.push(at.elapsed());
    }
    let mut row = row(Workload::Floor, 1, samples, started.elapsed(), None);
    row.note = measure.floor_ops().to_string();
    Ok(row)
}

/// 64 clients over 10,000 names: grants per second when locks rarely collide.
async fn many_locks(locks: &Locks, name: &str, duration: Duration) -> omnilock::Result<Row> {
    let samples = Arc::new(Mutex::new(Vec::new()));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for client in 0..MANY_CLIENTS {
        let (locks, name, samples) = (locks.clone(), name.to_string(), samples.clone());
        tasks.push(tokio::spawn(async move {
            let mut i = client * 7919;
            while started.elapsed() < duration {
                i = (i + 104_729) % MANY_NAMES;
                let at = Instant::now();
                let Some(guard) =
                    until(started + duration, locks.acquire(&format!("{name}/{i}"))).await?
                else {
                    break;
                };
                samples.lock().unwrap().push(at.elapsed());
                guard.release().await?;
            }
            Ok::<_, omnilock::Error>(())
        }));
    }
    join(tasks).await?;
    let elapsed = started.elapsed();
    let samples = std::mem::take(&mut *samples.lock().unwrap());
    Ok(row(
        Workload::ManyLocks,
        MANY_CLIENTS,
        samples,
        elapsed,
        None,
    ))
}

/// Store requests per hand-off along a chain of `waiters` queued
/// acquisitions, from the store's own counters: flat in the number of
/// waiters means no herd.
async fn herd(locks: &Locks, name: &str, waiters: usize) -> omnilock::Result<Row> {
    let Some(measure) = locks.measure() else {
        return Ok(skipped(
            Workload::Herd,
            waiters,
            "no request counter for this store",
        ));
    };
    if let Err(err) = measure.requests_served().await {
        if err.kind() == omnilock::ErrorKind::Unsupported {
            return Ok(skipped(
                Workload::Herd,
                waiters,
                "no request counter for this store",
            ));
        }
        return Err(err);
    }
    let ttl = Duration::from_secs(60);
    let holder = locks.lock(name).ttl(ttl).acquire().await?;
    let mut chain = Vec::new();
    for _ in 0..waiters {
        let (queued_tx, queued_rx) = tokio::sync::oneshot::channel();
        let (locks, name) = (locks.clone(), name.to_string());
        chain.push(tokio::spawn(async move {
            let guard = locks
                .lock(&name)
                .ttl(ttl)
                .on_wait(move || {
                    let _ = queued_tx.send(());
                })
                .acquire()
                .await?;
            guard.release().await
        }));
        let _ = queued_rx.await;
    }
    // Count from the moment the store is quiet (waiters finish setting up
    // their watches after they report waiting).
    let mut start = measure.requests_served().await?;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = measure.requests_served().await?;
        if now == start {
            break;
        }
        start = now;
    }
    let started = Instant::now();
    holder.release().await?;
    let aborts: Vec<_> = chain.iter().map(|t| t.abort_handle()).collect();
    if tokio::time::timeout(HERD_LIMIT, join(chain)).await.is_err() {
        // A stuck chain is a finding, not a reason to hang the whole run.
        aborts.iter().for_each(|a| a.abort());
        return Ok(skipped(
            Workload::Herd,
            waiters,
            &format!("the chain of hand-offs did not finish within {HERD_LIMIT:?}"),
        ));
    }
    let elapsed = started.elapsed();
    let end = measure.requests_served().await?;
    let mut row = row(Workload::Herd, waiters, Vec::new(), elapsed, None);
    row.ops = waiters;
    row.per_second = waiters as f64 / elapsed.as_secs_f64().max(1e-9);
    row.requests = Some(end.saturating_sub(start) as f64 / waiters as f64);
    Ok(row)
}

/// An acquisition cut off by the end of the run (`None`) is not counted:
/// on an unfair store a starved client would otherwise hold the run open.
async fn until(
    end: Instant,
    acquire: impl std::future::Future<Output = omnilock::Result<omnilock::LockGuard>>,
) -> omnilock::Result<Option<omnilock::LockGuard>> {
    match tokio::time::timeout_at(tokio::time::Instant::from_std(end), acquire).await {
        Ok(guard) => guard.map(Some),
        Err(_) => Ok(None),
    }
}

fn skipped(workload: Workload, clients: usize, why: &str) -> Row {
    let mut row = row(workload, clients, Vec::new(), Duration::from_secs(1), None);
    row.note = why.to_string();
    row
}

async fn join(tasks: Vec<tokio::task::JoinHandle<omnilock::Result<()>>>) -> omnilock::Result<()> {
    for task in tasks {
        task.await
            .map_err(|e| omnilock::Error::new(omnilock::ErrorKind::Backend, e.to_string()))??;
    }
    Ok(())
}

/// One client, acquire + release on a fresh name each time. With
/// `with_floor`, batches of the store's floor round alternate with batches of
/// acquire + release, and both rows come back: the p50/floor ratio then
/// compares samples taken in the same minutes.
async fn uncontended(
    locks: &Locks,
    name: &str,
    duration: Duration,
    with_floor: bool,
) -> omnilock::Result<Vec<Row>> {
    const BATCH: usize = 20;
    let measure = locks.measure().filter(|_| with_floor);
    let started = Instant::now();
    let (mut samples, mut floor_samples) = (Vec::new(), Vec::new());
    let (mut lock_time, mut floor_time) = (Duration::ZERO, Duration::ZERO);
    while started.elapsed() < duration {
        if let Some(measure) = measure {
            let batch = Instant::now();
            for _ in 0..BATCH {
                let at = Instant::now();
                measure.floor_round().await?;
                floor_samples.push(at.elapsed());
            }
            floor_time += batch.elapsed();
        }
        let batch = Instant::now();
        for _ in 0..BATCH {
            let at = Instant::now();
            let guard = locks.acquire(&format!("{name}/{}", samples.len())).await?;
            guard.release().await?;
            samples.push(at.elapsed());
        }
        lock_time += batch.elapsed();
    }
    let mut rows = Vec::new();
    if let Some(measure) = measure {
        let mut floor = row(Workload::Floor, 1, floor_samples, floor_time, None);
        floor.note = format!("{} (interleaved with uncontended)", measure.floor_ops());
        rows.push(floor);
    }
    rows.push(row(Workload::Uncontended, 1, samples, lock_time, None));
    Ok(rows)
}

/// `clients` tasks (sharing the handle's connection, each acquisition its own
/// owner) take one lock in turn with an empty critical section; latency is
/// the wait for each grant.
async fn contended(
    locks: &Locks,
    name: &str,
    clients: usize,
    duration: Duration,
) -> omnilock::Result<Row> {
    let waits = Arc::new(Mutex::new(Vec::new()));
    let counts = Arc::new(Mutex::new(vec![0u64; clients]));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for client in 0..clients {
        let (locks, name) = (locks.clone(), name.to_string());
        let (waits, counts) = (waits.clone(), counts.clone());
        tasks.push(tokio::spawn(async move {
            while started.elapsed() < duration {
                let at = Instant::now();
                let Some(guard) = until(started + duration, locks.acquire(&name)).await? else {
                    break;
                };
                waits.lock().unwrap().push(at.elapsed());
                counts.lock().unwrap()[client] += 1;
                guard.release().await?;
            }
            Ok::<_, omnilock::Error>(())
        }));
    }
    join(tasks).await?;
    let elapsed = started.elapsed();
    let counts = counts.lock().unwrap().clone();
    let samples = std::mem::take(&mut *waits.lock().unwrap());
    Ok(row(
        Workload::Contended,
        clients,
        samples,
        elapsed,
        Some(jain(&counts)),
    ))
}

/// `waiters` tasks queue for one lock; each holds it for a moment and
/// releases. Latency is from one holder's release call to the next grant.
async fn handoff(
    locks: &Locks,
    name: &str,
    waiters: usize,
    duration: Duration,
) -> omnilock::Result<Row> {
    let last_release: Arc<Mutex<Option<Instant>>> = Arc::new(Mutex::new(None));
    let samples = Arc::new(Mutex::new(Vec::new()));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..waiters {
        let (locks, name) = (locks.clone(), name.to_string());
        let (last_release, samples) = (last_release.clone(), samples.clone());
        tasks.push(tokio::spawn(async move {
            while started.elapsed() < duration {
                let Some(guard) = until(started + duration, locks.acquire(&name)).await? else {
                    break;
                };
                let granted = Instant::now();
                if let Some(released) = last_release.lock().unwrap().take() {
                    samples.lock().unwrap().push(granted - released);
                }
                // Long enough for every other waiter to be queued again.
                tokio::time::sleep(Duration::from_millis(2)).await;
                *last_release.lock().unwrap() = Some(Instant::now());
                guard.release().await?;
            }
            Ok::<_, omnilock::Error>(())
        }));
    }
    join(tasks).await?;
    let elapsed = started.elapsed();
    let samples = std::mem::take(&mut *samples.lock().unwrap());
    Ok(row(Workload::Handoff, waiters, samples, elapsed, None))
}

fn row(
    workload: Workload,
    clients: usize,
    mut samples: Vec<Duration>,
    elapsed: Duration,
    fairness: Option<f64>,
) -> Row {
    samples.sort();
    Row {
        store: String::new(),
        workload,
        clients,
        ops: samples.len(),
        per_second: samples.len() as f64 / elapsed.as_secs_f64().max(1e-9),
        p50: percentile(&samples, 0.5),
        p99: percentile(&samples, 0.99),
        p999: percentile(&samples, 0.999),
        fairness,
        ratio: None,
        requests: None,
        note: String::new(),
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let at = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[at.min(sorted.len() - 1)]
}

/// Jain's fairness index: 1 when every client got the same share, 1/n when
/// one got everything.
fn jain(counts: &[u64]) -> f64 {
    let sum: f64 = counts.iter().map(|c| *c as f64).sum();
    let squares: f64 = counts.iter().map(|c| (*c as f64).powi(2)).sum();
    if squares == 0.0 {
        return 1.0;
    }
    sum * sum / (counts.len() as f64 * squares)
}

fn ms(d: Duration) -> String {
    format!("{:.3}", d.as_secs_f64() * 1000.0)
}

fn print_table(rows: &[Row]) {
    println!(
        "| store | workload | clients | ops | ops/s | p50 ms | p99 ms | p99.9 ms \
         | p50/floor | fairness | requests/hand-off | note |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    let opt = |v: Option<f64>, digits: usize| {
        v.map(|v| format!("{v:.digits$}"))
            .unwrap_or_else(|| "-".into())
    };
    for r in rows {
        println!(
            "| {} | {} | {} | {} | {:.0} | {} | {} | {} | {} | {} | {} | {} |",
            r.store,
            r.workload,
            r.clients,
            r.ops,
            r.per_second,
            ms(r.p50),
            ms(r.p99),
            ms(r.p999),
            opt(r.ratio, 2),
            opt(r.fairness, 3),
            opt(r.requests, 2),
            r.note
        );
    }
}

/// `results.json`: one object per row, durations in milliseconds, figures
/// rounded to the digits they are good for.
fn json(rows: &[Row]) -> String {
    #[derive(serde::Serialize)]
    struct JsonRow<'a> {
        store: &'a str,
        workload: Workload,
        clients: usize,
        ops: usize,
        ops_per_second: f64,
        p50_ms: f64,
        p99_ms: f64,
        p999_ms: f64,
        fairness: Option<f64>,
        ratio_to_floor: Option<f64>,
        requests_per_handoff: Option<f64>,
        note: &'a str,
    }
    let round = |v: f64, digits: i32| {
        let scale = 10f64.powi(digits);
        (v * scale).round() / scale
    };
    let ms = |d: Duration| round(d.as_secs_f64() * 1000.0, 3);
    let json_rows: Vec<JsonRow> = rows
        .iter()
        .map(|r| JsonRow {
            store: &r.store,
            workload: r.workload,
            clients: r.clients,
            ops: r.ops,
            ops_per_second: round(r.per_second, 3),
            p50_ms: ms(r.p50),
            p99_ms: ms(r.p99),
            p999_ms: ms(r.p999),
            fairness: r.fairness.map(|v| round(v, 4)),
            ratio_to_floor: r.ratio.map(|v| round(v, 4)),
            requests_per_handoff: r.requests.map(|v| round(v, 3)),
            note: &r.note,
        })
        .collect();
    let mut text = serde_json::to_string_pretty(&json_rows).expect("rows serialize");
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fairness_index() {
        assert!((jain(&[5, 5, 5, 5]) - 1.0).abs() < 1e-9);
        assert!((jain(&[20, 0, 0, 0]) - 0.25).abs() < 1e-9);
    }

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
                "contended",
                "many-locks",
                "handoff",
                "herd"
            ]
        );
    }

    #[test]
    fn json_is_json() {
        let mut row = row(
            Workload::ManyLocks,
            3,
            vec![Duration::from_micros(1500)],
            Duration::from_secs(1),
            None,
        );
        row.store = "redis://h\"x".to_string();
        row.note = "a\nb".to_string();
        let parsed: serde_json::Value = serde_json::from_str(&json(&[row])).expect("valid JSON");
        assert_eq!(parsed[0]["store"], "redis://h\"x");
        assert_eq!(parsed[0]["workload"], "many-locks");
        assert_eq!(parsed[0]["p50_ms"], 1.5);
        assert_eq!(parsed[0]["fairness"], serde_json::Value::Null);
        assert_eq!(parsed[0]["note"], "a\nb");
    }
}
