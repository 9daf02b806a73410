//! The soak (`omnilock-chaos soak`): one process runs a steady load on
//! every store at once for a long time, with a store node faulted every so
//! often, and shows that nothing leaks. It samples its own resident
//! memory, open descriptors, sockets, connections per store and tokio
//! tasks, and after the warm-up judges each series flat or grown
//! ([`verdict`]).
//!
//! - [`stores`]: each store URL's label, server ports and faultable nodes;
//! - [`load`]: the clients (a `Locks` each) and their mix of primitives;
//! - [`nemesis`]: the pauses and restarts of store nodes, undone on exit;
//! - [`sample`]: what is read from `/proc` and the runtime;
//! - [`verdict`]: the leak rule, a pure function;
//! - [`report`] and [`plot`]: the summary and the SVG curves.
//!
//! `docs/reliability.md` (*Soak*) describes the run and its figures.

pub mod load;
pub mod nemesis;
pub mod plot;
pub mod report;
pub mod sample;
pub mod stores;
pub mod verdict;

use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use omnilock::Locks;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use load::{Tally, Workload};
use nemesis::Schedule;
use report::{StoreSummary, Summary};
use sample::Sample;
use stores::Store;
use verdict::Finding;

/// Everything a soak needs.
#[derive(Clone, Debug)]
pub struct SoakConfig {
    /// The store URLs, every one loaded at once.
    pub stores: Vec<String>,
    /// Clients per store, each with a `Locks` of its own.
    pub clients: u32,
    /// What each client does.
    pub workload: Workload,
    /// How long the clients run.
    pub duration: Duration,
    /// Time between two samples.
    pub sample_every: Duration,
    /// The faults; none without.
    pub schedule: Option<Schedule>,
    /// Where the samples, the summary and the charts go.
    pub out: PathBuf,
    /// A deliberate leak, to show the verdict catches one (a test aid).
    pub leak: Option<(Leak, Duration)>,
}

/// A deliberate leak ([`SoakConfig::leak`]), one every so often.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Leak {
    /// A task that never ends.
    Task,
    /// A TCP connection to the first store with a server, never closed.
    Connection,
    /// Half a MiB of heap, never freed (and never touched, so that only
    /// the heap count sees it, not resident memory).
    Memory,
}

/// How a soak ended.
#[derive(Debug)]
pub struct Outcome {
    /// Every judged series.
    pub findings: Vec<Finding>,
    /// Series that could not be judged.
    pub problems: Vec<String>,
    /// Whether a signal ended the run early.
    pub interrupted: bool,
    /// The summary as markdown.
    pub markdown: String,
}

impl Outcome {
    /// Whether every series was judged and stayed flat.
    pub fn flat(&self) -> bool {
        self.problems.is_empty() && self.findings.iter().all(Finding::flat)
    }
}

