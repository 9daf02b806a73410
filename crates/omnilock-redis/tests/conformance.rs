//! The conformance suite on one Redis instance and on Redlock over five
//! nodes (`OMNILOCK_TEST_REDIS_URL`, `OMNILOCK_TEST_REDLOCK_URL`).

mod common;

mod redis {
    omnilock_testkit::conformance_tests!(super::common::subject("REDIS"));
}

mod redlock {
    omnilock_testkit::conformance_tests!(super::common::subject("REDLOCK"));
}

mod redis_tls {
    omnilock_testkit::conformance_tests!(super::common::subject("REDIS_TLS"));
}
