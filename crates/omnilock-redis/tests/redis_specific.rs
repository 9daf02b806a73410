//! One Redis instance: one wake-up per release, lost wake-ups, cancelled
//! waiters, credentials. (`OMNILOCK_TEST_REDIS_URL`)

use std::time::{Duration, Instant};

use omnilock_core::{ErrorKind, LockRequest, Locks, StoreUrl};
use omnilock_redis::{FencedKey, GuardedWrite, RedisConfig, RedisStore};
use omnilock_testkit::fixtures::queue_handoff_chain;
use omnilock_testkit::store_url;

mod common;

use common::silent::Silent;

async fn store(options: &str) -> Option<(RedisStore, String)> {
    let mut url = store_url("REDIS")?;
    if !options.is_empty() {
        url = format!("{url}?{options}");
    }
    let config = RedisConfig::from_url(&StoreUrl::parse(&url).unwrap()).unwrap();
    Some((RedisStore::connect(config).await.expect("connect"), url))
}

async fn raw(url: &str) -> redis::aio::MultiplexedConnection {
    let parsed = StoreUrl::parse(url).unwrap();
    let host = &parsed.hosts()[0];
    let password = parsed.password().unwrap().expose().to_string();
    let client = redis::Client::open(format!(
        "redis://:{password}@{}:{}/",
        host.host,
        host.port.unwrap()
    ))
    .unwrap();
    client.get_multiplexed_async_connection().await.unwrap()
}

/// Queues `n` waiters for `name` behind a holder; each takes the lock and
/// passes it on. Returns the wake-up messages this client received.
async fn pass_along(n: usize) -> u64 {
    let Some((store, _)) = store("").await else {
        return 0;
    };
    let locks = Locks::new(store.clone());
    let name = format!("wakeups/{n}/{}", std::process::id());
    let holder = locks.acquire(&name).await.expect("holder");
    fn mutex<'a>(locks: &'a Locks, name: &str) -> LockRequest<'a> {
        locks.lock(name)
    }
    let ttl = Duration::from_secs(60);
    let tasks = queue_handoff_chain(&[locks], &name, n, ttl, mutex).await;
    let before = store.wakeups();
    holder.release().await.expect("release");
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(30), task)
            .await
            .expect("all waiters served")
            .expect("task");
    }
    // Every release has published by now, but a waiter blocked in the
    // server is served by the push onto its list, which can beat the
    // message: wait for the messages to arrive (a herd would send more).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while store.wakeups() - before < n as u64 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    store.wakeups() - before
}

/// Each release wakes exactly one waiter, with 2 waiters and with 64: the
/// number of wake-up messages equals the number of hand-offs.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_wakeup_per_release() {
    for n in [2, 64] {
        let wakeups = pass_along(n).await;
        if store_url("REDIS").is_some() {
            assert_eq!(wakeups, n as u64, "{n} waiters: {wakeups} wake-ups");
        }
    }
}

/// A waiter whose wake-up message is lost still gets the lock, through its
/// periodic re-check.
#[tokio::test(flavor = "multi_thread")]
async fn lost_wakeup_is_covered_by_recheck() {
    let Some((store, url)) = store("waiter_lease=600ms").await else {
        return;
    };
    let locks = Locks::new(store);
    let name = format!("lost-wakeup/{}", std::process::id());
    let holder = locks.acquire(&name).await.expect("holder");
    let waiter = omnilock_testkit::queue_waiter(&locks, &name, locks.default_ttl()).await;
    // Free the lock behind omnilock's back: no release script, no message.
    let mut conn = raw(&url).await;
    let key = format!("{{omnilock:{name}}}");
    let deleted: i64 = redis::cmd("DEL")
        .arg(&key)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(deleted, 1);
    let guard = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the waiter re-checked and took the lock")
        .expect("task")
        .expect("acquire");
    guard.release().await.expect("release");
    let _ = holder.release().await;
}

