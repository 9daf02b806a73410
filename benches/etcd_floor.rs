//! etcd: omnilock's acquire + release (recipe and Lock-RPC modes) against the
//! raw floor the recipe needs (one `Txn` put-if-absent on a lease + one
//! revision-fenced `Txn` delete), and etcd's own Lock + Unlock RPC used
//! directly — all in interleaved batches of the same run, one client,
//! sequential, uncontended.
//!
//! ```sh
//! scripts/stores.sh up && source target/stores/env
//! cargo bench --bench etcd_floor --features etcd
//! ```

#[path = "common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use common::{iterations, ms, percentile};
use etcd_client::{Compare, CompareOp, LockOptions, PutOptions, Txn, TxnOp};

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let iterations = iterations(1000);
    let Ok(url) = std::env::var("OMNILOCK_TEST_ETCD_URL") else {
        eprintln!("set OMNILOCK_TEST_ETCD_URL (scripts/stores.sh up)");
        return;
    };
    let hosts = url
        .trim_start_matches("etcd://")
        .split('/')
        .next()
        .unwrap()
        .split(',')
        .map(|h| format!("http://{h}"))
        .collect::<Vec<_>>();
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
    let recipe = omnilock::connect(&url).await.expect("recipe");
    let lockapi = omnilock::connect(&format!("{url}?mode=lockapi"))
        .await
        .expect("lockapi");

    let mut samples: [Vec<Duration>; 4] = Default::default();
    let batches = 20;
    let per_batch = (iterations / batches).max(1);
    for batch in 0..=batches {
        let warmup = batch == 0;
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
                guard.release().await.expect("release");
                if !warmup {
                    samples[i].push(started.elapsed());
                }
            }
        }
    }
    for s in samples.iter_mut() {
        s.sort();
    }
    let p50 = |s: &[Duration]| percentile(s, 0.5);
    let floor = p50(&samples[0]).as_secs_f64();
    println!("| measured (etcd, 3 members) | p50 | p99 | p50 / floor |");
    println!("|---|---|---|---|");
    for (label, s) in [
        ("floor: Txn put-if-absent + Txn fenced delete", &samples[0]),
        ("etcd Lock + Unlock RPC, raw (peer)", &samples[1]),
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
}
