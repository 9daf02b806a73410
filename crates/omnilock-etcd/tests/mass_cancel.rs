//! Many waiting acquisitions of one lock cancelled at once, then a hand-off
//! chain that must complete (issue 13, finding 12).
//!
//! `omnilock-bench` stalled a `mode=lockapi` herd chain after its contended
//! run, whose 64 clients' waiting acquisitions are all cut off at the same
//! instant. The cause was etcd's server-side Lock RPC (etcd 3.4): every
//! waiting Lock RPC watches through one in-process watch stream per member,
//! and a burst of watcher cancellations deadlocks that stream for good
//! (its client loop blocks sending a cancel request while the server blocks
//! queueing the cancel responses, which only that client loop would read).
//! From then on no Lock RPC that has to wait is ever answered by that member.
//! omnilock now waits on its own watches in both modes; this test keeps it so.
//!
//! A binary of its own: it queues hundreds of waiters on the test cluster.

use std::time::{Duration, Instant};

use omnilock_core::{ErrorKind, Locks, StoreUrl};
use omnilock_etcd::EtcdConfig;
use omnilock_testkit::store_url;

/// Waiters cancelled at once per round: enough for each member of the
/// 3-member cluster to see far more than the 16 that etcd's per-stream
/// control queue holds.
const WAITERS: usize = 96;
/// Rounds of burst + chain (the old code stalled in the first or second).
const ROUNDS: usize = 3;
/// Waiters in the hand-off chain after each burst (the bench's herd size).
const CHAIN: usize = 16;
/// A chain of 16 immediate hand-offs takes well under a second; a stalled
/// one never ends.
const CHAIN_BOUND: Duration = Duration::from_secs(30);
const PATIENCE: Duration = Duration::from_secs(20);
const TTL: Duration = Duration::from_secs(60);

async fn connect(url: &str) -> Locks {
    omnilock_etcd::connect(EtcdConfig::from_url(&StoreUrl::parse(url).unwrap()).unwrap())
        .await
        .expect("connect")
}

fn unique(what: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{what}/{}/{nanos}", std::process::id())
}

/// Every key in the lock's range with its create revision, lease and the
/// lease's remaining TTL: the evidence when something stays behind.
async fn listing(name: &str) -> String {
    let port =
        std::env::var("OMNILOCK_TEST_ETCD_FIRST_PORT").expect("OMNILOCK_TEST_ETCD_FIRST_PORT");
    let mut client = etcd_client::Client::connect([format!("http://127.0.0.1:{port}")], None)
        .await
        .expect("raw client");
    let range = format!("omnilock/{}/", name.replace('%', "%25").replace('/', "%2F"));
    let options = etcd_client::GetOptions::new().with_prefix().with_sort(
        etcd_client::SortTarget::Create,
        etcd_client::SortOrder::Ascend,
    );
    let resp = client
        .get(range.as_str(), Some(options))
        .await
        .expect("get");
    let mut out = format!(
        "{} key(s) in {range} at revision {}:\n",
        resp.kvs().len(),
        resp.header().map_or(0, |h| h.revision())
    );
    for kv in resp.kvs() {
        let ttl = match client.lease_time_to_live(kv.lease(), None).await {
            Ok(r) => r.ttl().to_string(),
            Err(e) => e.to_string(),
        };
        out += &format!(
            "  {} create={} lease={:x} lease_ttl={ttl}\n",
            String::from_utf8_lossy(kv.key()),
            kv.create_revision(),
            kv.lease(),
        );
    }
    out
}

