//! The leak verdict: whether a series sampled through a soak stayed flat
//! once warmed up. A pure function of the samples, so that its rule is
//! tested on made-up series: a linear leak must fail, noise must pass.
//!
//! The rule, for one series of `(seconds, value)` samples:
//!
//! 1. **Warm-up**: samples before [`WARM_UP`] of the run (a quarter) are
//!    ignored: connections open, pools fill, the allocator grows its arenas.
//! 2. **The allowance**: `max(absolute, relative × baseline)`, the baseline
//!    being the median of the first third of what is left.
//! 3. **Highs**: the high of the last third of the window (its 90th
//!    percentile, [`HIGH`]) may exceed the high of the first third by at
//!    most the allowance.
//! 4. **Trend**: the least-squares line through the whole window may rise
//!    by at most the allowance over the window's length.
//!
//! A series breaking either (3) or (4) grew. A leak grows without bound, so
//! a run long enough breaks both; noise moves the highs a little and the
//! trend hardly at all. A fault's spike moves neither: connections a paused
//! store made the pools open are closed again within seconds, a sample or
//! two, which the 90th percentile leaves out, while a leak lifts every
//! sample after it.

use serde::Serialize;

/// The part of a run ignored at its start.
pub const WARM_UP: f64 = 0.25;

/// Which of a third's samples stands for its level: the 90th percentile.
pub const HIGH: f64 = 0.9;

/// The fewest samples the window must hold for a verdict.
pub const MIN_SAMPLES: usize = 6;

/// How much a series may grow after warm-up: `max(absolute, relative ×
/// baseline)`, in the series' own unit.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Allowance {
    /// The least growth allowed, whatever the baseline.
    pub absolute: f64,
    /// The share of the baseline allowed.
    pub relative: f64,
}

impl Allowance {
    /// The growth allowed above `baseline`.
    pub fn of(self, baseline: f64) -> f64 {
        self.absolute.max(self.relative * baseline)
    }
}

/// What the verdict found for one series.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Finding {
    /// The series' name (`tasks`, `rss_kib`, `connections etcd`, ...).
    pub series: String,
    /// The first sample after warm-up.
    pub start: f64,
    /// The last sample.
    pub end: f64,
    /// The median of the window's first third.
    pub baseline: f64,
    /// The high ([`HIGH`]) of the window's first third.
    pub first_high: f64,
    /// The high ([`HIGH`]) of the window's last third.
    pub last_high: f64,
    /// How far the least-squares line rises over the window (negative when
    /// it falls).
    pub trend: f64,
    /// The growth allowed (see [`Allowance`]).
    pub allowed: f64,
    /// Why the series counts as grown; empty when it stayed flat.
    pub grew: Vec<String>,
}

impl Finding {
    /// Whether the series stayed flat.
    pub fn flat(&self) -> bool {
        self.grew.is_empty()
    }
}