/// A wake-up subscription whose connection died silently (packets dropped,
/// no reset: here a proxy that stops forwarding it) is found by its
/// keepalive PING and opened again, so the next release wakes the waiter by
/// message, long before its periodic re-check (every 16 to 20 s here).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_silently_dead_subscription_is_found_by_its_keepalive() {
    let url = store_url("REDIS").expect("OMNILOCK_TEST_REDIS_URL");
    let parsed = StoreUrl::parse(&url).unwrap();
    let proxy = Silent::start(parsed.hosts()[0].port.unwrap()).await;
    let password = parsed.password().unwrap().expose().to_string();
    let proxied = format!(
        "redis://:{password}@127.0.0.1:{}?waiter_lease=60s",
        proxy.port
    );
    let open = |url: String| async move {
        let config = RedisConfig::from_url(&StoreUrl::parse(&url).unwrap()).unwrap();
        omnilock_redis::connect(config).await.expect("connect")
    };
    let (direct, through) = (open(url.clone()).await, open(proxied).await);
    let name = format!("silent-subscription/{:08x}", rand::random::<u32>());
    let ttl = Duration::from_secs(60);
    // A semaphore's waiter waits for a message (a mutex's may block in the
    // server instead).
    let held = direct
        .semaphore(&name, 1)
        .ttl(ttl)
        .acquire()
        .await
        .expect("hold");
    let waiting = {
        let (locks, name) = (through.clone(), name.clone());
        tokio::spawn(async move { locks.semaphore(&name, 1).ttl(ttl).acquire().await })
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let waiters = direct
            .inspect(&name, omnilock_core::LockKind::Semaphore)
            .await
            .expect("inspect")
            .waiters
            .map_or(0, |waiters| waiters.len());
        if waiters == 1 && proxy.silence_subscriptions() > 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the waiter queued and subscribed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The PING comes within 2 s and is given the connect timeout (3 s) to
    // answer; then the subscription is opened again.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let released = Instant::now();
    held.release().await.expect("release");
    let guard = tokio::time::timeout(Duration::from_secs(30), waiting)
        .await
        .expect("the waiter got the permit")
        .expect("task")
        .expect("acquire");
    let took = released.elapsed();
    guard.release().await.expect("release");
    assert!(
        took < Duration::from_secs(3),
        "the waiter took {took:?} after the release: its wake-up went to the dead subscription"
    );
}

/// 500 waits that time out leave no queue entries behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cancelled_waits_leave_no_queue_entries() {
    let Some((store, url)) = store("").await else {
        return;
    };
    let locks = Locks::new(store);
    let name = format!("cancelled/{}", std::process::id());
    let holder = locks.acquire(&name).await.expect("holder");
    for _ in 0..5 {
        let waits = (0..100).map(|_| {
            let (locks, name) = (locks.clone(), name.clone());
            tokio::spawn(async move {
                locks
                    .lock(&name)
                    .timeout(Duration::from_millis(50))
                    .acquire()
                    .await
            })
        });
        for wait in futures_util::future::join_all(waits).await {
            assert_eq!(wait.unwrap().unwrap_err().kind(), ErrorKind::Timeout);
        }
    }
    let mut conn = raw(&url).await;
    let queue = format!("{{omnilock:{name}}}:queue");
    let timeouts = format!("{{omnilock:{name}}}:timeouts");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let queued: i64 = redis::cmd("LLEN")
            .arg(&queue)
            .query_async(&mut conn)
            .await
            .unwrap();
        let leases: i64 = redis::cmd("ZCARD")
            .arg(&timeouts)
            .query_async(&mut conn)
            .await
            .unwrap();
        if queued == 0 && leases == 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{queued} queue entries and {leases} leases left behind"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    holder.release().await.expect("release");
}

