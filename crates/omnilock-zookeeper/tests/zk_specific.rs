//! ZooKeeper-only behaviour: connection errors, ACLs from digest
//! credentials, node names, no nodes left behind, empty lock parents removed.

use std::time::Duration;

use omnilock_core::{ErrorKind, Locks, StoreUrl};
use omnilock_testkit::fixtures::{
    assert_observer_follows_the_watch, assert_unreachable, eventually, time_out_waiters,
    unique_name,
};
use omnilock_testkit::store_url;
use omnilock_zookeeper::ZkConfig;

mod common;

const PATIENCE: Duration = Duration::from_secs(20);

async fn connect(url: &str) -> omnilock_core::Result<Locks> {
    omnilock_zookeeper::connect(ZkConfig::from_url(&StoreUrl::parse(url)?)?).await
}

fn ensemble_url() -> String {
    store_url("ZK").expect("OMNILOCK_TEST_ZK_URL")
}

fn hosts(url: &str) -> String {
    url.trim_start_matches("zk://")
        .rsplit('@')
        .next()
        .unwrap()
        .split('/')
        .next()
        .unwrap()
        .to_string()
}

/// A raw client, without credentials, to look behind omnilock's back.
async fn raw() -> zookeeper_client::Client {
    zookeeper_client::Client::connect(&hosts(&ensemble_url()))
        .await
        .expect("raw client")
}

#[tokio::test]
async fn unreachable_ensemble_is_unavailable_within_the_connect_timeout() {
    let unreachable = connect("zk://app:s3cret-pw@127.0.0.1:1,127.0.0.1:9/x?connect_timeout=1s");
    let within = Duration::from_secs(3);
    assert_unreachable(unreachable, "127.0.0.1:1", Some("s3cret-pw"), within).await;
}

/// With digest credentials, lock nodes carry `creator_all`: a client
/// without them can neither delete a held lock's node nor break it, and
/// wrong credentials are a clear error, not a silent second lock.
#[tokio::test]
async fn lock_nodes_carry_the_acl_of_the_credentials() {
    let url = store_url("ZK_DIGEST").expect("OMNILOCK_TEST_ZK_DIGEST_URL");
    let locks = connect(&url).await.expect("connect with credentials");
    let name = unique_name("acl");
    let guard = locks.acquire(&name).await.expect("acquire");

    let anonymous = raw().await;
    let parent = format!("/omnilock-acl/{name}");
    let err = anonymous
        .list_children(&parent)
        .await
        .expect_err("no read access without credentials");
    assert!(matches!(err, zookeeper_client::Error::NoAuth), "{err:?}");

    // The same prefix through omnilock without credentials, and with wrong ones.
    let no_creds = url.replace("omnilock:omnilock-test-pw@", "");
    let wrong = url.replace("omnilock-test-pw", "not-the-pw");
    for other in [no_creds, wrong] {
        let outcome = match connect(&other).await {
            Ok(intruder) => intruder.break_lock(&name).await.map(|_| ()),
            Err(err) => Err(err),
        };
        let err = outcome.expect_err("breaking needs the credentials");
        assert_eq!(err.kind(), ErrorKind::Auth, "{err}");
        let text = format!("{err} {err:?}");
        assert!(!text.contains("not-the-pw"), "leaks the password: {text}");
    }
    assert!(guard.is_held());
    let probe = locks.try_acquire(&name).await.expect("probe");
    assert!(probe.is_none(), "the lock survived the intruders");
    guard.release().await.expect("release");
}

#[tokio::test]
async fn path_like_names_map_to_single_safe_nodes() {
    let locks = connect(&ensemble_url()).await.expect("connect");
    let tag = unique_name("names");
    let names = [
        format!("{tag}/a/b"),
        format!("{tag}%2Fa%2Fb"),
        ".".to_string(),
        "..".to_string(),
        "zookeeper".to_string(),
        format!("{tag} \u{e000} private use"),
        format!("{tag}-ünïcödé"),
    ];
    let mut guards = Vec::new();
    for name in &names {
        guards.push(
            locks
                .try_acquire(name)
                .await
                .unwrap_or_else(|e| panic!("{name:?}: {e}"))
                .unwrap_or_else(|| panic!("{name:?} is free")),
        );
    }
    let children = raw().await.list_children("/omnilock").await.expect("list");
    assert!(
        children.iter().all(|c| !c.contains('/')),
        "node names never contain a separator"
    );
    for guard in guards {
        guard.release().await.expect("release");
    }
}