/// Runs a soak and judges it. An error when a store cannot be reached at
/// the start or the output cannot be written.
pub async fn run(config: SoakConfig) -> Result<Outcome, String> {
    if config.stores.is_empty() {
        return Err("give at least one --store".into());
    }
    raise_descriptor_limit();
    let topology = omnilock_harness::topology::Topology::load().ok();
    let mut stores: Vec<Store> = Vec::new();
    for url in &config.stores {
        let store = Store::of(url, topology.as_ref(), &stores)?;
        stores.push(store);
    }
    if config.schedule.is_some() && stores.iter().all(|s| s.nodes.is_empty()) {
        eprintln!(
            "soak: no store is one of the test topology's ({}): no faults",
            omnilock_harness::topology::Topology::path().display()
        );
    }
    std::fs::create_dir_all(&config.out)
        .map_err(|e| format!("cannot create {}: {e}", config.out.display()))?;
    let clients = connect_all(&stores, config.clients, config.workload.ttl).await?;
    eprintln!(
        "soak: {} clients on {} stores ({}) for {}",
        clients.len(),
        stores.len(),
        stores
            .iter()
            .map(|s| s.label.as_str())
            .collect::<Vec<_>>()
            .join(", "),
        humantime::format_duration(config.duration)
    );

    let csv_path = config.out.join("samples.csv");
    let mut csv =
        std::fs::File::create(&csv_path).map_err(|e| format!("{}: {e}", csv_path.display()))?;
    writeln!(csv, "{}", sample::csv_header(&stores)).map_err(|e| e.to_string())?;

    let tallies: Vec<Arc<Tally>> = stores.iter().map(|_| Arc::default()).collect();
    let workload = Arc::new(config.workload.clone());
    let stop_clients = Arc::new(AtomicBool::new(false));
    let (stop_tx, stop_rx) = watch::channel(false);
    let started = Instant::now();
    let end = started + config.duration;
    let tasks: Vec<(usize, JoinHandle<Locks>)> = clients
        .into_iter()
        .map(|(store, locks)| {
            let (workload, tally, stop) = (
                workload.clone(),
                tallies[store].clone(),
                stop_clients.clone(),
            );
            let task = tokio::spawn(async move {
                load::client(&locks, workload, tally, stop).await;
                locks
            });
            (store, task)
        })
        .collect();
    let nemesis = config.schedule.clone().map(|schedule| {
        tokio::spawn(nemesis::run(
            stores.clone(),
            schedule,
            started,
            end,
            stop_rx.clone(),
        ))
    });
    let leaker = config
        .leak
        .map(|(leak, every)| tokio::spawn(inject(leak, every, stores.clone())));

    let mut samples: Vec<Sample> = Vec::new();
    let mut ticks = tokio::time::interval_at(started.into(), config.sample_every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let interrupt = interrupted();
    tokio::pin!(interrupt);
    let mut was_interrupted = false;
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            _ = &mut interrupt => {
                was_interrupted = true;
                eprintln!("soak: interrupted: putting the stores back and writing what was sampled");
                break;
            }
        }
        let mut sample = Sample::take(&stores);
        sample.t = started.elapsed().as_secs_f64();
        sample.grants = tallies.iter().map(|t| t.counts().grants).sum();
        sample.errors = tallies.iter().map(|t| t.error_total()).sum();
        writeln!(csv, "{}", sample.csv()).map_err(|e| e.to_string())?;
        eprintln!(
            "soak: {:>6.0} s  rss {:.1} MiB  heap {:.1} MiB  fds {}  sockets {}  tasks {}  \
             grants {}  errors {}",
            sample.t,
            sample.rss_kib as f64 / 1024.0,
            sample.heap_kib as f64 / 1024.0,
            sample.fds,
            sample.sockets,
            sample.tasks,
            sample.grants,
            sample.errors
        );
        samples.push(sample);
        // The last sample is the one at the end of the run (within half an
        // interval: ticks drift late on a loaded machine).
        if Instant::now() + config.sample_every / 2 >= end {
            break;
        }
    }

    // Stop: the faults first (their nodes put back), then the clients.
    let _ = stop_tx.send(true);
    stop_clients.store(true, Ordering::SeqCst);
    if let Some(leaker) = leaker {
        leaker.abort();
    }
    let faults = match nemesis {
        Some(nemesis) => nemesis.await.unwrap_or_default(),
        None => Vec::new(),
    };
    let mut per_store = vec![0u32; stores.len()];
    let mut handles = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    for (store, task) in tasks {
        per_store[store] += 1;
        match tokio::time::timeout_at(deadline, task).await {
            Ok(Ok(locks)) => handles.push(locks),
            Ok(Err(e)) => eprintln!("soak: a client of {} failed: {e}", stores[store].label),
            Err(_) => eprintln!(
                "soak: a client of {} did not stop within a minute",
                stores[store].label
            ),
        }
    }
    let closing = handles.iter().map(|locks| locks.close());
    if tokio::time::timeout(Duration::from_secs(60), futures_join(closing))
        .await
        .is_err()
    {
        eprintln!("soak: closing the clients took over a minute");
    }

    let (findings, problems) = report::verdict(&samples, &stores);
    let verdict = if !problems.is_empty() {
        "no verdict"
    } else if findings.iter().all(Finding::flat) {
        "flat"
    } else {
        "grew"
    };
    let summary = Summary {
        verdict: verdict.to_string(),
        seconds: samples.last().map_or(0.0, |s| s.t),
        samples: samples.len(),
        interrupted: was_interrupted,
        findings: findings.clone(),
        problems: problems.clone(),
        stores: stores
            .iter()
            .enumerate()
            .map(|(i, s)| StoreSummary {
                store: s.label.clone(),
                clients: per_store[i],
                connections: samples.last().map_or(0, |last| last.connections[i]),
                counts: tallies[i].counts(),
            })
            .collect(),
        faults,
    };
    report::write(&config.out, &summary, &samples, &stores)?;
    Ok(Outcome {
        findings,
        problems,
        interrupted: was_interrupted,
        markdown: summary.markdown(),
    })
}

