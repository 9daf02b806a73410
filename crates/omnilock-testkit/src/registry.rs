//! The one list of scenarios the suite runs, and what each needs the store to
//! claim. The runner ([`crate::suite`]) reads it to build its trials, and a
//! test below fails when a public scenario function is missing from it, so a
//! new scenario cannot be written and then never run.

use std::future::Future;
use std::pin::Pin;

use omnilock_core::{Capabilities, ErrorKind, Locks};

use crate::scenarios;
use crate::Subject;

type ScenarioFuture<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// One scenario: its name (the function's), the guarantees it tests, and
/// how to run it.
pub struct Scenario {
    /// The scenario function's name; the trial is `<subject>::<name>`.
    pub name: &'static str,
    /// What the store must claim for the scenario to apply; a store that
    /// does not claim one of these reports the scenario as ignored.
    pub needs: &'static [Claim],
    run: for<'a> fn(&'a Subject) -> ScenarioFuture<'a>,
}

impl Scenario {
    /// Runs the scenario on `subject` (assumes the store claims `needs`).
    pub fn run<'a>(&self, subject: &'a Subject) -> ScenarioFuture<'a> {
        (self.run)(subject)
    }

    /// The first of `needs` that `subject` (whose client is `locks`) does
    /// not claim, as a reason to show for ignoring the scenario.
    pub async fn unclaimed(&self, subject: &Subject, locks: &Locks) -> Option<&'static str> {
        for claim in self.needs {
            if !claim.is_offered_by(subject, locks).await {
                return Some(claim.missing());
            }
        }
        None
    }
}

/// A guarantee a store may or may not offer. Most are flags of
/// [`Capabilities`]; the request counter is
/// found by asking the subject's counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// `Capabilities::fair`.
    Fair,
    /// `Capabilities::fencing`.
    FencingTokens,
    /// `Capabilities::lease_renewal`.
    LeaseRenewal,
    /// `Capabilities::break_lock`.
    BreakLock,
    /// `Capabilities::cross_process_reentrancy`.
    CrossProcessReentrancy,
    /// `Capabilities::push_wakeups`.
    PushWakeups,
    /// `Capabilities::election`.
    Elections,
    /// `Capabilities::semaphore`.
    Semaphore,
    /// `Capabilities::rw_lock`.
    RwLock,
    /// Both `Capabilities::semaphore` and `Capabilities::rw_lock`.
    SemaphoreAndRwLock,
    /// `Capabilities::atomic_lock_all`.
    AtomicLockAll,
    /// The subject has a request counter ([`Subject::with_request_counter`])
    /// that counts (does not answer `Unsupported`).
    RequestCounter,
}

impl Claim {
    /// Whether `caps` claims this; `None` for the claims found by asking
    /// the subject rather than the store's capabilities.
    pub fn in_capabilities(self, caps: &Capabilities) -> Option<bool> {
        Some(match self {
            Claim::Fair => caps.fair,
            Claim::FencingTokens => caps.fencing,
            Claim::LeaseRenewal => caps.lease_renewal,
            Claim::BreakLock => caps.break_lock,
            Claim::CrossProcessReentrancy => caps.cross_process_reentrancy,
            Claim::PushWakeups => caps.push_wakeups,
            Claim::Elections => caps.election,
            Claim::Semaphore => caps.semaphore,
            Claim::RwLock => caps.rw_lock,
            Claim::SemaphoreAndRwLock => caps.semaphore && caps.rw_lock,
            Claim::AtomicLockAll => caps.atomic_lock_all,
            Claim::RequestCounter => return None,
        })
    }

    async fn is_offered_by(self, subject: &Subject, locks: &Locks) -> bool {
        if let Some(claimed) = self.in_capabilities(&locks.capabilities()) {
            return claimed;
        }
        match self {
            // Any answer but `Unsupported` is a claim: a counter that fails
            // for another reason must fail the scenario, not hide it.
            Claim::RequestCounter => match subject.requests_served().await {
                None => false,
                Some(Err(err)) => err.kind() != ErrorKind::Unsupported,
                Some(Ok(_)) => true,
            },
            _ => unreachable!("answered by in_capabilities"),
        }
    }

