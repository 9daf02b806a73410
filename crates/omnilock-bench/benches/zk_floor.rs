//! ZooKeeper: omnilock's acquire + release against the raw floor its recipe
//! needs (ephemeral-sequential create + getChildren + delete) with the same
//! client library, and `zookeeper-client`'s own lock recipe (peer) — all in
//! interleaved batches of the same run, one client, sequential, uncontended,
//! on the ensemble and on the standalone node.
//!
//! ```sh
//! scripts/stores.sh up && source target/stores/env
//! cargo bench -p omnilock-bench --bench zk_floor
//! ```

#[path = "common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use common::{batches, iterations, ms, percentile};
use zookeeper_client::{Acls, Client, CreateMode, LockOptions, LockPrefix};

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let iterations = iterations(1000);
    for store in ["ZK", "ZK_STANDALONE"] {
        let Ok(url) = std::env::var(format!("OMNILOCK_TEST_{store}_URL")) else {
            eprintln!("set OMNILOCK_TEST_{store}_URL (scripts/stores.sh up)");
            return;
        };
        let hosts = common::hosts(&url).join(",");
        let raw = Client::connect(&hosts).await.expect("raw client");
        let options = CreateMode::Persistent.with_acls(Acls::anyone_all());
        let _ = raw.mkdir("/bench/floor", &options).await;
        let _ = raw.mkdir("/bench/peer", &options).await;
        let locks = omnilock::connect(&url).await.expect("omnilock");
        let ephemeral = CreateMode::EphemeralSequential.with_acls(Acls::anyone_all());

        let mut samples: [Vec<Duration>; 3] = Default::default();
        for (_, warmup, per_batch) in batches(iterations) {
            for _ in 0..per_batch {
                let started = Instant::now();
                let (_, seq) = raw
                    .create("/bench/floor/me-lock-", &[], &ephemeral)
                    .await
                    .expect("create");
                let children = raw.list_children("/bench/floor").await.expect("list");
                assert!(!children.is_empty());
                raw.delete(&format!("/bench/floor/me-lock-{seq}"), None)
                    .await
                    .expect("delete");
                if !warmup {
                    samples[0].push(started.elapsed());
                }
            }
            for _ in 0..per_batch {
                let started = Instant::now();
                let prefix = LockPrefix::new_curator("/bench/peer", "lock-").expect("prefix");
                let lock = raw
                    .lock(prefix, b"", LockOptions::new(Acls::anyone_all()))
                    .await
                    .expect("peer lock");
                let path = lock.lock_path().to_string();
                raw.delete(&path, None).await.expect("unlock");
                std::mem::forget(lock); // its drop would delete again, in the background
                if !warmup {
                    samples[1].push(started.elapsed());
                }
            }
            for _ in 0..per_batch {
                let started = Instant::now();
                let guard = locks.acquire("bench-uncontended").await.expect("acquire");
                guard.release().await.expect("release");
                if !warmup {
                    samples[2].push(started.elapsed());
                }
            }
        }
        for s in samples.iter_mut() {
            s.sort();
        }
        let p50 = |s: &[Duration]| percentile(s, 0.5);
        let floor = p50(&samples[0]).as_secs_f64();
        println!("| measured ({store}) | p50 | p99 | p50 / floor |");
        println!("|---|---|---|---|");
        for (label, s) in [
            (
                "floor: create ephemeral-sequential + getChildren + delete",
                &samples[0],
            ),
            ("zookeeper-client lock recipe + delete (peer)", &samples[1]),
            ("omnilock zk:// acquire + release", &samples[2]),
        ] {
            println!(
                "| {label} | {} | {} | {:.2}x |",
                ms(p50(s)),
                ms(percentile(s, 0.99)),
                p50(s).as_secs_f64() / floor
            );
        }
    }
}
