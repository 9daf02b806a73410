//! etcd-only behaviour: connection errors, credentials, the session lease,
//! cross-process reentrancy, the key layout, and interoperation with
//! `etcdctl lock`.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use omnilock_core::{ErrorKind, Locks, Owner, StoreUrl};
use omnilock_etcd::EtcdConfig;
use omnilock_testkit::fixtures::{
    assert_observer_follows_the_watch, assert_unreachable, eventually, time_out_waiters,
    unique_name,
};
use omnilock_testkit::store_url;

const PATIENCE: Duration = Duration::from_secs(20);

async fn connect(url: &str) -> omnilock_core::Result<Locks> {
    omnilock_etcd::connect(EtcdConfig::from_url(&StoreUrl::parse(url)?)?).await
}

fn cluster_url() -> String {
    store_url("ETCD").expect("OMNILOCK_TEST_ETCD_URL")
}

/// A raw client on the test cluster, to look at keys behind omnilock's back.
async fn raw() -> etcd_client::Client {
    let port: u16 = std::env::var("OMNILOCK_TEST_ETCD_FIRST_PORT")
        .expect("OMNILOCK_TEST_ETCD_FIRST_PORT")
        .parse()
        .unwrap();
    etcd_client::Client::connect([format!("http://127.0.0.1:{port}")], None)
        .await
        .expect("raw client")
}

async fn keys_under(client: &etcd_client::Client, prefix: &str) -> Vec<(String, String)> {
    let resp = client
        .clone()
        .get(prefix, Some(etcd_client::GetOptions::new().with_prefix()))
        .await
        .expect("get");
    resp.kvs()
        .iter()
        .map(|kv| {
            (
                String::from_utf8_lossy(kv.key()).into_owned(),
                String::from_utf8_lossy(kv.value()).into_owned(),
            )
        })
        .collect()
}

#[tokio::test]
async fn unreachable_endpoints_are_unavailable_within_the_connect_timeout() {
    let unreachable =
        connect("etcd://locker:s3cret-pw@127.0.0.1:1,127.0.0.1:9/x?connect_timeout=1s");
    let within = Duration::from_secs(3);
    assert_unreachable(unreachable, "127.0.0.1:1", Some("s3cret-pw"), within).await;
}

#[tokio::test]
async fn wrong_credentials_are_a_clear_auth_error() {
    let url = store_url("ETCD_AUTH").expect("OMNILOCK_TEST_ETCD_AUTH_URL");
    let wrong = url.replace("omnilock-test-pw", "not-the-pw");
    assert_ne!(url, wrong);
    let err = connect(&wrong).await.expect_err("wrong password");
    assert_eq!(err.kind(), ErrorKind::Auth, "{err}");
    let text = format!("{err} {err:?}");
    assert!(text.contains("credentials"), "{text}");
    assert!(!text.contains("not-the-pw"), "leaks the password: {text}");
    // And with no credentials at all, the first lock operation says so.
    let anonymous = url.replace("omnilock:omnilock-test-pw@", "");
    let outcome = match connect(&anonymous).await {
        Ok(locks) => locks.try_acquire("anonymous").await.map(|_| ()),
        Err(err) => Err(err),
    };
    let err = outcome.expect_err("auth is enabled on that member");
    assert_eq!(err.kind(), ErrorKind::Auth, "{err}");
}

/// Checks an error message (issue 13, finding 8): one line, short, naming
/// `endpoint`, containing `why`, and no `password` anywhere in the error
/// chain (the etcd client's own error, kept as the source, included).
fn assert_one_clear_line(err: &omnilock_core::Error, endpoint: &str, why: &str, password: &str) {
    let line = err.to_string();
    assert!(!line.contains('\n'), "more than one line: {line}");
    assert!(line.len() < 200, "{} characters: {line}", line.len());
    assert!(line.contains(endpoint), "does not name {endpoint}: {line}");
    assert!(line.contains(why), "does not say {why:?}: {line}");
    let mut chain = format!("{err} {err:?}");
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        chain += &format!(" {cause} {cause:?}");
        source = cause.source();
    }
    assert!(!chain.contains(password), "leaks the password: {chain}");
}