/// Judges one series (samples in time order, time in seconds from the
/// start of the run). An error when too few samples are left after the
/// warm-up to judge.
pub fn judge(
    series: &str,
    samples: &[(f64, f64)],
    allowance: Allowance,
) -> Result<Finding, String> {
    let Some(&(last_t, _)) = samples.last() else {
        return Err(format!("{series}: no samples"));
    };
    let first_t = samples[0].0;
    let from = first_t + WARM_UP * (last_t - first_t);
    let window: Vec<(f64, f64)> = samples
        .iter()
        .copied()
        .filter(|(t, _)| *t >= from)
        .collect();
    if window.len() < MIN_SAMPLES {
        return Err(format!(
            "{series}: {} samples after the warm-up, {MIN_SAMPLES} needed: run longer or \
             sample more often",
            window.len()
        ));
    }
    let (w0, wn) = (window[0].0, window[window.len() - 1].0);
    let third = (wn - w0) / 3.0;
    let first: Vec<f64> = window
        .iter()
        .filter(|(t, _)| *t <= w0 + third)
        .map(|(_, v)| *v)
        .collect();
    let last: Vec<f64> = window
        .iter()
        .filter(|(t, _)| *t >= wn - third)
        .map(|(_, v)| *v)
        .collect();
    let baseline = median(&first);
    let allowed = allowance.of(baseline);
    let (first_high, last_high) = (percentile(&first, HIGH), percentile(&last, HIGH));
    let trend = slope(&window) * (wn - w0);
    let mut grew = Vec::new();
    if last_high - first_high > allowed {
        grew.push(format!(
            "high {} in the last third, {} in the first: +{} (allowed {})",
            shown(last_high),
            shown(first_high),
            shown(last_high - first_high),
            shown(allowed)
        ));
    }
    if trend > allowed {
        grew.push(format!(
            "trend +{} over {:.0} s (allowed {}; {}/hour)",
            shown(trend),
            wn - w0,
            shown(allowed),
            shown(trend / (wn - w0) * 3600.0)
        ));
    }
    Ok(Finding {
        series: series.to_string(),
        start: window[0].1,
        end: window[window.len() - 1].1,
        baseline,
        first_high,
        last_high,
        trend,
        allowed,
        grew,
    })
}

