//! The conformance scenarios for `omnilock::blocking`, driven from std
//! threads (no async runtime in the test), so the synchronous API is held to
//! the same guarantees as the async one.
//!
//! A test binary (`harness = false`) runs every scenario of
//! [`registry::BLOCKING`](crate::registry::BLOCKING) on
//! each subject, as trials `<label>::<scenario>`; a scenario whose guarantee
//! the store does not claim shows as *ignored*, with the reason, as in the
//! async suite ([`crate::suite`]).
//!
//! ```ignore
//! omnilock_testkit::blocking_main!(mem => BlockingSubject::url("mem", "mem://b"));
//! ```
//!
//! Waits are on events (channels, joins) bounded by generous timeouts; the
//! only sleeps are where time passing is the point.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use omnilock::blocking::{self, LockGuard, Locks};
use omnilock_core::Result;

pub(crate) mod locks;
pub(crate) mod together;

/// A bound for what should happen "at once" or "soon" (stores stall now and then).
pub(crate) const PATIENCE: Duration = Duration::from_secs(10);

type ConnectFn = dyn Fn() -> Result<Locks> + Send + Sync;

/// The store under test, for the blocking API: a label and a way to open
/// independent blocking clients to it.
#[derive(Clone)]
pub struct BlockingSubject {
    label: String,
    connect: Arc<ConnectFn>,
}

impl BlockingSubject {
    /// A subject whose clients come from `connect`.
    pub fn new(
        label: impl Into<String>,
        connect: impl Fn() -> Result<Locks> + Send + Sync + 'static,
    ) -> Self {
        BlockingSubject {
            label: label.into(),
            connect: Arc::new(connect),
        }
    }

    /// A subject whose clients are `omnilock::blocking::connect(url)`.
    pub fn url(label: impl Into<String>, url: impl Into<String>) -> Self {
        let url = url.into();
        BlockingSubject::new(label, move || blocking::connect(&url))
    }

    /// The label used in messages.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// Opens a new, independent client; panics (fails the test) if the
    /// store cannot be reached.
    pub fn client(&self) -> Locks {
        match (self.connect)() {
            Ok(locks) => locks,
            Err(e) => panic!(
                "{}: cannot connect to the store under test: {e}",
                self.label
            ),
        }
    }

    pub(crate) fn clients<const N: usize>(&self) -> [Locks; N] {
        std::array::from_fn(|_| self.client())
    }
}

/// The `main` of a blocking test binary (`harness = false` in its
/// `Cargo.toml`): every scenario of [`crate::registry::BLOCKING`] on each subject,
/// on the suite runner ([`crate::suite`]), as trials
/// `<label>::<scenario>`. Each subject expression gives a `BlockingSubject`
/// or an `Option<BlockingSubject>`; attributes such as `#[cfg(...)]` may
/// precede a subject.
#[macro_export]
macro_rules! blocking_main {
    ($($rest:tt)*) => {
        $crate::suite_main!($crate::registry::BLOCKING; $($rest)*);
    };
}

pub(crate) fn unique(prefix: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(
        "blocking/{prefix}/{:08x}-{}",
        nanos ^ std::process::id().rotate_left(16),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// `probe` cannot take `name` now: it is held (`why` says by whom).
pub(crate) fn assert_taken(probe: &Locks, name: &str, why: &str) {
    let taken = probe.try_acquire(name).expect("probe");
    assert!(taken.is_none(), "{why}");
}

/// `guard` still holds `name`, by its own account and by `probe`'s, which
/// cannot take it (`why` says what would have freed it).
pub(crate) fn assert_still_held(guard: &LockGuard, probe: &Locks, name: &str, why: &str) {
    assert!(guard.is_held(), "the guard says it lost {name}");
    assert_taken(probe, name, why);
}

/// `probe` takes `name` at once (and lets it go again): it is free.
pub(crate) fn assert_free(probe: &Locks, name: &str, why: &str) {
    let taken = probe.try_acquire(name).expect("probe");
    assert!(taken.is_some(), "{why}");
}

/// Starts a thread that waits for `name` on `locks` and returns once the
/// store reports it waiting; the thread's result is the acquire's.
pub(crate) fn queue_waiter(locks: &Locks, name: &str) -> thread::JoinHandle<Result<LockGuard>> {
    let (queued_tx, queued_rx) = mpsc::channel();
    let locks = locks.clone();
    let name = name.to_string();
    let waiter = thread::spawn(move || {
        locks
            .lock(&name)
            .ttl(Duration::from_secs(60))
            .timeout(Duration::from_secs(120))
            .on_wait(move || {
                let _ = queued_tx.send(());
            })
            .acquire()
    });
    queued_rx
        .recv_timeout(PATIENCE)
        .expect("a waiting thread reports that it waits");
    waiter
}

/// Joins `thread`, failing if it takes longer than [`PATIENCE`].
pub(crate) fn join_soon<T: Send + 'static>(what: &str, thread: thread::JoinHandle<T>) -> T {
    let deadline = Instant::now() + PATIENCE;
    while !thread.is_finished() {
        assert!(
            Instant::now() < deadline,
            "{what}: did not happen within {PATIENCE:?}"
        );
        thread::sleep(Duration::from_millis(5));
    }
    thread
        .join()
        .unwrap_or_else(|_| panic!("{what}: the thread panicked"))
}
