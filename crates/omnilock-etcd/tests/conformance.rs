//! The conformance suite on the 3-member test cluster, in both modes
//! (`OMNILOCK_TEST_ETCD_URL`, `OMNILOCK_TEST_ETCD_LOCKAPI_URL`), and through
//! the member with authentication enabled (`OMNILOCK_TEST_ETCD_AUTH_URL`).

mod common;

mod etcd {
    omnilock_testkit::conformance_tests!(super::common::subject("ETCD"));
}

mod etcd_lockapi {
    omnilock_testkit::conformance_tests!(super::common::subject("ETCD_LOCKAPI"));
}

mod etcd_auth {
    omnilock_testkit::conformance_tests!(super::common::subject("ETCD_AUTH"));
}
