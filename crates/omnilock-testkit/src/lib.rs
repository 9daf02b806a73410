//! The omnilock conformance suite: one set of scenarios, written once, that
//! every backend runs against its real store.
//!
//! A backend's conformance test is a `harness = false` test binary of one
//! line:
//!
//! ```ignore
//! omnilock_testkit::conformance_main!(redis => common::subject("REDIS"));
//! ```
//!
//! [`conformance_main!`] runs every scenario of [`registry::CONFORMANCE`] as
//! a trial `redis::<scenario>`. A scenario whose guarantee the store does not
//! claim (its [`Capabilities`](omnilock_core::Capabilities), known once
//! connected) shows as *ignored*, with the reason; every other scenario
//! asserts outcomes and fails loudly. A test in this crate fails when a
//! public scenario is missing from the registry.
//!
//! Stores are found through environment variables `OMNILOCK_TEST_<STORE>_URL`
//! (written by `scripts/stores.sh` into `target/stores/env`). A missing
//! variable fails the test: a test that cannot reach its store never passes
//! silently. Set `OMNILOCK_TEST_ALLOW_MISSING=1` to skip such tests instead
//! (for a quick local run without servers).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use omnilock_core::{Locks, Result};

#[cfg(feature = "blocking")]
pub mod blocking;
pub mod fixtures;
pub mod guarded;
pub mod registry;
pub mod scenarios;
pub mod suite;

pub use tokio;

type ConnectFn = dyn Fn() -> Pin<Box<dyn Future<Output = Result<Locks>> + Send>> + Send + Sync;
type CountFn = dyn Fn() -> Pin<Box<dyn Future<Output = Result<u64>> + Send>> + Send + Sync;
type GuardedFn =
    dyn Fn() -> Pin<Box<dyn Future<Output = Arc<dyn GuardedWrites>> + Send>> + Send + Sync;

pub use guarded::{GuardedWrite, GuardedWrites};

/// The store under test: a label and a way to open independent clients to
/// it, and for the herd scenarios a way to count the requests it served.
#[derive(Clone)]
pub struct Subject {
    label: String,
    url: Option<String>,
    connect: Arc<ConnectFn>,
    count: Option<Arc<CountFn>>,
    guarded: Option<Arc<GuardedFn>>,
    /// See [`Subject::connection_variant`].
    variant: bool,
}

