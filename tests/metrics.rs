//! The metrics (cargo feature `metrics`) after real runs on the in-memory
//! store and on SQLite: counts of grants, timeouts and losses, the wait and
//! latency histograms, the held gauge back at 0, and the `name` label only
//! when asked for.
//!
//! Each test installs a recorder of its own for its thread and runs the
//! scenario on a current-thread runtime on that thread, so tests running at
//! the same time do not see each other's series. (Handles are registered
//! when a lock is granted, so the updates of background tasks land in the
//! same recorder.)

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use metrics_util::MetricKind;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use omnilock::metrics::{
    ACQUIRE_SECONDS, GRANTS_TOTAL, HELD, LOSSES_TOTAL, RENEW_FAILURES_TOTAL, TIMEOUTS_TOTAL,
    WAIT_SECONDS,
};
use omnilock::{ErrorKind, Owner};

const PATIENCE: Duration = Duration::from_secs(10);

/// Everything recorded so far. The debugging recorder's snapshot resets
/// counters and gauges and drains histograms, so the tally adds snapshots up
/// (gauges are only ever moved up and down, so their sum is their value).
struct Tally {
    snapshotter: Snapshotter,
    /// Per series name: its labels and accumulated value.
    series: BTreeMap<String, (Vec<(String, String)>, Value)>,
}

#[derive(Debug, Clone, Default)]
struct Value {
    count: u64,
    gauge: f64,
    samples: Vec<f64>,
}

impl Tally {
    fn new(snapshotter: Snapshotter) -> Self {
        Tally {
            snapshotter,
            series: BTreeMap::new(),
        }
    }

    fn update(&mut self) {
        for (key, _, _, value) in self.snapshotter.snapshot().into_vec() {
            let name = key.key().name().to_string();
            let labels: Vec<(String, String)> = key
                .key()
                .labels()
                .map(|l| (l.key().to_string(), l.value().to_string()))
                .collect();
            let entry = self
                .series
                .entry(name.clone())
                .or_insert_with(|| (labels.clone(), Value::default()));
            assert_eq!(
                entry.0, labels,
                "{name}: more than one label set in one scenario"
            );
            match (key.kind(), value) {
                (MetricKind::Counter, DebugValue::Counter(n)) => entry.1.count += n,
                (MetricKind::Gauge, DebugValue::Gauge(v)) => entry.1.gauge += v.into_inner(),
                (MetricKind::Histogram, DebugValue::Histogram(vs)) => entry
                    .1
                    .samples
                    .extend(vs.into_iter().map(|v| v.into_inner())),
                (kind, value) => panic!("{name}: {kind:?} with {value:?}"),
            }
        }
    }

    fn value(&mut self, name: &str) -> Value {
        self.update();
        match self.series.get(name) {
            Some((_, value)) => value.clone(),
            None => panic!("no series {name}; have {:?}", self.series.keys()),
        }
    }

    fn counter(&mut self, name: &str) -> u64 {
        self.value(name).count
    }

    fn gauge(&mut self, name: &str) -> f64 {
        self.value(name).gauge
    }

    fn samples(&mut self, name: &str) -> Vec<f64> {
        self.value(name).samples
    }