/// Connects `clients` handles to every store, the stores at once and each
/// store's clients one after another (a few hundred connects at once would
/// time out on a small machine). The first failure ends the soak.
async fn connect_all(
    stores: &[Store],
    clients: u32,
    ttl: Duration,
) -> Result<Vec<(usize, Locks)>, String> {
    let mut set = tokio::task::JoinSet::new();
    for (i, store) in stores.iter().enumerate() {
        let (url, label) = (store.url.clone(), store.label.clone());
        set.spawn(async move {
            let mut handles = Vec::new();
            for _ in 0..clients {
                let locks = omnilock::connect(&url)
                    .await
                    .and_then(|locks| locks.with_ttl(ttl))
                    .map_err(|e| format!("{label}: {e}"))?;
                handles.push((i, locks));
            }
            Ok::<_, String>(handles)
        });
    }
    let mut all = Vec::new();
    while let Some(joined) = set.join_next().await {
        all.extend(joined.map_err(|e| e.to_string())??);
    }
    all.sort_by_key(|(store, _)| *store);
    Ok(all)
}

/// Awaits every future (the clients' `close`), concurrently.
async fn futures_join<F: std::future::Future<Output = ()>>(futures: impl Iterator<Item = F>) {
    let mut pending: Vec<_> = futures.map(Box::pin).collect();
    std::future::poll_fn(|cx| {
        pending.retain_mut(|f| f.as_mut().poll(cx).is_pending());
        if pending.is_empty() {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await
}

/// Resolves on SIGINT or SIGTERM.
async fn interrupted() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(term) => term,
        Err(_) => return std::future::pending().await,
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

/// Leaks one `leak` every `every`, for the verdict to catch.
async fn inject(leak: Leak, every: Duration, stores: Vec<Store>) {
    let target = stores.iter().find_map(|s| {
        let url = omnilock::raw::StoreUrl::parse(&s.url).ok()?;
        let host = url.hosts().first()?.clone();
        Some((host.host, host.port?))
    });
    let mut kept = Vec::new();
    let mut ticks = tokio::time::interval(every);
    loop {
        ticks.tick().await;
        match leak {
            Leak::Task => {
                tokio::spawn(std::future::pending::<()>());
            }
            Leak::Connection => {
                if let Some((host, port)) = &target
                    && let Ok(stream) = tokio::net::TcpStream::connect((host.as_str(), *port)).await
                {
                    kept.push(stream);
                }
            }
            // Allocated, never written (so never resident), never freed;
            // black_box, as an allocation nothing reads may be elided.
            Leak::Memory => {
                std::hint::black_box(Vec::<u8>::with_capacity(512 * 1024).leak());
            }
        }
    }
}

/// Raises this process's soft limit of open descriptors to its hard limit:
/// hundreds of clients hold thousands of connections.
fn raise_descriptor_limit() {
    // SAFETY: getrlimit and setrlimit on this process, with a valid struct.
    unsafe {
        let mut limit = std::mem::zeroed::<libc::rlimit>();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur < limit.rlim_max
        {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}
