//! MariaDB restarted while a lock is held: the row survives, the holder keeps
//! the lock, and renewal resumes once the pool reconnects. Its own test
//! binary, so no other test runs while the server is down.
#![cfg(feature = "mysql")]

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use omnilock_core::{Locks, StoreUrl};
use omnilock_sql::{SqlConfig, SqlStore};
use omnilock_testkit::store_url;

async fn connect(url: &str) -> Locks {
    let config = SqlConfig::from_url(&StoreUrl::parse(url).unwrap()).unwrap();
    Locks::new(SqlStore::connect(config).await.expect("connect"))
}

#[tokio::test(flavor = "multi_thread")]
async fn holder_keeps_lock_across_mariadb_restart() {
    let Some(url) = store_url("MYSQL") else {
        return;
    };
    let holder = connect(&url).await;
    // Renewal every 3 s: at least one renewal falls due while the server is
    // down or right after, and the 9 s lease outlasts the restart.
    let ttl = Duration::from_secs(9);
    let guard = holder
        .lock("restart/held")
        .ttl(ttl)
        .acquire()
        .await
        .expect("acquire");
    let token = guard.token();
    let lost = guard.lost();
    tokio::pin!(lost);

    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/stores.sh");
    let restarted = tokio::task::spawn_blocking(move || {
        Command::new(script)
            .args(["restart", "mariadb"])
            .status()
            .expect("run stores.sh")
    })
    .await
    .expect("restart task");
    assert!(restarted.success(), "MariaDB did not restart");
    let before = guard.safe_until();

    // Renewal resumes on new connections: the safe deadline moves on.
    let deadline = Instant::now() + ttl;
    while guard.safe_until() <= before {
        tokio::select! {
            loss = &mut lost => panic!("the lock was lost across the restart: {loss}"),
            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
        }
        assert!(
            Instant::now() < deadline,
            "renewal did not resume after the restart"
        );
    }
    assert!(guard.is_held());
    let other = connect(&url).await;
    assert!(
        other
            .try_acquire("restart/held")
            .await
            .expect("probe")
            .is_none(),
        "the lock row did not survive the restart"
    );
    assert_eq!(guard.token(), token);
    guard.release().await.expect("release after the restart");
    assert!(
        other
            .try_acquire("restart/held")
            .await
            .expect("probe")
            .is_some()
    );
}