/// 500 acquires cancelled by their timeout leave no node behind, and once
/// the lock is released its empty parent is removed by the server (a
/// container node), without racing the next contender.
#[tokio::test]
async fn cancelled_acquires_leave_no_nodes_and_empty_parents_go() {
    let locks = connect(&ensemble_url()).await.expect("connect");
    let name = unique_name("cancelled");
    let parent = format!("/omnilock/{name}");
    let holder = locks.acquire(&name).await.expect("holder");
    for _ in 0..10 {
        time_out_waiters(&locks, &name, 50, Duration::from_millis(200)).await;
    }
    let zk = raw().await;
    eventually("only the holder's node is left", PATIENCE, || async {
        match zk.list_children(&parent).await.expect("list").len() {
            1 => Ok(()),
            n => Err(format!("{n} nodes")),
        }
    })
    .await;
    holder.release().await.expect("release");
    // The test ensemble checks containers every second.
    eventually("the empty lock parent is removed", PATIENCE, || async {
        match zk.check_stat(&parent).await.expect("stat") {
            None => Ok(()),
            Some(_) => Err("it is still there".to_string()),
        }
    })
    .await;
    // And the lock works again: the parent is re-created on demand.
    let again = tokio::time::timeout(PATIENCE, locks.acquire(&name))
        .await
        .expect("in time")
        .expect("acquire after the parent went");
    again.release().await.expect("release");
}

/// Lock `locks` under prefix `<p>` and lock `job` under prefix `<p>/locks`:
/// the second's container sits inside the first's, and used to pass for one
/// of its contenders (a holder it saw, a node its break deleted, a
/// predecessor a waiter would watch forever).
#[test]
fn nested_prefixes_are_disjoint() {
    let p = format!("omnilock-ns/{}", unique_name("nest"));
    let (Some(a), Some(b)) = (
        common::subject_under("ZK", &p),
        common::subject_under("ZK", &format!("{p}/locks")),
    ) else {
        return;
    };
    omnilock_testkit::run(async move {
        omnilock_testkit::scenarios::namespaces_are_disjoint(&a, "locks", &b, "job").await;
    });
}

/// A name spelt like a lock node is refused (see `nested_prefixes_are_disjoint`).
#[tokio::test]
async fn names_shaped_like_lock_nodes_are_refused() {
    let locks = connect(&ensemble_url()).await.expect("connect");
    let name = format!("{}-lock-0000000001", "0".repeat(32));
    let err = locks.try_acquire(&name).await.expect_err("refused");
    assert_eq!(err.kind(), ErrorKind::InvalidName, "{err}");
}

#[tokio::test]
async fn an_election_observer_waits_on_the_watch() {
    let locks = connect(&ensemble_url()).await.expect("connect");
    assert_observer_follows_the_watch(&locks, Duration::from_secs(5)).await;
}

