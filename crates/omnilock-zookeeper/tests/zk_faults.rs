//! Ensemble failures: 8 clients contend for one lock while first a follower
//! and then the leader of the 3-node test ensemble is killed (SIGKILL) and
//! restarted. No two clients may ever be inside at once, fencing tokens
//! (czxids) must rise in grant order, and grants must go on.
//!
//! Runs alone in its own test binary: it kills nodes other tests use.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use omnilock_core::StoreUrl;
use omnilock_testkit::faults::Contention;
use omnilock_testkit::store_url;
use omnilock_zookeeper::ZkConfig;

const CLIENTS: usize = 8;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn stores_dir() -> PathBuf {
    std::env::var_os("OMNILOCK_STORES_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target/stores"))
}

fn first_port() -> u16 {
    std::env::var("OMNILOCK_TEST_ZK_FIRST_PORT")
        .expect("OMNILOCK_TEST_ZK_FIRST_PORT (set by scripts/stores.sh)")
        .parse()
        .expect("port")
}

/// `srvr` on node N: its mode (leader, follower), if it answers.
fn mode(n: u16) -> Option<String> {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", first_port() + n - 1)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    stream.write_all(b"srvr").ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    answer
        .lines()
        .find_map(|l| l.strip_prefix("Mode: "))
        .map(str::to_string)
}

fn leader() -> u16 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(n) = (1..=3).find(|n| mode(*n).as_deref() == Some("leader")) {
            return n;
        }
        assert!(Instant::now() < deadline, "the ensemble has no leader");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The PID of node N, from the processes stores.sh recorded.
fn node_pid(n: u16) -> u32 {
    let pids = std::fs::read_to_string(stores_dir().join("pids")).expect("stores pids file");
    let name = format!("zk/{n}/zoo.cfg");
    pids.lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let pid = fields.next()?.parse::<u32>().ok()?;
            (fields.next()? == name).then_some(pid)
        })
        .find(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| String::from_utf8_lossy(&c).contains(&name))
                .unwrap_or(false)
        })
        .unwrap_or_else(|| panic!("no running ZooKeeper node {n}"))
}

fn kill(n: u16) {
    let pid = node_pid(n);
    let status = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
}

fn restart(n: u16) {
    let status = Command::new(root().join("scripts/stores.sh"))
        .args(["restart", "zookeeper", &n.to_string()])
        .status()
        .expect("stores.sh restart zookeeper");
    assert!(status.success(), "restarting node {n} failed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn node_loss_keeps_exclusion_and_progress() {
    let url = store_url("ZK").expect("OMNILOCK_TEST_ZK_URL");
    let name = format!("faults-nodes-{}", std::process::id());
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        let config = ZkConfig::from_url(&StoreUrl::parse(&url).unwrap()).unwrap();
        clients.push(omnilock_zookeeper::connect(config).await.expect("connect"));
    }
    let contention = Contention::start(clients, &name);
    contention
        .wait_for_grants(20, Duration::from_secs(30), "before any fault")
        .await;
    for victim in ["follower", "leader"] {
        let leader = leader();
        let n = if victim == "leader" {
            leader
        } else {
            (1..=3).find(|n| *n != leader).unwrap()
        };
        kill(n);
        let took = contention
            .wait_for_grants(
                20,
                Duration::from_secs(60),
                &format!("after killing the {victim} (node {n})"),
            )
            .await;
        eprintln!("{victim} node {n} killed: 20 more grants within {took:?}");
        restart(n);
        contention
            .wait_for_grants(
                20,
                Duration::from_secs(60),
                &format!("after restarting node {n}"),
            )
            .await;
    }
    let report = contention.stop().await;
    assert!(
        report.violations.is_empty(),
        "safety violations: {report:?}"
    );
    eprintln!("{report:?}");
}
