//! Failover under contention: 8 clients contend on locks spread over every
//! master while the master of a held lock is killed (SIGKILL; Redis Cluster
//! promotes its replica), or Sentinel fails the master over (`SENTINEL
//! FAILOVER`, and a killed master).
//!
//! Asserted: acquisitions resume within a bound, every client finishes,
//! fencing tokens of one lock keep rising across the failover, and the
//! deployment is whole again afterwards (the killed node back as a replica).
//! Reported, not hidden: double grants (two clients holding one lock at
//! once, which asynchronous replication allows), with and without
//! `wait_replicas=1`. The figures go to stderr (`--nocapture`) and to
//! `failover-*.txt` in the stores directory.
//!
//! The faults change which server is master, so each deployment's run one
//! after another (in one test per deployment), in a binary of their own;
//! the cluster's and the sentinel's run side by side. (`OMNILOCK_TEST_REDIS_CLUSTER_URL`,
//! `OMNILOCK_TEST_REDIS_SENTINEL_URL`, and the `redis_cluster` and
//! `redis_sentinel` deployments of the test topology)

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use omnilock_core::{ErrorKind, Locks, StoreUrl};
use omnilock_harness::faults::{kill_store_process, pause_store_process, restart_node, stores_dir};
use omnilock_harness::topology::Topology;
use omnilock_redis::RedisConfig;
use omnilock_testkit::store_url;

const SENTINEL_PASSWORD: &str = "omnilock-sentinel-pw";
const CLIENTS: usize = 8;
const NAMES: usize = 12;
/// Acquisitions must resume this soon after the fault (generous: the
/// cluster needs its node timeout, an election and a slot-map refresh; the
/// measured figure is reported).
const RESUME_BOUND: Duration = Duration::from_secs(20);
/// With `wait_replicas=1` a promoted master has no replica until the failed
/// node is back and re-synced (the test restarts it 4 s after the kill;
/// the sentinels take about 11 s more to make it a replica): no grant can
/// be confirmed until then.
const RESUME_BOUND_WAITING: Duration = Duration::from_secs(45);

mod common;

use common::silent::Silent;
use common::{PASSWORD, hand_off_by_message, master_of, ports, raw, with_option};

async fn connect(url: &str) -> Locks {
    omnilock_redis::connect(RedisConfig::from_url(&StoreUrl::parse(url).unwrap()).unwrap())
        .await
        .expect("connect")
}

/// What the contending clients saw.
#[derive(Default)]
struct Tally {
    grants: AtomicU64,
    /// Grants of a lock another client of this test still held.
    double_grants: AtomicU64,
    /// Grants whose token was not above the lock's previous grant's.
    token_regressions: AtomicU64,
    /// Acquires that failed for good (not a timeout, not retryable): a
    /// client would give up. The first few, for the message.
    hard_errors: Mutex<Vec<String>>,
    holders: Mutex<HashMap<String, usize>>,
    last_token: Mutex<HashMap<String, u64>>,
    /// The grants, after the fault, of the locks whose slot the failed
    /// master served.
    victim_grants: Mutex<Vec<Instant>>,
    victims: Mutex<Vec<String>>,
    fault_at: Mutex<Option<Instant>>,
}

impl Tally {
    fn granted(&self, name: &str, token: u64) {
        self.grants.fetch_add(1, Ordering::Relaxed);
        {
            let mut holders = self.holders.lock().unwrap();
            let held = holders.entry(name.to_string()).or_default();
            if *held > 0 {
                self.double_grants.fetch_add(1, Ordering::Relaxed);
            }
            *held += 1;
        }
        {
            let mut last = self.last_token.lock().unwrap();
            let previous = last.entry(name.to_string()).or_default();
            if token <= *previous {
                self.token_regressions.fetch_add(1, Ordering::Relaxed);
            }
            *previous = token.max(*previous);
        }
        let fault_at = *self.fault_at.lock().unwrap();
        if fault_at.is_some() && self.victims.lock().unwrap().iter().any(|v| v == name) {
            self.victim_grants.lock().unwrap().push(Instant::now());
        }
    }

    fn released(&self, name: &str) {
        let mut holders = self.holders.lock().unwrap();
        if let Some(held) = holders.get_mut(name) {
            *held = held.saturating_sub(1);
        }
    }
}

