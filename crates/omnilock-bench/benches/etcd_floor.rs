//! etcd: omnilock's acquire + release (recipe and Lock-RPC modes) against the
//! raw floor (a plain put + delete), the least a safe lock needs (one `Txn`
//! put-if-absent on a lease + one revision-fenced `Txn` delete), and etcd's
//! own Lock + Unlock RPC used directly — all in interleaved batches of the same run, one client,
//! sequential, uncontended. Then 8 clients, each on its own connection
//! and lease, contend for one lock: etcd's Lock RPC (the peer) against
//! omnilock's recipe, grants per second and fairness.
//!
//! ```sh
//! scripts/stores.sh up && source target/stores/env
//! cargo bench -p omnilock-bench --bench etcd_floor
//! ```

#[path = "common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use common::{batches, iterations, ms, percentile};
use etcd_client::{Compare, CompareOp, LockOptions, PutOptions, Txn, TxnOp};

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let iterations = iterations(1000);
    let Ok(url) = std::env::var("OMNILOCK_TEST_ETCD_URL") else {
        eprintln!("set OMNILOCK_TEST_ETCD_URL (scripts/stores.sh up)");
        return;
    };
    let hosts: Vec<String> = common::hosts(&url)
        .iter()
        .map(|h| format!("http://{h}"))
        .collect();
    let mut raw = etcd_client::Client::connect(&hosts, None)
        .await
        .expect("raw client");
    // A run killed half-way may have left its floor key behind.
    let _ = raw
        .delete(
            "bench/floor/",
            Some(etcd_client::DeleteOptions::new().with_prefix()),
        )
        .await;
    let lease = raw.lease_grant(15, None).await.expect("lease").id();
    let (mut keeper, mut stream) = raw.lease_keep_alive(lease).await.expect("keep-alive");
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(3)).await;
            if keeper.keep_alive().await.is_err() || stream.message().await.is_err() {
                return;
            }
        }
    });
    let mut tuned = etcd_client::Client::connect(
        &hosts,
        Some(
            etcd_client::ConnectOptions::new()
                .with_connect_timeout(Duration::from_secs(5))
                .with_keep_alive(Duration::from_secs(5), Duration::from_secs(3))
                .with_keep_alive_while_idle(true),
        ),
    )
    .await
    .expect("tuned client");
    let recipe = omnilock::connect(&url).await.expect("recipe");
    let lockapi = omnilock::connect(&format!("{url}?mode=lockapi"))
        .await
        .expect("lockapi");

    let mut samples: [Vec<Duration>; 6] = Default::default();
    let mut halves: (Vec<Duration>, Vec<Duration>) = Default::default();
    let mut raw_halves: (Vec<Duration>, Vec<Duration>) = Default::default();
    for (_, warmup, per_batch) in batches(iterations) {
        // omnilock's recipe, its two transactions sent by the raw client.
        for _ in 0..per_batch {
            let raw = &mut tuned;
            let started = Instant::now();
            let (prefix, key) = ("bench/recipe/", "bench/recipe/o:me");
            let put = Txn::new()
                .when([Compare::create_revision(key, CompareOp::Equal, 0)])
                .and_then([
                    TxnOp::put(key, "1", Some(PutOptions::new().with_lease(lease))),
                    TxnOp::get(
                        prefix,
                        Some(
                            etcd_client::GetOptions::new()
                                .with_prefix()
                                .with_sort(
                                    etcd_client::SortTarget::Create,
                                    etcd_client::SortOrder::Descend,
                                )
                                .with_limit(2)
                                .with_keys_only(),
                        ),
                    ),
                ])
                .or_else([TxnOp::get(key, None)]);
            let resp = tokio::time::timeout(Duration::from_secs(5), raw.clone().txn(put))
                .await
                .unwrap()
                .expect("put");
            let put_took = started.elapsed();
            let rev = resp.header().unwrap().revision();
            let delete = Txn::new()
                .when([
                    Compare::create_revision(key, CompareOp::Equal, rev),
                    Compare::value(key, CompareOp::Equal, "1"),
                ])
                .and_then([TxnOp::delete(key, None)])
                .or_else([TxnOp::get(key, None)]);
            let deleted = tokio::time::timeout(Duration::from_secs(5), raw.clone().txn(delete))
                .await
                .unwrap()
                .expect("delete");
            assert!(deleted.succeeded());
            if !warmup {
                samples[5].push(started.elapsed());
                raw_halves.0.push(put_took);
                raw_halves.1.push(started.elapsed() - put_took);
            }
        }
        for _ in 0..per_batch {
            let started = Instant::now();
            raw.put("bench/floor/raw", "1", None).await.expect("put");
            raw.delete("bench/floor/raw", None).await.expect("delete");
            if !warmup {
                samples[4].push(started.elapsed());
            }
        }
        for _ in 0..per_batch {
            let started = Instant::now();
            let key = "bench/floor/o:me";
            let put = Txn::new()
                .when([Compare::create_revision(key, CompareOp::Equal, 0)])
                .and_then([TxnOp::put(
                    key,
                    "1",
                    Some(PutOptions::new().with_lease(lease)),
                )]);
            let resp = raw.txn(put).await.expect("put");
            assert!(resp.succeeded());
            let rev = resp.header().unwrap().revision();
            let delete = Txn::new()
                .when([Compare::create_revision(key, CompareOp::Equal, rev)])
                .and_then([TxnOp::delete(key, None)]);
            assert!(raw.txn(delete).await.expect("delete").succeeded());
            if !warmup {
                samples[0].push(started.elapsed());
            }
        }
        for _ in 0..per_batch {
            let started = Instant::now();
            let held = raw
                .lock("bench/rpc", Some(LockOptions::new().with_lease(lease)))
                .await
                .expect("lock");
            raw.unlock(held.key().to_vec()).await.expect("unlock");
            if !warmup {
                samples[1].push(started.elapsed());
            }
        }
        for (locks, i) in [(&recipe, 2), (&lockapi, 3)] {
            for _ in 0..per_batch {
                let started = Instant::now();
                let guard = locks.acquire("bench/uncontended").await.expect("acquire");
                let acquired = started.elapsed();
                guard.release().await.expect("release");
                if !warmup {
                    samples[i].push(started.elapsed());
                    if i == 2 {
                        halves.0.push(acquired);
                        halves.1.push(started.elapsed() - acquired);
                    }
                }
            }
        }
    }
    for s in samples.iter_mut() {
        s.sort();
    }
    for s in [
        &mut halves.0,
        &mut halves.1,
        &mut raw_halves.0,
        &mut raw_halves.1,
    ] {
        s.sort();
    }
    println!(
        "acquire p50 {} (raw Txn {}), release p50 {} (raw Txn {})",
        ms(percentile(&halves.0, 0.5)),
        ms(percentile(&raw_halves.0, 0.5)),
        ms(percentile(&halves.1, 0.5)),
        ms(percentile(&raw_halves.1, 0.5)),
    );
    let p50 = |s: &[Duration]| percentile(s, 0.5);
    let contended_rows = [
        ("etcd Lock + Unlock RPC (peer)", contend_rpc(&hosts).await),
        ("omnilock etcd://", contend_omnilock(&url).await),
    ];
    let floor = p50(&samples[4]).as_secs_f64();
    println!("| measured (etcd, 3 members) | p50 | p99 | p50 / raw floor |");
    println!("|---|---|---|---|");
    for (label, s) in [
        ("raw floor: put + delete", &samples[4]),
        (
            "safe floor: Txn put-if-absent on a lease + Txn fenced delete",
            &samples[0],
        ),
        ("etcd Lock + Unlock RPC, raw (peer)", &samples[1]),
        (
            "omnilock's two recipe Txns, raw client with omnilock's options",
            &samples[5],
        ),
        ("omnilock etcd:// acquire + release", &samples[2]),
        (
            "omnilock etcd://?mode=lockapi acquire + release",
            &samples[3],
        ),
    ] {
        println!(
            "| {label} | {} | {} | {:.2}x |",
            ms(p50(s)),
            ms(percentile(s, 0.99)),
            p50(s).as_secs_f64() / floor
        );
    }
    println!();
    println!(
        "| {CLIENTS} clients, a connection each, one lock | grants/s | wait p50 | wait p99 | fairness |"
    );
    println!("|---|---|---|---|---|");
    for (label, (per_second, mut waits, fairness)) in contended_rows {
        waits.sort();
        println!(
            "| {label} | {per_second:.0} | {} | {} | {fairness:.3} |",
            ms(percentile(&waits, 0.5)),
            ms(percentile(&waits, 0.99)),
        );
    }
}

