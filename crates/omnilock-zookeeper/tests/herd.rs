//! The herd scenario on the test ensemble, counting requests with the
//! backend's `Measure` hook (`mntr` on every node). A test binary of its
//! own: the counters are ensemble-wide.

mod common;

omnilock_testkit::herd_main! {
    zk => common::subject("ZK"),
}