/// 8 clients, each on its own connection, take random locks of `names`
/// (held 5–15 ms) until `stop`.
fn contend(
    url: &str,
    run: &str,
    tally: &Arc<Tally>,
    stop: &Arc<AtomicBool>,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..CLIENTS)
        .map(|client| {
            let (url, run, tally, stop) = (
                url.to_string(),
                run.to_string(),
                tally.clone(),
                stop.clone(),
            );
            tokio::spawn(async move {
                let locks = connect(&url).await;
                let mut i = client;
                while !stop.load(Ordering::Relaxed) {
                    i = (i * 7 + 3) % NAMES;
                    let name = format!("{run}/{i}");
                    let guard = locks
                        .lock(&name)
                        .ttl(Duration::from_secs(3))
                        .timeout(Duration::from_secs(2))
                        .acquire()
                        .await;
                    let guard = match guard {
                        Ok(guard) => guard,
                        // Timed out or the store failing over: try again.
                        Err(err) if err.is_retryable() || err.kind() == ErrorKind::Timeout => {
                            tokio::time::sleep(Duration::from_millis(20)).await;
                            continue;
                        }
                        Err(err) => {
                            {
                                let mut hard = tally.hard_errors.lock().unwrap();
                                if hard.len() < 5 {
                                    hard.push(format!("{err:?}"));
                                }
                            }
                            tokio::time::sleep(Duration::from_millis(20)).await;
                            continue;
                        }
                    };
                    tally.granted(&name, guard.token());
                    tokio::time::sleep(Duration::from_millis(5 + (i as u64 % 10))).await;
                    tally.released(&name);
                    let _ = guard.release().await;
                }
            })
        })
        .collect()
}

/// The running process of the node of `deployment` on `port`, and the
/// node's name, from the test topology.
fn node_on(deployment: &str, port: u16) -> (u32, String) {
    let topology = Topology::load().expect("the test topology (scripts/stores.sh up)");
    let node = topology
        .deployment(deployment)
        .node_on(port)
        .unwrap_or_else(|| panic!("no node of {deployment} on port {port}"));
    let pid = node
        .live_pid()
        .unwrap_or_else(|| panic!("{deployment} node {} is not running", node.name));
    (pid, node.name.clone())
}

/// Every cluster node (the killed one included, so it is back) reports
/// `cluster_state:ok` with 3 masters.
async fn cluster_whole(ports: &[u16]) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let checks = futures_util::future::join_all(ports.iter().map(|p| client_whole(*p))).await;
        if checks.into_iter().all(|ok| ok) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the cluster is whole again within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A plain connection to `port` with the test password, or `None` if the
/// server does not answer in time.
async fn try_raw(port: u16) -> Option<redis::aio::MultiplexedConnection> {
    let client = redis::Client::open(format!("redis://:{PASSWORD}@127.0.0.1:{port}/")).ok()?;
    tokio::time::timeout(
        Duration::from_secs(2),
        client.get_multiplexed_async_connection(),
    )
    .await
    .ok()?
    .ok()
}

async fn client_whole(port: u16) -> bool {
    let Some(mut conn) = try_raw(port).await else {
        return false;
    };
    let Ok(info) = redis::cmd("CLUSTER")
        .arg("INFO")
        .query_async::<String>(&mut conn)
        .await
    else {
        return false;
    };
    info.contains("cluster_state:ok") && info.contains("cluster_size:3")
}

fn report(file: &str, line: &str) {
    eprintln!("{line}");
    let path = stores_dir().join(file);
    let _ = std::fs::create_dir_all(path.parent().unwrap());
    use std::io::Write;
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        let _ = writeln!(f, "{line}");
    }
}

struct Outcome {
    /// The longest time, from the fault on, in which no lock of the failed
    /// master was granted.
    longest_gap: Duration,
    grants: u64,
    double_grants: u64,
}

