//! Metrics through the [`metrics`](https://docs.rs/metrics) facade (cargo
//! feature `metrics`), so any exporter (Prometheus, OpenTelemetry, ...)
//! installed as the recorder sees them. Every series is described in
//! [docs/observability.md](https://github.com/omnilock/omnilock/blob/main/docs/observability.md).
//!
//! All instrumentation lives here; the rest of core calls the small
//! functions below. Without the feature they are empty and inlined, so the
//! hooks compile to nothing.
//!
//! | series | type | unit | when |
//! |---|---|---|---|
//! | `omnilock_acquire_seconds` | histogram | seconds | a successful `acquire`/`try_acquire`: from the call to the grant |
//! | `omnilock_wait_seconds` | histogram | seconds | a successful `acquire` that had to wait: from the moment it started waiting to the grant |
//! | `omnilock_grants_total` | counter | | every guard handed out (reentrant ones too) |
//! | `omnilock_timeouts_total` | counter | | an `acquire` that gave up at its timeout |
//! | `omnilock_losses_total` | counter | | a lost signal that fired before the lock was released |
//! | `omnilock_renew_failures_total` | counter | | a lease renewal that failed or did not answer in time |
//! | `omnilock_held` | gauge | | locks this process holds in the store (reentrant holds of one acquisition count once) |
//!
//! The names are also constants here (`ACQUIRE_SECONDS`, ...), with the
//! feature on.
//!
//! Labels: `store` (the backend kind, as [`crate::Locks::backend_kind`]) on
//! every series, and `name` (the lock name) only on handles made with
//! [`crate::Locks::with_metrics_names`]: lock names can be unbounded in
//! number, and every distinct label value is a series the exporter keeps.

#[cfg(feature = "metrics")]
pub use on::{
    ACQUIRE_SECONDS, GRANTS_TOTAL, HELD, LOSSES_TOTAL, RENEW_FAILURES_TOTAL, TIMEOUTS_TOTAL,
    WAIT_SECONDS, describe,
};

#[cfg(feature = "metrics")]
pub(crate) use on::{HoldMetrics, Labels, WaitClock, granted, timed_out};

#[cfg(not(feature = "metrics"))]
pub(crate) use off::{HoldMetrics, Labels, WaitClock, granted, timed_out};