/// A wrong password is a clear error without the password; an unreachable
/// node is Unavailable and named.
#[tokio::test(flavor = "multi_thread")]
async fn credentials_and_unreachable_nodes() {
    let Some(url) = store_url("REDIS") else {
        return;
    };
    let password = StoreUrl::parse(&url)
        .unwrap()
        .password()
        .unwrap()
        .expose()
        .to_string();
    let wrong = url.replacen(&password, "not-the-password", 1);
    let err =
        omnilock_redis::connect(RedisConfig::from_url(&StoreUrl::parse(&wrong).unwrap()).unwrap())
            .await
            .expect_err("wrong password");
    assert_eq!(err.kind(), ErrorKind::Auth, "{err}");
    let shown = format!("{err} {err:?}");
    assert!(shown.contains("credentials"), "{shown}");
    assert!(
        !shown.contains("not-the-password") && !shown.contains(&password),
        "{shown}"
    );

    let url = "redis://:sekrit@127.0.0.1:1?connect_timeout=500ms";
    let err =
        omnilock_redis::connect(RedisConfig::from_url(&StoreUrl::parse(url).unwrap()).unwrap())
            .await
            .expect_err("nothing listens on port 1");
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert!(err.to_string().contains("127.0.0.1:1"), "{err}");
    assert!(!format!("{err} {err:?}").contains("sekrit"));

    // Redlock's one line names every node and why it failed.
    let url = "redlock://:sekrit@127.0.0.1:1,127.0.0.1:2,127.0.0.1:3/?connect_timeout=500ms";
    let err =
        omnilock_redis::connect(RedisConfig::from_url(&StoreUrl::parse(url).unwrap()).unwrap())
            .await
            .expect_err("nothing listens on ports 1-3");
    let shown = err.to_string();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{shown}");
    for node in [
        "127.0.0.1:1 (connection refused)",
        "127.0.0.1:3 (connection refused)",
    ] {
        assert!(shown.contains(node), "{shown}");
    }
    assert_eq!(shown.lines().count(), 1, "{shown}");
    assert!(!format!("{err} {err:?}").contains("sekrit"));
}

/// An ACL user (user name + password) with only the rights the protocol
/// needs can lock; the same user with a wrong password cannot connect.
#[tokio::test(flavor = "multi_thread")]
async fn acl_user() {
    let Some(url) = store_url("REDIS_ACL") else {
        return;
    };
    let locks =
        omnilock_redis::connect(RedisConfig::from_url(&StoreUrl::parse(&url).unwrap()).unwrap())
            .await
            .expect("the ACL user connects");
    let name = format!("acl/{}", std::process::id());
    let guard = locks.acquire(&name).await.expect("acquire as the ACL user");
    assert!(locks.try_acquire(&name).await.expect("probe").is_none());
    guard.release().await.expect("release");
    let wrong = url.replacen("locker:", "locker:x", 1);
    let err =
        omnilock_redis::connect(RedisConfig::from_url(&StoreUrl::parse(&wrong).unwrap()).unwrap())
            .await
            .expect_err("wrong password");
    assert_eq!(err.kind(), ErrorKind::Auth, "{err}");
}

/// TLS: a client that does not trust the server's certificate cannot connect
/// (`Tls` naming `tls_ca`: a setting to fix, not an outage to wait
/// out; no panic); the one given the CA can (the conformance suite runs over
/// TLS too).
#[tokio::test(flavor = "multi_thread")]
async fn tls_needs_a_trusted_certificate() {
    let Some(url) = store_url("REDIS_TLS") else {
        return;
    };
    let untrusting = url.split("?tls_ca=").next().unwrap().to_string();
    let err = omnilock_redis::connect(
        RedisConfig::from_url(&StoreUrl::parse(&untrusting).unwrap()).unwrap(),
    )
    .await
    .expect_err("the test CA is not in the system store");
    assert_eq!(err.kind(), ErrorKind::Tls, "{err}");
    assert!(err.to_string().contains("tls_ca"), "{err}");
    let locks =
        omnilock_redis::connect(RedisConfig::from_url(&StoreUrl::parse(&url).unwrap()).unwrap())
            .await
            .expect("TLS with the test CA");
    let guard = locks.acquire("tls").await.expect("acquire over TLS");
    guard.release().await.expect("release");
}

/// Prefix `<p>` with name `x:y` and prefix `<p>:x` with name `y` used to be
/// one key, `{<p>:x:y}`: two owners held "the same" lock alone and a break
/// on one freed the other.
#[test]
fn abutting_prefixes_are_disjoint() {
    for store in ["REDIS", "REDLOCK"] {
        let p = format!("ns{}", std::process::id());
        let (Some(a), Some(b)) = (
            common::subject_with(store, "prefix", &p),
            common::subject_with(store, "prefix", &format!("{p}:x")),
        ) else {
            continue;
        };
        omnilock_testkit::run(async move {
            omnilock_testkit::scenarios::namespaces_are_disjoint(&a, "x:y", &b, "y").await
        });
    }
}

