//! Redis Cluster and Sentinel beyond the conformance suite: locks spread
//! over every master, `wait_replicas`, and bad input (a cluster URL at a
//! plain server, an unknown master name, wrong sentinel credentials,
//! unreachable seeds). (`OMNILOCK_TEST_REDIS_CLUSTER_URL`,
//! `OMNILOCK_TEST_REDIS_SENTINEL_URL`, `OMNILOCK_TEST_REDIS_URL`)

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use omnilock_core::{Error, ErrorKind, Locks, StoreUrl};
use omnilock_redis::RedisConfig;
use omnilock_testkit::store_url;

mod common;

use common::{PASSWORD, hand_off_by_message, master_of, raw, with_option};

async fn connect(url: &str) -> omnilock_core::Result<Locks> {
    omnilock_redis::connect(RedisConfig::from_url(&StoreUrl::parse(url)?)?).await
}

/// The cluster's masters by port, with the slot ranges each serves.
async fn masters(url: &str) -> BTreeMap<u16, Vec<(u16, u16)>> {
    let seed = StoreUrl::parse(url).unwrap().hosts()[0].port.unwrap();
    let slots: Vec<(u16, u16, (String, u16))> = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query_async::<Vec<redis::Value>>(&mut raw(seed, PASSWORD).await)
        .await
        .unwrap()
        .into_iter()
        .map(|range| {
            let redis::Value::Array(mut parts) = range else {
                panic!("CLUSTER SLOTS entry is not an array")
            };
            parts.truncate(3);
            let (start, end, master): (u16, u16, Vec<redis::Value>) =
                redis::from_redis_value(redis::Value::Array(parts)).unwrap();
            let host: String = redis::from_redis_value_ref(&master[0]).unwrap();
            let port: u16 = redis::from_redis_value_ref(&master[1]).unwrap();
            (start, end, (host, port))
        })
        .collect();
    let mut by_master: BTreeMap<u16, Vec<(u16, u16)>> = BTreeMap::new();
    for (start, end, (_, port)) in slots {
        by_master.entry(port).or_default().push((start, end));
    }
    by_master
}

fn assert_clear(err: &Error, kind: ErrorKind, words: &str) {
    let shown = format!("{err} {err:?}");
    assert_eq!(err.kind(), kind, "{shown}");
    assert!(shown.contains(words), "{shown:?} should say {words:?}");
    for secret in [PASSWORD, "omnilock-sentinel-pw"] {
        assert!(!shown.contains(secret), "{shown:?} shows a password");
    }
}

