//! One chaos run: the register, the client processes, the nemesis, the
//! leftover check and the checker, for one store and a set of faults.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::Rng;
use rand::seq::IteratorRandom;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{ChildStdin, Command};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

use crate::checker::{Report, check};
use crate::history::{self, Event, Op, Phase, Source};
use crate::primitive::Primitive;
use crate::proxy::Partitionable;

/// A fault the nemesis injects, each repeated through the run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Fault {
    /// SIGKILL the current holder of a lock (a new client replaces it).
    Kill,
    /// SIGSTOP the current holder for 1.5–3 × TTL, then SIGCONT.
    Pause,
    /// Cut the current holder off the store for 1.5–3 × TTL, then heal.
    Partition,
    /// SIGKILL a store node (an etcd member, a ZooKeeper node, MariaDB, a
    /// Redis instance or Redlock node), keep it down 1.5–3 × TTL, start it
    /// again. Finds the node in the test topology of `scripts/stores.sh`.
    Node,
    /// The same, restarted at once (Redis comes back empty: no persistence).
    Restart,
    /// The last Redlock node's clock jumps 3 × TTL ahead, as far as its
    /// keys can tell: every key there loses 3 × TTL of its remaining life
    /// (emulated with a script; libfaketime and Redis's jemalloc do not mix).
    Clock,
    /// Cut the current holder off a minority of the store's nodes (1 of 3,
    /// 2 of 5) for 1.5–3 × TTL, then heal. Needs at least 3 nodes.
    Minority,
    /// Kleppmann's Redlock construction: cut the current holder off a
    /// minority of the nodes; one TTL later its keys there have expired and
    /// its lock stands on exactly the majority it still renews; then restart
    /// one node of that majority at once (Redis comes back empty), and heal
    /// after 2–3 × TTL. Any other client then granted the same lock is a
    /// second holder.
    MajorityRestart,
    /// SIGKILL the master that serves a held lock (Redis Cluster: the master
    /// of the lock's slot; Sentinel: the master the sentinels name), so that
    /// its replica is promoted; start it again after 1.5–3 × TTL, when it
    /// rejoins as a replica. Finds the node in the test topology of `scripts/stores.sh`.
    Failover,
}

impl Fault {
    /// Whether the fault needs every client behind proxies of its own.
    fn partitions(self) -> bool {
        matches!(
            self,
            Fault::Partition | Fault::Minority | Fault::MajorityRestart
        )
    }
}

/// Everything a run needs.
pub struct RunConfig {
    /// The store URL.
    pub store: String,
    /// The faults, injected in turn.
    pub faults: Vec<Fault>,
    /// Client processes contending at any time.
    pub clients: u32,
    /// Locks they spread over.
    pub locks: u32,
    /// TTL of every acquisition.
    pub ttl: Duration,
    /// Longest random work under the lock.
    pub work: Duration,
    /// How long clients run.
    pub duration: Duration,
    /// Mean pause between faults.
    pub interval: Duration,
    /// Whether the register refuses stale tokens.
    pub fenced: bool,
    /// The resource is the lock's own SQL database instead of the
    /// register (`records.rs`): `Some(true)` written in guarded
    /// transactions, `Some(false)` without the guard.
    pub records: Option<bool>,
    /// The resource is a log in the lock's own store (`logs.rs`), appended
    /// to this way.
    pub log: Option<crate::logs::LogWrite>,
    /// The resource is a document per lock (`documents.rs`) of this kind,
    /// written this way.
    pub document: Option<(
        crate::documents::DocumentKind,
        crate::documents::DocumentWrite,
    )>,
    /// Whether clients skip their write when the guard says the lock is gone.
    pub careful: bool,
    /// What the clients take.
    pub primitive: Primitive,
    /// Clients build the store on an application's own client or pool
    /// (etcd, ZooKeeper, PostgreSQL, MySQL/MariaDB, one Redis server;
    /// `byo.rs`).
    pub byo: bool,
    /// Where the history, the client logs and the report go.
    pub out: PathBuf,
}

struct Client {
    pid: u32,
    stdin: Option<ChildStdin>,
    proxy: Option<Arc<Partitionable>>,
}

struct Harness {
    config: RunConfig,
    register: String,
    history: UnboundedSender<Event>,
    /// (Lock, client) of every current hold, by the client's own account
    /// (a semaphore or read-write lock has several holders).
    holders: Mutex<HashSet<(String, u32)>>,
    clients: Mutex<HashMap<u32, Client>>,
    next_id: AtomicU32,
    stopping: AtomicBool,
    exited: tokio::sync::Notify,
    /// A client died: start another in its place (a channel, because a
    /// client's reader task cannot start the next client itself).
    respawn: UnboundedSender<()>,
    /// The run the logs are named after (`logs.rs`).
    log_run: String,
    /// The file documents' directory (`documents.rs`).
    documents_dir: Option<PathBuf>,
    /// Per lock, the ids of the document writes their clients saw accepted.
    acknowledged: Mutex<HashMap<String, HashSet<i64>>>,
}

