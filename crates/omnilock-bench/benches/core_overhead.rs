//! What core adds per acquisition, on the in-memory store (no I/O): the
//! guard, the renewal task, the lost signal, the release path.
//!
//! ```sh
//! cargo bench -p omnilock-bench --bench core_overhead
//! ```

#[path = "common/mod.rs"]
mod common;

use std::time::Instant;

use common::{iterations, ms, percentile, try_round};

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let locks = omnilock::connect("mem://bench").await.expect("mem");
    let mut samples = Vec::new();
    for i in 0..iterations(20000) {
        let started = Instant::now();
        try_round(&locks, "bench").await;
        if i > 1000 {
            samples.push(started.elapsed());
        }
    }
    samples.sort();
    println!(
        "mem:// try_acquire + release: p50 {} p99 {}",
        ms(percentile(&samples, 0.5)),
        ms(percentile(&samples, 0.99))
    );
}