    /// Waits (on a runtime, without blocking it) until `check` holds.
    async fn until(&mut self, what: &str, mut check: impl FnMut(&mut Tally) -> bool) {
        let deadline = Instant::now() + PATIENCE;
        while !check(self) {
            assert!(Instant::now() < deadline, "{what}: not within {PATIENCE:?}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("metrics/{prefix}/{nanos:x}")
}

/// Runs the scenario on `url` with the recorder installed for this thread.
fn run(url: String, names: bool) {
    with_recorder(|tally| scenario(url, names, tally));
}

/// Runs `scenario` on a current-thread runtime with a recorder of its own
/// installed for this thread; the scenario reads it through its `Tally`.
fn with_recorder<F: std::future::Future<Output = ()>>(scenario: impl FnOnce(Tally) -> F) {
    let recorder = DebuggingRecorder::new();
    let tally = Tally::new(recorder.snapshotter());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    metrics::with_local_recorder(&recorder, || {
        runtime.block_on(scenario(tally));
    });
}

async fn scenario(url: String, names: bool, mut tally: Tally) {
    let a = omnilock::connect(&url)
        .await
        .expect("connect")
        .with_metrics_names(names);
    let b = omnilock::connect(&url)
        .await
        .expect("connect")
        .with_metrics_names(names);
    let name = unique(a.backend_kind());
    omnilock::metrics::describe();

    // 1 grant; a busy try_acquire is no grant.
    let first = a.acquire(&name).await.expect("acquire");
    assert!(b.try_acquire(&name).await.expect("try").is_none());
    assert_eq!(tally.counter(GRANTS_TOTAL), 1);
    assert_eq!(tally.gauge(HELD), 1.0);

    // 2: an acquire that waits behind the first holder for at least 100 ms.
    let (queued_tx, queued) = tokio::sync::oneshot::channel();
    let waiter = {
        let (b, name) = (b.clone(), name.clone());
        tokio::spawn(async move {
            b.lock(&name)
                .on_wait(move || {
                    let _ = queued_tx.send(());
                })
                .acquire()
                .await
        })
    };
    tokio::time::timeout(PATIENCE, queued)
        .await
        .expect("the waiter waits")
        .expect("the waiter reports waiting");
    // Time passing is the point: the wait histogram must show it.
    tokio::time::sleep(Duration::from_millis(100)).await;
    first.release().await.expect("release");
    let second = tokio::time::timeout(PATIENCE, waiter)
        .await
        .expect("the waiter gets the lock")
        .expect("task")
        .expect("acquire");
    assert_eq!(tally.counter(GRANTS_TOTAL), 2);
    assert_eq!(tally.gauge(HELD), 1.0);
    let waits = tally.samples(WAIT_SECONDS);
    assert_eq!(waits.len(), 1, "one acquire waited: {waits:?}");
    assert!(
        waits[0] >= 0.1 && waits[0] < PATIENCE.as_secs_f64(),
        "{waits:?}"
    );

    // A timeout is counted, and is no grant.
    let err = a
        .lock(&name)
        .timeout(Duration::from_millis(50))
        .acquire()
        .await
        .expect_err("times out");
    assert_eq!(err.kind(), ErrorKind::Timeout);
    assert_eq!(tally.counter(TIMEOUTS_TOTAL), 1);
    drop(second); // release on drop takes the gauge down too
    assert_eq!(tally.gauge(HELD), 0.0);

    // 3 and 4: a reentrant hold is a grant but the same held lock.
    let me = a.with_owner(Owner::random());
    let outer = me.acquire(&name).await.expect("outer");
    let inner = me.acquire(&name).await.expect("inner");
    assert_eq!(tally.counter(GRANTS_TOTAL), 4);
    assert_eq!(tally.gauge(HELD), 1.0);
    inner.release().await.expect("release inner");
    assert_eq!(tally.gauge(HELD), 1.0);
    outer.release().await.expect("release outer");
    assert_eq!(tally.gauge(HELD), 0.0);

    // 5: a loss is counted once and takes the gauge down once, also when
    // the lost guard is released afterwards.
    let doomed = a
        .lock(&name)
        .ttl(Duration::from_secs(1))
        .acquire()
        .await
        .expect("acquire");
    assert_eq!(tally.gauge(HELD), 1.0);
    assert!(b.break_lock(&name).await.expect("break"));
    let loss = tokio::time::timeout(PATIENCE, doomed.lost())
        .await
        .expect("the loss is noticed");
    assert_eq!(loss.kind(), ErrorKind::LockLost);
    tally
        .until("the loss is counted", |t| t.counter(LOSSES_TOTAL) == 1)
        .await;
    assert_eq!(tally.gauge(HELD), 0.0);
    let err = doomed.release().await.expect_err("a lost lock");
    assert_eq!(err.kind(), ErrorKind::NotOwner);
    assert_eq!(tally.counter(LOSSES_TOTAL), 1);
    assert_eq!(tally.gauge(HELD), 0.0, "the gauge drifted");

    let grants = tally.counter(GRANTS_TOTAL);
    assert_eq!(grants, 5);
    let latencies = tally.samples(ACQUIRE_SECONDS);
    assert_eq!(latencies.len() as u64, grants, "one latency per grant");
    assert!(
        latencies.iter().all(|s| *s >= 0.0 && *s < 10.0),
        "{latencies:?}"
    );
    // The waiter's latency includes its wait.
    assert!(latencies.iter().any(|s| *s >= 0.1), "{latencies:?}");
    assert_eq!(tally.counter(TIMEOUTS_TOTAL), 1);
    // The in-memory store tells of a broken lock at once; SQLite learns it
    // when the renewal finds the row gone: a failed renewal.
    let renew_failures = tally.counter(RENEW_FAILURES_TOTAL);
    if a.backend_kind() == "mem" {
        assert_eq!(renew_failures, 0);
    } else {
        assert!(renew_failures >= 1, "{renew_failures}");
    }

    // Every series: `store` always, `name` only when asked for.
    tally.update();
    assert_eq!(tally.series.len(), 7, "{:?}", tally.series.keys());
    for (series, (labels, _)) in &tally.series {
        let mut expected = vec![("store".to_string(), a.backend_kind().to_string())];
        if names {
            expected.push(("name".to_string(), name.clone()));
        }
        assert_eq!(labels, &expected, "{series}");
    }
}

/// `lock_all` is counted like single acquisitions: one grant (and one
/// latency) per part, whether the store took the set in one step or part by
/// part, and one timeout when the whole call runs out of time.
async fn lock_all_scenario(url: String, mut tally: Tally) {
    let a = omnilock::connect(&url).await.expect("connect");
    let b = omnilock::connect(&url).await.expect("connect");
    let (x, y) = (unique("all-x"), unique("all-y"));
    omnilock::metrics::describe();

    // Both free: in one step where the store has one.
    let both = a.lock_all([&x, &y]).acquire().await.expect("lock_all");
    assert_eq!(tally.counter(GRANTS_TOTAL), 2, "one grant per part");
    assert_eq!(
        tally.samples(ACQUIRE_SECONDS).len(),
        2,
        "one latency per part"
    );
    assert_eq!(tally.gauge(HELD), 2.0);

    // Busy: the whole call times out once.
    let err = b
        .lock_all([&x, &y])
        .timeout(Duration::from_millis(50))
        .acquire()
        .await
        .expect_err("busy");
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    assert_eq!(tally.counter(TIMEOUTS_TOTAL), 1, "one timeout per call");
    assert_eq!(tally.counter(GRANTS_TOTAL), 2);

    both.release().await.expect("release");
    assert_eq!(tally.gauge(HELD), 0.0);
}

fn run_lock_all(url: String) {
    with_recorder(|tally| lock_all_scenario(url, tally));
}

#[test]
fn mem_lock_all_series() {
    run_lock_all(format!("mem://{}", unique("all").replace('/', "-")));
}

#[test]
fn mem_series_without_names() {
    run(
        format!("mem://{}", unique("store").replace('/', "-")),
        false,
    );
}

#[test]
fn mem_series_with_names() {
    run(format!("mem://{}", unique("store").replace('/', "-")), true);
}

#[cfg(feature = "sqlite")]
mod sqlite {
    fn url() -> String {
        let dir = std::env::temp_dir().join(format!(
            "omnilock-metrics-{}-{}",
            std::process::id(),
            super::unique("db").replace('/', "-")
        ));
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        format!("sqlite://{}", dir.join("locks.db").display())
    }

    #[test]
    fn sqlite_series_without_names() {
        super::run(url(), false);
    }

    #[test]
    fn sqlite_series_with_names() {
        super::run(url(), true);
    }

    #[test]
    fn sqlite_lock_all_series() {
        super::run_lock_all(url());
    }
}
