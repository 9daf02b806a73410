//! Member failures on the 3-member test cluster: 8 clients contend for one
//! lock while first a follower and then the leader is killed (SIGKILL) and
//! restarted. No two clients may ever be inside at once, fencing tokens must
//! rise in grant order, and grants must resume after each kill.
//!
//! Runs alone in its own test binary: it kills members other tests use. Its
//! tests take [`MEMBERS`] in turn: two members down at once would lose the
//! quorum.

use std::time::{Duration, Instant};

use omnilock_core::StoreUrl;
use omnilock_etcd::EtcdConfig;
use omnilock_harness::faults::kill_follower_then_leader;
use omnilock_harness::topology::Topology;
use omnilock_testkit::store_url;

/// Held by each test while it kills members.
static MEMBERS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The client port of member N (1..3) of the cluster, from the topology.
fn port(n: u16) -> u16 {
    Topology::load()
        .expect("the test topology (scripts/stores.sh up)")
        .deployment("etcd")
        .node(&format!("e{n}"))
        .port()
}

/// Which member (1..3) leads now, asking each live member.
async fn leader() -> u16 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        for n in 1..=3u16 {
            let endpoint = format!("http://127.0.0.1:{}", port(n));
            let Ok(Ok(mut client)) = tokio::time::timeout(
                Duration::from_secs(1),
                etcd_client::Client::connect([endpoint], None),
            )
            .await
            else {
                continue;
            };
            if let Ok(Ok(status)) =
                tokio::time::timeout(Duration::from_secs(1), client.status()).await
            {
                let me = status.header().map(|h| h.member_id()).unwrap_or(0);
                if status.leader() != 0 && status.leader() == me {
                    return n;
                }
            }
        }
        assert!(Instant::now() < deadline, "the cluster has no leader");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn member_loss_keeps_exclusion_and_progress() {
    let _members = MEMBERS.lock().await;
    let url = store_url("ETCD").expect("OMNILOCK_TEST_ETCD_URL");
    // A short request deadline, so that calls stuck on a dead member give up fast.
    let url = format!("{url}?timeout=2s");
    let name = format!("faults/members/{}", std::process::id());
    let config = EtcdConfig::from_url(&StoreUrl::parse(&url).unwrap()).unwrap();
    let connect = || omnilock_etcd::connect(config.clone());
    let nodes = ["e1", "e2", "e3"];
    let patience = Duration::from_secs(30);
    kill_follower_then_leader(connect, &name, "etcd", &nodes, patience, || async {
        format!("e{}", leader().await)
    })
    .await;
}

/// Restarts the killed member when dropped, also when a test fails half
/// way: the tests after it need the whole cluster.
struct RestartOnDrop(&'static str);

impl Drop for RestartOnDrop {
    fn drop(&mut self) {
        omnilock_harness::faults::restart_node("etcd", self.0);
    }
}

/// One member of three down (quorum intact): a fresh client of the whole
/// cluster connects and locks every time, whichever member is down. Before,
/// the connect probe was one read, and the first requests of a lock one
/// request each, that the client's balancer could send to the dead member
/// ("connection refused"): most fresh clients (the CLI starts one per run)
/// gave up at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fresh_clients_connect_with_one_member_down() {
    let _members = MEMBERS.lock().await;
    let url = store_url("ETCD").expect("OMNILOCK_TEST_ETCD_URL");
    let config = EtcdConfig::from_url(&StoreUrl::parse(&url).unwrap()).unwrap();
    for down in ["e3", "e1"] {
        omnilock_harness::faults::kill_node("etcd", down);
        let _back = RestartOnDrop(down);
        // The quorum intact and led (if the leader was killed, once the
        // two left have elected one): what the rounds test is a member
        // down, not an election.
        leader().await;
        let mut failures = Vec::new();
        for round in 0..10 {
            let locks = match omnilock_etcd::connect(config.clone()).await {
                Ok(locks) => locks,
                Err(err) => {
                    failures.push(format!("round {round}: connect: {err}"));
                    continue;
                }
            };
            let name = format!("one-member-down/{down}/{round}");
            match locks.acquire(&name).await {
                Ok(guard) => {
                    if let Err(err) = guard.release().await {
                        failures.push(format!("round {round}: release: {err}"));
                    }
                }
                Err(err) => failures.push(format!("round {round}: acquire: {err}")),
            }
            locks.close().await;
        }
        drop(_back);
        assert!(
            failures.is_empty(),
            "with member {down} down, fresh clients failed: {failures:#?}"
        );
    }
}
