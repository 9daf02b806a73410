//! The lists of scenarios the suite runs: each scenario module's own list
//! (beside its functions, with what each needs the store to claim),
//! gathered here. The runner ([`crate::suite`]) reads them to build its
//! trials. Scenario functions are crate-private, so one that no list names
//! is dead code and the build (`-D warnings`) refuses it: a scenario cannot
//! be written and then never run.

use std::future::Future;
use std::pin::Pin;

use omnilock_core::{Capabilities, ErrorKind, Locks};

use crate::Subject;
#[cfg(feature = "blocking")]
use crate::blocking::{self, BlockingSubject};
use crate::scenarios;

pub(crate) type ScenarioFuture<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// One scenario: its name (the function's), the guarantees it tests, and
/// how to run it on a subject `S`: the async [`Subject`] of the conformance
/// and herd suites, or the `BlockingSubject` of the blocking suite.
pub struct Scenario<S: SuiteSubject = Subject> {
    /// The scenario function's name; the trial is `<subject>::<name>`.
    pub name: &'static str,
    /// What the store must claim for the scenario to apply; a store that
    /// does not claim one of these reports the scenario as ignored.
    pub needs: &'static [Claim],
    pub(crate) run: S::Run,
}

/// What a suite runs its scenarios on: opens the store's clients, tells
/// whether the store claims what a scenario needs, and runs it.
pub trait SuiteSubject: Sized + 'static {
    /// How a scenario function is called on this kind of subject.
    type Run: Copy + Send + Sync + 'static;

    /// Runs the scenario `run` unless the store does not claim one of
    /// `needs`; then it returns the reason, to show for ignoring it.
    fn run_claimed(&self, needs: &'static [Claim], run: Self::Run) -> Option<&'static str>;
}

impl SuiteSubject for Subject {
    type Run = for<'a> fn(&'a Subject) -> ScenarioFuture<'a>;

    fn run_claimed(&self, needs: &'static [Claim], run: Self::Run) -> Option<&'static str> {
        crate::run(async move {
            if !needs.is_empty() {
                let locks = self.client().await;
                for claim in needs {
                    if !claim.is_offered_by(self, &locks).await {
                        return Some(claim.missing());
                    }
                }
            }
            run(self).await;
            None
        })
    }
}

#[cfg(feature = "blocking")]
impl SuiteSubject for BlockingSubject {
    type Run = fn(&BlockingSubject);

    /// Runs on the calling thread, with no async runtime: the blocking API
    /// is tested as a program without one uses it.
    fn run_claimed(&self, needs: &'static [Claim], run: Self::Run) -> Option<&'static str> {
        if !needs.is_empty() {
            let caps = self.client().capabilities();
            let unclaimed = needs
                .iter()
                .find(|claim| claim.in_capabilities(&caps) != Some(true));
            if let Some(claim) = unclaimed {
                return Some(claim.missing());
            }
        }
        run(self);
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
    /// `Capabilities::check`.
    Check,
    /// `Capabilities::guarded_write`.
    GuardedWrite,
    /// `Capabilities::inspect`.
    Inspect,
    /// `Capabilities::inspect_waiters`.
    InspectWaiters,
    /// `Capabilities::list`.
    List,
    /// `Capabilities::records`.
    Records,
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
            Claim::Check => caps.check,
            Claim::GuardedWrite => caps.guarded_write,
            Claim::Inspect => caps.inspect,
            Claim::InspectWaiters => caps.inspect_waiters,
            Claim::List => caps.list,
            Claim::Records => caps.records,
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
            Claim::Check => "not claimed: check",
            Claim::GuardedWrite => "not claimed: guarded writes",
            Claim::RequestCounter => "not claimed: a request counter",
            Claim::Inspect => "not claimed: inspect",
            Claim::InspectWaiters => "not claimed: inspect waiters",
            Claim::List => "not claimed: list",
            Claim::Records => "not claimed: records",
        }
    }
}

/// A registry entry for the scenario function `$name` (in scope where the
/// macro is used), needing `$needs`.
macro_rules! scenario {
    ($name:ident $(, $needs:expr)*) => {
        $crate::registry::Scenario {
            name: stringify!($name),
            needs: &[$($needs),*],
            run: |subject| Box::pin($name(subject)),
        }
    };
}
pub(crate) use scenario;

/// Like [`scenario!`], for a blocking scenario function.
#[cfg(feature = "blocking")]
macro_rules! blocking_scenario {
    ($name:ident $(, $needs:expr)*) => {
        $crate::registry::Scenario::<$crate::blocking::BlockingSubject> {
            name: stringify!($name),
            needs: &[$($needs),*],
            run: $name,
        }
    };
}
#[cfg(feature = "blocking")]
pub(crate) use blocking_scenario;

/// Every scenario of the conformance suite: each module's list, in this
/// order.
pub static CONFORMANCE: &[&[Scenario]] = &[
    scenarios::exclusion::SCENARIOS,
    scenarios::reentrancy::SCENARIOS,
    scenarios::contract::SCENARIOS,
    scenarios::leases::SCENARIOS,
    scenarios::guarded::SCENARIOS,
    scenarios::names::SCENARIOS,
    scenarios::release::SCENARIOS,
    scenarios::multi::SCENARIOS,
    scenarios::semaphore::SCENARIOS,
    scenarios::rw::SCENARIOS,
    scenarios::elections::SCENARIOS,
    scenarios::inspect::SCENARIOS,
    scenarios::hold_bounds::SCENARIOS,
    scenarios::records::SCENARIOS,
];

/// The scenarios that read store-wide request counters: a test binary of
/// their own runs them, one at a time, since any test running beside them
/// adds to the counts.
pub static HERD: &[&[Scenario]] = &[scenarios::herd::SCENARIOS];

/// Every scenario of the blocking suite (`omnilock::blocking`, driven from
/// plain threads): each module's list, in this order.
#[cfg(feature = "blocking")]
pub static BLOCKING: &[&[Scenario<BlockingSubject>]] =
    &[blocking::locks::SCENARIOS, blocking::together::SCENARIOS];

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn scenario_names_are_unique() {
        let mut seen = BTreeSet::new();
        for scenario in CONFORMANCE.iter().chain(HERD).flat_map(|list| list.iter()) {
            assert!(seen.insert(scenario.name), "{} twice", scenario.name);
        }
        assert!(seen.len() > 50, "only {} scenarios", seen.len());
        #[cfg(feature = "blocking")]
        for scenario in BLOCKING.iter().flat_map(|list| list.iter()) {
            assert!(seen.insert(scenario.name), "{} twice", scenario.name);
        }
    }
}
