//! The herd scenarios on the test ensemble, counting requests with a store
//! probe (`mntr` on every node). A test binary of its own: the counters are
//! ensemble-wide.

mod common;

use omnilock_harness::Probe;
use omnilock_testkit::Subject;

/// The subject, with the ensemble's request counter.
fn counted(store: &str) -> Option<Subject> {
    let subject = common::subject(store)?;
    let url = subject.url()?.to_string();
    Some(subject.with_request_counter(Probe::counter(url)))
}

omnilock_testkit::herd_main! {
    zk => counted("ZK"),
}
