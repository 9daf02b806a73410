//! Bring your own client: the whole conformance suite through
//! `ZkStore::builder` on the application's sessions (plain, and with digest
//! credentials), and proof that the locks live on the session given: lock
//! nodes are that session's ephemerals with its credentials' ACL, leases are
//! its timeout, and its end is reported. (`OMNILOCK_TEST_ZK_URL`,
//! `OMNILOCK_TEST_ZK_DIGEST_URL`)

mod common;

use std::time::Duration;

use omnilock_core::{ErrorKind, StoreUrl};
use omnilock_testkit::fixtures::{assert_refused, assert_same_refusal, byo_subject, unique_name};
use omnilock_testkit::{Subject, assert_builder_refuses, store_url};
use omnilock_zookeeper::{ZkConfig, ZkStore};
use zookeeper_client::Client;

use common::app_client;

/// The shortest TTL the conformance scenarios ask for: the session timeout
/// may not be longer (a longer session would keep a dead holder's lock
/// beyond its TTL, and the store refuses such TTLs).
const SESSION: Duration = Duration::from_secs(1);

const PATIENCE: Duration = Duration::from_secs(20);

/// The settings in `OMNILOCK_TEST_<store>_URL`, read only to learn where the
/// test ensemble is, its prefix and its credentials.
fn settings(store: &str) -> Option<ZkConfig> {
    let url = store_url(store)?;
    Some(ZkConfig::from_url(&StoreUrl::parse(&url).unwrap()).unwrap())
}

/// The application's client, built with zookeeper-client alone.
fn subject(store: &str) -> Option<Subject> {
    let config = settings(store)?;
    let writes = common::guarded::opener(config.clone());
    Some(
        byo_subject(store, config, |config| async move {
            ZkStore::builder(app_client(&config, SESSION).await)
                .prefix(&config.options.prefix)
                .build()
                .await
        })
        .with_guarded_writes(writes),
    )
}

omnilock_testkit::conformance_main! {
    zk => subject("ZK"),
    zk_digest => subject("ZK_DIGEST");
    tests:
        locks_live_on_the_applications_session,
        credentials_come_from_the_client,
        ttls_shorter_than_the_session_are_refused,
        the_end_of_the_applications_session_is_reported,
        builder_checks_options_like_urls,
}

/// The one contender node of a held lock, read through `client`.
async fn lock_node(client: &Client, container: &str) -> (String, zookeeper_client::Stat) {
    let children = client.list_children(container).await.expect("children");
    assert_eq!(children.len(), 1, "contenders of {container}: {children:?}");
    let path = format!("{container}/{}", children[0]);
    let (_, stat) = client.get_data(&path).await.expect("lock node");
    (path, stat)
}

/// The lock's node is an ephemeral of the application's session, under the
/// builder's prefix; the handle's default lease is that session's timeout.
async fn locks_live_on_the_applications_session() {
    let Some(config) = settings("ZK") else {
        return;
    };
    let client = app_client(&config, Duration::from_secs(7)).await;
    let prefix = format!("/{}", unique_name("byo"));
    let locks = ZkStore::builder(client.clone())
        .prefix(&prefix)
        .build()
        .await
        .expect("build");
    let guard = locks.acquire("job").await.expect("acquire");
    assert_eq!(guard.ttl(), client.session_timeout(), "default lease");
    let (_, stat) = lock_node(&client, &format!("{prefix}/job")).await;
    assert_eq!(
        stat.ephemeral_owner,
        client.session_id().0,
        "the lock node is not the application's session's"
    );
    guard.release().await.expect("release");
    assert!(
        client
            .list_children(&format!("{prefix}/job"))
            .await
            .map_or(true, |c| c.is_empty())
    );
}

