//! The herd scenario on the test cluster, in both modes, counting requests
//! with the backend's `Measure` hook (the members' `/metrics`). A test
//! binary of its own: the counters are cluster-wide.

mod common;

omnilock_testkit::herd_main! {
    etcd => common::subject("ETCD"),
    etcd_lockapi => common::subject("ETCD_LOCKAPI"),
}