/// A user's `multi` with `check_owner` applies while the guard holds its
/// mutex, and not once the hold has ended: not after a release, not when
/// the same client takes the lock again, not after another client took it.
#[tokio::test]
async fn a_multi_checked_by_check_owner_applies_only_while_the_lock_is_held() {
    let client = raw().await;
    let url = ensemble_url();
    let (a, b) = (connect(&url).await.unwrap(), connect(&url).await.unwrap());
    let name = format!("guarded/{}", std::process::id());
    let node = format!("/omnilock-test-app-{}", std::process::id());
    client
        .create(
            &node,
            b"",
            &zookeeper_client::CreateMode::Persistent
                .with_acls(zookeeper_client::Acls::anyone_all()),
        )
        .await
        .expect("the application's node");
    let write = |guard: &omnilock_core::LockGuard, value: &'static [u8]| {
        let mut writer = client.new_multi_writer();
        omnilock_zookeeper::check_owner(&mut writer, guard).expect("a mutex");
        writer.add_set_data(&node, value, None).expect("set");
        async move { writer.commit().await.is_ok() }
    };

    let first = a.acquire(&name).await.expect("acquire");
    assert!(write(&first, b"first").await);
    // A release consumes the guard: this writer is built while it holds,
    // and committed after.
    let mut ended = client.new_multi_writer();
    omnilock_zookeeper::check_owner(&mut ended, &first).expect("a mutex");
    ended.add_set_data(&node, b"released", None).expect("set");
    first.release().await.expect("release");
    assert!(
        ended.commit().await.is_err(),
        "a released hold's check passed"
    );

    let again = a.acquire(&name).await.expect("acquire again");
    let mut stale = client.new_multi_writer();
    omnilock_zookeeper::check_owner(&mut stale, &again).expect("a mutex");
    stale.add_set_data(&node, b"stale", None).expect("set");
    assert!(write(&again, b"second").await);
    again.release().await.expect("release");
    let other = b.acquire(&name).await.expect("another client");
    assert!(stale.commit().await.is_err(), "a stale check passed");
    let (data, _) = client.get_data(&node).await.expect("read");
    assert_eq!(data, b"second", "a stale multi wrote");
    other.release().await.expect("release");
    client.delete(&node, None).await.expect("clean up");

    let permit = a
        .semaphore(&format!("guarded-permits/{}", std::process::id()), 2)
        .acquire()
        .await
        .expect("permit");
    let mut writer = client.new_multi_writer();
    let err = omnilock_zookeeper::check_owner(&mut writer, &permit).expect_err("a permit");
    assert_eq!(err.kind(), ErrorKind::Unsupported, "{err}");
    permit.release().await.expect("release");
}