/// Runs the contention, applies `fault` once the clients are going, and
/// stops them a few seconds after acquisitions resume.
async fn under_contention<F, Fut>(url: &str, label: &str, bound: Duration, fault: F) -> Outcome
where
    F: FnOnce(Vec<String>) -> Fut,
    Fut: std::future::Future<Output = Vec<String>>,
{
    let run = format!("failover-{label}-{:08x}", rand::random::<u32>());
    let tally = Arc::new(Tally::default());
    let stop = Arc::new(AtomicBool::new(false));
    let tasks = contend(url, &run, &tally, &stop);
    // Going: some grants on every lock.
    let deadline = Instant::now() + Duration::from_secs(30);
    while tally.grants.load(Ordering::Relaxed) < 100 {
        assert!(Instant::now() < deadline, "{label}: contention starts");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let names: Vec<String> = (0..NAMES).map(|i| format!("{run}/{i}")).collect();
    let victims = fault(names).await;
    assert!(!victims.is_empty(), "{label}: the fault hits some locks");
    *tally.victims.lock().unwrap() = victims;
    let fault_at = Instant::now();
    *tally.fault_at.lock().unwrap() = Some(fault_at);
    // Runs until the failover is over (a SENTINEL FAILOVER answers at once
    // and switches a second later) and victims have been granted again for
    // a while.
    let deadline = fault_at + bound;
    loop {
        let victims_granted = tally.victim_grants.lock().unwrap().len();
        if fault_at.elapsed() > Duration::from_secs(8) && victims_granted >= 50 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{label}: {victims_granted} grants of the failed master's locks within {bound:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(30), task)
            .await
            .expect("every client finishes")
            .expect("client task");
    }
    assert_eq!(
        tally.token_regressions.load(Ordering::Relaxed),
        0,
        "{label}: fencing tokens keep rising across the failover"
    );
    let hard = tally.hard_errors.lock().unwrap().clone();
    assert!(
        hard.is_empty(),
        "{label}: acquires failed with errors that are neither timeouts nor retryable: {hard:?}"
    );
    let mut grants = tally.victim_grants.lock().unwrap().clone();
    grants.insert(0, fault_at);
    let longest_gap = grants
        .windows(2)
        .map(|w| w[1] - w[0])
        .max()
        .unwrap_or_default();
    assert!(longest_gap < bound, "{label}: longest gap {longest_gap:?}");
    Outcome {
        longest_gap,
        grants: tally.grants.load(Ordering::Relaxed),
        double_grants: tally.double_grants.load(Ordering::Relaxed),
    }
}

async fn cluster_master_kill(wait: bool) {
    let url = store_url("REDIS_CLUSTER").expect("cluster URL");
    let url = if wait {
        with_option(&url, "wait_replicas=1&wait_timeout=500ms")
    } else {
        url
    };
    let ports = ports("redis_cluster");
    cluster_whole(&ports).await;
    let label = if wait { "cluster-wait1" } else { "cluster" };
    let seed_ports = ports.clone();
    let bound = if wait {
        RESUME_BOUND_WAITING
    } else {
        RESUME_BOUND
    };
    let outcome = under_contention(&url, label, bound, |names| async move {
        // The master of the first lock: kill it, and every lock it served is a victim.
        let seed = seed_ports[0];
        let master = master_of(seed, &format!("{{omnilock:{}}}", names[0])).await;
        let (pid, node) = node_on("redis_cluster", master);
        let mut victims = Vec::new();
        let alive = *seed_ports.iter().find(|p| **p != master).unwrap();
        for name in &names {
            if master_of(alive, &format!("{{omnilock:{name}}}")).await == master {
                victims.push(name.clone());
            }
        }
        kill_store_process(pid);
        // Start it again once its replica has taken over (in the background:
        // the contention goes on meanwhile).
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(4)).await;
            tokio::task::spawn_blocking(move || restart_node("redis_cluster", &node))
                .await
                .unwrap();
        });
        victims
    })
    .await;
    report(
        "failover-cluster.txt",
        &format!(
            "redis-cluster master SIGKILL{}: longest stop of the failed master's locks {} ms; {} grants, {} double grants",
            if wait { " (wait_replicas=1)" } else { "" },
            outcome.longest_gap.as_millis(),
            outcome.grants,
            outcome.double_grants
        ),
    );
    // Whole again before the next test: the killed node back, as a replica.
    tokio::time::sleep(Duration::from_secs(5)).await;
    cluster_whole(&ports).await;
}

async fn cluster_master_killed() {
    cluster_master_kill(false).await;
}