/// Queues `n` acquisitions of `name` behind the current holder and returns
/// once every one reports waiting; sending on the returned channel drops
/// them all at the same instant.
async fn queue_cancellable(
    locks: &Locks,
    name: &str,
    n: usize,
) -> (
    tokio::sync::watch::Sender<bool>,
    Vec<tokio::task::JoinHandle<bool>>,
) {
    let (cancel, cancelled) = tokio::sync::watch::channel(false);
    let (queued_tx, mut queued_rx) = tokio::sync::mpsc::unbounded_channel();
    let mut tasks = Vec::new();
    for _ in 0..n {
        let (locks, name, queued) = (locks.clone(), name.to_string(), queued_tx.clone());
        let mut cancelled = cancelled.clone();
        tasks.push(tokio::spawn(async move {
            let acquire = locks
                .lock(&name)
                .ttl(TTL)
                .on_wait(move || {
                    let _ = queued.send(());
                })
                .acquire();
            tokio::select! {
                granted = acquire => {
                    drop(granted);
                    false
                }
                _ = cancelled.wait_for(|c| *c) => true,
            }
        }));
    }
    for i in 0..n {
        tokio::time::timeout(PATIENCE, queued_rx.recv())
            .await
            .unwrap_or_else(|_| panic!("only {i} of {n} waiters report waiting"))
            .expect("a waiter ended before waiting");
    }
    (cancel, tasks)
}

async fn burst_then_chain(url: &str) {
    let locks = connect(url).await;
    let name = unique("mass-cancel");
    for round in 0..ROUNDS {
        let holder = locks.lock(&name).ttl(TTL).acquire().await.expect("holder");
        let (cancel, doomed) = queue_cancellable(&locks, &name, WAITERS).await;
        cancel.send(true).expect("waiters listen");
        for task in doomed {
            assert!(
                task.await.expect("task"),
                "a waiter was granted a held lock"
            );
        }
        holder.release().await.expect("release");

        // The bench's herd: a holder, a chain of waiters that release at
        // once when granted, then the holder lets go.
        let holder = locks.lock(&name).ttl(TTL).acquire().await.expect("holder");
        let mut chain = Vec::new();
        for _ in 0..CHAIN {
            let (queued_tx, queued_rx) = tokio::sync::oneshot::channel();
            let (locks, name) = (locks.clone(), name.clone());
            chain.push(tokio::spawn(async move {
                let guard = locks
                    .lock(&name)
                    .ttl(TTL)
                    .on_wait(move || {
                        let _ = queued_tx.send(());
                    })
                    .acquire()
                    .await?;
                guard.release().await
            }));
            tokio::time::timeout(PATIENCE, queued_rx)
                .await
                .expect("a chain waiter reports waiting")
                .expect("a chain waiter ended before waiting");
        }
        let started = Instant::now();
        holder.release().await.expect("release");
        let aborts: Vec<_> = chain.iter().map(|t| t.abort_handle()).collect();
        let finished = tokio::time::timeout(CHAIN_BOUND, async {
            for task in chain {
                task.await.expect("task").expect("chain waiter");
            }
        })
        .await;
        if finished.is_err() {
            let evidence = listing(&name).await;
            aborts.iter().for_each(|a| a.abort());
            panic!(
                "round {round}: the hand-off chain of {CHAIN} stalled (not done within \
                 {CHAIN_BOUND:?} after the holder's release)\n{evidence}"
            );
        }
        eprintln!(
            "round {round}: {WAITERS} waiters cancelled at once, then {CHAIN} hand-offs in {:?}",
            started.elapsed()
        );
        // Nothing stays behind: the cancelled waiters' keys go at once
        // (their deletion runs in the background).
        let deadline = Instant::now() + PATIENCE;
        loop {
            match locks.try_acquire(&name).await {
                Ok(Some(guard)) => {
                    guard.release().await.expect("release");
                    break;
                }
                Ok(None) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(50)).await
                }
                Ok(None) => panic!("round {round}: keys left behind\n{}", listing(&name).await),
                Err(e) => assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}"),
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lockapi_hand_offs_continue_after_mass_cancellation() {
    let Some(url) = store_url("ETCD_LOCKAPI") else {
        return;
    };
    burst_then_chain(&url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn recipe_hand_offs_continue_after_mass_cancellation() {
    let Some(url) = store_url("ETCD") else { return };
    burst_then_chain(&url).await;
}