/// Runs one store under the configured faults and checks the history.
pub async fn run(config: RunConfig) -> Result<Report, String> {
    if config.primitive == Primitive::Multi && config.locks < 2 {
        return Err("--primitive multi takes two locks at once: give --locks 2 or more".into());
    }
    if config.byo && config.log.is_some() && config.store.starts_with("redis") {
        // The Redis log appends through the store it opens itself.
        return Err("--byo does not apply to a Redis log register: its store is its own".into());
    }
    if config.byo {
        // Fails on a store --byo does not cover, before any client starts.
        crate::byo::locks(&config.store, config.ttl)
            .await?
            .close()
            .await;
    }
    std::fs::create_dir_all(&config.out)
        .map_err(|e| format!("cannot create {}: {e}", config.out.display()))?;
    // The store must answer before anything starts; its capabilities decide
    // whether a fenced register makes sense.
    let locks = omnilock::connect(&config.store)
        .await
        .map_err(|e| e.to_string())?;
    // The clients would otherwise fail every acquisition with it, quietly.
    let locks = locks
        .with_ttl(config.ttl)
        .map_err(|e| format!("--ttl: {e}"))?;
    let capabilities = locks.capabilities();
    let offered = match config.primitive {
        Primitive::Mutex | Primitive::Multi => true,
        Primitive::Semaphore(_) => capabilities.semaphore,
        Primitive::Rw => capabilities.rw_lock,
    };
    if !offered {
        return Err(format!(
            "{} offers no {}: pick another --primitive or store",
            locks.backend_kind(),
            match config.primitive {
                Primitive::Rw => "read-write locks",
                _ => "semaphores",
            }
        ));
    }
    if config.fenced && !locks.capabilities().fencing {
        return Err(format!(
            "{} gives no fencing tokens: run it with --register unfenced",
            locks.backend_kind()
        ));
    }
    if let Some(guarded) = config.records {
        if config.primitive != Primitive::Mutex {
            return Err("the records modes take mutexes: --primitive mutex".into());
        }
        if guarded && !capabilities.guarded_write {
            return Err(format!(
                "{} cannot guard a write in its own database: use --register sql-unguarded \
                 or a SQL store in table mode",
                locks.backend_kind()
            ));
        }
        let records = crate::records::Records::connect(&config.store)
            .await?
            .ok_or("the records modes need a SQL store (postgres://, mysql://, sqlite://)")?;
        records.prepare(config.locks).await?;
    }
    // Logs named after this run: nothing of an earlier run is in them.
    let log_run = format!(
        "{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis()
    );
    let logs = match config.log {
        Some(how) => {
            if config.primitive != Primitive::Mutex {
                return Err("the log modes take mutexes: --primitive mutex".into());
            }
            if how == crate::logs::LogWrite::Guarded && !capabilities.guarded_write {
                return Err(format!(
                    "{} cannot guard a write in its own store: use --register log-unguarded",
                    locks.backend_kind()
                ));
            }
            let logs = crate::logs::Logs::connect(&config.store).await?;
            if how == crate::logs::LogWrite::Fenced && !matches!(logs, crate::logs::Logs::Redis(_))
            {
                return Err("the fenced log is a Redis key: use a Redis store".into());
            }
            logs.prepare(&log_run, config.locks).await?;
            Some(logs)
        }
        None => None,
    };
    if config
        .faults
        .iter()
        .any(|f| matches!(f, Fault::Node | Fault::Restart | Fault::MajorityRestart))
    {
        Nodes::of(&config.store)?;
    }
    if config.faults.contains(&Fault::Failover) {
        let scheme = config.store.split("://").next().unwrap_or_default();
        if !matches!(scheme, "redis+cluster" | "redis+sentinel") {
            return Err(
                "the failover fault kills a master whose replica takes over: use a \
                 redis+cluster:// or redis+sentinel:// store"
                    .into(),
            );
        }
        Nodes::of(&config.store)?;
    }
    if config.faults.contains(&Fault::MajorityRestart) && !config.store.starts_with("redlock://") {
        return Err("majority-restart is Redlock's hazard: use a redlock:// store".into());
    }
    if config.faults.contains(&Fault::Clock) && !config.store.starts_with("redlock://") {
        return Err("the clock fault jumps a Redlock node's clock: use a redlock:// store".into());
    }
    if config.faults.iter().any(|f| f.partitions()) {
        let proxies = Partitionable::start(&config.store).await?;
        if proxies.nodes() < 3
            && config
                .faults
                .iter()
                .any(|f| *f != Fault::Partition && f.partitions())
        {
            return Err("minority faults need a store of at least 3 nodes".into());
        }
    }

    let documents_dir = match config.document {
        Some((crate::documents::DocumentKind::File, _)) => Some(config.out.join("documents")),
        _ => None,
    };
    let documents = match config.document {
        Some((kind, _)) => {
            if config.primitive != Primitive::Mutex {
                return Err("the document modes take mutexes: --primitive mutex".into());
            }
            if !capabilities.fencing {
                return Err(format!(
                    "{} gives no fencing tokens: a fenced document needs them",
                    locks.backend_kind()
                ));
            }
            let documents =
                crate::documents::Documents::connect(documents_dir.as_deref(), &config.store)
                    .await
                    .map_err(|e| format!("{} documents: {e}", kind.name()))?;
            documents.prepare(config.locks).await?;
            Some(documents)
        }
        None => None,
    };

    let (history_tx, history_rx) = unbounded_channel();
    let (end_history, history_ends) = tokio::sync::oneshot::channel();
    let writer = tokio::spawn(write_history(
        config.out.join("history.jsonl"),
        history_rx,
        history_ends,
    ));
    let register = crate::register::start(config.fenced, history_tx.clone())
        .await
        .map_err(|e| format!("register: {e}"))?;
    let (respawn_tx, mut respawn_rx) = unbounded_channel();
    let harness = Arc::new(Harness {
        config,
        register,
        history: history_tx,
        holders: Mutex::new(HashSet::new()),
        clients: Mutex::new(HashMap::new()),
        next_id: AtomicU32::new(1),
        stopping: AtomicBool::new(false),
        exited: tokio::sync::Notify::new(),
        respawn: respawn_tx,
        log_run: log_run.clone(),
        documents_dir,
        acknowledged: Mutex::new(HashMap::new()),
    });
    let respawner = {
        let harness = harness.clone();
        tokio::spawn(async move {
            while respawn_rx.recv().await.is_some() {
                if harness.stopping.load(Ordering::SeqCst) {
                    break;
                }
                if let Err(err) = spawn_client(&harness).await {
                    eprintln!("omnilock-chaos: {err}");
                }
            }
        })
    };
    let mut start = Event::now(Source::Harness, Op::Start, Phase::Ok).detail(locks.backend_kind());
    start.fencing = Some(locks.capabilities().fencing);
    harness.record(start);
    for _ in 0..harness.config.clients {
        spawn_client(&harness).await?;
    }
    let nemesis = tokio::spawn(nemesis(harness.clone()));
    tokio::time::sleep(harness.config.duration).await;

    harness.stopping.store(true, Ordering::SeqCst);
    let _ = nemesis.await;
    respawner.abort();
    stop_clients(&harness).await;
    check_leftovers(&harness, &locks).await;
    if let Some(logs) = &logs {
        collect_logs(&harness, &locks, logs, &log_run).await?;
    }
    if let Some(documents) = &documents {
        collect_documents(&harness, documents).await?;
    }
    locks.close().await;

    let _ = end_history.send(());
    let events = writer.await.map_err(|e| e.to_string())??;
    let mut report = check(&events);
    let config = &harness.config;
    let faults: Vec<String> = config
        .faults
        .iter()
        .map(|f| format!("{f:?}").to_lowercase())
        .collect();
    report.setup = format!(
        "{}{} · {} lock{} · {} clients · TTL {:?} · work ≤ {:?} · {:?} · {}",
        match config.primitive {
            Primitive::Mutex => String::new(),
            other => format!("{other} · "),
        },
        if faults.is_empty() {
            "no fault".to_string()
        } else {
            faults.join("+")
        },
        config.locks,
        if config.locks == 1 { "" } else { "s" },
        config.clients,
        config.ttl,
        config.work,
        config.duration,
        match (config.records, config.log, config.document, config.fenced) {
            (Some(true), ..) => "sql-guarded".to_string(),
            (Some(false), ..) => "sql-unguarded".to_string(),
            (None, Some(how), ..) => format!("log-{}", how.name()),
            (None, None, Some((kind, how)), _) => format!(
                "{}-{}",
                kind.name(),
                if how == crate::documents::DocumentWrite::Fenced {
                    "fenced"
                } else {
                    "unfenced"
                }
            ),
            (None, None, None, true) => "fenced".to_string(),
            (None, None, None, false) => "unfenced".to_string(),
        },
    );
    Ok(report)
}

