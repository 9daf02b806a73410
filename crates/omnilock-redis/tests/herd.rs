//! The herd scenarios on the single test instance, the cluster and Redlock,
//! counting commands with a store probe (`INFO commandstats`, summed over
//! every master of the cluster or every Redlock node). A test binary of its
//! own: the counters are server-wide.

mod common;

use omnilock_harness::Probe;
use omnilock_testkit::Subject;

/// The subject, with the servers' command counter.
fn counted(store: &str) -> Option<Subject> {
    let subject = common::subject(store)?;
    let url = subject.url()?.to_string();
    Some(subject.with_request_counter(Probe::counter(url)))
}

omnilock_testkit::herd_main! {
    redis_single => counted("REDIS"),
    redis_cluster => counted("REDIS_CLUSTER"),
    redlock => counted("REDLOCK"),
}
