//! The test runner behind [`conformance_main!`](crate::conformance_main) and
//! [`herd_main!`](crate::herd_main): one trial per scenario and subject, on
//! `libtest-mimic`, so that a scenario the store does not claim shows as
//! *ignored* (with the reason) instead of passing without having run.
//!
//! What a store claims is known only once connected, so each trial connects
//! first and decides then; a store whose URL is missing (allowed by
//! `OMNILOCK_TEST_ALLOW_MISSING=1`) makes its trials ignored too.

use std::future::Future;
use std::pin::Pin;
use std::process::ExitCode;

use libtest_mimic::{Arguments, Completion, Trial};

use crate::Subject;
use crate::registry::{Scenario, SuiteSubject};

/// The trials of one test binary.
pub struct Suite<S: SuiteSubject = Subject> {
    scenarios: &'static [&'static [Scenario<S>]],
    one_at_a_time: bool,
    trials: Vec<Trial>,
}

impl<S: SuiteSubject> Suite<S> {
    /// A suite of the `scenarios` lists (see [`crate::registry`]), with no
    /// subject yet.
    pub fn new(scenarios: &'static [&'static [Scenario<S>]]) -> Self {
        Suite {
            scenarios,
            one_at_a_time: false,
            trials: Vec::new(),
        }
    }

    /// Runs the trials one at a time, whatever `--test-threads` says: the
    /// herd scenarios read store-wide request counters, which a trial
    /// beside them would add to.
    pub fn one_at_a_time(mut self) -> Self {
        self.one_at_a_time = true;
        self
    }

    /// Adds one trial per scenario, named `<label>::<scenario>`, on the
    /// subject `subject` returns (`None`: the store is not configured).
    /// `subject` is called inside each trial, so listing the tests needs no
    /// store.
    pub fn subject(&mut self, label: &str, subject: fn() -> Option<S>) {
        for scenario in self.scenarios.iter().flat_map(|list| list.iter()) {
            let name = format!("{label}::{}", scenario.name);
            self.trials
                .push(Trial::ignorable_test(name.clone(), move || {
                    let _timer = TrialTimer::start(&name);
                    let Some(subject) = subject() else {
                        return Ok(Completion::ignored_with("store not configured"));
                    };
                    Ok(match subject.run_claimed(scenario.needs, scenario.run) {
                        Some(why) => Completion::ignored_with(why),
                        None => Completion::Completed,
                    })
                }));
        }
    }

    /// Adds a plain async test, run on a fresh runtime like the scenarios
    /// (for test binaries that hold more than the suite).
    pub fn test(&mut self, name: &str, body: fn() -> Pin<Box<dyn Future<Output = ()> + Send>>) {
        self.trials.push(Trial::test(name, move || {
            crate::run(body());
            Ok(())
        }));
    }

    /// Runs the trials the command line selects, as `cargo test` would.
    pub fn main(self) -> ExitCode {
        let mut arguments = Arguments::from_args();
        if self.one_at_a_time {
            arguments.test_threads = Some(1);
        } else if arguments.test_threads.is_none()
            && std::env::var_os("RUST_TEST_THREADS").is_none()
        {
            arguments.test_threads = Some(default_threads());
        }
        libtest_mimic::run(&arguments, self.trials).exit_code()
    }
}

/// How many trials run at once unless `--test-threads` or
/// `RUST_TEST_THREADS` says: one more than there are CPUs. A trial spends
/// most of its time waiting (for a lease to run out, a poll, the store's
/// answer), so one trial per CPU leaves them idle a third of the time; many
/// more starve the trials' own renewals (on 2 CPUs, four at a time made
/// renewals late by over half a second, and leases ran out).
fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |cpus| cpus.get()) + 1
}

/// With `OMNILOCK_TEST_TIMES=1`, each trial prints its wall time to stderr
/// when it ends (`trial-time <seconds> <name>`), to find what makes a suite
/// slow.
struct TrialTimer<'a> {
    name: &'a str,
    start: Option<std::time::Instant>,
}

impl<'a> TrialTimer<'a> {
    fn start(name: &'a str) -> Self {
        let on = std::env::var_os("OMNILOCK_TEST_TIMES").is_some_and(|v| v == "1");
        TrialTimer {
            name,
            start: on.then(std::time::Instant::now),
        }
    }
}

impl Drop for TrialTimer<'_> {
    fn drop(&mut self) {
        if let Some(start) = self.start {
            eprintln!(
                "trial-time {:.2} {}",
                start.elapsed().as_secs_f64(),
                self.name
            );
        }
    }
}

/// The `main` of a conformance test binary (`harness = false` in its
/// `Cargo.toml`): every scenario of [`registry::CONFORMANCE`] on each
/// subject, as trials `<label>::<scenario>`. Each subject expression gives
/// an `Option<Subject>` or a `Subject` (see [`store_url`]); attributes such
/// as `#[cfg(...)]` may precede a subject. Plain async tests of the same
/// binary follow `tests:`.
///
/// ```ignore
/// omnilock_testkit::conformance_main!(etcd => common::subject("ETCD"));
/// ```
///
/// [`registry::CONFORMANCE`]: crate::registry::CONFORMANCE
/// [`store_url`]: crate::store_url
#[macro_export]
macro_rules! conformance_main {
    ($($rest:tt)*) => {
        $crate::suite_main!($crate::registry::CONFORMANCE; $($rest)*);
    };
}

/// Like [`conformance_main!`], with the scenarios of
/// [`registry::HERD`](crate::registry::HERD), which read store-wide request
/// counters and so run in a test binary of their own.
#[macro_export]
macro_rules! herd_main {
    ($($rest:tt)*) => {
        $crate::suite_main!($crate::registry::HERD, one_at_a_time; $($rest)*);
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! suite_main {
    ($scenarios:expr $(, $one_at_a_time:ident)?;
     $($(#[$attr:meta])* $label:ident => $subject:expr),+ $(,)?
     $(; tests: $($test:ident),+ $(,)?)?) => {
        fn main() -> ::std::process::ExitCode {
            let mut suite = $crate::suite::Suite::new($scenarios)$(.$one_at_a_time())?;
            $(
                $(#[$attr])*
                suite.subject(stringify!($label), || ($subject).into());
            )+
            $($(
                suite.test(stringify!($test), || ::std::boxed::Box::pin($test()));
            )+)?
            suite.main()
        }
    };
}