async fn write_history(
    path: PathBuf,
    mut events: UnboundedReceiver<Event>,
    mut end: tokio::sync::oneshot::Receiver<()>,
) -> Result<Vec<Event>, String> {
    let fail = |e: std::io::Error| format!("{}: {e}", path.display());
    let mut file = tokio::fs::File::create(&path).await.map_err(fail)?;
    let mut all = Vec::new();
    // The register keeps a sender for its whole life, so the end is a signal,
    // after which whatever is queued is still written.
    loop {
        tokio::select! {
            Some(event) = events.recv() => all.push(event),
            _ = &mut end => break,
        }
    }
    while let Ok(event) = events.try_recv() {
        all.push(event);
    }
    let mut text = String::new();
    for event in &all {
        text.push_str(&event.to_line());
        text.push('\n');
    }
    file.write_all(text.as_bytes()).await.map_err(fail)?;
    file.flush().await.map_err(fail)?;
    Ok(all)
}

async fn spawn_client(harness: &Arc<Harness>) -> Result<(), String> {
    let id = harness.next_id.fetch_add(1, Ordering::SeqCst);
    let proxy = if harness.config.faults.iter().any(|f| f.partitions()) {
        Some(Arc::new(Partitionable::start(&harness.config.store).await?))
    } else {
        None
    };
    let store = proxy
        .as_ref()
        .map_or(harness.config.store.clone(), |p| p.url.clone());
    let log = std::fs::File::create(harness.config.out.join(format!("client-{id}.log")))
        .map_err(|e| e.to_string())?;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut child = Command::new(exe)
        .arg("client")
        .args(["--id", &id.to_string()])
        .args(["--register", &harness.register])
        .args(["--locks", &harness.config.locks.to_string()])
        .args([
            "--ttl",
            &humantime::format_duration(harness.config.ttl).to_string(),
        ])
        .args([
            "--work",
            &humantime::format_duration(harness.config.work).to_string(),
        ])
        .args(harness.config.careful.then_some("--careful"))
        .args(harness.config.byo.then_some("--byo"))
        .args(harness.config.records.map(|guarded| {
            format!(
                "--records={}",
                if guarded { "guarded" } else { "unguarded" }
            )
        }))
        .args(
            harness
                .config
                .log
                .map(|how| format!("--log={}", how.name())),
        )
        .args(["--log-run", &harness.log_run])
        .args(harness.config.document.map(|(_, how)| {
            format!(
                "--document={}",
                if how == crate::documents::DocumentWrite::Fenced {
                    "fenced"
                } else {
                    "unfenced"
                }
            )
        }))
        .args(
            harness
                .documents_dir
                .iter()
                .flat_map(|dir| [std::ffi::OsStr::new("--documents-dir"), dir.as_os_str()]),
        )
        .args(["--primitive", &harness.config.primitive.to_string()])
        // In the environment, not the command line: URLs carry passwords.
        .env("OMNILOCK_CHAOS_STORE", store)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start a client: {e}"))?;
    let pid = child.id().unwrap_or(0);
    let stdout = child.stdout.take().expect("piped stdout");
    harness.clients.lock().unwrap().insert(
        id,
        Client {
            pid,
            stdin: child.stdin.take(),
            proxy,
        },
    );
    let harness = harness.clone();
    tokio::spawn(async move {
        let mut lines = BufReader::new(stdout).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            match serde_json::from_str::<Event>(&line) {
                Ok(event) => {
                    harness.track(&event);
                    let _ = harness.history.send(event);
                }
                Err(_) => {
                    let _ = harness.history.send(
                        Event::now(Source::Harness, Op::Exit, Phase::Invoke)
                            .client(id)
                            .detail(format!("unreadable client line {line:?}")),
                    );
                }
            }
        }
        let status = child.wait().await;
        harness.holders.lock().unwrap().retain(|(_, c)| *c != id);
        harness.clients.lock().unwrap().remove(&id);
        let _ = harness.history.send(
            Event::now(Source::Harness, Op::Exit, Phase::Ok)
                .client(id)
                .detail(format!("{status:?}")),
        );
        if !harness.stopping.load(Ordering::SeqCst) {
            let _ = harness.respawn.send(());
        }
        harness.exited.notify_waiters();
    });
    Ok(())
}