/// A server that lost omnilock's scripts (`SCRIPT FLUSH`, or a restart)
/// gets each one loaded again by its next use: acquire, release and the
/// batched renewal (a hold at TTL 1 s outlives 3 TTLs after a flush).
#[tokio::test(flavor = "multi_thread")]
async fn flushed_scripts_are_loaded_again() {
    let Some((store, url)) = store("").await else {
        return;
    };
    let locks = Locks::new(store);
    let mut conn = raw(&url).await;
    let flush = || {
        let mut conn = conn.clone();
        async move {
            let _: () = redis::cmd("SCRIPT")
                .arg("FLUSH")
                .query_async(&mut conn)
                .await
                .expect("SCRIPT FLUSH");
        }
    };
    let name = format!("flushed/{}", std::process::id());
    flush().await;
    let guard = locks.acquire(&name).await.expect("acquire after a flush");
    flush().await;
    guard.release().await.expect("release after a flush");
    let guard = locks
        .lock(&name)
        .ttl(Duration::from_secs(1))
        .acquire()
        .await
        .expect("acquire");
    flush().await;
    let lost = guard.lost();
    assert!(
        tokio::time::timeout(Duration::from_secs(3), lost)
            .await
            .is_err(),
        "renewal failed after a flush"
    );
    let pttl: i64 = redis::cmd("PTTL")
        .arg(format!("{{omnilock:{name}}}"))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(pttl > 0, "the lock key is gone ({pttl})");
    guard.release().await.expect("release");
}

/// A guarded write applies all its writes, in order, while the lock is
/// held; after the release, none (`LockLost`); under a later holder, none
/// (`StaleToken` with both tokens). It may not touch the lock's own keys.
#[tokio::test(flavor = "multi_thread")]
async fn guarded_writes_apply_together_or_not_at_all() {
    let Some((store, url)) = store("").await else {
        panic!("OMNILOCK_TEST_REDIS_URL is not set")
    };
    let locks = Locks::new(store.clone());
    let name = format!("guarded/{}", std::process::id());
    let mut conn = raw(&url).await;
    let get = |key: String| redis::cmd("GET").arg(key).clone();

    let first = locks.acquire(&name).await.expect("acquire");
    let write = GuardedWrite::new(&first).expect("a mutex of a Redis store");
    let (current, config, old) = (write.key("current"), write.key("config"), write.key("old"));
    let _: () = redis::cmd("SET")
        .arg(&old)
        .arg("x")
        .query_async(&mut conn)
        .await
        .unwrap();
    write
        .clone()
        .set(&current, "v1")
        .hset(&config, "version", "1")
        .del(&old)
        .rpush(write.key("log"), "entry")
        .commit()
        .await
        .expect("held: applies");
    let log: Vec<String> = redis::cmd("LRANGE")
        .arg(write.key("log"))
        .arg(0)
        .arg(-1)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(log, ["entry"]);
    let got: (Option<String>, Option<String>, Option<String>) = redis::pipe()
        .add_command(get(current.clone()))
        .cmd("HGET")
        .arg(&config)
        .arg("version")
        .add_command(get(old.clone()))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(got, (Some("v1".into()), Some("1".into()), None));

    // A write that would meet a key of another type: refused before any
    // write is made (Redis would keep the writes before a failing one).
    let text = write.key("text");
    let _: () = redis::cmd("SET")
        .arg(&text)
        .arg("x")
        .query_async(&mut conn)
        .await
        .unwrap();
    for batch in [
        write.clone().set(&current, "partial").hset(&text, "f", "v"),
        write.clone().set(&current, "partial").rpush(&text, "v"),
        write
            .clone()
            .set(&current, "partial")
            .set(write.key("fresh"), "s")
            .hset(write.key("fresh"), "f", "v"),
    ] {
        let err = batch.commit().await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Conflict, "{err}");
        let value: Option<String> = get(current.clone()).query_async(&mut conn).await.unwrap();
        assert_eq!(value.as_deref(), Some("v1"), "nothing written: {err}");
    }
    write
        .clone()
        .del(&text)
        .hset(&text, "f", "v")
        .commit()
        .await
        .expect("a key deleted first may become a hash");

    let own = current[..current.find(":app:").unwrap()].to_string();
    let err = write.clone().set(&own, "x").commit().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");

    first.release().await.expect("release");
    let err = write
        .clone()
        .set(&current, "v2")
        .commit()
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::LockLost, "{err}");

    let later = locks.acquire(&name).await.expect("the next holder");
    let err = write
        .clone()
        .set(&current, "v3")
        .commit()
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::StaleToken, "{err}");
    assert_eq!(err.tokens(), Some((write.token(), later.token())));
    let value: Option<String> = get(current.clone()).query_async(&mut conn).await.unwrap();
    assert_eq!(
        value.as_deref(),
        Some("v1"),
        "a refused write changed nothing"
    );
    later.release().await.expect("release");
}

