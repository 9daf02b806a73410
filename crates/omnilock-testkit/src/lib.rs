//! The omnilock conformance suite: one set of scenarios, written once, that
//! every backend runs against its real store.
//!
//! A backend's test file is a few lines:
//!
//! ```ignore
//! omnilock_testkit::conformance_tests!(omnilock_testkit::Subject::from_env("REDIS"));
//! ```
//!
//! [`conformance_tests!`] expands to one `#[test]` per scenario. A scenario
//! whose guarantee the backend does not claim in its
//! [`Capabilities`](omnilock_core::Capabilities) returns early and says so on
//! stderr; every other scenario asserts outcomes and fails loudly.
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
pub mod faults;
pub mod process;
pub mod scenarios;

pub use tokio;

type ConnectFn = dyn Fn() -> Pin<Box<dyn Future<Output = Result<Locks>> + Send>> + Send + Sync;

/// The store under test: a label and a way to open independent clients to it.
#[derive(Clone)]
pub struct Subject {
    label: String,
    url: Option<String>,
    connect: Arc<ConnectFn>,
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

/// Expands to the scenarios that read store-wide request counters (the
/// backend's [`Measure`](omnilock_core::Measure) hook). Put them in a test
/// binary of their own: any other test running at the same time would add to
/// the counts.
#[macro_export]
macro_rules! herd_tests {
    ($subject:expr) => {
        $crate::conformance_tests!(@each $subject; handoff_cost_is_flat);
    };
}

/// Runs an async test body on a fresh multi-threaded runtime, as
/// [`conformance_tests!`] does for each scenario.
pub fn run<F: Future<Output = ()>>(body: F) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .expect("test runtime");
    runtime.block_on(body);
    runtime.shutdown_timeout(std::time::Duration::from_secs(5));
}

/// Expands to one `#[test]` per conformance scenario for the subject that
/// `$subject` evaluates to (an `Option<Subject>`, or a `Subject`; `None`
/// skips, see [`store_url`]).
#[macro_export]
macro_rules! conformance_tests {
    ($subject:expr) => {
        $crate::conformance_tests!(@each $subject;
            mutual_exclusion,
            try_acquire_and_timeout,
            cancelled_acquire_leaves_nothing,
            reentrancy,
            reentrancy_across_clients,
            non_reentrant_reacquire_fails,
            fifo_order,
            capabilities_tell_the_truth,
            abandoned_holder_expires,
            renewal_keeps_lock,
            lost_signal_fires,
            release_is_not_a_loss,
            stale_release_is_not_owner,
            fencing_tokens_increase,
            invalid_names_rejected,
            distinct_names_are_distinct_locks,
            many_locks_at_once,
            drop_releases_in_background,
            drop_outside_runtime,
            errors_name_backend_and_lock,
            election_one_leader_at_a_time,
            election_successor_takes_over_when_leader_dies,
            election_observers_see_every_change,
            measure_hooks_work,
        );
    };
    (@each $subject:expr; $($scenario:ident),* $(,)?) => {
        $(
            #[test]
            fn $scenario() {
                let subject: Option<$crate::Subject> = ($subject).into();
                if let Some(subject) = subject {
                    $crate::run(async move { $crate::scenarios::$scenario(&subject).await });
                }
            }
        )*
    };
}
