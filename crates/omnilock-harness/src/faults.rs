//! Clients that keep contending for one lock while a test breaks the store
//! (kills a member, partitions a node), recording what a safety checker
//! needs: how many grants, whether two clients were ever inside at once, and
//! whether fencing tokens rose in grant order; and the store faults
//! themselves (kill, pause and restart a node of the test topology).

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use omnilock_core::Locks;
use tokio::task::JoinHandle;

use crate::deadline::RunBounded;
use crate::topology::Topology;

/// A running contention; see [`Contention::start`].
pub struct Contention {
    record: Arc<Record>,
    stop: Arc<AtomicBool>,
    tasks: Vec<JoinHandle<()>>,
}

#[derive(Default)]
struct Record {
    grants: AtomicU64,
    errors: AtomicU64,
    inside: AtomicBool,
    last_token: Mutex<u64>,
    violations: Mutex<Vec<String>>,
}

/// What the clients saw, once stopped.
#[derive(Debug)]
pub struct Report {
    /// Critical sections completed.
    pub grants: u64,
    /// Retryable errors the clients rode out (acquires that failed while the
    /// store was broken).
    pub errors: u64,
    /// Safety violations: overlapping holds, tokens out of order.
    pub violations: Vec<String>,
}

impl Contention {
    /// Starts one task per client, each looping acquire (TTL 3 s) → check
    /// nobody else is inside and the token rose → 2 ms inside → release.
    /// Retryable errors are counted and retried; any other error fails the
    /// test.
    pub fn start(clients: Vec<Locks>, name: &str) -> Contention {
        let record = Arc::new(Record::default());
        let stop = Arc::new(AtomicBool::new(false));
        let tasks = clients
            .into_iter()
            .map(|locks| {
                tokio::spawn(contend(
                    locks,
                    name.to_string(),
                    record.clone(),
                    stop.clone(),
                ))
            })
            .collect();
        Contention {
            record,
            stop,
            tasks,
        }
    }

    /// Grants so far.
    pub fn grants(&self) -> u64 {
        self.record.grants.load(Ordering::SeqCst)
    }

