//! Redlock with nodes down: 2 of 5 unresponsive still grants and excludes;
//! 3 of 5 never grants. Nodes are made unresponsive with `CLIENT PAUSE`, which
//! heals by itself. Its own test binary: nothing else runs meanwhile.

use std::time::Duration;

use omnilock_core::{ErrorKind, StoreUrl};
use omnilock_redis::RedisConfig;
use omnilock_testkit::store_url;

async fn pause(url: &str, nodes: usize, millis: u64) {
    let parsed = StoreUrl::parse(url).unwrap();
    let password = parsed.password().unwrap().expose().to_string();
    for host in parsed.hosts().iter().take(nodes) {
        let client = redis::Client::open(format!(
            "redis://:{password}@{}:{}/",
            host.host,
            host.port.unwrap()
        ))
        .unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        let _: () = redis::cmd("CLIENT")
            .arg("PAUSE")
            .arg(millis)
            .arg("ALL")
            .query_async(&mut conn)
            .await
            .unwrap();
    }
}

async fn connect(url: &str) -> omnilock_core::Locks {
    omnilock_redis::connect(RedisConfig::from_url(&StoreUrl::parse(url).unwrap()).unwrap())
        .await
        .expect("connect")
}

#[tokio::test(flavor = "multi_thread")]
async fn majority_rules() {
    let Some(url) = store_url("REDLOCK") else {
        return;
    };
    let a = connect(&url).await;
    let b = connect(&url).await;
    let pid = std::process::id();

    // Two of five unresponsive: still grants, still excludes.
    pause(&url, 2, 3000).await;
    let name = format!("faults/two/{pid}");
    let guard = a
        .lock(&name)
        .ttl(Duration::from_secs(10))
        .timeout(Duration::from_secs(5))
        .acquire()
        .await
        .expect("a majority of 3 grants");
    assert!(
        b.try_acquire(&name).await.expect("probe").is_none(),
        "two holders"
    );
    guard.release().await.expect("release");
    tokio::time::sleep(Duration::from_millis(3200)).await; // let the pause end

    // Three of five unresponsive: never grants.
    pause(&url, 3, 3000).await;
    let name = format!("faults/three/{pid}");
    let err = a.try_acquire(&name).await.expect_err("no majority");
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    // Default 15 s TTL: grants that paused nodes apply late must be undone,
    // not left to expire, or the healed cluster below stays locked.
    let err = a
        .lock(&name)
        .timeout(Duration::from_secs(1))
        .acquire()
        .await
        .expect_err("no majority while waiting either");
    assert!(
        matches!(err.kind(), ErrorKind::Timeout | ErrorKind::Unavailable),
        "{err}"
    );
    tokio::time::sleep(Duration::from_millis(3200)).await;
    // Healed: grants again.
    let guard = a
        .lock(&name)
        .timeout(Duration::from_secs(10))
        .acquire()
        .await
        .expect("grants once the nodes answer");
    guard.release().await.expect("release");
}