/// A client closed while one of its acquires waits on a watch: the wait
/// ends with an error, and nothing is granted to the closed client.
#[tokio::test(flavor = "multi_thread")]
async fn closing_a_client_ends_its_waiting_acquires() {
    let url = ensemble_url();
    let (holder, waiter) = (
        connect(&url).await.expect("connect"),
        connect(&url).await.expect("connect"),
    );
    let name = unique_name("closing");
    let _guard = holder.lock(&name).acquire().await.expect("acquire");
    let waiting = {
        let (waiter, name) = (waiter.clone(), name.clone());
        tokio::spawn(async move { waiter.lock(&name).acquire().await.map(drop) })
    };
    // The waiter's node is in the line (two children) before the close.
    let raw = raw().await;
    let lock_path = format!("/omnilock/{name}");
    tokio::time::timeout(Duration::from_secs(10), async {
        while raw.list_children(&lock_path).await.map_or(0, |c| c.len()) < 2 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the waiter joins the line");
    waiter.close().await;
    let acquired = tokio::time::timeout(Duration::from_secs(20), waiting)
        .await
        .expect("the waiting acquire ends once its client is closed")
        .expect("the waiting acquire's task");
    assert!(acquired.is_err(), "a closed client's acquire was granted");
}

/// TLS with a client certificate (the server requires one): locks work
/// over it, and every misconfiguration is a clear error at once (`Tls` or
/// `InvalidConfig`, never retried), not a timeout that reads as an outage.
/// A server that does not speak TLS is an outage with a hint.
#[cfg(feature = "tls")]
#[tokio::test(flavor = "multi_thread")]
async fn tls_with_a_client_certificate() {
    let url = store_url("ZK_TLS").expect("OMNILOCK_TEST_ZK_TLS_URL");
    let locks = connect(&url).await.expect("connect over TLS");
    let guard = locks
        .acquire(&unique_name("tls"))
        .await
        .expect("acquire over TLS");
    assert!(guard.token() > 0);
    guard.release().await.expect("release over TLS");

    let base = url.split('?').next().unwrap().to_string();
    let query = url.split('?').nth(1).unwrap();
    let option = |key: &str| {
        let found = query
            .split('&')
            .find(|kv| kv.starts_with(&format!("{key}=")));
        found.unwrap().to_string()
    };
    let (ca, cert, key) = (option("tls_ca"), option("tls_cert"), option("tls_key"));
    // The etcd test members' CA: a real CA, not the one that signed the
    // server's certificate.
    let other_ca = ca.replace("zk/tls", "etcd/tls");
    // The server's key: a real key, of another certificate.
    let other_key = key.replace("client.key", "server.key");
    let cert_as_key = cert.replace("tls_cert=", "tls_key=");
    let plain = ensemble_url().replacen("zk://", "zks://", 1);
    for (what, bad, kind) in [
        (
            "no client certificate",
            format!("{base}?{ca}"),
            ErrorKind::Tls,
        ),
        (
            "the system's CAs only",
            format!("{base}?{cert}&{key}"),
            ErrorKind::Tls,
        ),
        (
            "another CA",
            format!("{base}?{other_ca}&{cert}&{key}"),
            ErrorKind::Tls,
        ),
        (
            "a key of another certificate",
            format!("{base}?{ca}&{cert}&{other_key}"),
            ErrorKind::InvalidConfig,
        ),
        (
            "a certificate as the key",
            format!("{base}?{ca}&{cert}&{cert_as_key}"),
            ErrorKind::InvalidConfig,
        ),
        (
            "TLS to plain-text servers",
            format!("{plain}?{ca}&{cert}&{key}&connect_timeout=2s"),
            ErrorKind::Unavailable,
        ),
    ] {
        let started = std::time::Instant::now();
        let err = connect(&bad).await.expect_err(what);
        assert_eq!(err.kind(), kind, "{what}: {err}");
        if kind == ErrorKind::Unavailable {
            assert!(
                err.message().contains("does not speak TLS"),
                "{what}: {err}"
            );
        } else {
            assert!(
                started.elapsed() < Duration::from_secs(2),
                "{what}: slow: {err}"
            );
        }
        assert!(
            !err.is_retryable() || kind == ErrorKind::Unavailable,
            "{what}: {err}"
        );
    }
}

/// A grant made through one server is seen at once by `break_lock`,
/// `holder` and `inspect` on a client of another server. ZooKeeper's
/// servers may lag its leader: a read that answers for another client
/// must sync first, or it misses a grant made just before. Every ordered
/// pair of servers is tried, so one pair has the holder on the leader and
/// the operator on a follower, where the lag is longest. The lag is a
/// race: without the sync this fails on some runs, not every one (most
/// often on a loaded machine, such as CI's).
#[tokio::test(flavor = "multi_thread")]
async fn operator_reads_through_another_server_see_a_grant_at_once() {
    let url = ensemble_url();
    let servers: Vec<String> = hosts(&url).split(',').map(str::to_string).collect();
    assert!(servers.len() >= 2, "the test ensemble has several servers");
    let on = |server: &str| url.replace(&hosts(&url), server);
    let mut missed = Vec::new();
    for from in &servers {
        for through in servers.iter().filter(|s| *s != from) {
            let holder = connect(&on(from)).await.expect("holder");
            let admin = connect(&on(through)).await.expect("admin");
            for round in 0..40 {
                // Each read comes first after its own grant: a sync by one
                // read would bring the server up to date for the next.
                let grant = async || {
                    let name = unique_name("zk-lag");
                    (holder.acquire(&name).await.expect("acquire"), name)
                };
                let (guard, name) = grant().await;
                let broken = admin.break_lock(&name).await.expect("break");
                let _ = guard.release().await;
                let (guard, name) = grant().await;
                let seen = admin.holder(&name).await.expect("holder").is_some();
                guard.release().await.expect("release");
                let (guard, name) = grant().await;
                let inspected = admin
                    .inspect(&name, omnilock_core::LockKind::Mutex)
                    .await
                    .expect("inspect")
                    .holders
                    .len();
                guard.release().await.expect("release");
                if !(broken && seen && inspected == 1) {
                    missed.push((
                        from.clone(),
                        through.clone(),
                        round,
                        broken,
                        seen,
                        inspected,
                    ));
                }
            }
            holder.close().await;
            admin.close().await;
        }
    }
    assert!(
        missed.is_empty(),
        "reads through another server missed a grant \
         (holder's server, operator's server, round, broken, holder seen, holders inspected): \
         {missed:?}"
    );
}