/// The nearest-rank percentile `p` (0 to 1) of `values`.
fn percentile(values: &[f64], p: f64) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (p * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    match sorted.len() {
        0 => 0.0,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

/// The least-squares slope of `points` (0 for fewer than two distinct
/// times).
fn slope(points: &[(f64, f64)]) -> f64 {
    let n = points.len() as f64;
    let mean_t = points.iter().map(|p| p.0).sum::<f64>() / n;
    let mean_v = points.iter().map(|p| p.1).sum::<f64>() / n;
    let (mut cov, mut var) = (0.0, 0.0);
    for (t, v) in points {
        cov += (t - mean_t) * (v - mean_v);
        var += (t - mean_t) * (t - mean_t);
    }
    if var == 0.0 { 0.0 } else { cov / var }
}

/// A figure as the verdict prints it: whole when large, else one decimal.
pub fn shown(value: f64) -> String {
    if value.abs() >= 100.0 || value == value.trunc() {
        format!("{value:.0}")
    } else {
        format!("{value:.1}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TASKS: Allowance = Allowance {
        absolute: 32.0,
        relative: 0.10,
    };

    /// Deterministic noise in [-1, 1) (a linear congruential generator).
    fn noise(seed: &mut u64) -> f64 {
        *seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((*seed >> 33) as f64 / (1u64 << 31) as f64) * 2.0 - 1.0
    }

    /// `n` samples every `every` seconds of `value(t)` plus noise of
    /// amplitude `spread`.
    fn series(n: usize, every: f64, spread: f64, value: impl Fn(f64) -> f64) -> Vec<(f64, f64)> {
        let mut seed = 7;
        (0..n)
            .map(|i| {
                let t = i as f64 * every;
                (t, (value(t) + spread * noise(&mut seed)).round())
            })
            .collect()
    }

    #[test]
    fn a_linear_leak_fails_on_highs_and_trend() {
        // The CI run's shape: 2 minutes sampled every 2 s, one task a
        // second leaked over 300 alive.
        let samples = series(61, 2.0, 15.0, |t| 300.0 + t);
        let finding = judge("tasks", &samples, TASKS).unwrap();
        assert!(!finding.flat(), "{finding:?}");
        assert_eq!(finding.grew.len(), 2, "{:?}", finding.grew);
        assert!(finding.trend > 80.0 && finding.trend < 100.0, "{finding:?}");
    }

    #[test]
    fn a_slow_leak_over_an_hour_fails() {
        // One task a minute over 2,000, sampled every 10 s for an hour:
        // 45 tasks over the window, well inside the noise of any one sample.
        let samples = series(361, 10.0, 40.0, |t| 2000.0 + t / 60.0);
        let allowance = Allowance {
            absolute: 32.0,
            relative: 0.01,
        };
        let finding = judge("tasks", &samples, allowance).unwrap();
        assert!(!finding.flat(), "{finding:?}");
    }

    #[test]
    fn a_flat_noisy_series_passes() {
        let samples = series(61, 2.0, 15.0, |_| 300.0);
        let finding = judge("tasks", &samples, TASKS).unwrap();
        assert!(finding.flat(), "{finding:?}");
        assert!(finding.trend.abs() < 15.0, "{finding:?}");
    }

    #[test]
    fn growth_during_the_warm_up_is_ignored() {
        // Pools fill in the first 20 s, then stay.
        let samples = series(61, 2.0, 3.0, |t| 100.0 + 200.0 * (t / 20.0).min(1.0));
        let finding = judge("fds", &samples, TASKS).unwrap();
        assert!(finding.flat(), "{finding:?}");
        assert!((finding.baseline - 300.0).abs() <= 3.0, "{finding:?}");
    }

    #[test]
    fn a_spike_in_the_middle_passes_and_a_step_past_the_allowance_fails() {
        // A fault at 60 s: connections reopen for 10 s, then settle.
        let spike = series(61, 2.0, 2.0, |t| {
            if (60.0..70.0).contains(&t) {
                140.0
            } else {
                100.0
            }
        });
        assert!(judge("sockets", &spike, TASKS).unwrap().flat());
        // The same fault leaving 50 sockets behind for good.
        let step = series(61, 2.0, 2.0, |t| if t >= 64.0 { 150.0 } else { 100.0 });
        let finding = judge("sockets", &step, TASKS).unwrap();
        assert!(!finding.flat(), "{finding:?}");
    }

    #[test]
    fn a_fault_in_the_last_third_of_an_hour_passes() {
        // The hour's shape: a sample every 10 s. A paused store makes the
        // pools open 150 more connections, closed again within 10 s: one
        // sample in each third.
        let samples = series(361, 10.0, 5.0, |t| match t as u64 {
            1200 | 2400 | 3300 => 550.0,
            _ => 400.0,
        });
        let finding = judge("connections postgres", &samples, TASKS).unwrap();
        assert!(finding.flat(), "{finding:?}");
        // The same spike left behind for good fails.
        let step = series(361, 10.0, 5.0, |t| if t >= 3300.0 { 550.0 } else { 400.0 });
        assert!(!judge("connections postgres", &step, TASKS).unwrap().flat());
    }

    #[test]
    fn the_high_is_the_nearest_rank_percentile() {
        let values: Vec<f64> = (1..=20).map(f64::from).collect();
        assert_eq!(percentile(&values, HIGH), 18.0);
        assert_eq!(percentile(&[5.0], HIGH), 5.0);
        assert_eq!(percentile(&[], HIGH), 0.0);
    }

    #[test]
    fn a_falling_series_passes() {
        let samples = series(61, 2.0, 1.0, |t| 500.0 - t);
        assert!(judge("rss_kib", &samples, TASKS).unwrap().flat());
    }

    #[test]
    fn the_relative_allowance_scales_with_the_baseline() {
        // +150 on 2,000 is within 10 %; +150 on 300 is not.
        let big = series(61, 2.0, 0.0, |t| 2000.0 + 1.25 * t);
        assert!(judge("tasks", &big, TASKS).unwrap().flat());
        let small = series(61, 2.0, 0.0, |t| 300.0 + 1.25 * t);
        assert!(!judge("tasks", &small, TASKS).unwrap().flat());
    }

    #[test]
    fn too_few_samples_is_no_verdict() {
        let samples = series(6, 10.0, 0.0, |_| 1.0);
        let err = judge("tasks", &samples, TASKS).unwrap_err();
        assert!(err.contains("6 needed"), "{err}");
        assert!(judge("tasks", &[], TASKS).is_err());
    }

    #[test]
    fn figures_are_printed_plainly() {
        assert_eq!(shown(1234.56), "1235");
        assert_eq!(shown(12.0), "12");
        assert_eq!(shown(1.25), "1.2");
    }
}
