//! Helpers shared by the benchmarks.

use std::time::Duration;

/// The `p` quantile (0..=1) of sorted samples.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index]
}

/// Milliseconds with three decimals.
pub fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1000.0)
}

/// `OMNILOCK_BENCH_ITERATIONS`, else `default`.
pub fn iterations(default: usize) -> usize {
    std::env::var("OMNILOCK_BENCH_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
