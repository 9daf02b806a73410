//! The herd scenario on the test ensemble, counting requests with the
//! backend's `Measure` hook (`mntr` on every node). A test binary of its
//! own: the counters are ensemble-wide.

mod common;

mod zk {
    omnilock_testkit::herd_tests!(super::common::subject("ZK"));
}
