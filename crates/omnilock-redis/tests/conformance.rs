//! The conformance suite on one Redis instance and on Redlock over five
//! nodes (`OMNILOCK_TEST_REDIS_URL`, `OMNILOCK_TEST_REDLOCK_URL`).

mod common;

omnilock_testkit::conformance_main! {
    redis => common::subject("REDIS"),
    redlock => common::subject("REDLOCK"),
    redis_tls => common::subject("REDIS_TLS"),
}
