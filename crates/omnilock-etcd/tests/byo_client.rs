//! Bring your own client: the whole conformance suite through
//! `EtcdStore::builder` in both modes and on the member with authentication,
//! and proof that the lock runs on the client it was given: credentials and
//! TLS identity that only that client has, keys and leases as the builder's
//! options say. (`OMNILOCK_TEST_ETCD_URL`, `OMNILOCK_TEST_ETCD_AUTH_URL`,
//! `OMNILOCK_TEST_ETCD_TLS_URL`)

mod common;

use std::time::Duration;

use etcd_client::{Client, GetOptions};
use omnilock_core::{ErrorKind, StoreUrl};
use omnilock_etcd::{EtcdConfig, EtcdStore, Mode};
use omnilock_testkit::fixtures::{
    assert_refused_as, assert_same_refusal, assert_unreachable, byo_subject, take_and_release,
    unique_name,
};
use omnilock_testkit::{Subject, assert_builder_refuses, store_url};

use common::app_client;

/// The settings in `OMNILOCK_TEST_<store>_URL`, read only to learn where
/// the test cluster is and what it needs.
fn settings(store: &str) -> Option<EtcdConfig> {
    let url = store_url(store)?;
    Some(EtcdConfig::from_url(&StoreUrl::parse(&url).unwrap()).unwrap())
}

/// The application's client, built with etcd-client alone.
fn subject(store: &str, mode: Mode) -> Option<Subject> {
    let config = settings(store)?;
    let writes = common::guarded::opener(config.clone());
    Some(
        byo_subject(store, config, move |config| async move {
            let client = app_client(&config)
                .await
                .map_err(|e| omnilock_core::Error::unavailable(e.to_string()))?;
            EtcdStore::builder(client)
                .prefix(config.options.prefix.clone())
                .mode(mode)
                .build()
                .await
        })
        .with_guarded_writes(writes),
    )
}

omnilock_testkit::conformance_main! {
    etcd => subject("ETCD", omnilock_etcd::Mode::Recipe),
    etcd_lockapi => subject("ETCD", omnilock_etcd::Mode::LockApi),
    etcd_auth => subject("ETCD_AUTH", omnilock_etcd::Mode::Recipe);
    tests:
        keys_and_leases_follow_the_builder,
        credentials_come_from_the_client,
        tls_identity_comes_from_the_client,
        builder_checks_options_like_urls,
}

/// The lock's key is where the builder's prefix says, on a lease of the
/// builder's TTL, and the application's own client sees it.
async fn keys_and_leases_follow_the_builder() {
    let Some(config) = settings("ETCD") else {
        return;
    };
    let mut client = app_client(&config).await.expect("client");
    let prefix = format!("byo{}/app", std::process::id());
    let locks = EtcdStore::builder(client.clone())
        .prefix(prefix.clone())
        .ttl(Duration::from_secs(42))
        .build()
        .await
        .expect("build");
    let guard = locks.acquire("job").await.expect("acquire");
    // `/` in the prefix stays inside one key segment, as with a URL path.
    let range = format!("byo{}%2Fapp/job/", std::process::id());
    let found = client
        .get(range.as_str(), Some(GetOptions::new().with_prefix()))
        .await
        .expect("get");
    assert_eq!(found.kvs().len(), 1, "keys under {range}");
    let lease = found.kvs()[0].lease();
    assert_ne!(lease, 0, "the lock's key has no lease");
    let granted = client
        .lease_time_to_live(lease, None)
        .await
        .expect("lease TTL")
        .granted_ttl();
    assert_eq!(granted, 42, "the lease is not the builder's TTL");
    guard.release().await.expect("release");
    let left = client
        .get(range.as_str(), Some(GetOptions::new().with_prefix()))
        .await
        .expect("get");
    assert!(left.kvs().is_empty(), "release left {:?}", left.kvs());
}

/// Credentials only the application's client has: on the member with
/// authentication the client with them locks, and one without them is
/// refused with a clear `Auth` error.
async fn credentials_come_from_the_client() {
    let Some(mut config) = settings("ETCD_AUTH") else {
        return;
    };
    let client = app_client(&config).await.expect("client");
    let locks = EtcdStore::builder(client).build().await.expect("build");
    let name = format!("byo-auth/{}", std::process::id());
    take_and_release(&locks, &name).await;

    config.username = None;
    config.password = None;
    let anonymous = app_client(&config)
        .await
        .expect("client without credentials");
    let refused = EtcdStore::builder(anonymous).build().await;
    assert_refused_as(refused, ErrorKind::Auth, "refused the credentials");
}

/// A TLS client with a client certificate (mutual TLS) that only the
/// application's client carries: omnilock locks through it.
async fn tls_identity_comes_from_the_client() {
    let Some(config) = settings("ETCD_TLS") else {
        return;
    };
    assert!(
        config.tls.identity.is_some(),
        "the TLS URL names a client certificate"
    );
    let client = app_client(&config).await.expect("client");
    let locks = EtcdStore::builder(client)
        .build()
        .await
        .expect("build over TLS");
    take_and_release(&locks, &unique_name("byo-tls")).await;
}

/// Options are checked before any I/O, with the URL's messages: the client
/// here points at a port where nothing listens, so any I/O would answer
/// `Unavailable` instead.
async fn builder_checks_options_like_urls() {
    let nowhere = || async {
        Client::connect(["http://127.0.0.1:1"], None)
            .await
            .expect("etcd-client connects lazily")
    };
    // Also a zero timeout and a 1 ms TTL, as every builder.
    assert_builder_refuses!(EtcdStore::builder(nowhere().await);
        prefix("a//b") => "prefix",
        prefix("") => "prefix",
    );
    assert_same_refusal(
        EtcdConfig::from_url(&StoreUrl::parse("etcd://127.0.0.1:1/a//b").unwrap()),
        EtcdStore::builder(nowhere().await)
            .prefix("a//b")
            .build()
            .await,
    );
    // Valid options, unreachable cluster: Unavailable within connect_timeout.
    let build = EtcdStore::builder(nowhere().await)
        .connect_timeout(Duration::from_millis(500))
        .build();
    let whom = "application's client";
    assert_unreachable(build, whom, None, Duration::from_secs(10)).await;
}