/// With digest credentials on the application's client (and nowhere else),
/// lock nodes carry `creator_all` for that identity: an anonymous client
/// cannot read them.
async fn credentials_come_from_the_client() {
    let Some(config) = settings("ZK_DIGEST") else {
        return;
    };
    let client = app_client(&config, Duration::from_secs(5)).await;
    let locks = ZkStore::builder(client.clone())
        .prefix(&config.options.prefix)
        .build()
        .await
        .expect("build");
    let name = unique_name("byo-acl");
    let guard = locks.acquire(&name).await.expect("acquire");
    let container = format!("{}/{name}", config.options.prefix);
    let (path, _) = lock_node(&client, &container).await;
    let (acls, _) = client.get_acl(&path).await.expect("ACL");
    let user = &config.digest.as_ref().unwrap().0;
    assert!(
        acls.iter()
            .all(|acl| acl.scheme() == "digest" && acl.id().starts_with(&format!("{user}:"))),
        "not creator_all for the client's identity: {acls:?}"
    );
    let anonymous = Client::connect(&config.hosts).await.expect("anonymous");
    let err = anonymous
        .list_children(&container)
        .await
        .expect_err("no read access without the client's credentials");
    assert!(matches!(err, zookeeper_client::Error::NoAuth), "{err:?}");
    guard.release().await.expect("release");
}

/// A TTL shorter than the session timeout cannot be kept (a dead holder's
/// node lives as long as the session): refused at build and at acquisition,
/// as `InvalidConfig` naming the session timeout. Longer ones are fine.
async fn ttls_shorter_than_the_session_are_refused() {
    let Some(config) = settings("ZK") else {
        return;
    };
    let client = app_client(&config, Duration::from_secs(4)).await;
    let timeout = client.session_timeout();
    let refused = ZkStore::builder(client.clone())
        .ttl(timeout / 2)
        .build()
        .await;
    assert_refused(refused, "session");

    let locks = ZkStore::builder(client).build().await.expect("build");
    let name = unique_name("byo-ttl");
    let err = locks
        .lock(&name)
        .ttl(timeout / 2)
        .acquire()
        .await
        .expect_err("TTL below the session timeout");
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
    let guard = locks
        .lock(&name)
        .ttl(timeout * 3)
        .acquire()
        .await
        .expect("a longer TTL");
    guard.release().await.expect("release");
}

/// When the application's session ends, guards on it are lost at once and
/// later acquisitions fail (non-retryable `Unavailable`), since omnilock
/// cannot open a session on a client it was given.
async fn the_end_of_the_applications_session_is_reported() {
    let Some(config) = settings("ZK") else {
        return;
    };
    let client = app_client(&config, Duration::from_secs(10)).await;
    let locks = ZkStore::builder(client.clone())
        .build()
        .await
        .expect("build");
    let guard = locks
        .acquire(&unique_name("byo-end"))
        .await
        .expect("acquire");
    let lost = guard.lost();
    // Take the session over on a second connection, then close it there:
    // the server ends the session for every connection.
    let thief = Client::connector()
        .with_session(client.session().clone())
        .connect(&config.hosts)
        .await
        .expect("same session");
    drop(thief);
    let cause = tokio::time::timeout(PATIENCE, lost)
        .await
        .expect("the guard heard of the session's end");
    assert_eq!(cause.kind(), ErrorKind::LockLost, "{cause}");
    let err = locks
        .acquire(&unique_name("byo-after"))
        .await
        .expect_err("no session left");
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert!(!err.is_retryable(), "{err}");
    assert!(err.to_string().contains("new client"), "{err}");
}

/// Options are checked before any I/O, with the URL's messages.
async fn builder_checks_options_like_urls() {
    let Some(config) = settings("ZK") else {
        return;
    };
    let client = app_client(&config, SESSION).await;
    // Also a zero timeout and a 1 ms TTL, as every builder.
    assert_builder_refuses!(ZkStore::builder(client.clone());
        prefix("a//b") => "prefix",
        prefix("") => "prefix",
        prefix("/zookeeper") => "prefix",
    );
    assert_same_refusal(
        ZkConfig::from_url(&StoreUrl::parse("zk://127.0.0.1:1/a//b").unwrap()),
        ZkStore::builder(client).prefix("a//b").build().await,
    );
}