    /// Waits until `more` grants happened after this call; panics with
    /// `what` if that takes longer than `within`. Returns how long it took.
    pub async fn wait_for_grants(&self, more: u64, within: Duration, what: &str) -> Duration {
        let started = Instant::now();
        let target = self.grants() + more;
        while self.grants() < target {
            assert!(
                started.elapsed() < within,
                "fewer than {more} grants within {within:?} {what}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        started.elapsed()
    }

    /// Stops the clients and returns what they saw.
    pub async fn stop(self) -> Report {
        self.stop.store(true, Ordering::SeqCst);
        for task in self.tasks {
            tokio::time::timeout(Duration::from_secs(60), task)
                .await
                .expect("clients stop within a minute")
                .expect("client task");
        }
        Report {
            grants: self.record.grants.load(Ordering::SeqCst),
            errors: self.record.errors.load(Ordering::SeqCst),
            violations: self.record.violations.lock().unwrap().clone(),
        }
    }
}

async fn contend(locks: Locks, name: String, record: Arc<Record>, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::SeqCst) {
        let guard = match locks
            .lock(&name)
            .ttl(Duration::from_secs(3))
            .timeout(Duration::from_secs(30))
            .acquire()
            .await
        {
            Ok(guard) => guard,
            Err(err) => {
                assert!(err.is_retryable(), "a non-retryable error: {err}");
                record.errors.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        if record.inside.swap(true, Ordering::SeqCst) {
            record
                .violations
                .lock()
                .unwrap()
                .push("two clients inside at once".into());
        }
        {
            let mut last = record.last_token.lock().unwrap();
            if guard.token() <= *last {
                record.violations.lock().unwrap().push(format!(
                    "token {} granted after token {}",
                    guard.token(),
                    *last
                ));
            }
            *last = guard.token();
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
        let still_held = guard.is_held();
        record.inside.store(false, Ordering::SeqCst);
        record.grants.fetch_add(1, Ordering::SeqCst);
        if let Err(err) = guard.release().await {
            // A release fails only when the lock was lost or the store was
            // unreachable; either way the lease frees it.
            record.errors.fetch_add(1, Ordering::SeqCst);
            assert!(
                err.is_retryable()
                    || !still_held
                    || err.kind() == omnilock_core::ErrorKind::NotOwner,
                "release: {err}"
            );
        }
    }
}

/// Member loss on a three-node deployment: 8 clients (from `connect`)
/// contend for `name` (see [`Contention::start`]) while first a follower
/// and then the leader of `deployment` (`leader` names the node that leads
/// now, one of `nodes`) is killed with SIGKILL and restarted. Grants must go
/// on, 20 more within `patience` before any fault and after each kill and
/// restart, and no safety violation may be seen.
pub async fn kill_follower_then_leader<C, CFut, F, Fut>(
    connect: C,
    name: &str,
    deployment: &str,
    nodes: &[&str],
    patience: Duration,
    mut leader: F,
) where
    C: Fn() -> CFut,
    CFut: std::future::Future<Output = omnilock_core::Result<Locks>>,
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = String>,
{
    let mut clients = Vec::new();
    for _ in 0..8 {
        clients.push(connect().await.expect("connect"));
    }
    let contention = Contention::start(clients, name);
    contention
        .wait_for_grants(20, patience, "before any fault")
        .await;
    for victim in ["follower", "leader"] {
        let leader = leader().await;
        let node = if victim == "leader" {
            leader
        } else {
            let follower = nodes.iter().find(|node| **node != leader);
            follower.expect("a follower").to_string()
        };
        kill_node(deployment, &node);
        let killed = format!("after killing the {victim} ({deployment} node {node})");
        let took = contention.wait_for_grants(20, patience, &killed).await;
        eprintln!("{victim} {node} killed: 20 more grants within {took:?}");
        restart_node(deployment, &node);
        let restarted = format!("after restarting {deployment} node {node}");
        contention.wait_for_grants(20, patience, &restarted).await;
    }
    let report = contention.stop().await;
    assert!(
        report.violations.is_empty(),
        "safety violations: {report:?}"
    );
    eprintln!("{report:?}");
}

/// The directory `scripts/stores.sh` keeps the test stores in: the
/// topology's, else `$OMNILOCK_STORES_DIR`, else `target/stores` of this
/// workspace.
pub fn stores_dir() -> PathBuf {
    if let Ok(topology) = Topology::load() {
        return topology.dir;
    }
    std::env::var_os("OMNILOCK_STORES_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| crate::topology::workspace_root().join("target/stores"))
}

/// The running process of node `node` of `deployment`, from a fresh read of
/// the topology (a restart changes it); panics when it is not running.
pub fn node_pid(deployment: &str, node: &str) -> u32 {
    let topology = Topology::load().expect("the test topology");
    let found = topology.deployment(deployment).node(node);
    found
        .live_pid()
        .unwrap_or_else(|| panic!("{deployment} node {node} is not running"))
}

/// SIGKILLs node `node` of `deployment` (see [`kill_store_process`]).
pub fn kill_node(deployment: &str, node: &str) {
    kill_store_process(node_pid(deployment, node));
}

/// Starts node `node` of `deployment` again after a kill, with
/// `scripts/stores.sh restart …` (which waits until it is ready).
pub fn restart_node(deployment: &str, node: &str) {
    let topology = Topology::load().expect("the test topology");
    let found = topology.deployment(deployment).node(node);
    if let Err(err) = topology.restart(found) {
        panic!("restarting {deployment} node {node}: {err}");
    }
}

/// SIGKILLs a store process and waits until it is gone (or a zombie).
pub fn kill_store_process(pid: u32) {
    let status = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status_or_fail("kill");
    assert!(status.success(), "kill -KILL {pid} failed");
    let stat = format!("/proc/{pid}/stat");
    while std::fs::read_to_string(&stat).is_ok_and(|s| !s.contains(") Z")) {
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A store process stopped with SIGSTOP (still connected, answering
/// nothing); dropping it sends SIGCONT, also when the test fails.
#[must_use = "dropping it continues the process at once"]
pub struct PausedStore(u32);

/// SIGSTOPs a store process until the returned guard is dropped.
pub fn pause_store_process(pid: u32) -> PausedStore {
    try_pause_store_process(pid).unwrap_or_else(|| panic!("kill -STOP {pid} failed"))
}

/// [`pause_store_process`], or `None` if there is no such process (any
/// more): a PostgreSQL backend listed a moment ago may have ended since,
/// its connection closed.
pub fn try_pause_store_process(pid: u32) -> Option<PausedStore> {
    let status = Command::new("kill")
        .args(["-STOP", &pid.to_string()])
        .stderr(std::process::Stdio::null())
        .status_or_fail("kill");
    status.success().then_some(PausedStore(pid))
}

impl Drop for PausedStore {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-CONT", &self.0.to_string()])
            .status();
    }
}