/// Locks whose names hash to every master are held at once, each by its
/// own owner, and each master holds some of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cluster_locks_on_every_master_at_once() {
    let url = store_url("REDIS_CLUSTER").expect("cluster URL");
    let locks = connect(&url).await.expect("connect");
    let masters = masters(&url).await;
    assert_eq!(masters.len(), 3, "3 masters: {masters:?}");
    let run = format!("spread-{}-{}", std::process::id(), rand_suffix());
    let mut guards = Vec::new();
    for i in 0..48 {
        guards.push(locks.acquire(&format!("{run}/{i}")).await.expect("acquire"));
    }
    for port in masters.keys() {
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{{omnilock:{run}/*"))
            .query_async(&mut raw(*port, PASSWORD).await)
            .await
            .unwrap();
        assert!(
            keys.len() >= 3,
            "master {port} holds {} of the 48 locks: {keys:?}",
            keys.len()
        );
    }
    for (i, guard) in guards.iter().enumerate() {
        let holder = locks
            .holder(&format!("{run}/{i}"))
            .await
            .unwrap()
            .expect("held");
        assert_eq!(holder.token, guard.token());
    }
    for guard in guards {
        guard.release().await.expect("release");
    }
    let other = connect(&url).await.expect("second client");
    for i in 0..48 {
        let guard = other
            .try_acquire(&format!("{run}/{i}"))
            .await
            .unwrap()
            .expect("free after release");
        guard.release().await.unwrap();
    }
}

fn rand_suffix() -> String {
    format!("{:08x}", rand::random::<u32>())
}

/// `WAIT` blocks the connection it runs on. With `wait_replicas`, each
/// confirmed write waits on a connection of its own: while the replicas
/// asked for are missing (here: 3 asked, fewer exist), six confirmed
/// writes of one process take one `wait_timeout` together, not one each
/// behind the others (on the cluster's three masters, two each), and a
/// read on the store's shared connection answers at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn confirmed_writes_wait_side_by_side() {
    const WAIT: Duration = Duration::from_secs(1);
    for store in ["REDIS_CLUSTER", "REDIS_SENTINEL"] {
        let url = store_url(store).expect("URL");
        let stalled = connect(&with_option(&url, "wait_replicas=3&wait_timeout=1s"))
            .await
            .expect("connect");
        let names: Vec<String> = (0..6)
            .map(|i| format!("side-{store}-{i}-{}", rand_suffix()))
            .collect();
        let writes = || {
            let mut writes = tokio::task::JoinSet::new();
            for name in names.clone() {
                let locks = stalled.clone();
                writes.spawn(async move { locks.try_acquire(&name).await.map(drop) });
            }
            writes
        };
        // A first round loads the scripts on masters that have not seen
        // them (a `NOSCRIPT` answer costs one more `WAIT`).
        writes().join_all().await;
        // Their unconfirmed grants are undone in the background.
        for name in &names {
            let deadline = Instant::now() + Duration::from_secs(10);
            while stalled.holder(name).await.expect("holder").is_some() {
                assert!(Instant::now() < deadline, "{store}: {name} undone");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        let started = Instant::now();
        let mut measured = writes();
        // A read while the writes wait in `WAIT`.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let read = Instant::now();
        stalled.holder("side-read").await.expect("holder");
        let read_took = read.elapsed();
        while let Some(result) = measured.join_next().await {
            let err = result.expect("task").expect_err("3 replicas do not exist");
            assert_clear(&err, ErrorKind::Unavailable, "replicas");
        }
        let took = started.elapsed();
        assert!(
            took < WAIT + Duration::from_millis(900),
            "{store}: six confirmed writes took {took:?}: they waited behind each other's WAIT"
        );
        assert!(
            read_took < Duration::from_millis(500),
            "{store}: a read took {read_took:?} behind the writes' WAIT"
        );
        stalled.close().await;
    }
}

/// `wait_replicas=1` on a master with one replica: grants and renewals
/// come back confirmed; asking for more replicas than exist fails with a
/// typed error, leaves no lock behind, and a patient acquire waits for the
/// replicas instead of granting and undoing again and again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn wait_replicas_confirms_or_undoes() {
    for store in ["REDIS_CLUSTER", "REDIS_SENTINEL"] {
        let url = store_url(store).expect("URL");
        let name = format!("wait-{store}-{}", rand_suffix());
        let confirmed = connect(&with_option(&url, "wait_replicas=1&wait_timeout=1s"))
            .await
            .expect("connect");
        let guard = confirmed
            .lock(&name)
            .ttl(Duration::from_millis(1500))
            .acquire()
            .await
            .expect("one replica confirms");
        // Held past two TTLs: the renewals were confirmed too.
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert!(guard.is_held(), "{store}: renewals confirmed");
        guard.release().await.expect("release");

        let too_many = connect(&with_option(&url, "wait_replicas=3&wait_timeout=100ms"))
            .await
            .expect("connect");
        let err = too_many
            .try_acquire(&name)
            .await
            .expect_err("3 replicas do not exist");
        assert_clear(&err, ErrorKind::Unavailable, "replicas");
        // The unconfirmed grant is undone (in the background, retried).
        let deadline = Instant::now() + Duration::from_secs(10);
        while confirmed.holder(&name).await.unwrap().is_some() {
            assert!(
                Instant::now() < deadline,
                "{store}: the unconfirmed grant was undone"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let err = too_many
            .lock(&name)
            .timeout(Duration::from_millis(800))
            .acquire()
            .await
            .expect_err("never confirmed");
        assert!(
            matches!(err.kind(), ErrorKind::Timeout | ErrorKind::Unavailable),
            "{err}"
        );
        // The attempt the timeout cut short finishes (and undoes its grant)
        // in the background.
        let deadline = Instant::now() + Duration::from_secs(10);
        while confirmed.holder(&name).await.unwrap().is_some() {
            assert!(
                Instant::now() < deadline,
                "{store}: the cut-short grant is undone"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }

        // A patient acquire does not grant and undo over and over while the
        // replicas are missing: after the first shortfall it waits for the
        // master to have them, holding nothing.
        let waiting = tokio::spawn({
            let (too_many, name) = (too_many.clone(), name.clone());
            async move {
                too_many
                    .lock(&name)
                    .timeout(Duration::from_secs(4))
                    .acquire()
                    .await
            }
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
        let mut held_samples = 0;
        for _ in 0..100 {
            if confirmed.holder(&name).await.unwrap().is_some() {
                held_samples += 1;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(
            held_samples, 0,
            "{store}: an acquire short of replicas kept granting and undoing"
        );
        let err = waiting.await.unwrap().expect_err("never confirmed");
        assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    }
}

#[tokio::test]
async fn cluster_url_at_a_plain_server_is_refused() {
    let plain = store_url("REDIS").expect("single URL");
    let port = StoreUrl::parse(&plain).unwrap().hosts()[0].port.unwrap();
    let url = format!("redis+cluster://:{PASSWORD}@127.0.0.1:{port}");
    let err = connect(&url).await.expect_err("not a cluster");
    assert_clear(
        &err,
        ErrorKind::InvalidConfig,
        "not part of a Redis Cluster",
    );
}

#[tokio::test]
async fn sentinel_with_an_unknown_master_name_is_refused() {
    let url = store_url("REDIS_SENTINEL").expect("sentinel URL");
    let parsed = StoreUrl::parse(&url).unwrap();
    let url = url.replace(&format!("/{}", parsed.path()), "/no-such-master");
    let err = connect(&url).await.expect_err("unknown master");
    assert_clear(&err, ErrorKind::InvalidConfig, "no-such-master");
}

#[tokio::test]
async fn sentinel_credentials_are_the_sentinels_own() {
    let url = store_url("REDIS_SENTINEL").expect("sentinel URL");
    let wrong = url.replace(
        "sentinel_password=omnilock-sentinel-pw",
        "sentinel_password=wrong-pw",
    );
    assert_ne!(wrong, url, "the test URL carries sentinel_password");
    let err = connect(&wrong).await.expect_err("wrong sentinel password");
    assert_clear(&err, ErrorKind::Auth, "sentinel_password");
    assert!(!err.to_string().contains("wrong-pw"));
    // The data nodes' password is checked on its own.
    let wrong_data = url.replace(&format!(":{PASSWORD}@"), ":wrong-data-pw@");
    let err = connect(&wrong_data).await.expect_err("wrong data password");
    assert_clear(&err, ErrorKind::Auth, "credentials");
    assert!(!err.to_string().contains("wrong-data-pw"));
}

/// Nothing listens on ports 1–3, and a server that accepts connections
/// but never answers: `Unavailable` within the connect timeout.
#[tokio::test]
async fn unreachable_seeds_are_unavailable_in_time() {
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent_port = silent.local_addr().unwrap().port();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            held.push(socket);
        }
    });
    for url in [
        format!(
            "redis+cluster://:{PASSWORD}@127.0.0.1:1,127.0.0.1:2,127.0.0.1:3?connect_timeout=1s"
        ),
        format!(
            "redis+sentinel://:{PASSWORD}@127.0.0.1:1,127.0.0.1:2/mymaster?connect_timeout=1s\
             &sentinel_password=omnilock-sentinel-pw"
        ),
        format!("redis+cluster://:{PASSWORD}@127.0.0.1:{silent_port}?connect_timeout=1s"),
        format!(
            "redis+sentinel://:{PASSWORD}@127.0.0.1:{silent_port}/m?connect_timeout=1s\
             &sentinel_password=omnilock-sentinel-pw"
        ),
    ] {
        let started = Instant::now();
        let err = connect(&url).await.expect_err("unreachable");
        let took = started.elapsed();
        assert_clear(&err, ErrorKind::Unavailable, "");
        assert!(took < Duration::from_secs(3), "{url}: {took:?}");
    }
}

#[test]
fn bad_urls_are_clear() {
    for (url, words) in [
        ("redis+sentinel://:pw@127.0.0.1:1", "master's name"),
        ("redis+cluster://:pw@127.0.0.1:1/3", "database 0"),
        ("redis+cluster://:pw@h:1?wait_timeout=1s", "wait_replicas"),
        ("redlock://h:1,h:2,h:3/?wait_replicas=1", "Redlock"),
        (
            "redis://h:1?wait_replicas=1&wait_timeout=5s",
            "at most half the reply",
        ),
        ("redis://h:1?wait_replicas=65", "between 1 and 64"),
        ("redis://h:1?wait_replicas=two", "expected a number"),
        ("redis://h:1,h:2", "redis+cluster"),
    ] {
        let err = StoreUrl::parse(url)
            .and_then(|u| RedisConfig::from_url(&u))
            .expect_err(url);
        assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{url}: {err}");
        assert!(err.to_string().contains(words), "{url}: {err}");
    }
}

/// A release that runs twice (core retries a release whose reply was lost;
/// the cluster client re-sends after a dropped connection) drops its own
/// hold once, never the other hold of the same owner. Before the call ids,
/// the second run freed a lock another process of that owner still held.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_release_run_twice_drops_one_hold() {
    use omnilock_core::{AcquireRequest, Backend, LockName, LockSpec, Owner, Primitive};
    for store in ["REDIS", "REDIS_CLUSTER", "REDIS_SENTINEL"] {
        let url = store_url(store).expect("URL");
        let config = RedisConfig::from_url(&StoreUrl::parse(&url).unwrap()).unwrap();
        let backend = omnilock_redis::RedisStore::connect(config)
            .await
            .expect("connect");
        let request = AcquireRequest::new(LockSpec {
            name: LockName::new(&format!("twice-{store}-{}", rand_suffix())).unwrap(),
            primitive: Primitive::Mutex,
            owner: Owner::new("shared-owner").unwrap(),
            ttl: Duration::from_secs(15),
            reentrant: true,
        });
        // Two holds of one owner (two processes of one service, say).
        let first = backend.acquire(&request).await.expect("first hold");
        let second = backend.acquire(&request).await.expect("second hold");
        backend.release(&request, &first).await.expect("release");
        backend
            .release(&request, &first)
            .await
            .expect("the same release again changes nothing");
        let holder = backend.holder(&request.name).await.unwrap();
        assert!(holder.is_some(), "{store}: the second hold still holds");
        backend.release(&request, &second).await.expect("release");
        assert!(
            backend.holder(&request.name).await.unwrap().is_none(),
            "{store}"
        );
    }
}

/// In a cluster a release wakes its waiter through sharded pub/sub on a
/// channel in the lock's slot: the waiter's client subscribes there while
/// it waits (and a little after), the wake-up arrives as a message (not by
/// the waiter's periodic re-check), and the idle channel is dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cluster_wakeups_arrive_on_the_locks_shard() {
    use omnilock_core::LockName;
    let url = store_url("REDIS_CLUSTER").expect("cluster URL");
    let config = RedisConfig::from_url(&StoreUrl::parse(&url).unwrap()).unwrap();
    let backend = omnilock_redis::RedisStore::connect(config)
        .await
        .expect("connect");
    let waiter = Locks::new(backend.clone());
    let holder = connect(&url).await.expect("second client");
    let name = format!("shard-wake-{}", rand_suffix());
    let ttl = Duration::from_secs(15);
    let channel = backend.wake_channel(&LockName::new(&name).unwrap());
    assert!(
        channel.starts_with('{'),
        "{channel} is not in the lock's slot"
    );

    let seed = StoreUrl::parse(&url).unwrap().hosts()[0].port.unwrap();
    let master = master_of(seed, &channel).await;
    let at_master = raw(master, PASSWORD).await;
    let subscribers = |mut conn: redis::aio::MultiplexedConnection, channel: String| async move {
        let (_, count): (String, i64) = redis::cmd("PUBSUB")
            .arg("SHARDNUMSUB")
            .arg(&channel)
            .query_async(&mut conn)
            .await
            .unwrap();
        count
    };

    let held = holder.lock(&name).ttl(ttl).acquire().await.expect("holder");
    let waiting = omnilock_testkit::queue_waiter(&waiter, &name, ttl).await;
    assert_eq!(
        subscribers(at_master.clone(), channel.clone()).await,
        1,
        "the waiting client subscribes to {channel} at the slot's master {master}"
    );
    let before = backend.wakeups();
    held.release().await.expect("release");
    let granted = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the waiter is granted")
        .unwrap()
        .expect("acquire");
    assert!(
        backend.wakeups() > before,
        "the grant came from the waiter's re-check, not a wake-up message"
    );
    granted.release().await.expect("release");

    // The idle channel lingers for 5 s, then is unsubscribed.
    let deadline = Instant::now() + Duration::from_secs(30);
    while subscribers(at_master.clone(), channel.clone()).await != 0 {
        assert!(Instant::now() < deadline, "{channel} never unsubscribed");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `rediss+cluster://`: a cluster that speaks only TLS (clients and cluster
/// bus). Locks on every master, a wake-up by sharded message over TLS, and
/// a clear error when the CA is not given.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tls_cluster_locks_and_wakes() {
    use omnilock_core::LockName;
    let url = store_url("REDIS_CLUSTER_TLS").expect("TLS cluster URL");
    assert!(url.starts_with("rediss+cluster://"), "{url}");
    let config = RedisConfig::from_url(&StoreUrl::parse(&url).unwrap()).unwrap();
    let backend = omnilock_redis::RedisStore::connect(config)
        .await
        .expect("connect");
    let locks = Locks::new(backend.clone());
    let run = format!("tls-{}", rand_suffix());
    // 24 names: spread over the three masters (the plain cluster's
    // `cluster_locks_on_every_master_at_once` checks the spread).
    let mut guards = Vec::new();
    for i in 0..24 {
        guards.push(locks.acquire(&format!("{run}/{i}")).await.expect("acquire"));
    }
    for guard in guards {
        guard.release().await.expect("release");
    }

    let other = connect(&url).await.expect("second client");
    let name = format!("{run}/wake");
    assert!(
        hand_off_by_message(&backend, &other, &name).await,
        "the grant came by re-check, not by a message over TLS"
    );
    assert!(
        backend
            .wake_channel(&LockName::new(&name).unwrap())
            .starts_with('{')
    );

    // Without the private CA the handshake fails: a setting to fix.
    let without_ca = url.split('?').next().unwrap().to_string();
    let err = connect(&without_ca)
        .await
        .expect_err("untrusted certificate");
    assert_clear(&err, ErrorKind::Tls, "tls_ca");
}

/// The client port of every node of the cluster `seed` belongs to.
async fn cluster_ports(seed: u16) -> Vec<u16> {
    let nodes: String = redis::cmd("CLUSTER")
        .arg("NODES")
        .query_async(&mut raw(seed, PASSWORD).await)
        .await
        .unwrap();
    nodes
        .lines()
        .filter_map(|line| {
            let address = line.split_whitespace().nth(1)?;
            let (_, port) = address.split('@').next()?.rsplit_once(':')?;
            port.parse().ok()
        })
        .collect()
}

/// An ACL user that may use the one-instance wake-up channels but not the
/// cluster's sharded ones (`&{prefix*`) is told at connect, not left to
/// poll at every wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cluster_acl_user_without_shard_channels_is_refused() {
    let url = store_url("REDIS_CLUSTER").expect("cluster URL");
    let user = format!("noshard{}", rand_suffix());
    // Every node, as the cluster itself lists them (so that this runs on
    // docker/compose.yaml's cluster too, which writes no topology).
    let seed = StoreUrl::parse(&url).unwrap().hosts()[0].port.unwrap();
    let ports = cluster_ports(seed).await;
    let acl = |args: Vec<String>| {
        let ports = ports.clone();
        async move {
            for port in ports {
                let () = redis::cmd("ACL")
                    .arg(&args)
                    .query_async(&mut raw(port, PASSWORD).await)
                    .await
                    .unwrap();
            }
        }
    };
    acl(vec![
        "SETUSER".into(),
        user.clone(),
        "on".into(),
        format!(">{PASSWORD}"),
        "~omnilock*".into(),
        "~{omnilock*".into(),
        "&omnilock*".into(),
        "+@all".into(),
    ])
    .await;
    let as_user = url.replacen(
        &format!("redis+cluster://:{PASSWORD}@"),
        &format!("redis+cluster://{user}:{PASSWORD}@"),
        1,
    );
    assert_ne!(as_user, url, "the URL names the user");
    let err = connect(&as_user).await.expect_err("no shard channels");
    acl(vec!["DELUSER".into(), user.clone()]).await;
    assert_clear(&err, ErrorKind::Auth, "&{omnilock*");
}

/// On a cluster, a guarded write writes keys of the lock's slot and refuses
/// any other before writing anything; a fenced key and its fence share a
/// slot, so its script runs on a cluster. Redlock has no one server to
/// guard a write on.
#[tokio::test(flavor = "multi_thread")]
async fn cluster_guarded_writes_stay_in_the_locks_slot() {
    let url = store_url("REDIS_CLUSTER").expect("OMNILOCK_TEST_REDIS_CLUSTER_URL");
    let config = RedisConfig::from_url(&StoreUrl::parse(&url).unwrap()).unwrap();
    let store = omnilock_redis::RedisStore::connect(config)
        .await
        .expect("connect");
    let locks = Locks::new(store.clone());
    let name = format!("guarded-slot/{}", rand_suffix());
    let guard = locks.acquire(&name).await.expect("acquire");
    let write = omnilock_redis::GuardedWrite::new(&guard).unwrap();
    let (mine, elsewhere) = (write.key("mine"), format!("elsewhere-{}", rand_suffix()));
    assert_ne!(
        redis::cluster_routing::Slot::for_key(&elsewhere),
        redis::cluster_routing::Slot::for_key(&mine),
        "pick another name"
    );
    let err = write
        .clone()
        .set(&mine, "1")
        .set(&elsewhere, "1")
        .commit()
        .await
        .unwrap_err();
    assert_clear(&err, ErrorKind::InvalidConfig, "another hash slot");
    let mut conn = store.connection();
    let read = |key: &str| redis::cmd("GET").arg(key).clone();
    let got: Option<String> = read(&mine).query_async(&mut conn).await.unwrap();
    assert_eq!(got, None, "nothing written");
    write
        .clone()
        .set(&mine, "2")
        .commit()
        .await
        .expect("in the slot");
    let got: Option<String> = read(&mine).query_async(&mut conn).await.unwrap();
    assert_eq!(got.as_deref(), Some("2"));
    guard.release().await.unwrap();

    let fenced = omnilock_redis::FencedKey::new(elsewhere.clone()).unwrap();
    fenced
        .set(&mut conn, 5, "five")
        .await
        .expect("fenced write");
    let err = fenced.set(&mut conn, 4, "four").await.unwrap_err();
    assert_eq!(err.tokens(), Some((4, 5)), "{err}");

    let redlock = connect(&store_url("REDLOCK").expect("OMNILOCK_TEST_REDLOCK_URL"))
        .await
        .expect("redlock");
    let held = redlock.acquire(&name).await.expect("acquire");
    let err = omnilock_redis::GuardedWrite::new(&held).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unsupported, "{err}");
    held.release().await.unwrap();
}