    /// Why a scenario needing this is ignored, as shown in the test output.
    pub fn missing(self) -> &'static str {
        match self {
            Claim::Fair => "not claimed: fair",
            Claim::FencingTokens => "not claimed: fencing tokens",
            Claim::LeaseRenewal => "not claimed: lease renewal",
            Claim::BreakLock => "not claimed: break_lock",
            Claim::CrossProcessReentrancy => "not claimed: cross-process reentrancy",
            Claim::PushWakeups => "not claimed: push wake-ups",
            Claim::Elections => "not claimed: elections",
            Claim::Semaphore => "not claimed: semaphore",
            Claim::RwLock => "not claimed: read-write lock",
            Claim::SemaphoreAndRwLock => "not claimed: semaphore and read-write lock",
            Claim::AtomicLockAll => "not claimed: an atomic lock_all step",
            Claim::RequestCounter => "not claimed: a request counter",
        }
    }
}

/// A registry entry for `scenarios::$name`, needing `$needs`.
macro_rules! scenario {
    ($name:ident $(, $needs:expr)*) => {
        Scenario {
            name: stringify!($name),
            needs: &[$($needs),*],
            run: |subject| Box::pin(scenarios::$name(subject)),
        }
    };
}

/// Every scenario of the conformance suite, in the order they are listed.
pub static CONFORMANCE: &[Scenario] = &[
    scenario!(mutual_exclusion),
    scenario!(try_acquire_and_timeout),
    scenario!(cancelled_acquire_leaves_nothing),
    scenario!(reentrancy),
    scenario!(reentrancy_across_clients, Claim::CrossProcessReentrancy),
    scenario!(non_reentrant_reacquire_fails),
    scenario!(fifo_order, Claim::Fair),
    scenario!(newcomers_never_pass_a_waiter, Claim::Fair),
    scenario!(capabilities_tell_the_truth),
    scenario!(abandoned_holder_expires),
    scenario!(renewal_keeps_lock, Claim::LeaseRenewal),
    scenario!(lost_signal_fires, Claim::BreakLock),
    scenario!(release_is_not_a_loss),
    scenario!(stale_release_is_not_owner, Claim::BreakLock),
    scenario!(fencing_tokens_increase, Claim::FencingTokens),
    scenario!(invalid_names_rejected),
    scenario!(distinct_names_are_distinct_locks),
    scenario!(many_locks_at_once),
    scenario!(drop_releases_in_background),
    scenario!(drop_outside_runtime),
    scenario!(errors_name_backend_and_lock),
    scenario!(lock_all_takes_every_name),
    scenario!(lock_all_is_all_or_nothing),
    scenario!(lock_all_in_opposite_orders_never_deadlocks),
    scenario!(lock_all_cancelled_leaves_nothing),
    scenario!(lock_all_lost_fires_when_a_part_is_lost, Claim::BreakLock),
    scenario!(lock_all_rejects_bad_input),
    scenario!(
        lock_all_atomic_step_never_holds_a_part_alone,
        Claim::AtomicLockAll
    ),
    scenario!(primitives_reject_bad_input_and_report_support),
    scenario!(
        primitives_have_separate_namespaces,
        Claim::SemaphoreAndRwLock
    ),
    scenario!(semaphore_permits_never_exceeded, Claim::Semaphore),
    scenario!(semaphore_full_refuses_until_release, Claim::Semaphore),
    scenario!(semaphore_first_tries_at_once_never_error, Claim::Semaphore),
    scenario!(semaphore_permits_mismatch_rejected, Claim::Semaphore),
    scenario!(semaphore_cancelled_acquire_leaves_nothing, Claim::Semaphore),
    scenario!(semaphore_fifo_order, Claim::Semaphore, Claim::Fair),
    scenario!(
        semaphore_tokens_rise,
        Claim::Semaphore,
        Claim::FencingTokens
    ),
    scenario!(semaphore_abandoned_permit_expires, Claim::Semaphore),
    scenario!(
        semaphore_paused_holder_is_told,
        Claim::Semaphore,
        Claim::LeaseRenewal
    ),
    scenario!(rw_readers_share_writers_exclude, Claim::RwLock),
    scenario!(rw_readers_never_overlap_a_writer, Claim::RwLock),
    scenario!(
        rw_waiting_writer_blocks_later_readers,
        Claim::RwLock,
        Claim::Fair
    ),
    scenario!(rw_reentrancy_rules, Claim::RwLock),
    scenario!(rw_cancelled_writer_leaves_nothing, Claim::RwLock),
    scenario!(rw_tokens_rise, Claim::RwLock, Claim::FencingTokens),
    scenario!(rw_abandoned_writer_expires, Claim::RwLock),
    // Elections serve candidates in the order they queued: fair stores only.
    scenario!(election_one_leader_at_a_time, Claim::Fair, Claim::Elections),
    scenario!(
        election_successor_takes_over_when_leader_dies,
        Claim::Fair,
        Claim::Elections
    ),
    scenario!(
        election_observers_see_every_change,
        Claim::Fair,
        Claim::Elections
    ),
    scenario!(
        election_longest_value_round_trips,
        Claim::Fair,
        Claim::Elections
    ),
];