#[tokio::test]
async fn errors_are_one_short_line_naming_the_endpoint_and_the_cause() {
    let err = connect("etcd://locker:s3cret-pw@127.0.0.1:1/x?connect_timeout=2s")
        .await
        .expect_err("nothing listens there");
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert_one_clear_line(&err, "etcd 127.0.0.1:1", "connection refused", "s3cret-pw");
    // The cause is the etcd client's own error, and `{:#}` shows it after
    // the line.
    let cause = std::error::Error::source(&err).expect("a cause");
    assert!(
        cause.downcast_ref::<etcd_client::Error>().is_some(),
        "the client's error is kept: {err:?}"
    );
    assert!(
        format!("{err:#}").starts_with(&format!("{err}: ")),
        "{err:#}"
    );

    let err = connect("etcd://locker:s3cret-pw@127.0.0.1:1,127.0.0.1:9/x?connect_timeout=2s")
        .await
        .expect_err("nothing listens there");
    assert_one_clear_line(
        &err,
        "127.0.0.1:1,127.0.0.1:9",
        "connection refused",
        "s3cret-pw",
    );

    let url = store_url("ETCD_AUTH").expect("OMNILOCK_TEST_ETCD_AUTH_URL");
    let endpoint = url
        .split('@')
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .expect("host:port in the auth URL")
        .to_string();
    let wrong = url.replace("omnilock-test-pw", "not-the-pw");
    let err = connect(&wrong).await.expect_err("wrong password");
    assert_eq!(err.kind(), ErrorKind::Auth, "{err}");
    assert_one_clear_line(&err, &endpoint, "authentication failed", "not-the-pw");
}

/// The lease of omnilock's session revoked behind its back, and an
/// acquisition right after, before the keep-alive task can have noticed:
/// the acquisition takes a new lease instead of failing on the dead one
/// (`requested lease not found`), for a mutex and for a semaphore.
#[tokio::test]
async fn an_acquisition_right_after_a_revoke_takes_a_new_lease() {
    let locks = connect(&cluster_url()).await.expect("connect");
    let ttl = Duration::from_secs(9);
    let first = unique_name("revoked-first");
    let held = locks
        .lock(&first)
        .ttl(ttl)
        .acquire()
        .await
        .expect("acquire");
    let mut client = raw().await;
    let resp = client
        .get(
            format!("omnilock/{}", first.replace('/', "%2F")),
            Some(etcd_client::GetOptions::new().with_prefix()),
        )
        .await
        .unwrap();
    let lease = resp.kvs().first().expect("the holder's key").lease();
    client.lease_revoke(lease).await.expect("revoke");
    let mutex = locks
        .lock(&unique_name("revoked-next"))
        .ttl(ttl)
        .acquire()
        .await
        .expect("a mutex right after the revoke");
    let permit = locks
        .semaphore(&unique_name("revoked-permit"), 2)
        .ttl(ttl)
        .acquire()
        .await
        .expect("a permit right after the revoke");
    assert!(mutex.is_held() && permit.is_held());
    let loss = tokio::time::timeout(PATIENCE, held.lost())
        .await
        .expect("the guard on the revoked lease is told");
    assert_eq!(loss.kind(), ErrorKind::LockLost);
}

