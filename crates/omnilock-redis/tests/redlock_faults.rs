//! Redlock with nodes down: 2 of 5 unresponsive still grants and excludes;
//! 3 of 5 never grants. Nodes are made unresponsive with `CLIENT PAUSE`, which
//! heals by itself. Its own test binary, and its scenarios take turns
//! (`NODES`): nothing else runs meanwhile.

use std::time::Duration;

use omnilock_core::{ErrorKind, StoreUrl};
use omnilock_redis::RedisConfig;
use omnilock_testkit::store_url;

/// A test's own connection to a node, without connection or response
/// timeouts (redis 1.x's defaults are 1 s and 500 ms): the scenarios of this
/// binary run at once, and one that pauses nodes for 3 s must not make
/// another's handshake or commands time out.
async fn raw(client: &redis::Client) -> redis::aio::MultiplexedConnection {
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(None)
        .set_response_timeout(None);
    client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .unwrap()
}

/// A client for each of the first `nodes` hosts of a `redis://` or
/// `redlock://` URL, with its password.
fn node_clients(url: &str, nodes: usize) -> Vec<redis::Client> {
    let parsed = StoreUrl::parse(url).unwrap();
    let password = parsed.password().unwrap().expose().to_string();
    parsed
        .hosts()
        .iter()
        .take(nodes)
        .map(|host| {
            redis::Client::open(format!(
                "redis://:{password}@{}:{}/",
                host.host,
                host.port.unwrap()
            ))
            .unwrap()
        })
        .collect()
}

async fn pause(url: &str, nodes: usize, millis: u64) {
    for client in node_clients(url, nodes) {
        let mut conn = raw(&client).await;
        let _: () = redis::cmd("CLIENT")
            .arg("PAUSE")
            .arg(millis)
            .arg("ALL")
            .query_async(&mut conn)
            .await
            .unwrap();
    }
}

/// The scenarios here pause nodes that the others count on: they take
/// turns.
static NODES: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

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
    let _turn = NODES.lock().await;
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

/// One instance: when the wake-up subscription's connection is killed, the
/// client re-subscribes and releases wake its waiters by message again.
#[tokio::test(flavor = "multi_thread")]
async fn wakeups_survive_a_lost_subscription() {
    let Some(url) = store_url("REDIS") else {
        return;
    };
    let _turn = NODES.lock().await;
    let config = RedisConfig::from_url(&StoreUrl::parse(&url).unwrap()).unwrap();
    let store = omnilock_redis::RedisStore::connect(config)
        .await
        .expect("connect");
    let mut admin = raw(&node_clients(&url, 1)[0]).await;
    let before_kill = pubsub_client_ids(&mut admin).await;
    let killed: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("pubsub")
        .query_async(&mut admin)
        .await
        .unwrap();
    assert!(killed >= 1, "no subscription to kill");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (_, subscribers): (String, i64) = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg(store.wake_channel(&omnilock_core::LockName::new("x").unwrap()))
            .query_async(&mut admin)
            .await
            .unwrap();
        // The server may free a killed client after answering the kill, so
        // the old subscription can still count here: wait for a new one.
        let renewed = pubsub_client_ids(&mut admin)
            .await
            .iter()
            .any(|id| !before_kill.contains(id));
        if subscribers == 1 && renewed {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "never re-subscribed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let locks = omnilock_core::Locks::new(store.clone());
    let name = format!("resubscribed/{}", std::process::id());
    let holder = locks.acquire(&name).await.expect("holder");
    let waiter = omnilock_testkit::queue_waiter(&locks, &name, locks.default_ttl()).await;
    let before = store.wakeups();
    holder.release().await.expect("release");
    let guard = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("served")
        .expect("task")
        .expect("acquire");
    // The waiter blocked in the server may be served before the release's
    // message arrives: wait for the message itself.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while store.wakeups() == before && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        store.wakeups() - before,
        1,
        "the release's message did not arrive"
    );
    guard.release().await.expect("release");
}

/// The ids of the server's pub/sub connections (`CLIENT LIST TYPE pubsub`).
async fn pubsub_client_ids(admin: &mut redis::aio::MultiplexedConnection) -> Vec<String> {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .arg("TYPE")
        .arg("pubsub")
        .query_async(admin)
        .await
        .unwrap();
    list.lines()
        .filter_map(|line| line.split(' ').find_map(|field| field.strip_prefix("id=")))
        .map(str::to_owned)
        .collect()
}