async fn cluster_master_killed_with_wait_replicas() {
    cluster_master_kill(true).await;
}

/// A cluster master other than `than`.
async fn another_master(seed: u16, than: u16) -> u16 {
    for probe in 0..1000 {
        let master = master_of(seed, &format!("{{probe-{probe}}}")).await;
        if master != than {
            return master;
        }
    }
    panic!("no master but {than}")
}

/// Moves `slot` from master `from` to master `to` the way `redis-cli
/// --cluster reshard` does: `IMPORTING`/`MIGRATING`, its keys with
/// `MIGRATE` (clients meanwhile get `ASK` and `TRYAGAIN`), then the slot
/// assigned to `to` on every master.
async fn migrate_slot(ports: &[u16], slot: u16, from: u16, to: u16) {
    let (mut source, mut target) = (raw(from, PASSWORD).await, raw(to, PASSWORD).await);
    let id = |mut conn: redis::aio::MultiplexedConnection| async move {
        redis::cmd("CLUSTER")
            .arg("MYID")
            .query_async::<String>(&mut conn)
            .await
            .unwrap()
    };
    let (source_id, target_id) = (id(source.clone()).await, id(target.clone()).await);
    let setslot = |state: &'static str, node: String| {
        let mut cmd = redis::cmd("CLUSTER");
        cmd.arg("SETSLOT").arg(slot).arg(state).arg(node);
        cmd
    };
    let () = setslot("IMPORTING", source_id.clone())
        .query_async(&mut target)
        .await
        .unwrap();
    let () = setslot("MIGRATING", target_id.clone())
        .query_async(&mut source)
        .await
        .unwrap();
    loop {
        let keys: Vec<String> = redis::cmd("CLUSTER")
            .arg("GETKEYSINSLOT")
            .arg(slot)
            .arg(100)
            .query_async(&mut source)
            .await
            .unwrap();
        if keys.is_empty() {
            break;
        }
        let () = redis::cmd("MIGRATE")
            .arg("127.0.0.1")
            .arg(to)
            .arg("")
            .arg(0)
            .arg(5000)
            .arg("AUTH")
            .arg(PASSWORD)
            .arg("KEYS")
            .arg(&keys)
            .query_async(&mut source)
            .await
            .unwrap();
    }
    let () = setslot("NODE", target_id.clone())
        .query_async(&mut target)
        .await
        .unwrap();
    let () = setslot("NODE", target_id.clone())
        .query_async(&mut source)
        .await
        .unwrap();
    for port in ports {
        // Replicas refuse SETSLOT; the other masters learn it by gossip
        // too, this only makes it sooner.
        let _ = setslot("NODE", target_id.clone())
            .query_async::<()>(&mut raw(*port, PASSWORD).await)
            .await;
    }
}

/// The lock's slot moves to another master under contention, and back:
/// scripts meet `ASK`, `TRYAGAIN` and `MOVED` on the way. No double grant,
/// no token regression, and the lock keeps being granted (its waiters are
/// not lost with the move).
async fn cluster_slot_migrated() {
    let url = store_url("REDIS_CLUSTER").expect("cluster URL");
    let ports = ports("redis_cluster");
    cluster_whole(&ports).await;
    let seed = ports[0];
    let moved = Arc::new(Mutex::new(None));
    let record = moved.clone();
    let fault_ports = ports.clone();
    let outcome = under_contention(&url, "cluster-migrate", RESUME_BOUND, |names| async move {
        let key = format!("{{omnilock:{}}}", names[0]);
        let slot: u16 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(&key)
            .query_async(&mut raw(seed, PASSWORD).await)
            .await
            .unwrap();
        let from = master_of(seed, &key).await;
        let to = another_master(seed, from).await;
        migrate_slot(&fault_ports, slot, from, to).await;
        *record.lock().unwrap() = Some((slot, from, to));
        let mut victims = Vec::new();
        for name in &names {
            if master_of(seed, &format!("{{omnilock:{name}}}")).await == to
                && redis::cmd("CLUSTER")
                    .arg("KEYSLOT")
                    .arg(format!("{{omnilock:{name}}}"))
                    .query_async::<u16>(&mut raw(seed, PASSWORD).await)
                    .await
                    .unwrap()
                    == slot
            {
                victims.push(name.clone());
            }
        }
        victims
    })
    .await;
    report(
        "failover-cluster.txt",
        &format!(
            "redis-cluster slot migration: longest stop of the moved lock {} ms; {} grants, {} double grants",
            outcome.longest_gap.as_millis(),
            outcome.grants,
            outcome.double_grants
        ),
    );
    assert_eq!(
        outcome.double_grants, 0,
        "a slot move is no failover: no double grant"
    );
    // Put the slot back where it was.
    let (slot, from, to) = moved.lock().unwrap().expect("moved");
    migrate_slot(&ports, slot, to, from).await;
    cluster_whole(&ports).await;
}

