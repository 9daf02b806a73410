//! The conformance suite on the 3-node test ensemble
//! (`OMNILOCK_TEST_ZK_URL`), the standalone node
//! (`OMNILOCK_TEST_ZK_STANDALONE_URL`) and the ensemble with digest
//! credentials and `creator_all` ACLs (`OMNILOCK_TEST_ZK_DIGEST_URL`).

mod common;

mod zk {
    omnilock_testkit::conformance_tests!(super::common::subject("ZK"));
}

mod zk_standalone {
    omnilock_testkit::conformance_tests!(super::common::subject("ZK_STANDALONE"));
}

mod zk_digest {
    omnilock_testkit::conformance_tests!(super::common::subject("ZK_DIGEST"));
}
