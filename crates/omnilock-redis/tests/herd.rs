//! The herd scenario on the single test instance, counting commands with the
//! backend's `Measure` hook (`INFO commandstats`). A test binary of its own:
//! the counters are server-wide.

mod common;

omnilock_testkit::herd_main! {
    redis_single => common::subject("REDIS"),
}
