//! The herd scenarios on the test cluster, in both modes, counting requests
//! with a store probe (the members' `/metrics`). A test binary of its own:
//! the counters are cluster-wide.

mod common;

use omnilock_harness::Probe;
use omnilock_testkit::Subject;

/// The subject, with the members' request counter.
fn counted(store: &str) -> Option<Subject> {
    let subject = common::subject(store)?;
    let url = subject.url()?.to_string();
    Some(subject.with_request_counter(Probe::counter(url)))
}

omnilock_testkit::herd_main! {
    etcd => counted("ETCD"),
    etcd_lockapi => counted("ETCD_LOCKAPI"),
}
