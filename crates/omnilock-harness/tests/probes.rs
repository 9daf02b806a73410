//! Every store probe against its real test store: a floor round runs, and
//! the store's request counter (where it has one) counts it.

use std::time::Duration;

use omnilock_core::ErrorKind;
use omnilock_harness::Probe;
use omnilock_testkit::store_url;

/// Three floor rounds on the store in `OMNILOCK_TEST_<store>_URL`; the
/// counter, where the store has one, counts at least one request for each.
fn floor_rounds_are_counted(store: &str) {
    let Some(url) = store_url(store) else {
        return;
    };
    omnilock_testkit::run(async move {
        let probe = Probe::connect(&url)
            .await
            .unwrap_or_else(|e| panic!("{store}: probe: {e}"))
            .expect("a probe for a real store");
        assert!(!probe.floor_ops().is_empty());
        let before = match probe.requests_served().await {
            Ok(count) => Some(count),
            Err(err) if err.kind() == ErrorKind::Unsupported => None,
            Err(err) => panic!("{store}: request counter: {err}"),
        };
        for _ in 0..3 {
            tokio::time::timeout(Duration::from_secs(10), probe.floor_round())
                .await
                .unwrap_or_else(|_| panic!("{store}: a floor round took over 10 s"))
                .unwrap_or_else(|e| panic!("{store}: floor round: {e}"));
        }
        if let Some(before) = before {
            let after = probe.requests_served().await.expect("request counter");
            assert!(
                after >= before + 3,
                "{store}: 3 floor rounds counted as {} requests",
                after - before
            );
        }
    });
}

#[test]
fn redis() {
    floor_rounds_are_counted("REDIS");
}

#[test]
fn redis_cluster() {
    floor_rounds_are_counted("REDIS_CLUSTER");
}

#[test]
fn redis_sentinel() {
    floor_rounds_are_counted("REDIS_SENTINEL");
}

#[test]
fn redlock() {
    floor_rounds_are_counted("REDLOCK");
}

#[test]
fn etcd() {
    floor_rounds_are_counted("ETCD");
}

#[test]
fn zookeeper() {
    floor_rounds_are_counted("ZK");
}

#[test]
fn mysql() {
    floor_rounds_are_counted("MYSQL");
}

#[test]
fn postgres() {
    floor_rounds_are_counted("POSTGRES");
}

#[test]
fn sqlite() {
    floor_rounds_are_counted("SQLITE");
}

/// The in-memory store has no probe; a TLS URL is refused as unsupported,
/// not tried in plain text; nonsense is a configuration error.
#[test]
fn urls_without_a_probe_say_so() {
    omnilock_testkit::run(async {
        assert!(Probe::connect("mem://").await.expect("mem").is_none());
        let tls = Probe::connect("rediss://127.0.0.1:1")
            .await
            .err()
            .expect("refused");
        assert_eq!(tls.kind(), ErrorKind::Unsupported);
        let unknown = Probe::connect("nosuch://h").await.err().expect("refused");
        assert_eq!(unknown.kind(), ErrorKind::InvalidConfig);
    });
}