/// Contending clients, and how long each contended run lasts.
const CLIENTS: usize = 8;
const CONTENDED_FOR: Duration = Duration::from_secs(5);

/// Grants per second, every wait, and Jain's index over the clients' grant
/// counts, of `CLIENTS` tasks each running `cycle` (one acquire + release,
/// returning the wait) until the time is up.
async fn contend<C, F, Fut>(clients: Vec<C>, cycle: F) -> (f64, Vec<Duration>, f64)
where
    C: Send + 'static,
    F: Fn(&mut C) -> Fut + Send + Sync + Copy + 'static,
    Fut: std::future::Future<Output = Duration> + Send,
{
    let started = Instant::now();
    let tasks: Vec<_> = clients
        .into_iter()
        .map(|mut client| {
            tokio::spawn(async move {
                let mut waits = Vec::new();
                while started.elapsed() < CONTENDED_FOR {
                    waits.push(cycle(&mut client).await);
                }
                waits
            })
        })
        .collect();
    let mut all = Vec::new();
    let mut counts = Vec::new();
    for task in tasks {
        let waits = task.await.expect("contending client");
        counts.push(waits.len() as f64);
        all.extend(waits);
    }
    let elapsed = started.elapsed().as_secs_f64();
    let sum: f64 = counts.iter().sum();
    let squares: f64 = counts.iter().map(|c| c * c).sum();
    let fairness = sum * sum / (counts.len() as f64 * squares.max(1.0));
    (all.len() as f64 / elapsed, all, fairness)
}

/// etcd's Lock RPC, each client with its own connection and lease.
async fn contend_rpc(hosts: &[String]) -> (f64, Vec<Duration>, f64) {
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        let mut client = etcd_client::Client::connect(hosts, None)
            .await
            .expect("client");
        let lease = client.lease_grant(30, None).await.expect("lease").id();
        clients.push((client, lease));
    }
    contend(clients, |(client, lease)| {
        let (mut client, lease) = (client.clone(), *lease);
        async move {
            let started = Instant::now();
            let held = client
                .lock(
                    "bench/contended-rpc",
                    Some(LockOptions::new().with_lease(lease)),
                )
                .await
                .expect("lock");
            let waited = started.elapsed();
            client.unlock(held.key().to_vec()).await.expect("unlock");
            waited
        }
    })
    .await
}

/// omnilock's recipe, each client its own `connect(url)`.
async fn contend_omnilock(url: &str) -> (f64, Vec<Duration>, f64) {
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        clients.push(omnilock::connect(url).await.expect("connect"));
    }
    contend(clients, |locks| {
        let locks = locks.clone();
        async move {
            let started = Instant::now();
            let guard = locks
                .acquire("bench/contended-omnilock")
                .await
                .expect("acquire");
            let waited = started.elapsed();
            guard.release().await.expect("release");
            waited
        }
    })
    .await
}