/// A fenced key takes writes of the highest token seen or above, refuses a
/// lower one with both tokens, and keeps its fence through a `DEL`.
#[tokio::test(flavor = "multi_thread")]
async fn a_fenced_key_refuses_lower_tokens() {
    let Some((store, _)) = store("").await else {
        panic!("OMNILOCK_TEST_REDIS_URL is not set")
    };
    let mut conn = store.connection();
    let key = FencedKey::new(format!("fenced/{}", std::process::id())).unwrap();
    let read = |conn: &mut omnilock_redis::RedisConnection| {
        let mut conn = conn.clone();
        let key = key.key().to_string();
        async move {
            redis::cmd("GET")
                .arg(key)
                .query_async::<Option<String>>(&mut conn)
                .await
                .unwrap()
        }
    };

    key.set(&mut conn, 7, "seven").await.expect("first write");
    key.set(&mut conn, 7, "seven again")
        .await
        .expect("the same token again");
    // Beyond a double's exact integers: compared as decimals.
    let big = (1u64 << 60) + 1;
    key.set(&mut conn, big, "big")
        .await
        .expect("a higher token");
    let err = key.set(&mut conn, big - 1, "stale").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::StaleToken, "{err}");
    assert_eq!(err.tokens(), Some((big - 1, big)));
    assert_eq!(read(&mut conn).await.as_deref(), Some("big"));
    let err = key.del(&mut conn, 7).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::StaleToken, "{err}");
    key.del(&mut conn, big).await.expect("delete");
    assert_eq!(read(&mut conn).await, None);
    assert_eq!(
        key.highest(&mut conn).await.unwrap(),
        Some(big),
        "the fence stays"
    );
    let err = key.hset(&mut conn, 8, "f", "v").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::StaleToken, "{err}");
    key.rpush(&mut conn, big + 1, "appended")
        .await
        .expect("rpush");
    let err = key.rpush(&mut conn, big, "late").await.unwrap_err();
    assert_eq!(err.tokens(), Some((big, big + 1)), "{err}");
    let list: Vec<String> = redis::cmd("LRANGE")
        .arg(key.key())
        .arg(0)
        .arg(-1)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(list, ["appended"]);

    // A claim raises the fence without writing: the holder that reads
    // before it writes shuts out a predecessor that has not written yet.
    key.claim(&mut conn, big + 3).await.expect("claim");
    let err = key.rpush(&mut conn, big + 2, "late").await.unwrap_err();
    assert_eq!(err.tokens(), Some((big + 2, big + 3)), "{err}");
    let err = key.claim(&mut conn, big + 2).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::StaleToken, "{err}");
    key.rpush(&mut conn, big + 3, "mine")
        .await
        .expect("the claimer writes");

    // A write that fails (a hash write on a list) leaves the fence as it was.
    let err = key.hset(&mut conn, big + 5, "f", "v").await.unwrap_err();
    assert_ne!(err.kind(), ErrorKind::StaleToken, "{err}");
    assert_eq!(key.highest(&mut conn).await.unwrap(), Some(big + 3));

    let hash = FencedKey::new(format!("fenced-hash/{}", std::process::id())).unwrap();
    hash.hset(&mut conn, 3, "rows", "42").await.expect("hset");
    let rows: Option<String> = redis::cmd("HGET")
        .arg(hash.key())
        .arg("rows")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(rows.as_deref(), Some("42"));
}