#[cfg(feature = "metrics")]
mod on {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex, OnceLock};
    use std::time::Instant;

    use crate::sync::lock_unpoisoned;

    use metrics::{Counter, Gauge, Label, Unit};
    use tokio::sync::oneshot;

    use crate::error::Result;
    use crate::signal::{LostNotifier, WaitNotice};

    /// Histogram: seconds from the acquire call to the grant.
    pub const ACQUIRE_SECONDS: &str = "omnilock_acquire_seconds";
    /// Histogram: seconds an acquire spent waiting behind another holder.
    pub const WAIT_SECONDS: &str = "omnilock_wait_seconds";
    /// Counter: guards handed out.
    pub const GRANTS_TOTAL: &str = "omnilock_grants_total";
    /// Counter: acquires that gave up at their timeout.
    pub const TIMEOUTS_TOTAL: &str = "omnilock_timeouts_total";
    /// Counter: locks lost before they were released.
    pub const LOSSES_TOTAL: &str = "omnilock_losses_total";
    /// Counter: lease renewals that failed or timed out.
    pub const RENEW_FAILURES_TOTAL: &str = "omnilock_renew_failures_total";
    /// Gauge: locks held in the store by this process.
    pub const HELD: &str = "omnilock_held";

    /// Registers the description and unit of every omnilock series with the
    /// installed recorder. Optional: exporters use it for `# HELP` lines
    /// and units. Call it once, after installing the recorder.
    ///
    /// ```
    /// omnilock_core::metrics::describe();
    /// ```
    pub fn describe() {
        use metrics::{describe_counter, describe_gauge, describe_histogram};
        describe_histogram!(
            ACQUIRE_SECONDS,
            Unit::Seconds,
            "Time from an acquire call to the grant, for successful acquires"
        );
        describe_histogram!(
            WAIT_SECONDS,
            Unit::Seconds,
            "Time a successful acquire spent waiting behind another holder"
        );
        describe_counter!(GRANTS_TOTAL, "Lock guards handed out");
        describe_counter!(TIMEOUTS_TOTAL, "Acquires that gave up at their timeout");
        describe_counter!(LOSSES_TOTAL, "Locks lost before they were released");
        describe_counter!(
            RENEW_FAILURES_TOTAL,
            "Lease renewals that failed or did not answer in time"
        );
        describe_gauge!(HELD, "Locks held in the store by this process");
    }

    /// The labels of one acquisition's series.
    #[derive(Clone)]
    pub(crate) struct Labels(Arc<[Label]>);

    impl Labels {
        pub(crate) fn new(store: &'static str, name: &str, with_name: bool) -> Self {
            let mut labels = vec![Label::from_static_parts("store", store)];
            if with_name {
                labels.push(Label::new("name", name.to_string()));
            }
            Labels(labels.into())
        }

        fn vec(&self) -> Vec<Label> {
            self.0.to_vec()
        }
    }

    /// When an acquire started to wait: set by the backend raising the
    /// acquisition's "now waiting" notice.
    pub(crate) struct WaitClock(Arc<OnceLock<Instant>>);

    impl WaitClock {
        /// Wraps the caller's notice so that raising it also starts the clock.
        pub(crate) fn watch(notice: WaitNotice) -> (WaitClock, WaitNotice) {
            let started = Arc::new(OnceLock::new());
            let mark = started.clone();
            let notice = WaitNotice::new(move || {
                let _ = mark.set(Instant::now());
                notice.raise();
            });
            (WaitClock(started), notice)
        }
    }

    /// A guard was handed out `started` after the call began.
    pub(crate) fn granted(labels: &Labels, started: Instant, wait: &WaitClock) {
        metrics::counter!(GRANTS_TOTAL, labels.vec()).increment(1);
        metrics::histogram!(ACQUIRE_SECONDS, labels.vec()).record(started.elapsed());
        if let Some(waiting) = wait.0.get() {
            metrics::histogram!(WAIT_SECONDS, labels.vec()).record(waiting.elapsed());
        }
    }

    /// An acquire gave up at its timeout.
    pub(crate) fn timed_out(labels: &Labels) {
        metrics::counter!(TIMEOUTS_TOTAL, labels.vec()).increment(1);
    }

    /// The series of one held acquisition. The handles are registered when
    /// the lock is granted, on the caller's thread, so a thread-local
    /// recorder sees the updates made later from runtime threads too.
    struct Series {
        held: Gauge,
        losses: Counter,
        renew_failures: Counter,
        /// Set once the gauge went down: whichever of release, loss or drop
        /// comes first takes it down, the others find this set. This is what
        /// keeps the gauge from drifting.
        down: AtomicBool,
    }

    impl Series {
        fn down(&self) {
            if !self.down.swap(true, Ordering::AcqRel) {
                self.held.decrement(1.0);
            }
        }

        fn lost(&self) {
            if !self.down.load(Ordering::Acquire) {
                self.losses.increment(1);
            }
            self.down();
        }
    }

    /// The metrics of one held acquisition (one `Hold`).
    pub(crate) struct HoldMetrics {
        series: Arc<Series>,
        /// Ends the loss watcher: sent on release, dropped with the hold.
        stop: Mutex<Option<oneshot::Sender<()>>>,
    }

    impl HoldMetrics {
        /// Counts the lock as held and watches `lost` until the hold ends.
        /// Must run inside a runtime (as `Hold::start` does).
        pub(crate) fn start(labels: &Labels, lost: &LostNotifier) -> Self {
            let lost = lost.fired();
            let series = Arc::new(Series {
                held: metrics::gauge!(HELD, labels.vec()),
                losses: metrics::counter!(LOSSES_TOTAL, labels.vec()),
                renew_failures: metrics::counter!(RENEW_FAILURES_TOTAL, labels.vec()),
                down: AtomicBool::new(false),
            });
            series.held.increment(1.0);
            let (stop, stopped) = oneshot::channel();
            let watched = series.clone();
            // A task of its own rather than hooks at every place a loss can
            // come from (renewal, the backend's own notice, a session end).
            tokio::spawn(async move {
                tokio::select! {
                    _ = lost => watched.lost(),
                    _ = stopped => {}
                }
            });
            HoldMetrics {
                series,
                stop: Mutex::new(Some(stop)),
            }
        }

        /// The last guard of the acquisition is gone.
        pub(crate) fn released(&self) {
            self.series.down();
            let stop = lock_unpoisoned(&self.stop).take();
            drop(stop);
        }

        /// Passes a renewal's outcome through, counting failures (an error
        /// or no answer before the lease ran out).
        pub(crate) fn renewal<T, E>(
            &self,
            outcome: std::result::Result<Result<T>, E>,
        ) -> std::result::Result<Result<T>, E> {
            if !matches!(outcome, Ok(Ok(_))) {
                self.series.renew_failures.increment(1);
            }
            outcome
        }
    }

    impl Drop for HoldMetrics {
        fn drop(&mut self) {
            // Normally a no-op (released or lost first); a safety net so that
            // no path leaves the gauge up.
            self.series.down();
        }
    }
}

#[cfg(not(feature = "metrics"))]
mod off {
    use std::time::Instant;

    use crate::error::Result;
    use crate::signal::{LostNotifier, WaitNotice};

    pub(crate) struct Labels;

    impl Labels {
        #[inline(always)]
        pub(crate) fn new(_store: &'static str, _name: &str, _with_name: bool) -> Self {
            Labels
        }
    }

    pub(crate) struct WaitClock;

    impl WaitClock {
        #[inline(always)]
        pub(crate) fn watch(notice: WaitNotice) -> (WaitClock, WaitNotice) {
            (WaitClock, notice)
        }
    }

    #[inline(always)]
    pub(crate) fn granted(_labels: &Labels, _started: Instant, _wait: &WaitClock) {}

    #[inline(always)]
    pub(crate) fn timed_out(_labels: &Labels) {}

    pub(crate) struct HoldMetrics;

    impl HoldMetrics {
        #[inline(always)]
        pub(crate) fn start(_labels: &Labels, _lost: &LostNotifier) -> Self {
            HoldMetrics
        }

        #[inline(always)]
        pub(crate) fn released(&self) {}

        #[inline(always)]
        pub(crate) fn renewal<T, E>(
            &self,
            outcome: std::result::Result<Result<T>, E>,
        ) -> std::result::Result<Result<T>, E> {
            outcome
        }
    }
}
