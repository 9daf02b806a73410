//! Ensemble failures: 8 clients contend for one lock while first a follower
//! and then the leader of the 3-node test ensemble is killed (SIGKILL) and
//! restarted. No two clients may ever be inside at once, fencing tokens
//! (czxids) must rise in grant order, and grants must go on.
//!
//! Runs alone in its own test binary: it kills nodes other tests use.

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use omnilock_core::StoreUrl;
use omnilock_harness::faults::kill_follower_then_leader;
use omnilock_harness::topology::Topology;
use omnilock_testkit::store_url;
use omnilock_zookeeper::ZkConfig;

/// The client port of node N (1..3) of the ensemble, from the topology.
fn port(n: u16) -> u16 {
    Topology::load()
        .expect("the test topology (scripts/stores.sh up)")
        .deployment("zookeeper")
        .node(&n.to_string())
        .port()
}

/// `srvr` on node N: its mode (leader, follower), if it answers.
fn mode(n: u16) -> Option<String> {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port(n))).ok()?;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn node_loss_keeps_exclusion_and_progress() {
    let url = store_url("ZK").expect("OMNILOCK_TEST_ZK_URL");
    let name = format!("faults-nodes-{}", std::process::id());
    let config = ZkConfig::from_url(&StoreUrl::parse(&url).unwrap()).unwrap();
    let connect = || omnilock_zookeeper::connect(config.clone());
    let nodes = ["1", "2", "3"];
    let patience = Duration::from_secs(60);
    kill_follower_then_leader(connect, &name, "zookeeper", &nodes, patience, || async {
        leader().to_string()
    })
    .await;
}
