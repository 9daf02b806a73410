//! The conformance scenarios for `omnilock::blocking`, driven from std
//! threads (no async runtime in the test), so the synchronous API is held to
//! the same guarantees as the async one.
//!
//! A test binary (`harness = false`) runs every scenario of [`BLOCKING`] on
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

use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

use libtest_mimic::{Arguments, Completion, Trial};
use omnilock::blocking::{self, LockGuard, Locks};
use omnilock_core::Result;

use crate::registry::Claim;

mod locks;
mod together;

pub use locks::*;
pub use together::*;

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

/// One blocking scenario: its name (the function's), what the store must
/// claim for it to apply, and the function.
pub struct BlockingScenario {
    /// The scenario function's name; the trial is `<subject>::<name>`.
    pub name: &'static str,
    /// What the store must claim; otherwise the trial is ignored.
    pub needs: &'static [Claim],
    run: fn(&BlockingSubject),
}

macro_rules! scenario {
    ($name:ident $(, $needs:expr)*) => {
        BlockingScenario {
            name: stringify!($name),
            needs: &[$($needs),*],
            run: $name,
        }
    };
}

/// Every blocking scenario, in the order they run.
pub static BLOCKING: &[BlockingScenario] = &[
    scenario!(blocking_mutual_exclusion),
    scenario!(blocking_try_acquire_when_held),
    scenario!(blocking_timeout_is_typed),
    scenario!(blocking_release_by_owner_only),
    scenario!(blocking_stale_release_is_not_owner, Claim::BreakLock),
    scenario!(blocking_tokens_rise, Claim::FencingTokens),
    scenario!(blocking_reentrancy),
    scenario!(
        blocking_reentrancy_across_clients,
        Claim::CrossProcessReentrancy
    ),
    scenario!(blocking_drop_releases_to_waiting_thread),
    scenario!(blocking_drop_inside_runtime),
    scenario!(blocking_refused_inside_runtime),
    scenario!(blocking_lost_fires_channel_and_callback, Claim::BreakLock),
    scenario!(blocking_release_is_not_a_loss),
    scenario!(blocking_with_lock),
    scenario!(blocking_with_lock_returns_the_loss, Claim::BreakLock),
    scenario!(blocking_close),
    scenario!(blocking_invalid_names),
    scenario!(blocking_lock_all_is_all_or_nothing),
    scenario!(blocking_lock_all_in_opposite_orders_never_deadlocks),
    scenario!(blocking_lock_all_lost_fires, Claim::BreakLock),
    scenario!(blocking_election, Claim::Elections),
    scenario!(blocking_observe_follows_the_leader, Claim::Elections),
];

/// The trials of one blocking test binary.
#[derive(Default)]
pub struct BlockingSuite {
    trials: Vec<Trial>,
}

impl BlockingSuite {
    /// A suite with no subject yet.
    pub fn new() -> Self {
        BlockingSuite::default()
    }

    /// Adds one trial per scenario of [`BLOCKING`], named
    /// `<label>::<scenario>`, on the subject `subject` returns (`None`: the
    /// store is not configured). `subject` is called inside each trial, so
    /// listing the tests needs no store.
    pub fn subject(&mut self, label: &str, subject: fn() -> Option<BlockingSubject>) {
        for scenario in BLOCKING {
            let name = format!("{label}::{}", scenario.name);
            self.trials.push(Trial::ignorable_test(name, move || {
                let Some(subject) = subject() else {
                    return Ok(Completion::ignored_with("store not configured"));
                };
                if !scenario.needs.is_empty() {
                    let caps = subject.client().capabilities();
                    let unclaimed = scenario
                        .needs
                        .iter()
                        .find(|claim| claim.in_capabilities(&caps) != Some(true));
                    if let Some(claim) = unclaimed {
                        return Ok(Completion::ignored_with(claim.missing()));
                    }
                }
                (scenario.run)(&subject);
                Ok(Completion::Completed)
            }));
        }
    }

    /// Runs the trials the command line selects, as `cargo test` would.
    pub fn main(self) -> ExitCode {
        libtest_mimic::run(&Arguments::from_args(), self.trials).exit_code()
    }
}

/// The `main` of a blocking test binary (`harness = false` in its
/// `Cargo.toml`): every scenario of [`BLOCKING`] on each subject, as trials
/// `<label>::<scenario>`. Each subject expression gives a `BlockingSubject`
/// or an `Option<BlockingSubject>`; attributes such as `#[cfg(...)]` may
/// precede a subject.
#[macro_export]
macro_rules! blocking_main {
    ($($(#[$attr:meta])* $label:ident => $subject:expr),+ $(,)?) => {
        fn main() -> ::std::process::ExitCode {
            let mut suite = $crate::blocking::BlockingSuite::new();
            $(
                $(#[$attr])*
                suite.subject(stringify!($label), || ($subject).into());
            )+
            suite.main()
        }
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    /// Every public scenario function of this module is in [`BLOCKING`],
    /// once, and every entry is a scenario function.
    #[test]
    fn every_blocking_scenario_is_registered() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/blocking");
        let mut written = BTreeSet::new();
        for entry in std::fs::read_dir(dir).expect("blocking sources") {
            let source = std::fs::read_to_string(entry.expect("entry").path()).expect("source");
            for line in source.lines() {
                if let Some(rest) = line.strip_prefix("pub fn blocking_") {
                    let name: String = rest
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect();
                    written.insert(format!("blocking_{name}"));
                }
            }
        }
        let registered: Vec<&str> = BLOCKING.iter().map(|s| s.name).collect();
        let unique: BTreeSet<String> = registered.iter().map(|s| s.to_string()).collect();
        assert_eq!(unique.len(), registered.len(), "a scenario listed twice");
        assert_eq!(
            written, unique,
            "BLOCKING and the scenario functions differ"
        );
    }
}