/// A holder whose key survives on fewer than a majority of nodes (here: 2
/// of 5, as after expiry or restarts on the other 3) has lost the lock even
/// if nobody else took it yet: its release says so (`NotOwner`) instead of
/// reporting a clean release, and still removes what was left.
#[tokio::test(flavor = "multi_thread")]
async fn release_without_a_majority_reports_the_loss() {
    let Some(url) = store_url("REDLOCK") else {
        return;
    };
    let _turn = NODES.lock().await;
    let locks = connect(&url).await;
    let name = format!("faults/minority-release/{}", std::process::id());
    let guard = locks
        .lock(&name)
        .ttl(Duration::from_secs(30))
        .acquire()
        .await
        .expect("acquire");
    let key = format!("{{omnilock:{name}}}");
    let mut raws = Vec::new();
    for client in node_clients(&url, usize::MAX) {
        raws.push(raw(&client).await);
    }
    for conn in raws.iter_mut().take(3) {
        let deleted: i64 = redis::cmd("DEL").arg(&key).query_async(conn).await.unwrap();
        assert_eq!(deleted, 1, "the lock's key was not where expected");
    }
    let err = guard.release().await.expect_err("a minority is not a hold");
    assert_eq!(err.kind(), ErrorKind::NotOwner, "{err}");
    for conn in raws.iter_mut() {
        let exists: i64 = redis::cmd("EXISTS")
            .arg(&key)
            .query_async(conn)
            .await
            .unwrap();
        assert_eq!(exists, 0, "the release left a key behind");
    }
}

/// A release wakes the first in line on every node, and the waiter goes
/// once a majority has woken it. With `waiter_lease=60s` a waiter re-checks
/// only every 20 s and the holder's lease is a minute: being served within
/// 10 s takes the pushed wake-ups.
#[tokio::test(flavor = "multi_thread")]
async fn releases_wake_the_next_waiter_through_a_majority() {
    let Some(url) = store_url("REDLOCK") else {
        return;
    };
    let _turn = NODES.lock().await;
    let url = format!(
        "{url}{}waiter_lease=60s",
        if url.contains('?') { '&' } else { '?' }
    );
    let config = RedisConfig::from_url(&StoreUrl::parse(&url).unwrap()).unwrap();
    let waiting_store = omnilock_redis::RedlockStore::connect(config)
        .await
        .expect("connect");
    let waiting = omnilock_core::Locks::new(waiting_store.clone());
    let holding = connect(&url).await;
    let name = format!("redlock-push/{}", std::process::id());
    let holder = holding
        .lock(&name)
        .ttl(Duration::from_secs(60))
        .acquire()
        .await
        .expect("holder");
    let waiter = omnilock_testkit::queue_waiter(&waiting, &name, Duration::from_secs(60)).await;
    let before = waiting_store.wakeups();
    holder.release().await.expect("release");
    let guard = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("served by the release's wake-ups, not a re-check")
        .expect("task")
        .expect("acquire");
    let woken = waiting_store.wakeups() - before;
    assert!(woken >= 3, "woken by {woken} of 5 nodes; a majority is 3");
    guard.release().await.expect("release");
}

/// A release while 3 of 5 nodes stall past the per-node timeout: the first
/// attempt is confirmed by 2 nodes only, and the stalled nodes run it when
/// they resume. The retries must count the earlier confirmations and take
/// a key gone where the earlier attempt went unanswered as that release:
/// the lock was never lost (TTL 15 s, and nobody else could take it), so
/// the release succeeds. It answered `NotOwner` ("the lock was lost")
/// before.
#[tokio::test(flavor = "multi_thread")]
async fn a_release_retried_through_stalled_nodes_is_not_a_loss() {
    let Some(url) = store_url("REDLOCK") else {
        return;
    };
    let _turn = NODES.lock().await;
    let locks = connect(&url).await;
    let name = format!("stalled-release/{}", std::process::id());
    let guard = locks
        .lock(&name)
        .ttl(Duration::from_secs(15))
        .acquire()
        .await
        .expect("acquire");
    pause(&url, 3, 800).await;
    guard
        .release()
        .await
        .expect("released: a stall is not a loss");
    let other = connect(&url).await;
    let again = tokio::time::timeout(Duration::from_secs(10), other.acquire(&name))
        .await
        .expect("free after the release")
        .expect("acquire");
    again.release().await.expect("release");
}