/// A client that has waited on a lock keeps its sharded subscription for
/// a while; when the lock's slot moves to another master the server ends
/// that subscription, and the client's next wait subscribes again at the
/// new master: the grant still comes by message, not by the waiter's
/// periodic re-check.
async fn cluster_wakeups_follow_a_moved_slot() {
    use omnilock_core::LockName;
    let url = store_url("REDIS_CLUSTER").expect("cluster URL");
    let ports = ports("redis_cluster");
    cluster_whole(&ports).await;
    let config = RedisConfig::from_url(&StoreUrl::parse(&url).unwrap()).unwrap();
    let backend = omnilock_redis::RedisStore::connect(config)
        .await
        .expect("connect");
    let holder = connect(&url).await;
    let name = format!("moved-wake-{:08x}", rand::random::<u32>());
    let channel = backend.wake_channel(&LockName::new(&name).unwrap());

    assert!(
        hand_off_by_message(&backend, &holder, &name).await,
        "before the move: granted by message"
    );

    let seed = ports[0];
    let slot: u16 = redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(&channel)
        .query_async(&mut raw(seed, PASSWORD).await)
        .await
        .unwrap();
    let from = master_of(seed, &channel).await;
    let to = another_master(seed, from).await;
    // Within the 5 s the idle subscription lingers.
    migrate_slot(&ports, slot, from, to).await;
    let moved_ok = hand_off_by_message(&backend, &holder, &name).await;
    migrate_slot(&ports, slot, to, from).await;
    cluster_whole(&ports).await;
    assert!(
        moved_ok,
        "after the slot moved the grant came from the waiter's re-check, not a wake-up message"
    );
}

/// The sentinel set's current master port (of the two data nodes).
async fn sentinel_master(sentinel: u16) -> u16 {
    let (_, port): (String, u16) = redis::cmd("SENTINEL")
        .arg("GET-MASTER-ADDR-BY-NAME")
        .arg("omnilock-master")
        .query_async(&mut raw(sentinel, SENTINEL_PASSWORD).await)
        .await
        .unwrap();
    port
}

/// Both data nodes up, one master with one connected replica, and every
/// sentinel agreeing on it.
async fn sentinel_whole(ports: &[u16]) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        assert!(
            Instant::now() < deadline,
            "the sentinel set is whole again within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
        let mut masters = Vec::new();
        for sentinel in &ports[2..] {
            masters.push(sentinel_master(*sentinel).await);
        }
        if masters.windows(2).any(|w| w[0] != w[1]) {
            continue;
        }
        // Both data nodes answer (a killed one is back).
        if try_raw(ports[0]).await.is_none() || try_raw(ports[1]).await.is_none() {
            continue;
        }
        let Some(mut conn) = try_raw(masters[0]).await else {
            continue;
        };
        let Ok(info) = redis::cmd("INFO")
            .arg("replication")
            .query_async::<String>(&mut conn)
            .await
        else {
            continue;
        };
        if info.contains("role:master")
            && info.contains("connected_slaves:1")
            && info.contains("state=online")
        {
            return;
        }
    }
}

