//! The conformance suite on the 3-node test ensemble
//! (`OMNILOCK_TEST_ZK_URL`), the standalone node
//! (`OMNILOCK_TEST_ZK_STANDALONE_URL`), the ensemble with digest
//! credentials and `creator_all` ACLs (`OMNILOCK_TEST_ZK_DIGEST_URL`), and
//! the standalone node over TLS with a client certificate
//! (`OMNILOCK_TEST_ZK_TLS_URL`).

mod common;

omnilock_testkit::conformance_main! {
    zk => common::subject("ZK"),
    zk_standalone => common::subject("ZK_STANDALONE"),
    zk_digest => common::subject("ZK_DIGEST"),
    zk_tls => common::subject("ZK_TLS"),
}
