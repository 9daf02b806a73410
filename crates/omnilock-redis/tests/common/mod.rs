//! The subject every Redis test binary builds its scenarios on.

pub(crate) mod guarded;
pub(crate) mod silent;

use omnilock_core::StoreUrl;
use omnilock_redis::RedisConfig;
use omnilock_testkit::{Subject, store_url};

/// The store in `OMNILOCK_TEST_<store>_URL`, opened through `RedisConfig`.
#[allow(dead_code)] // not every test binary uses it
pub(crate) fn subject(store: &str) -> Option<Subject> {
    subject_at(store, store_url(store)?)
}

/// The store in `OMNILOCK_TEST_<store>_URL` with `option=value` added.
#[allow(dead_code)] // not every test binary uses it
pub(crate) fn subject_with(store: &str, option: &str, value: &str) -> Option<Subject> {
    let url = store_url(store)?;
    subject_at(store, with_option(&url, &format!("{option}={value}")))
}

fn subject_at(store: &str, url: String) -> Option<Subject> {
    let for_clients = url.clone();
    Some(
        Subject::new(store.to_lowercase(), move || {
            let url = for_clients.clone();
            async move { omnilock_redis::connect(RedisConfig::from_url(&StoreUrl::parse(&url)?)?).await }
        })
        .with_guarded_writes(guarded::opener(url.clone()))
        .with_url(url),
    )
}

/// The data nodes' password in every test deployment of `scripts/stores.sh`.
#[allow(dead_code)]
pub(crate) const PASSWORD: &str = "omnilock-test-pw";

/// `url` with `option` (`key=value`) added to its query string.
#[allow(dead_code)]
pub(crate) fn with_option(url: &str, option: &str) -> String {
    let joiner = if url.contains('?') { '&' } else { '?' };
    format!("{url}{joiner}{option}")
}

/// The client ports of `deployment`'s nodes in the test topology, in node
/// order (`redis_cluster`: nodes 0..5; `redis_sentinel`: the master, its
/// replica, then the three sentinels).
#[allow(dead_code)]
pub(crate) fn ports(deployment: &str) -> Vec<u16> {
    omnilock_harness::topology::Topology::load()
        .expect("the test topology (scripts/stores.sh up)")
        .deployment(deployment)
        .ports()
}

/// A plain connection to `port` on loopback with `password`, within 5 s.
#[allow(dead_code)]
pub(crate) async fn raw(port: u16, password: &str) -> redis::aio::MultiplexedConnection {
    let client = redis::Client::open(format!("redis://:{password}@127.0.0.1:{port}/")).unwrap();
    tokio::time::timeout(
        std::time::Duration::from_secs(5),
        client.get_multiplexed_async_connection(),
    )
    .await
    .expect("connect in time")
    .expect("connect")
}

/// The port of the cluster master that serves `key`'s slot, as the node at
/// `seed` sees the map.
#[allow(dead_code)]
pub(crate) async fn master_of(seed: u16, key: &str) -> u16 {
    let mut conn = raw(seed, PASSWORD).await;
    let slot: u16 = redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(key)
        .query_async(&mut conn)
        .await
        .unwrap();
    let ranges: Vec<redis::Value> = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query_async(&mut conn)
        .await
        .unwrap();
    for range in ranges {
        let redis::Value::Array(parts) = range else {
            continue;
        };
        let start: u16 = redis::from_redis_value_ref(&parts[0]).unwrap();
        let end: u16 = redis::from_redis_value_ref(&parts[1]).unwrap();
        if (start..=end).contains(&slot) {
            let redis::Value::Array(master) = &parts[2] else {
                continue;
            };
            return redis::from_redis_value_ref(&master[1]).unwrap();
        }
    }
    panic!("no master serves slot {slot}")
}

/// One hand-off of `name`: `holder` takes it, a waiter on `backend` queues,
/// `holder` releases, the waiter is granted and releases. True when the
/// grant came by a wake-up message (`backend`'s `wakeups()` counter rose),
/// not by the waiter's periodic re-check.
#[allow(dead_code)]
pub(crate) async fn hand_off_by_message(
    backend: &omnilock_redis::RedisStore,
    holder: &omnilock_core::Locks,
    name: &str,
) -> bool {
    let ttl = std::time::Duration::from_secs(15);
    let held = holder.lock(name).ttl(ttl).acquire().await.expect("holder");
    let waiter = omnilock_core::Locks::new(backend.clone());
    let waiting = omnilock_testkit::queue_waiter(&waiter, name, ttl).await;
    let before = backend.wakeups();
    held.release().await.expect("release");
    let granted = tokio::time::timeout(std::time::Duration::from_secs(10), waiting)
        .await
        .expect("the waiter is granted")
        .unwrap()
        .expect("acquire");
    let by_message = backend.wakeups() > before;
    granted.release().await.expect("release");
    by_message
}
