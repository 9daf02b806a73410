//! The conformance suite on one Redis instance, on Redlock over five nodes,
//! on TLS, on Redis Cluster (3 masters, 3 replicas) and on a master watched
//! by Sentinel (`OMNILOCK_TEST_REDIS_URL`, `OMNILOCK_TEST_REDLOCK_URL`,
//! `OMNILOCK_TEST_REDIS_TLS_URL`, `OMNILOCK_TEST_REDIS_CLUSTER_URL`,
//! `OMNILOCK_TEST_REDIS_SENTINEL_URL`), and on that master with every write
//! confirmed by its replica (`wait_replicas=1`).

mod common;

omnilock_testkit::conformance_main! {
    redis => common::subject("REDIS"),
    redlock => common::subject("REDLOCK"),
    redis_tls => common::subject("REDIS_TLS"),
    redis_cluster => common::subject("REDIS_CLUSTER"),
    redis_sentinel => common::subject("REDIS_SENTINEL"),
    redis_sentinel_confirmed =>
        common::subject_with("REDIS_SENTINEL", "wait_replicas", "1&wait_timeout=1s"),
}