async fn sentinel_fault(kill: bool, wait: bool) {
    let url = store_url("REDIS_SENTINEL").expect("sentinel URL");
    let url = if wait {
        with_option(&url, "wait_replicas=1&wait_timeout=500ms")
    } else {
        url
    };
    let ports = ports("redis_sentinel");
    sentinel_whole(&ports).await;
    let label = match (kill, wait) {
        (true, false) => "sentinel-kill",
        (true, true) => "sentinel-kill-wait1",
        (false, _) => "sentinel-failover",
    };
    let fault_ports = ports.clone();
    let bound = if wait {
        RESUME_BOUND_WAITING
    } else {
        RESUME_BOUND
    };
    let outcome = under_contention(&url, label, bound, |names| async move {
        let master = sentinel_master(fault_ports[2]).await;
        if kill {
            let (pid, node) = node_on("redis_sentinel", master);
            kill_store_process(pid);
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_secs(4)).await;
                tokio::task::spawn_blocking(move || restart_node("redis_sentinel", &node))
                    .await
                    .unwrap();
            });
        } else {
            let _: String = redis::cmd("SENTINEL")
                .arg("FAILOVER")
                .arg("omnilock-master")
                .query_async(&mut raw(fault_ports[2], SENTINEL_PASSWORD).await)
                .await
                .expect("SENTINEL FAILOVER");
        }
        // One master: every lock is a victim.
        names
    })
    .await;
    report(
        "failover-sentinel.txt",
        &format!(
            "redis-sentinel {}{}: longest stop of the failed master's locks {} ms; {} grants, {} double grants",
            if kill {
                "master SIGKILL"
            } else {
                "SENTINEL FAILOVER"
            },
            if wait { " (wait_replicas=1)" } else { "" },
            outcome.longest_gap.as_millis(),
            outcome.grants,
            outcome.double_grants
        ),
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    sentinel_whole(&ports).await;
}

async fn sentinel_failover_command() {
    sentinel_fault(false, false).await;
}

async fn sentinel_master_killed() {
    sentinel_fault(true, false).await;
}

async fn sentinel_master_killed_with_wait_replicas() {
    sentinel_fault(true, true).await;
}

/// Fresh clients connect while the sentinels promote the replica of a
/// killed master: connecting asks the sentinels again until its timeout
/// (they name the dead master, then a replica not yet promoted) instead of
/// failing at once; once connected, a client locks on the new master.
async fn fresh_clients_connect_during_a_failover() {
    let url = with_option(
        &store_url("REDIS_SENTINEL").expect("sentinel URL"),
        "connect_timeout=20s",
    );
    let ports = ports("redis_sentinel");
    sentinel_whole(&ports).await;
    let master = sentinel_master(ports[2]).await;
    let (pid, node) = node_on("redis_sentinel", master);
    kill_store_process(pid);
    // Back also if a fresh client fails: the steps after this one need it.
    let back = RestartOnDrop(Some(node));
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut fresh = 0;
    loop {
        let promoted = sentinel_master(ports[2]).await != master;
        let config = RedisConfig::from_url(&StoreUrl::parse(&url).unwrap()).unwrap();
        let locks = omnilock_redis::connect(config)
            .await
            .unwrap_or_else(|e| panic!("fresh client {fresh} during the failover: {e}"));
        let guard = locks
            .acquire(&format!("fresh-during-failover/{fresh}"))
            .await
            .unwrap_or_else(|e| panic!("fresh client {fresh}: acquire: {e}"));
        guard.release().await.expect("release");
        locks.close().await;
        fresh += 1;
        // Until one connected after the sentinels named the new master.
        if promoted {
            break;
        }
        assert!(Instant::now() < deadline, "no failover within 60 s");
    }
    tokio::task::spawn_blocking(move || drop(back))
        .await
        .unwrap();
    sentinel_whole(&ports).await;
}

/// Restarts a killed node of the sentinel deployment when dropped.
struct RestartOnDrop(Option<String>);

impl Drop for RestartOnDrop {
    fn drop(&mut self) {
        if let Some(node) = self.0.take() {
            restart_node("redis_sentinel", &node);
        }
    }
}

