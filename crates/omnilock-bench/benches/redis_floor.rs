//! Redis: omnilock's acquire + release on one instance against the raw floor
//! its algorithm needs (`SET NX PX` + an owner-checked `EVALSHA` release),
//! and against that floor plus a fencing token (the same `SET NX PX` in a
//! script that then raises a counter kept at or above the server's clock, as
//! omnilock's tokens are: what fencing costs by itself), and Redlock over five nodes against the single instance and against the
//! `rslock` crate (a peer Redlock implementation) on the same five nodes — all
//! measured in interleaved batches of the same run. Then both Redlocks under
//! contention: 8 clients with a connection set each on one lock, one after
//! the other for `OMNILOCK_BENCH_SECONDS` (default 4) each: grants/s,
//! hand-offs/s (grants to another client than the last) and fairness (the
//! fewest grants of a client over the most).
//!
//! ```sh
//! scripts/stores.sh up && source target/stores/env
//! cargo bench -p omnilock-bench --bench redis_floor
//! ```

#[path = "common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use common::{batches, iterations, ms, percentile, try_round};

const RELEASE: &str = r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"#;

/// The floor's `SET NX PX`, then a fencing token the way omnilock draws
/// one: `INCR` of a counter, raised to the server's clock (µs) when behind
/// it, so that tokens keep rising if the counter is lost.
const FENCED_SET: &str = r#"
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 0 end
local token = redis.call('INCR', KEYS[2])
local t = redis.call('TIME')
local floor = tonumber(t[1]) * 1000000 + tonumber(t[2])
if token <= floor then
  token = floor + 1
  redis.call('SET', KEYS[2], string.format('%d', token), 'PX', 86400000)
end
return token
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
    let fenced_set = redis::Script::new(FENCED_SET);
    let single = omnilock::connect(&single_url).await.expect("single");
    let redlock = omnilock::connect(&redlock_url).await.expect("redlock");
    let peer = rslock_manager(&redlock_url);

    let (mut floor, mut fenced, mut ours, mut five, mut rslock) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (_, warmup, per_batch) in batches(iterations) {
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
        for _ in 0..per_batch {
            let started = Instant::now();
            let token: i64 = fenced_set
                .key("{bench:fenced}")
                .key("{bench:fenced}:fence")
                .arg("me")
                .arg(15000)
                .invoke_async(&mut conn)
                .await
                .expect("fenced set");
            assert!(token > 0);
            let _: i64 = release
                .key("{bench:fenced}")
                .arg("me")
                .invoke_async(&mut conn)
                .await
                .expect("release");
            if !warmup {
                fenced.push(started.elapsed());
            }
        }
        for (locks, samples) in [(&single, &mut ours), (&redlock, &mut five)] {
            for _ in 0..per_batch {
                let started = Instant::now();
                try_round(locks, "bench/uncontended").await;
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
    for samples in [&mut floor, &mut fenced, &mut ours, &mut five, &mut rslock] {
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
        "| fenced floor: the same with a fencing token | {} | {} | {:.2}x of floor |",
        ms(p50(&fenced)),
        ms(percentile(&fenced, 0.99)),
        p50(&fenced).as_secs_f64() / p50(&floor).as_secs_f64()
    );
    println!(
        "| omnilock redis:// acquire + release | {} | {} | {:.2}x of floor, {:.2}x of fenced floor |",
        ms(p50(&ours)),
        ms(percentile(&ours, 0.99)),
        p50(&ours).as_secs_f64() / p50(&floor).as_secs_f64(),
        p50(&ours).as_secs_f64() / p50(&fenced).as_secs_f64()
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

    let seconds = std::env::var("OMNILOCK_BENCH_SECONDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4);
    let duration = Duration::from_secs(seconds);
    let clients = 8;
    let mut ours = Vec::new();
    for _ in 0..clients {
        ours.push(omnilock::connect(&redlock_url).await.expect("redlock"));
    }
    // A run ends with a holder cut off, whose lock stays for its TTL: a
    // name per run, so that the next run does not wait for it.
    let name = format!("bench/redlock-contended/{}", std::process::id());
    let ours = contend(clients, duration, |client, order| {
        let (locks, name) = (ours[client].clone(), name.clone());
        async move {
            loop {
                let guard = locks.acquire(&name).await.expect("acquire");
                order.lock().unwrap().push(client);
                guard.release().await.expect("release");
            }
        }
    })
    .await;
    let peers: Vec<_> = (0..clients)
        .map(|_| std::sync::Arc::new(rslock_manager(&redlock_url)))
        .collect();
    let peer = contend(clients, duration, |client, order| {
        let manager = peers[client].clone();
        // A run aborted while holding leaves its key for the TTL: a name per run.
        let name = format!("bench:rslock-contended:{}", std::process::id());
        async move {
            loop {
                let lock = manager
                    .acquire_no_guard(name.as_bytes(), Duration::from_secs(15))
                    .await
                    .expect("rslock acquire");
                order.lock().unwrap().push(client);
                manager.unlock(&lock).await;
            }
        }
    })
    .await;
    println!();
    println!(
        "| {clients} clients, one lock, a connection set each | grants/s | hand-offs/s | fairness |"
    );
    println!("|---|---|---|---|");
    ours.row("omnilock redlock:// (5 nodes)");
    peer.row("peer: rslock 0.10 (5 nodes)");
    println!(
        "\nomnilock hands over {:.1}x as often as rslock",
        (ours.handoffs as f64 / ours.seconds) / (peer.handoffs.max(1) as f64 / peer.seconds)
    );
}

/// What one contended run came to.
struct Contention {
    grants: usize,
    handoffs: usize,
    fairness: f64,
    seconds: f64,
}

impl Contention {
    /// From the clients' grants in order.
    fn of(order: &[usize], clients: usize, seconds: f64) -> Self {
        let handoffs = order.windows(2).filter(|w| w[0] != w[1]).count();
        let mut per_client = vec![0usize; clients];
        for &client in order {
            per_client[client] += 1;
        }
        let (fewest, most) = (
            *per_client.iter().min().unwrap_or(&0),
            *per_client.iter().max().unwrap_or(&0),
        );
        Contention {
            grants: order.len(),
            handoffs,
            fairness: if most == 0 {
                0.0
            } else {
                fewest as f64 / most as f64
            },
            seconds,
        }
    }

    fn row(&self, what: &str) {
        println!(
            "| {what} | {:.0} | {:.0} | {:.3} |",
            self.grants as f64 / self.seconds,
            self.handoffs as f64 / self.seconds,
            self.fairness
        );
    }
}

/// `clients` tasks, each with its own store, take and give back one lock
/// in a loop for `duration`; returns who was granted, in order.
async fn contend<F, Fut>(clients: usize, duration: Duration, take_and_give: F) -> Contention
where
    F: Fn(usize, std::sync::Arc<std::sync::Mutex<Vec<usize>>>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let order = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let started = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|client| tokio::spawn(take_and_give(client, order.clone())))
        .collect();
    tokio::time::sleep(duration).await;
    for task in &tasks {
        task.abort();
    }
    let seconds = started.elapsed().as_secs_f64();
    let order = order.lock().unwrap().clone();
    Contention::of(&order, clients, seconds)
}

/// rslock's manager over the nodes of a `redlock://` URL, with its password.
fn rslock_manager(redlock_url: &str) -> rslock::LockManager {
    let url = omnilock::raw::StoreUrl::parse(redlock_url).expect("redlock URL");
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