impl Harness {
    fn track(&self, event: &Event) {
        let (Some(client), Some(lock)) = (event.client, event.lock.as_ref()) else {
            return;
        };
        if let (Source::Client, Op::Write, Phase::Ok, Some(id)) =
            (event.src, event.op, event.phase, event.value)
        {
            self.acknowledged
                .lock()
                .unwrap()
                .entry(lock.clone())
                .or_default()
                .insert(id);
        }
        let mut holders = self.holders.lock().unwrap();
        match (event.op, event.phase) {
            (Op::Acquire, Phase::Ok) => {
                holders.insert((lock.clone(), client));
            }
            (Op::Release, Phase::Invoke) => {
                holders.remove(&(lock.clone(), client));
            }
            _ => {}
        }
    }

    /// A current holder: (client, lock, pid), waiting up to 5 s for one.
    async fn pick_holder(&self) -> Option<(u32, String, u32)> {
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            let picked = {
                let holders = self.holders.lock().unwrap();
                let clients = self.clients.lock().unwrap();
                holders
                    .iter()
                    .filter_map(|(lock, c)| Some((*c, lock.clone(), clients.get(c)?.pid)))
                    .choose(&mut rand::thread_rng())
            };
            if picked.is_some() {
                return picked;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        None
    }

    /// The proxies `client` reaches the store through, if it has them.
    fn proxy_of(&self, client: u32) -> Option<Arc<Partitionable>> {
        self.clients
            .lock()
            .unwrap()
            .get(&client)
            .and_then(|c| c.proxy.clone())
    }

    fn record(&self, event: Event) {
        let _ = self.history.send(event);
    }

    fn fault_length(&self) -> Duration {
        self.config
            .ttl
            .mul_f64(rand::thread_rng().gen_range(1.5..3.0))
    }
}

fn signal(pid: u32, signal: libc::c_int) {
    // SAFETY: kill(2) with a PID we started; a stale PID only fails.
    unsafe { libc::kill(pid as libc::pid_t, signal) };
}

async fn nemesis(harness: Arc<Harness>) {
    let faults = harness.config.faults.clone();
    if faults.is_empty() {
        return;
    }
    let mut node_turn = 0usize;
    // A fault that found no holder to hit (a store still recovering from
    // the last one, on a loaded machine) is tried again next turn, so that
    // a short run still has each of its faults.
    let mut turn = 0usize;
    loop {
        let wait = harness
            .config
            .interval
            .mul_f64(rand::thread_rng().gen_range(0.5..1.5));
        tokio::time::sleep(wait).await;
        if harness.stopping.load(Ordering::SeqCst) {
            return;
        }
        let fault = faults[turn % faults.len()];
        match fault {
            Fault::Node | Fault::Restart => {
                let down = (fault == Fault::Node).then(|| harness.fault_length());
                node_fault(&harness, node_turn, down).await;
                node_turn += 1;
                turn += 1;
                continue;
            }
            Fault::Clock => {
                clock_jump(&harness).await;
                turn += 1;
                continue;
            }
            Fault::MajorityRestart => {
                if majority_restart(&harness).await {
                    turn += 1;
                }
                continue;
            }
            Fault::Failover => {
                if failover(&harness).await {
                    turn += 1;
                }
                continue;
            }
            _ => {}
        }
        let Some((client, lock, pid)) = harness.pick_holder().await else {
            continue;
        };
        let event = |op, phase| {
            Event::now(Source::Nemesis, op, phase)
                .client(client)
                .lock(&lock)
        };
        match fault {
            Fault::Kill => {
                harness.record(event(Op::Kill, Phase::Invoke));
                signal(pid, libc::SIGKILL);
            }
            Fault::Pause => {
                let length = harness.fault_length();
                harness.record(event(Op::Pause, Phase::Invoke).detail(format!("{length:?}")));
                signal(pid, libc::SIGSTOP);
                tokio::time::sleep(length).await;
                signal(pid, libc::SIGCONT);
                harness.record(event(Op::Pause, Phase::Ok));
            }
            Fault::Partition => {
                let Some(proxy) = harness.proxy_of(client) else {
                    turn += 1;
                    continue;
                };
                let length = harness.fault_length();
                harness.record(event(Op::Partition, Phase::Invoke).detail(format!("{length:?}")));
                proxy.set_cut(true);
                tokio::time::sleep(length).await;
                proxy.set_cut(false);
                harness.record(event(Op::Partition, Phase::Ok));
            }
            Fault::Minority => {
                let Some(proxy) = harness.proxy_of(client) else {
                    turn += 1;
                    continue;
                };
                let cut = minority(proxy.nodes());
                let length = harness.fault_length();
                harness.record(
                    event(Op::Partition, Phase::Invoke)
                        .detail(format!("{length:?} from nodes {cut:?}")),
                );
                proxy.cut_only(&cut);
                tokio::time::sleep(length).await;
                proxy.set_cut(false);
                harness.record(event(Op::Partition, Phase::Ok));
            }
            Fault::Node
            | Fault::Restart
            | Fault::Clock
            | Fault::MajorityRestart
            | Fault::Failover => {
                unreachable!("handled above")
            }
        }
        turn += 1;
    }
}

/// The store nodes the node and restart faults can hit: nodes of the test
/// topology (`target/stores/topology.json`) that the store URL names, in
/// the URL's order (which the minority faults rely on); for Redis Cluster
/// and Sentinel, whose URLs name seeds and sentinels, every data node of the
/// deployment.
struct Nodes {
    /// The deployment's name in the topology.
    deployment: String,
    /// The nodes' names.
    names: Vec<String>,
}

impl Nodes {
    fn of(url: &str) -> Result<Nodes, String> {
        use omnilock_harness::topology::Topology;
        let scheme = url.split("://").next().unwrap_or_default();
        if !matches!(
            scheme,
            "etcd"
                | "etcds"
                | "zk"
                | "zks"
                | "zookeeper"
                | "mysql"
                | "redis"
                | "redlock"
                | "redis+cluster"
                | "redis+sentinel"
        ) {
            return Err(format!(
                "node faults know the etcd, zk, mysql, redis, redlock, redis+cluster \
                 and redis+sentinel stores of scripts/stores.sh, not {scheme}://"
            ));
        }
        let topology = Topology::load()?;
        let parsed = omnilock::raw::StoreUrl::parse(url).map_err(|e| e.to_string())?;
        let mut deployment: Option<String> = None;
        let mut names = Vec::new();
        for host in parsed.hosts() {
            let Some((d, node)) = host.port.and_then(|p| topology.node_at(&host.host, p)) else {
                continue;
            };
            if deployment.get_or_insert_with(|| d.name.clone()) != &d.name {
                return Err(format!(
                    "the URL names nodes of two deployments of the test topology \
                     ({} and {})",
                    deployment.unwrap_or_default(),
                    d.name
                ));
            }
            names.push(node.name.clone());
        }
        let deployment = deployment.ok_or_else(|| {
            format!(
                "no node of the test topology ({}) in the URL: node faults need \
                 the stores of scripts/stores.sh",
                Topology::path().display()
            )
        })?;
        let found = topology.deployment(&deployment);
        if matches!(scheme, "redis+cluster" | "redis+sentinel") {
            names = found
                .nodes
                .iter()
                .filter(|n| n.restart.is_some())
                .map(|n| n.name.clone())
                .collect();
        }
        if let Some(fixed) = names.iter().find(|n| found.node(n).restart.is_none()) {
            return Err(format!(
                "scripts/stores.sh cannot restart {deployment} node {fixed}"
            ));
        }
        Ok(Nodes { deployment, names })
    }
}

async fn node_fault(harness: &Arc<Harness>, turn: usize, down: Option<Duration>) {
    let nodes = Nodes::of(&harness.config.store).expect("checked at start");
    let n = nodes.names[turn % nodes.names.len()].clone();
    fault_node(harness, nodes, n, down).await;
}

/// Kills store node `n` and starts it again after `down` (at once if none).
async fn fault_node(harness: &Arc<Harness>, nodes: Nodes, n: String, down: Option<Duration>) {
    let what = format!(
        "{} node {n} killed, {}",
        nodes.deployment,
        match down {
            Some(down) => format!("restarted after {down:?}"),
            None => "restarted at once".to_string(),
        }
    );
    harness.record(Event::now(Source::Nemesis, Op::Node, Phase::Invoke).detail(what.clone()));
    let outcome = tokio::task::spawn_blocking(move || {
        use omnilock_harness::faults::{kill_node, restart_node};
        kill_node(&nodes.deployment, &n);
        if let Some(down) = down {
            std::thread::sleep(down);
        }
        restart_node(&nodes.deployment, &n);
    })
    .await;
    let phase = if outcome.is_ok() {
        Phase::Ok
    } else {
        Phase::Fail
    };
    harness.record(Event::now(Source::Nemesis, Op::Node, phase).detail(what));
}

/// See [`Fault::Failover`].
async fn failover(harness: &Arc<Harness>) -> bool {
    let Some((client, lock, _)) = harness.pick_holder().await else {
        return false;
    };
    let nodes = Nodes::of(&harness.config.store).expect("checked at start");
    let master = match master_serving(&harness.config.store, &lock).await {
        Ok(port) => port,
        Err(err) => {
            harness.record(
                Event::now(Source::Nemesis, Op::Node, Phase::Fail)
                    .client(client)
                    .lock(&lock)
                    .detail(format!("failover: no master found: {err}")),
            );
            return true;
        }
    };
    let Some(n) = omnilock_harness::topology::Topology::load()
        .ok()
        .and_then(|t| Some(t.get(&nodes.deployment)?.node_on(master)?.name.clone()))
    else {
        return true;
    };
    let down = harness.fault_length();
    fault_node(harness, nodes, n, Some(down)).await;
    true
}

/// The port of the master that serves `lock` now.
async fn master_serving(store: &str, lock: &str) -> Result<u16, String> {
    use omnilock::redis::redis;
    use redis::IntoConnectionInfo;
    let mut url = omnilock::raw::StoreUrl::parse(store).map_err(|e| e.to_string())?;
    let sentinel = store.starts_with("redis+sentinel");
    let first = url.hosts().first().ok_or("no host")?.clone();
    // The sentinels' own password (percent-decoded by the URL parser), or
    // the data nodes'.
    let password = if sentinel {
        url.take("sentinel_password")
    } else {
        url.password().map(|p| p.expose().to_string())
    };
    let prefix = url.take("prefix").unwrap_or_else(|| "omnilock".to_string());
    let default_port = if sentinel { 26379 } else { 6379 };
    let info = redis::ConnectionAddr::Tcp(first.host.clone(), first.port.unwrap_or(default_port))
        .into_connection_info()
        .map_err(|e| e.to_string())?;
    let info = match password {
        Some(password) => {
            info.set_redis_settings(redis::RedisConnectionInfo::default().set_password(password))
        }
        None => info,
    };
    let mut conn = redis::Client::open(info)
        .map_err(|e| e.to_string())?
        .get_multiplexed_async_connection()
        .await
        .map_err(|e| e.to_string())?;
    if sentinel {
        let master = url.path().split('/').next().unwrap_or_default().to_string();
        let (_, port): (String, u16) = redis::cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg(master)
            .query_async(&mut conn)
            .await
            .map_err(|e| e.to_string())?;
        return Ok(port);
    }
    // The clients' keys: `{<prefix>:<lock>}` (the chaos locks' names and
    // usual prefixes need no escaping).
    let slot: u16 = redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(format!("{{{prefix}:{lock}}}"))
        .query_async(&mut conn)
        .await
        .map_err(|e| e.to_string())?;
    let ranges: Vec<(u16, u16, (String, u16))> = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query_async::<Vec<redis::Value>>(&mut conn)
        .await
        .map_err(|e| e.to_string())?
        .into_iter()
        .filter_map(|range| {
            let redis::Value::Array(mut parts) = range else {
                return None;
            };
            parts.truncate(3);
            let (start, end, master): (u16, u16, Vec<redis::Value>) =
                redis::from_redis_value(redis::Value::Array(parts)).ok()?;
            let host: String = redis::from_redis_value_ref(master.first()?).ok()?;
            let port: u16 = redis::from_redis_value_ref(master.get(1)?).ok()?;
            Some((start, end, (host, port)))
        })
        .collect();
    ranges
        .into_iter()
        .find(|(start, end, _)| (*start..=*end).contains(&slot))
        .map(|(_, _, (_, port))| port)
        .ok_or_else(|| format!("no master serves slot {slot}"))
}

/// The last ⌊(n − 1) / 2⌋ of `n` nodes: a minority, whatever the rest do.
fn minority(n: usize) -> Vec<usize> {
    (n - (n - 1) / 2..n).collect()
}

/// See [`Fault::MajorityRestart`].
async fn majority_restart(harness: &Arc<Harness>) -> bool {
    let Some((client, lock, _)) = harness.pick_holder().await else {
        return false;
    };
    let Some(proxy) = harness.proxy_of(client) else {
        return true;
    };
    let cut = minority(proxy.nodes());
    let length = harness.fault_length().max(harness.config.ttl * 2);
    let partition = |phase| {
        Event::now(Source::Nemesis, Op::Partition, phase)
            .client(client)
            .lock(&lock)
            .detail(format!(
                "{length:?} from nodes {cut:?}; a majority node restarts once its \
                 keys on them have expired"
            ))
    };
    harness.record(partition(Phase::Invoke));
    proxy.cut_only(&cut);
    // Its renewals reach the majority only: one TTL on, its keys on the
    // minority have expired and the lock stands on exactly that majority
    // (as if it had been granted while cut off).
    tokio::time::sleep(harness.config.ttl + Duration::from_millis(200)).await;
    let still_held = harness
        .holders
        .lock()
        .unwrap()
        .contains(&(lock.clone(), client));
    if still_held {
        let nodes = Nodes::of(&harness.config.store).expect("checked at start");
        let majority: Vec<String> = (0..proxy.nodes())
            .filter(|i| !cut.contains(i))
            .filter_map(|i| nodes.names.get(i).cloned())
            .collect();
        let restart = majority.into_iter().choose(&mut rand::thread_rng());
        if let Some(n) = restart {
            fault_node(harness, nodes, n, None).await;
        }
    }
    tokio::time::sleep(length.saturating_sub(harness.config.ttl)).await;
    proxy.set_cut(false);
    harness.record(partition(Phase::Ok));
    true
}

/// What a wall-clock jump of `ahead` does to a Redis node's keys: each loses
/// `ahead` of its remaining life (and those with less left expire).
const CLOCK_JUMP: &str = "local n = 0 \
    for _, key in ipairs(redis.call('KEYS', '*')) do \
      local left = redis.call('PTTL', key) \
      if left > 0 then \
        if left <= tonumber(ARGV[1]) then redis.call('DEL', key) \
        else redis.call('PEXPIRE', key, left - tonumber(ARGV[1])) end \
        n = n + 1 \
      end \
    end \
    return n";

/// Makes the last Redlock node's clock jump 3 × TTL ahead (see [`CLOCK_JUMP`]).
async fn clock_jump(harness: &Arc<Harness>) {
    let url = omnilock::raw::StoreUrl::parse(&harness.config.store).expect("checked at start");
    let node = url.hosts().last().expect("checked at start").clone();
    let ahead = harness.config.ttl * 3;
    let what = format!("clock of {node} jumped {ahead:?} ahead");
    harness.record(Event::now(Source::Nemesis, Op::Clock, Phase::Invoke).detail(what.clone()));
    let mut command = tokio::process::Command::new("redis-cli");
    command
        .args([
            "-h",
            &node.host,
            "-p",
            &node.port.unwrap_or(6379).to_string(),
        ])
        .arg("--no-auth-warning");
    if let Some(password) = url.password() {
        // In the environment, so the password is not on a command line.
        command.env("REDISCLI_AUTH", password.expose());
    }
    let output = command
        .args(["EVAL", CLOCK_JUMP, "0", &ahead.as_millis().to_string()])
        .output()
        .await;
    let (phase, detail) = match output {
        Ok(out) if out.status.success() => (
            Phase::Ok,
            format!(
                "{what}: {} keys",
                String::from_utf8_lossy(&out.stdout).trim()
            ),
        ),
        Ok(out) => (
            Phase::Fail,
            format!("{what}: {}", String::from_utf8_lossy(&out.stderr).trim()),
        ),
        Err(e) => (Phase::Fail, format!("{what}: redis-cli: {e}")),
    };
    harness.record(Event::now(Source::Nemesis, Op::Clock, phase).detail(detail));
}

/// Closes every client's standard input (they finish their round and exit),
/// waiting up to a minute before killing the rest.
async fn stop_clients(harness: &Arc<Harness>) {
    for client in harness.clients.lock().unwrap().values_mut() {
        client.stdin.take();
        // A paused client cannot read its end-of-input.
        signal(client.pid, libc::SIGCONT);
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let exited = harness.exited.notified();
        if harness.clients.lock().unwrap().is_empty() {
            return;
        }
        if Instant::now() > deadline {
            for client in harness.clients.lock().unwrap().values() {
                signal(client.pid, libc::SIGKILL);
            }
        }
        let _ = tokio::time::timeout(Duration::from_secs(1), exited).await;
    }
}

/// Every lock must be free once every client stopped and a TTL passed:
/// all of it (every permit, the write side) can be taken at once.
async fn check_leftovers(harness: &Arc<Harness>, locks: &omnilock::Locks) {
    let deadline = Instant::now() + harness.config.ttl + Duration::from_secs(3);
    for n in 0..harness.config.locks {
        let name = format!("chaos-{n}");
        loop {
            let attempt = take_all(harness, locks, &name).await;
            if let Ok(true) = attempt {
                break;
            }
            if Instant::now() > deadline {
                let detail = match attempt {
                    Err(err) => err.to_string(),
                    _ => format!("still held ({})", who_holds(locks, &name).await),
                };
                harness.record(
                    Event::now(Source::Harness, Op::Leftover, Phase::Fail)
                        .lock(&name)
                        .detail(detail),
                );
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Judges every lock's log after the run (`logs.rs`), under the lock, so
/// that the store names the keys as it does for its holders.
async fn collect_logs(
    harness: &Harness,
    locks: &omnilock::Locks,
    logs: &crate::logs::Logs,
    run: &str,
) -> Result<(), String> {
    for n in 0..harness.config.locks {
        let name = format!("chaos-{n}");
        let guard = locks
            .lock(&name)
            .timeout(harness.config.ttl * 3)
            .acquire()
            .await
            .map_err(|e| format!("reading the log of {name}: {e}"))?;
        let served = logs.collect(run, &guard).await;
        let _ = guard.release().await;
        for event in served? {
            harness.record(event);
        }
    }
    Ok(())
}

/// Judges every lock's document after the run (`documents.rs`).
async fn collect_documents(
    harness: &Harness,
    documents: &crate::documents::Documents,
) -> Result<(), String> {
    for n in 0..harness.config.locks {
        let name = format!("chaos-{n}");
        let acknowledged = harness
            .acknowledged
            .lock()
            .unwrap()
            .get(&name)
            .cloned()
            .unwrap_or_default();
        for event in documents.collect(&name, &acknowledged).await? {
            harness.record(event);
        }
    }
    Ok(())
}

/// Tries to take all of `name` at once, and gives it back.
/// What the store says of a lock left behind: its mutex's holders and
/// waiters (owners name the client's host and process), for the history.
async fn who_holds(locks: &omnilock::Locks, name: &str) -> String {
    match locks.inspect(name, omnilock::LockKind::Mutex).await {
        Ok(seen) => {
            let holders: Vec<_> = seen
                .holders
                .iter()
                .map(|h| format!("{} token {}", h.owner, h.token))
                .collect();
            let waiters = seen.waiters.as_ref().map_or(0, Vec::len);
            format!("holders: [{}]; waiters: {waiters}", holders.join(", "))
        }
        Err(err) => format!("inspect: {err}"),
    }
}

async fn take_all(
    harness: &Harness,
    locks: &omnilock::Locks,
    name: &str,
) -> omnilock::Result<bool> {
    let mut guards = Vec::new();
    let mut all = true;
    for request in harness.config.primitive.fill(locks, name) {
        match request.ttl(harness.config.ttl).try_acquire().await {
            Ok(Some(guard)) => guards.push(guard),
            Ok(None) => {
                all = false;
                break;
            }
            Err(err) => {
                for guard in guards {
                    let _ = guard.release().await;
                }
                return Err(err);
            }
        }
    }
    for guard in guards {
        let _ = guard.release().await;
    }
    Ok(all)
}

/// Reads a history file and checks it.
pub fn check_file(path: &std::path::Path) -> Result<Report, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(check(&history::read(&text)?))
}