/// A waiter whose lease is revoked while it waits (as when a network cut
/// outlasts its TTL) lost only its place in line: it queues again on a new
/// lease and gets the lock once the holder lets go, instead of failing with
/// `LockLost` (the CLI exited 70, "lost while the command ran", for a
/// command that never ran).
#[tokio::test]
async fn a_waiter_whose_lease_ends_queues_again() {
    let ttl = Duration::from_secs(6);
    let name = unique_name("requeue");
    let holder = connect(&cluster_url()).await.expect("connect");
    let held = holder
        .lock(&name)
        .ttl(ttl)
        .acquire()
        .await
        .expect("acquire");
    let waiter = connect(&cluster_url()).await.expect("connect");
    let waiting = {
        let name = name.clone();
        tokio::spawn(async move {
            let guard = waiter
                .lock(&name)
                .ttl(ttl)
                .timeout(PATIENCE)
                .acquire()
                .await;
            (guard, waiter)
        })
    };
    let mut client = raw().await;
    let prefix = format!("omnilock/{}", name.replace('/', "%2F"));
    let deadline = Instant::now() + PATIENCE;
    let waiters_lease = loop {
        // In line order (etcd sorts a range by key otherwise, and keys are
        // owner names).
        let in_line = etcd_client::GetOptions::new().with_prefix().with_sort(
            etcd_client::SortTarget::Create,
            etcd_client::SortOrder::Ascend,
        );
        let resp = client.get(prefix.as_str(), Some(in_line)).await.unwrap();
        if let [first, second, ..] = resp.kvs() {
            assert_ne!(first.lease(), second.lease(), "two clients, two leases");
            break second.lease();
        }
        assert!(Instant::now() < deadline, "the waiter never queued");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    client.lease_revoke(waiters_lease).await.expect("revoke");
    // Let the waiter notice (its keep-alive runs every third of the TTL).
    tokio::time::sleep(ttl / 2).await;
    held.release().await.expect("release");
    let (guard, _waiter) = waiting.await.expect("the waiting task");
    let guard = guard.expect("the waiter queued again and got the lock");
    assert!(guard.is_held());
}

#[tokio::test]
async fn lease_loss_fires_every_guard_and_a_new_lease_serves_later_acquisitions() {
    let locks = connect(&cluster_url()).await.expect("connect");
    let names: Vec<_> = (0..3).map(|i| unique_name(&format!("lease-{i}"))).collect();
    let mut guards = Vec::new();
    for name in &names {
        guards.push(
            locks
                .lock(name)
                .ttl(Duration::from_secs(5))
                .acquire()
                .await
                .expect("acquire"),
        );
    }
    // Revoke the session's lease behind omnilock's back.
    let mut client = raw().await;
    let prefix = format!("omnilock/{}", names[0].replace('/', "%2F"));
    let resp = client
        .get(prefix, Some(etcd_client::GetOptions::new().with_prefix()))
        .await
        .unwrap();
    let lease = resp.kvs().first().expect("the holder's key").lease();
    assert_ne!(lease, 0, "keys live on a lease");
    client.lease_revoke(lease).await.expect("revoke");
    for guard in &guards {
        let loss = tokio::time::timeout(PATIENCE, guard.lost())
            .await
            .expect("every guard on the lease is told");
        assert_eq!(loss.kind(), ErrorKind::LockLost);
        assert!(!guard.is_held());
    }
    for guard in guards {
        let err = guard.release().await.expect_err("released after loss");
        assert_eq!(err.kind(), ErrorKind::NotOwner, "{err}");
    }
    let again = tokio::time::timeout(
        PATIENCE,
        locks.lock(&names[0]).ttl(Duration::from_secs(5)).acquire(),
    )
    .await
    .expect("in time")
    .expect("a new lease serves later acquisitions");
    let resp = client
        .get(
            format!("omnilock/{}", names[0].replace('/', "%2F")),
            Some(etcd_client::GetOptions::new().with_prefix()),
        )
        .await
        .unwrap();
    assert_ne!(resp.kvs()[0].lease(), lease, "a fresh lease");
    again.release().await.expect("release");
}

/// The hold count of an owner that re-enters through other clients lives
/// in etcd, as the value of one key per owner (the conformance scenario
/// `reentrancy_across_clients` checks what the holders see).
#[tokio::test]
async fn the_same_owner_reenters_across_processes_and_the_count_lives_in_etcd() {
    let url = cluster_url();
    let (a, b) = (connect(&url).await.unwrap(), connect(&url).await.unwrap());
    assert!(a.capabilities().cross_process_reentrancy);
    let name = unique_name("xreentry");
    let me = Owner::new("deploy-bot").unwrap();
    // Neither hold waits (a timeout would be an error).
    let first = a.lock(&name).owner(&me).timeout(PATIENCE).acquire().await;
    let first = first.expect("first hold");
    let second = b.lock(&name).owner(&me).timeout(PATIENCE).acquire().await;
    let second = second.expect("second hold, from another client");
    let client = raw().await;
    let prefix = format!("omnilock/{}/", name.replace('/', "%2F"));
    let keys = keys_under(&client, &prefix).await;
    assert_eq!(keys.len(), 1, "{keys:?}");
    assert!(keys[0].0.ends_with("/o:deploy-bot"), "{keys:?}");
    assert_eq!(keys[0].1, "2", "the hold count is the key's value");
    first.release().await.expect("release one hold");
    assert_eq!(keys_under(&client, &prefix).await[0].1, "1");
    second.release().await.expect("release the last hold");
    assert!(keys_under(&client, &prefix).await.is_empty());
}

/// Callers of two permit counts at once on a semaphore: those of the count
/// in force (the oldest key's) go on, those of the other are refused. A key
/// of the other count that stands between (a caller being refused) is
/// waited for, not a reason to refuse the caller whose count is in force.
#[tokio::test]
async fn the_count_in_force_goes_on_past_a_caller_being_refused() {
    let locks = connect(&cluster_url()).await.expect("connect");
    let name = unique_name("sem-dispute");
    let holder = locks.semaphore(&name, 3).acquire().await.expect("holder");
    // A caller of count 1 that joined and has not yet left: its key, as
    // omnilock writes it (weight, count, owner), on a lease of its own.
    let mut client = raw().await;
    let lease = client.lease_grant(30, None).await.expect("lease").id();
    let range = format!("omnilock/%sem/{}/", name.replace('/', "%2F"));
    let disputed = format!("{range}ffff-0");
    client
        .put(
            disputed.as_str(),
            "1 1 refused-one",
            Some(etcd_client::PutOptions::new().with_lease(lease)),
        )
        .await
        .expect("put");
    // The other count is refused at once, as before.
    let err = locks
        .semaphore(&name, 1)
        .timeout(PATIENCE)
        .acquire()
        .await
        .map(|_| ())
        .expect_err("another count");
    assert_eq!(err.kind(), ErrorKind::Conflict, "{err}");
    // The count in force waits for the disputed key, then goes on.
    let waiting = tokio::spawn({
        let locks = locks.clone();
        let name = name.clone();
        async move { locks.semaphore(&name, 3).timeout(PATIENCE).acquire().await }
    });
    // Its key joined the range (holder, disputed, waiter): it has looked.
    eventually("the waiter's key", PATIENCE, || async {
        match keys_under(&client, &range).await.len() {
            3 => Ok(()),
            n => Err(format!("{n} keys")),
        }
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !waiting.is_finished(),
        "admitted past a key of another count, or refused: {:?}",
        waiting.await
    );
    client
        .delete(disputed.as_str(), None)
        .await
        .expect("delete");
    let second = waiting
        .await
        .unwrap()
        .expect("the count in force, once the disputed key is gone");
    second.release().await.expect("release");
    holder.release().await.expect("release");
    client.lease_revoke(lease).await.expect("revoke");
}

#[tokio::test]
async fn cancelled_waiters_leave_no_keys() {
    let locks = connect(&cluster_url()).await.expect("connect");
    let name = unique_name("cancelled");
    let holder = locks.acquire(&name).await.expect("holder");
    time_out_waiters(&locks, &name, 50, Duration::from_millis(300)).await;
    let client = raw().await;
    let prefix = format!("omnilock/{}/", name.replace('/', "%2F"));
    eventually("only the holder's key is left", PATIENCE, || async {
        match keys_under(&client, &prefix).await.len() {
            1 => Ok(()),
            n => Err(format!("{n} keys")),
        }
    })
    .await;
    holder.release().await.expect("release");
    assert!(keys_under(&client, &prefix).await.is_empty());
}

/// The recipe uses the same key range and order as etcd's Lock RPC, so
/// `etcdctl lock <prefix>/<name>` and omnilock exclude one another.
#[tokio::test]
async fn etcdctl_lock_and_omnilock_exclude_each_other() {
    let locks = connect(&cluster_url()).await.expect("connect");
    let name = unique_name("interop");
    let port: u16 = std::env::var("OMNILOCK_TEST_ETCD_FIRST_PORT")
        .unwrap()
        .parse()
        .unwrap();
    let mut etcdctl = Command::new("etcdctl")
        .args([
            "--endpoints",
            &format!("127.0.0.1:{port}"),
            "lock",
            "--ttl",
            "5",
            &format!("omnilock/{name}"),
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("etcdctl");
    // etcdctl prints the key it holds, then holds it until interrupted.
    let mut stdout = std::io::BufReader::new(etcdctl.stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut stdout, &mut line).expect("etcdctl output");
    assert!(line.starts_with(&format!("omnilock/{name}/")), "{line}");
    assert!(
        locks.try_acquire(&name).await.unwrap().is_none(),
        "omnilock must see etcdctl's hold"
    );
    let waiter = {
        let locks = locks.clone();
        let name = name.clone();
        tokio::spawn(async move { locks.lock(&name).timeout(PATIENCE).acquire().await })
    };
    // SIGINT: etcdctl unlocks and revokes its session on the way out.
    let interrupted = Command::new("kill")
        .args(["-INT", &etcdctl.id().to_string()])
        .status()
        .unwrap();
    assert!(interrupted.success());
    let _ = etcdctl.wait();
    let guard = waiter.await.unwrap().expect("granted once etcdctl lets go");
    guard.release().await.unwrap();
}

/// TLS with a private CA and a client certificate: works with them. A
/// server certificate the CAs do not verify is a TLS error, which no retry
/// mends (the CLI's exit 78). Without the client certificate, or with TLS
/// to a plain-text endpoint, the server hangs up: a TLS alert when it
/// reaches the client first (`Tls`), else `Unavailable` with a message that
/// names the settings to check. A certificate and key that do not belong
/// together, or a key file that holds no key, are configuration errors
/// found before any I/O.
#[tokio::test]
async fn tls_with_a_client_certificate() {
    let url = store_url("ETCD_TLS").expect("OMNILOCK_TEST_ETCD_TLS_URL");
    let locks = connect(&url).await.expect("connect over TLS");
    let name = unique_name("tls");
    let guard = locks.acquire(&name).await.expect("acquire over TLS");
    assert!(guard.token() > 0);
    guard.release().await.expect("release over TLS");

    let base = url.split('?').next().unwrap().to_string();
    let query = url.split('?').nth(1).unwrap();
    let option = |key: &str| {
        query
            .split('&')
            .find(|kv| kv.starts_with(&format!("{key}=")))
            .unwrap()
            .to_string()
    };
    let (ca, cert) = (option("tls_ca"), option("tls_cert"));
    // The server's key: a real key, of another certificate.
    let other_key = cert
        .replace("tls_cert=", "tls_key=")
        .replace("client.crt", "server.key");
    let plain = cluster_url().replacen("etcd://", "etcds://", 1);
    for (what, bad, kind) in [
        (
            "no client certificate",
            format!("{base}?{ca}&connect_timeout=2s"),
            ErrorKind::Unavailable,
        ),
        (
            "the system's CAs only",
            format!("{base}?connect_timeout=2s"),
            ErrorKind::Tls,
        ),
        ("TLS to plain-text members", plain, ErrorKind::Unavailable),
        (
            "a key of another certificate",
            format!("{base}?{ca}&{cert}&{other_key}"),
            ErrorKind::InvalidConfig,
        ),
        (
            "a certificate as the key",
            format!(
                "{base}?{ca}&{cert}&{}",
                cert.replace("tls_cert=", "tls_key=")
            ),
            ErrorKind::InvalidConfig,
        ),
    ] {
        // Several times: the server's refusal of a missing certificate
        // reaches the client in one of three ways.
        for _ in 0..3 {
            let started = Instant::now();
            let err = connect(&bad).await.expect_err(what);
            match kind {
                // A hang-up: the TLS alert when it reached the client
                // first, else a hint at the settings.
                ErrorKind::Unavailable => assert!(
                    err.kind() == ErrorKind::Tls || err.message().contains("plain text"),
                    "{what}: {err}"
                ),
                kind => assert_eq!(err.kind(), kind, "{what}: {err}"),
            }
            assert!(started.elapsed() < Duration::from_secs(5), "{what}: slow");
        }
    }
}

/// An acquisition that names no owner reuses the owner of one the same
/// handle released before, so locking one name again and again writes one
/// key, not a new key (and a deleted key left for every later range read
/// to walk) per acquisition. Two at once still get two owners, and a hold
/// that was never released successfully never lends its owner again.
#[tokio::test(flavor = "multi_thread")]
async fn anonymous_owners_are_reused_after_a_release() {
    let locks = connect(&cluster_url()).await.expect("connect");
    let name = unique_name("reused-owner");
    let first = locks.acquire(&name).await.expect("acquire");
    let owner = first.owner().clone();
    first.release().await.expect("release");
    let second = locks.acquire(&name).await.expect("acquire again");
    assert_eq!(second.owner(), &owner, "a released owner is lent again");
    // Held now: another acquisition of the handle gets an owner of its own.
    let other = locks
        .try_acquire(&format!("{name}-other"))
        .await
        .expect("try");
    let other = other.expect("a free lock");
    assert_ne!(other.owner(), &owner);
    // Broken, then dropped: the release fails, and the owner is not reused.
    assert!(locks.break_lock(&name).await.expect("break"));
    assert!(second.release().await.is_err(), "the broken hold's release");
    let third = locks.acquire(&name).await.expect("acquire after the break");
    assert_ne!(third.owner(), &owner, "an owner whose release failed");
    third.release().await.expect("release");
    other.release().await.expect("release");
}

#[tokio::test]
async fn an_election_observer_waits_on_the_watch() {
    let locks = connect(&cluster_url()).await.expect("connect");
    assert_observer_follows_the_watch(&locks, Duration::from_secs(5)).await;
}

/// A user's `Txn` guarded by `is_owner` applies while the guard holds its
/// mutex, and not once the hold has ended: not after a release, not when
/// the same client takes the lock again (an anonymous owner is reused, so
/// the key's name is the same and only its create revision tells the holds
/// apart), not after another client took it. Both modes.
#[tokio::test]
async fn a_txn_guarded_by_is_owner_applies_only_while_the_lock_is_held() {
    use omnilock_etcd::etcd_client::{Txn, TxnOp};
    let client = raw().await;
    for mode in ["recipe", "lockapi"] {
        let url = format!("{}?mode={mode}", cluster_url());
        let (a, b) = (connect(&url).await.unwrap(), connect(&url).await.unwrap());
        let name = format!("guarded/{}/{mode}", std::process::id());
        let key = format!("omnilock-test-app/{}/{mode}", std::process::id());
        let write = |compare, value: &str| {
            Txn::new()
                .when([compare])
                .and_then([TxnOp::put(key.clone(), value, None)])
        };
        let applied = |txn| {
            let mut kv = client.kv_client();
            async move { kv.txn(txn).await.expect("txn").succeeded() }
        };

        let first = a.acquire(&name).await.expect("acquire");
        let first_owner = omnilock_etcd::is_owner(&first).expect("a mutex");
        assert!(applied(write(first_owner.clone(), "first")).await, "{mode}");
        first.release().await.expect("release");
        assert!(
            !applied(write(first_owner.clone(), "released")).await,
            "{mode}"
        );

        let again = a.acquire(&name).await.expect("acquire again");
        assert!(
            !applied(write(first_owner.clone(), "earlier hold")).await,
            "{mode}: an ended hold's compare held for the same client's next hold"
        );
        let again_owner = omnilock_etcd::is_owner(&again).expect("a mutex");
        assert!(
            applied(write(again_owner.clone(), "second")).await,
            "{mode}"
        );
        again.release().await.expect("release");

        let other = b.acquire(&name).await.expect("another client");
        assert!(!applied(write(again_owner, "stale")).await, "{mode}");
        let (_, value) = keys_under(&client, &key).await.pop().expect("the key");
        assert_eq!(value, "second", "{mode}: a stale Txn wrote");
        other.release().await.expect("release");
        client
            .kv_client()
            .delete(key, None)
            .await
            .expect("clean up");
    }
    let locks = connect(&cluster_url()).await.unwrap();
    let permit = locks
        .semaphore(&format!("guarded-permits/{}", std::process::id()), 2)
        .acquire()
        .await
        .expect("permit");
    let err = omnilock_etcd::is_owner(&permit).expect_err("a permit");
    assert_eq!(err.kind(), ErrorKind::Unsupported, "{err}");
    permit.release().await.expect("release");
}