/// The scenarios that read store-wide request counters: a test binary of
/// their own runs them, one at a time, since any test running beside them
/// adds to the counts.
pub static HERD: &[Scenario] = &[
    scenario!(
        handoff_cost_is_flat,
        Claim::PushWakeups,
        Claim::RequestCounter
    ),
    scenario!(
        semaphore_handoff_cost_is_flat,
        Claim::Semaphore,
        Claim::PushWakeups,
        Claim::RequestCounter
    ),
    scenario!(
        rw_handoff_cost_is_flat,
        Claim::RwLock,
        Claim::PushWakeups,
        Claim::RequestCounter
    ),
];

/// Public scenario functions that take more than one subject: each
/// backend's own tests call them with the subjects they need.
pub const MULTI_SUBJECT: &[&str] = &["namespaces_are_disjoint"];

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    /// Every `pub async fn` in the scenario sources, by name.
    fn public_scenario_functions() -> BTreeSet<String> {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/scenarios");
        let mut names = BTreeSet::new();
        for entry in std::fs::read_dir(dir).expect("scenario sources") {
            let path = entry.expect("directory entry").path();
            if path.extension().is_some_and(|e| e == "rs") {
                let source = std::fs::read_to_string(&path).expect("scenario source");
                for line in source.lines() {
                    if let Some(rest) = line.trim_start().strip_prefix("pub async fn ") {
                        let name: String = rest
                            .chars()
                            .take_while(|c| c.is_alphanumeric() || *c == '_')
                            .collect();
                        names.insert(name);
                    }
                }
            }
        }
        names
    }

    #[test]
    fn every_public_scenario_is_registered() {
        let registered: BTreeSet<String> = CONFORMANCE
            .iter()
            .chain(HERD)
            .map(|s| s.name.to_string())
            .chain(MULTI_SUBJECT.iter().map(|s| s.to_string()))
            .collect();
        let written = public_scenario_functions();
        assert!(!written.is_empty(), "no scenario functions found");
        let unregistered: Vec<_> = written.difference(&registered).collect();
        assert!(
            unregistered.is_empty(),
            "public scenarios the suite never runs (add them to CONFORMANCE, HERD or \
             MULTI_SUBJECT in registry.rs): {unregistered:?}"
        );
        let vanished: Vec<_> = registered.difference(&written).collect();
        assert!(
            vanished.is_empty(),
            "registered but not found: {vanished:?}"
        );
    }

    #[test]
    fn scenario_names_are_unique() {
        let mut seen = BTreeSet::new();
        for scenario in CONFORMANCE.iter().chain(HERD) {
            assert!(seen.insert(scenario.name), "{} twice", scenario.name);
        }
    }
}