impl Subject {
    /// A subject whose clients come from `connect`.
    pub fn new<F, Fut>(label: impl Into<String>, connect: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Locks>> + Send + 'static,
    {
        Subject {
            label: label.into(),
            url: None,
            connect: Arc::new(move || Box::pin(connect())),
            count: None,
            guarded: None,
            variant: false,
        }
    }

    /// Gives the guarded-write scenarios a way to write in the store
    /// itself under a lock, opened by `open` in each scenario's runtime. A
    /// store that claims `guarded_write` on a subject without one fails
    /// those scenarios.
    pub fn with_guarded_writes<F, Fut>(mut self, open: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Arc<dyn GuardedWrites>> + Send + 'static,
    {
        self.guarded = Some(Arc::new(move || Box::pin(open())));
        self
    }

    /// The subject's guarded writes (see [`Subject::with_guarded_writes`]).
    pub async fn guarded_writes(&self) -> Option<Arc<dyn GuardedWrites>> {
        match &self.guarded {
            Some(open) => Some(open().await),
            None => None,
        }
    }

    /// Gives the herd scenarios ([`registry::HERD`]) the store's own count
    /// of the requests it has served, read by `count` (for example with
    /// `omnilock_harness::Probe::requests_served`). A count that answers
    /// [`ErrorKind::Unsupported`](omnilock_core::ErrorKind::Unsupported)
    /// makes those scenarios ignored.
    pub fn with_request_counter<F, Fut>(mut self, count: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<u64>> + Send + 'static,
    {
        self.count = Some(Arc::new(move || Box::pin(count())));
        self
    }

    /// The store's request count so far, through the counter given to
    /// [`Subject::with_request_counter`]; `None` without one.
    pub async fn requests_served(&self) -> Option<Result<u64>> {
        match &self.count {
            Some(count) => Some(count().await),
            None => None,
        }
    }

    /// Marks this subject as another way to reach a store that a full
    /// subject of the suite also tests with the same grant statements (over
    /// TLS, on the application's own pool or client): every scenario runs
    /// on it, but
    /// the ones that repeat an operation hundreds of times for statistical
    /// strength (`mutual_exclusion`) run a quarter of their rounds, since
    /// what such a subject adds is its connections, which every scenario
    /// exercises.
    pub fn connection_variant(mut self) -> Self {
        self.variant = true;
        self
    }

    /// `full` rounds, or a quarter of them (at least one) on a
    /// [`connection_variant`](Subject::connection_variant).
    pub(crate) fn rounds(&self, full: usize) -> usize {
        if self.variant {
            (full / 4).max(1)
        } else {
            full
        }
    }

    /// Records the store URL, for scenarios that start other processes.
    pub fn with_url(mut self, url: impl Into<String>) -> Self {
        self.url = Some(url.into());
        self
    }

    /// The label used in messages.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// The store URL, when known.
    pub fn url(&self) -> Option<&str> {
        self.url.as_deref()
    }

    /// Opens a new, independent client. Panics (fails the test) if the store
    /// cannot be reached.
    pub async fn client(&self) -> Locks {
        match (self.connect)().await {
            Ok(locks) => locks,
            Err(e) => panic!(
                "{}: cannot connect to the store under test: {e}",
                self.label
            ),
        }
    }
}

/// The URL in `OMNILOCK_TEST_<STORE>_URL`, e.g. `store_url("REDIS")`.
///
/// Missing: panics, unless `OMNILOCK_TEST_ALLOW_MISSING=1`, in which case it
/// prints a loud skip notice and returns `None`.
pub fn store_url(store: &str) -> Option<String> {
    let var = format!("OMNILOCK_TEST_{store}_URL");
    match std::env::var(&var) {
        Ok(url) if !url.trim().is_empty() => Some(url),
        _ if std::env::var("OMNILOCK_TEST_ALLOW_MISSING").as_deref() == Ok("1") => {
            eprintln!("SKIPPED: {var} is not set (OMNILOCK_TEST_ALLOW_MISSING=1)");
            None
        }
        _ => panic!(
            "{var} is not set: start the test stores with `scripts/stores.sh up` and \
             `source target/stores/env`, or run `scripts/test.sh`"
        ),
    }
}

/// Queues an acquire of `name` on `locks` in a task and returns the task
/// once the backend reports it waiting (its `on_wait` fired); the task ends
/// with the guard or the error. For scenarios and store-specific tests that
/// need a waiter in the queue before they act.
pub async fn queue_waiter(
    locks: &Locks,
    name: &str,
    ttl: std::time::Duration,
) -> tokio::task::JoinHandle<Result<omnilock_core::LockGuard>> {
    let name = name.to_string();
    queue_request(locks, take(move |locks| locks.lock(&name).ttl(ttl))).await
}

/// What [`queue_request`] acquires: a request built on the given client.
pub type Take = Box<dyn for<'a> FnOnce(&'a Locks) -> omnilock_core::LockRequest<'a> + Send>;

/// Boxes `build` as a [`Take`] (a closure that borrows its client needs
/// this to be accepted for every borrow).
pub fn take<F>(build: F) -> Take
where
    F: for<'a> FnOnce(&'a Locks) -> omnilock_core::LockRequest<'a> + Send + 'static,
{
    Box::new(build)
}

/// Like [`queue_waiter`], for any request: a semaphore permit, a side of a
/// read-write lock.
pub async fn queue_request(
    locks: &Locks,
    build: Take,
) -> tokio::task::JoinHandle<Result<omnilock_core::LockGuard>> {
    let (queued_tx, queued_rx) = tokio::sync::oneshot::channel();
    let locks = locks.clone();
    let task = tokio::spawn(async move {
        build(&locks)
            .on_wait(move || {
                let _ = queued_tx.send(());
            })
            .acquire()
            .await
    });
    scenarios::within("a waiter reports that it waits", queued_rx)
        .await
        .expect("the waiter reports waiting before it ends");
    task
}

/// Runs an async test body on a fresh multi-threaded runtime, as the
/// [`suite`] does for each trial, and returns what the body returns.
pub fn run<F: Future>(body: F) -> F::Output {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .expect("test runtime");
    let output = runtime.block_on(body);
    runtime.shutdown_timeout(std::time::Duration::from_secs(5));
    output
}
