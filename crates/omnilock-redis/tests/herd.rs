//! The herd scenario on the single test instance, the cluster and Redlock,
//! counting commands with the backend's `Measure` hook (`INFO commandstats`,
//! summed over every master of the cluster or every Redlock node). A test binary of its own: the
//! counters are server-wide.

mod common;

omnilock_testkit::herd_main! {
    redis_single => common::subject("REDIS"),
    redis_cluster => common::subject("REDIS_CLUSTER"),
    redlock => common::subject("REDLOCK"),
}
