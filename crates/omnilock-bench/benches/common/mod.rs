//! Helpers shared by the benchmarks.

use std::time::Duration;

/// The `p` quantile (0..=1) of sorted samples.
#[allow(dead_code)] // not every bench uses it
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index]
}

/// Milliseconds with three decimals.
#[allow(dead_code)] // not every bench uses it
pub fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1000.0)
}

/// `OMNILOCK_BENCH_ITERATIONS`, else `default`.
#[allow(dead_code)] // not every bench uses it
pub fn iterations(default: usize) -> usize {
    std::env::var("OMNILOCK_BENCH_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Interleaved batches over `iterations` rounds: `(batch, warmup, rounds
/// in the batch)` for a warm-up batch (0) and then 20 measured ones, so
/// that each contender of a comparison runs a batch in turn and drift on a
/// shared machine hits them alike.
#[allow(dead_code)] // not every bench uses it
pub fn batches(iterations: usize) -> impl Iterator<Item = (usize, bool, usize)> {
    const BATCHES: usize = 20;
    let per_batch = (iterations / BATCHES).max(1);
    (0..=BATCHES).map(move |batch| (batch, batch == 0, per_batch))
}

/// One uncontended round on `locks`: try-acquire `name` (it must be free)
/// and release it.
#[allow(unused_imports)] // not every bench uses it
pub use omnilock_testkit::fixtures::take_and_release as try_round;

/// The `host:port` list of a store URL (`scheme://h1:p1,h2:p2/...`).
#[allow(dead_code)] // not every bench uses it
pub fn hosts(url: &str) -> Vec<String> {
    let after_scheme = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = after_scheme.split(['/', '?']).next().unwrap_or_default();
    authority.split(',').map(str::to_string).collect()
}