/// A reentrant acquire whose grants the replica cannot confirm (it is
/// paused: still connected, never acknowledging) is undone each time, and
/// only its own hold is undone: the owner's outer hold survives every
/// retry. (Retries once re-used the call id, so a retry got the grant that
/// was being undone back, and the next undo took the outer hold.)
async fn an_unconfirmed_reentrant_acquire_keeps_the_outer_hold() {
    let url = store_url("REDIS_SENTINEL").expect("sentinel URL");
    let ports = ports("redis_sentinel");
    sentinel_whole(&ports).await;
    let master = sentinel_master(ports[2]).await;
    let replica = *ports[..2].iter().find(|p| **p != master).unwrap();
    let confirmed = connect(&with_option(&url, "wait_replicas=1&wait_timeout=500ms")).await;
    let impatient = connect(&with_option(&url, "wait_replicas=1&wait_timeout=100ms")).await;
    let name = format!("unconfirmed-reentrant-{:08x}", rand::random::<u32>());
    let owner = omnilock_core::Owner::new(&format!("owner-{:08x}", rand::random::<u32>())).unwrap();
    let outer = confirmed
        .lock(&name)
        .owner(&owner)
        .ttl(Duration::from_secs(20))
        .acquire()
        .await
        .expect("outer hold, confirmed");

    let paused = pause_store_process(node_on("redis_sentinel", replica).0);
    let err = impatient
        .lock(&name)
        .owner(&owner)
        .timeout(Duration::from_secs(3))
        .acquire()
        .await
        .expect_err("the paused replica confirms nothing");
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    drop(paused);

    // Undos still under way (of an attempt the timeout cut short) run at
    // once; the outer hold is still there after them.
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let holder = confirmed.holder(&name).await.expect("holder");
        let holder = holder.expect("the outer hold survives the undone re-entries");
        assert_eq!(holder.token, outer.token());
        if Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(outer.is_held());
    outer.release().await.expect("release the outer hold");
    assert!(
        confirmed.holder(&name).await.unwrap().is_none(),
        "one release frees it"
    );
    sentinel_whole(&ports).await;
}

/// The cluster's faults, one after another: each needs the cluster whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cluster_faults() {
    cluster_master_killed().await;
    cluster_master_killed_with_wait_replicas().await;
    cluster_slot_migrated().await;
    cluster_wakeups_follow_a_moved_slot().await;
}

/// While every sentinel is silent (a network that drops their packets),
/// calls that fail on the master do not each ask the sentinels again:
/// eight calls, each after the master dropped every client connection,
/// ask them at most three times (each ask waits on silent sentinels for
/// half the connect timeout).
async fn refreshes_are_spaced_during_a_sentinel_outage() {
    let ports = ports("redis_sentinel");
    sentinel_whole(&ports).await;
    let mut proxies = Vec::new();
    for sentinel in &ports[2..] {
        proxies.push(Silent::start(*sentinel).await);
    }
    let seeds: Vec<String> = proxies
        .iter()
        .map(|p| format!("127.0.0.1:{}", p.port))
        .collect();
    let url = format!(
        "redis+sentinel://:{PASSWORD}@{}/omnilock-master?sentinel_password={SENTINEL_PASSWORD}&connect_timeout=1s",
        seeds.join(",")
    );
    let locks = connect(&url).await;
    locks.holder("outage").await.expect("through the proxies");
    // The watcher's subscription and first look are done.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let master = sentinel_master(ports[2]).await;
    let mut admin = raw(master, PASSWORD).await;
    for proxy in &proxies {
        proxy.set(true);
    }
    let accepted = |proxies: &[Silent]| proxies.iter().map(Silent::accepted).sum::<usize>();
    let before = accepted(&proxies);
    for _ in 0..8 {
        let _: i64 = redis::cmd("CLIENT")
            .arg("KILL")
            .arg("TYPE")
            .arg("normal")
            .query_async(&mut admin)
            .await
            .expect("CLIENT KILL");
        let _ = locks.holder("outage").await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Each ask opens a connection to each of the three sentinels.
    let asks = (accepted(&proxies) - before).div_ceil(3);
    for proxy in &proxies {
        proxy.set(false);
    }
    locks.close().await;
    assert!(
        asks >= 1,
        "the dropped connections made a call ask the sentinels"
    );
    assert!(
        asks <= 3,
        "{asks} asks of silent sentinels for 8 failed calls"
    );
}

/// Sentinel's faults, one after another: each needs its master and replica.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sentinel_faults() {
    sentinel_failover_command().await;
    sentinel_master_killed().await;
    sentinel_master_killed_with_wait_replicas().await;
    fresh_clients_connect_during_a_failover().await;
    an_unconfirmed_reentrant_acquire_keeps_the_outer_hold().await;
    refreshes_are_spaced_during_a_sentinel_outage().await;
}
