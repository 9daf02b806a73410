//! Redis: omnilock's acquire + release on one instance against the raw floor
//! its algorithm needs (`SET NX PX` + an owner-checked `EVALSHA` release),
//! and Redlock over five nodes against the single instance and against the
//! `rslock` crate (a peer Redlock implementation) on the same five nodes — all
//! measured in interleaved batches of the same run.
//!
//! ```sh
//! scripts/stores.sh up && source target/stores/env
//! cargo bench --bench redis_floor --features redis
//! ```

#[path = "common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use common::{iterations, ms, percentile};

const RELEASE: &str = r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"#;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let iterations = iterations(2000);
    let (Ok(single_url), Ok(redlock_url)) = (
        std::env::var("OMNILOCK_TEST_REDIS_URL"),
        std::env::var("OMNILOCK_TEST_REDLOCK_URL"),
    ) else {
        eprintln!(
            "set OMNILOCK_TEST_REDIS_URL and OMNILOCK_TEST_REDLOCK_URL (scripts/stores.sh up)"
        );
        return;
    };
    let client = redis::Client::open(single_url.as_str()).expect("url");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("raw connection");
    let release = redis::Script::new(RELEASE);
    let single = omnilock::connect(&single_url).await.expect("single");
    let redlock = omnilock::connect(&redlock_url).await.expect("redlock");
    let peer = rslock_manager(&redlock_url);

    let (mut floor, mut ours, mut five, mut rslock) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let batches = 20;
    let per_batch = (iterations / batches).max(1);
    for batch in 0..=batches {
        let warmup = batch == 0;
        for _ in 0..per_batch {
            let started = Instant::now();
            let set: Option<String> = redis::cmd("SET")
                .arg("bench:floor")
                .arg("me")
                .arg("NX")
                .arg("PX")
                .arg(15000)
                .query_async(&mut conn)
                .await
                .expect("set");
            assert!(set.is_some());
            let _: i64 = release
                .key("bench:floor")
                .arg("me")
                .invoke_async(&mut conn)
                .await
                .expect("release");
            if !warmup {
                floor.push(started.elapsed());
            }
        }
        for (locks, samples) in [(&single, &mut ours), (&redlock, &mut five)] {
            for _ in 0..per_batch {
                let started = Instant::now();
                let guard = locks
                    .try_acquire("bench/uncontended")
                    .await
                    .expect("acquire")
                    .expect("free");
                guard.release().await.expect("release");
                if !warmup {
                    samples.push(started.elapsed());
                }
            }
        }
        for _ in 0..per_batch {
            let started = Instant::now();
            let lock = peer
                .lock(b"bench:rslock", Duration::from_secs(15))
                .await
                .expect("rslock: free lock");
            peer.unlock(&lock).await;
            if !warmup {
                rslock.push(started.elapsed());
            }
        }
    }
    for samples in [&mut floor, &mut ours, &mut five, &mut rslock] {
        samples.sort();
    }
    let p50 = |s: &[Duration]| percentile(s, 0.5);
    println!("| measured | p50 | p99 | ratio p50 |");
    println!("|---|---|---|---|");
    println!(
        "| floor: SET NX PX + EVALSHA release | {} | {} | 1.00x |",
        ms(p50(&floor)),
        ms(percentile(&floor, 0.99))
    );
    println!(
        "| omnilock redis:// acquire + release | {} | {} | {:.2}x of floor |",
        ms(p50(&ours)),
        ms(percentile(&ours, 0.99)),
        p50(&ours).as_secs_f64() / p50(&floor).as_secs_f64()
    );
    println!(
        "| omnilock redlock:// (5 nodes) acquire + release | {} | {} | {:.2}x of single |",
        ms(p50(&five)),
        ms(percentile(&five, 0.99)),
        p50(&five).as_secs_f64() / p50(&ours).as_secs_f64()
    );
    println!(
        "| peer: rslock 0.10 (5 nodes) lock + unlock | {} | {} | omnilock redlock = {:.2}x of rslock |",
        ms(p50(&rslock)),
        ms(percentile(&rslock, 0.99)),
        p50(&five).as_secs_f64() / p50(&rslock).as_secs_f64()
    );
}

/// rslock's manager over the nodes of a `redlock://` URL, with its password.
fn rslock_manager(redlock_url: &str) -> rslock::LockManager {
    let url = omnilock::StoreUrl::parse(redlock_url).expect("redlock URL");
    let auth = url
        .password()
        .map(|pw| format!(":{}@", pw.expose()))
        .unwrap_or_default();
    let uris: Vec<String> = url
        .hosts()
        .iter()
        .map(|h| format!("redis://{auth}{}:{}", h.host, h.port.unwrap_or(6379)))
        .collect();
    rslock::LockManager::new(uris)
}
