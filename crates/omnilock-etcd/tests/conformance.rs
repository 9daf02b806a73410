//! The conformance suite on the 3-member test cluster, in both modes
//! (`OMNILOCK_TEST_ETCD_URL`, `OMNILOCK_TEST_ETCD_LOCKAPI_URL`), and through
//! the member with authentication enabled (`OMNILOCK_TEST_ETCD_AUTH_URL`).

mod common;

omnilock_testkit::conformance_main! {
    etcd => common::subject("ETCD"),
    etcd_lockapi => common::subject("ETCD_LOCKAPI"),
    etcd_auth => common::subject("ETCD_AUTH"),
}
