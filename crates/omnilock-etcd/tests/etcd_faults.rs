//! Member failures on the 3-member test cluster: 8 clients contend for one
//! lock while first a follower and then the leader is killed (SIGKILL) and
//! restarted. No two clients may ever be inside at once, fencing tokens must
//! rise in grant order, and grants must resume after each kill.
//!
//! Runs alone in its own test binary: it kills members other tests use.

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use omnilock_core::{Locks, StoreUrl};
use omnilock_etcd::EtcdConfig;
use omnilock_testkit::store_url;

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
    std::env::var("OMNILOCK_TEST_ETCD_FIRST_PORT")
        .expect("OMNILOCK_TEST_ETCD_FIRST_PORT (set by scripts/stores.sh)")
        .parse()
        .expect("port")
}

/// The PID of cluster member `eN`, from the processes stores.sh recorded.
fn member_pid(n: u16) -> u32 {
    let pids = std::fs::read_to_string(stores_dir().join("pids")).expect("stores pids file");
    let wanted = format!("--name\0e{n}\0");
    pids.lines()
        .filter_map(|line| line.split_whitespace().next()?.parse::<u32>().ok())
        .find(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| String::from_utf8_lossy(&c).contains(&wanted))
                .unwrap_or(false)
        })
        .unwrap_or_else(|| panic!("no running etcd member e{n}"))
}

/// Which member (1..3) leads now, asking each live member.
async fn leader() -> u16 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        for n in 1..=3u16 {
            let endpoint = format!("http://127.0.0.1:{}", first_port() + n - 1);
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

fn kill(n: u16) {
    let pid = member_pid(n);
    let status = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    while std::path::Path::new(&format!("/proc/{pid}/stat")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .unwrap_or_default()
            .contains(") Z")
    {
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn restart(n: u16) {
    let status = Command::new(root().join("scripts/stores.sh"))
        .args(["restart", "etcd", &n.to_string()])
        .status()
        .expect("stores.sh restart etcd");
    assert!(status.success(), "restarting member e{n} failed");
}

/// What the contending clients saw.
#[derive(Default)]
struct Record {
    grants: AtomicU64,
    errors: AtomicU64,
    inside: AtomicBool,
    /// (token, grant number) in the order clients entered.
    last_token: Mutex<u64>,
    violations: Mutex<Vec<String>>,
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
            // A release can fail only if the lock was lost while held; then
            // the guard must have said so.
            if still_held {
                record.errors.fetch_add(1, Ordering::SeqCst);
            }
            assert!(err.is_retryable() || !still_held, "release: {err}");
        }
    }
}

async fn wait_for_grants(record: &Record, more_than: u64, within: Duration, what: &str) {
    let deadline = Instant::now() + within;
    while record.grants.load(Ordering::SeqCst) <= more_than {
        assert!(
            Instant::now() < deadline,
            "no grant within {within:?} {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn member_loss_keeps_exclusion_and_progress() {
    let url = store_url("ETCD").expect("OMNILOCK_TEST_ETCD_URL");
    // A short request deadline, so that calls stuck on a dead member give up fast.
    let url = format!("{url}?timeout=2s");
    let name = format!("faults/members/{}", std::process::id());
    let record = Arc::new(Record::default());
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for _ in 0..CLIENTS {
        let config = EtcdConfig::from_url(&StoreUrl::parse(&url).unwrap()).unwrap();
        let locks = omnilock_etcd::connect(config).await.expect("connect");
        tasks.push(tokio::spawn(contend(
            locks,
            name.clone(),
            record.clone(),
            stop.clone(),
        )));
    }
    wait_for_grants(&record, 20, Duration::from_secs(30), "before any fault").await;

    for victim in ["follower", "leader"] {
        let leader = leader().await;
        let n = if victim == "leader" {
            leader
        } else {
            (1..=3).find(|n| *n != leader).unwrap()
        };
        let before = record.grants.load(Ordering::SeqCst);
        kill(n);
        let killed_at = Instant::now();
        wait_for_grants(
            &record,
            before + 20,
            Duration::from_secs(30),
            &format!("after killing the {victim} (e{n})"),
        )
        .await;
        eprintln!(
            "{victim} e{n} killed: 20 more grants within {:?}",
            killed_at.elapsed()
        );
        restart(n);
        let before = record.grants.load(Ordering::SeqCst);
        wait_for_grants(
            &record,
            before + 20,
            Duration::from_secs(30),
            &format!("after restarting e{n}"),
        )
        .await;
    }
    stop.store(true, Ordering::SeqCst);
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(60), task)
            .await
            .expect("clients stop")
            .expect("client task");
    }
    let violations = record.violations.lock().unwrap();
    assert!(violations.is_empty(), "safety violations: {violations:?}");
    eprintln!(
        "{} grants, {} retried errors, 0 violations",
        record.grants.load(Ordering::SeqCst),
        record.errors.load(Ordering::SeqCst)
    );
}