/// A grant that a stalled node applies after the round already won its
/// majority elsewhere is released there too: it would otherwise stand for
/// a whole TTL that nobody renews or releases, and with one of the other
/// nodes down the lock could not be taken until it ran out. (Since rounds
/// go on at a majority, the stalled node is one the round did not wait
/// for: it joins the hold with the round's token, and the release goes to
/// it too. Without that it keeps the key.)
///
/// Tried twice: with the node's scripts loaded, and with them flushed (as
/// after a restart), where the release the node runs first is refused with
/// `NOSCRIPT` and must be sent again after the caller stopped waiting.
#[tokio::test(flavor = "multi_thread")]
async fn a_late_grant_on_a_stalled_node_is_released() {
    let Some(url) = store_url("REDLOCK") else {
        return;
    };
    let _turn = NODES.lock().await;
    let locks = connect(&url).await;
    let first = node_clients(&url, 1).remove(0);
    let mut conn = raw(&first).await;
    for flushed in [false, true] {
        let name = format!("late-grant/{}/{flushed}", std::process::id());
        if flushed {
            let _: () = redis::cmd("SCRIPT")
                .arg("FLUSH")
                .query_async(&mut conn)
                .await
                .unwrap();
        }
        // Node 1 stalls through the acquire: nodes 2–5 grant it.
        pause(&url, 1, 1000).await;
        let guard = locks
            .lock(&name)
            .ttl(Duration::from_secs(30))
            .acquire()
            .await
            .expect("acquire on 4 of 5");
        guard.release().await.expect("release");
        // PING answers once node 1 resumes and runs the backlog of the
        // paused clients: the late acquire, then its release (which may
        // reach the node a moment after the acquire, on a loaded machine).
        // Without that release the key stands there for the whole 30 s
        // TTL; with it, the key is gone within moments.
        let _: String = redis::cmd("PING").query_async(&mut conn).await.unwrap();
        let key = format!("{{omnilock:{name}}}");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
        loop {
            let ttl: i64 = redis::cmd("PTTL")
                .arg(&key)
                .query_async(&mut conn)
                .await
                .unwrap();
            if ttl == -2 {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "a late grant on node 1 (scripts flushed: {flushed}) still stands 3 s \
                 after it resumed ({ttl} ms left)"
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }
}

/// Nodes that lost omnilock's scripts (`SCRIPT FLUSH` on every node, as
/// after restarts) get them loaded again by their next use: a waiting
/// acquire that queues (the acquire script), the holder's renewal, its
/// release, and the waiter's grant.
#[tokio::test(flavor = "multi_thread")]
async fn flushed_scripts_are_loaded_again() {
    let Some(url) = store_url("REDLOCK") else {
        return;
    };
    let _turn = NODES.lock().await;
    let flush = || async {
        for client in node_clients(&url, usize::MAX) {
            let mut conn = raw(&client).await;
            let _: () = redis::cmd("SCRIPT")
                .arg("FLUSH")
                .query_async(&mut conn)
                .await
                .expect("SCRIPT FLUSH");
        }
    };
    let (a, b) = (connect(&url).await, connect(&url).await);
    let name = format!("flushed/{}", std::process::id());
    let held = a
        .lock(&name)
        .ttl(Duration::from_secs(1))
        .acquire()
        .await
        .expect("holder");
    flush().await;
    let waiter = omnilock_testkit::queue_waiter(&b, &name, Duration::from_secs(10)).await;
    flush().await;
    let lost = held.lost();
    assert!(
        tokio::time::timeout(Duration::from_secs(2), lost)
            .await
            .is_err(),
        "the holder's renewal failed after a flush"
    );
    flush().await;
    held.release().await.expect("release after a flush");
    let granted = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the waiter is served")
        .unwrap()
        .expect("acquire");
    granted.release().await.expect("release");
}
