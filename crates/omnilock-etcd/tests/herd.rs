//! The herd scenario on the test cluster, in both modes, counting requests
//! with the backend's `Measure` hook (the members' `/metrics`). A test
//! binary of its own: the counters are cluster-wide.

mod common;

mod etcd {
    omnilock_testkit::herd_tests!(super::common::subject("ETCD"));
}

mod etcd_lockapi {
    omnilock_testkit::herd_tests!(super::common::subject("ETCD_LOCKAPI"));
}
