//! Bring your own client: the whole conformance suite through
//! `RedisStore::builder` (with and without the application's
//! `ConnectionManager`) and `RedlockStore::builder`, and proof that the lock
//! runs on the clients it was given. (`OMNILOCK_TEST_REDIS_URL`,
//! `OMNILOCK_TEST_REDLOCK_URL`, `OMNILOCK_TEST_REDIS_ACL_URL`,
//! `OMNILOCK_TEST_REDIS_TLS_URL`)

mod common;

use std::time::Duration;

use omnilock_core::{ErrorKind, HostPort, StoreUrl};
use omnilock_redis::{RedisStore, RedlockStore};
use omnilock_testkit::fixtures::{
    assert_refused, assert_refused_as, assert_same_refusal, assert_unreachable, take_and_release,
    unique_name,
};
use omnilock_testkit::{Subject, assert_builder_refuses, store_url};
use redis::{ConnectionAddr, IntoConnectionInfo, RedisConnectionInfo};

/// The application's client for one node of a test URL: its credentials,
/// database `db`, and nothing from omnilock's URL parser.
fn app_client(url: &StoreUrl, host: &HostPort, db: i64) -> redis::Client {
    let mut settings = RedisConnectionInfo::default().set_db(db);
    if let Some(user) = url.username() {
        settings = settings.set_username(user);
    }
    if let Some(password) = url.password() {
        settings = settings.set_password(password.expose());
    }
    let info = ConnectionAddr::Tcp(host.host.clone(), host.port.unwrap_or(6379))
        .into_connection_info()
        .unwrap()
        .set_redis_settings(settings);
    redis::Client::open(info).unwrap()
}

/// The application's client for the one instance in `OMNILOCK_TEST_<store>_URL`.
fn single_client(store: &str, db: i64) -> Option<redis::Client> {
    let url = StoreUrl::parse(&store_url(store)?).unwrap();
    Some(app_client(&url, &url.hosts()[0], db))
}

/// One client per Redlock node.
fn redlock_clients() -> Option<Vec<redis::Client>> {
    let url = StoreUrl::parse(&store_url("REDLOCK")?).unwrap();
    Some(
        url.hosts()
            .iter()
            .map(|host| app_client(&url, host, 0))
            .collect(),
    )
}

/// A connection for looking at the server behind omnilock's back.
/// Named `ADMIN`, so that connection counts leave it out.
async fn admin(store: &str, db: i64) -> redis::aio::MultiplexedConnection {
    let mut conn = single_client(store, db)
        .expect("store URL")
        .get_multiplexed_async_connection()
        .await
        .expect("admin connection");
    let _: () = redis::cmd("CLIENT")
        .arg("SETNAME")
        .arg(ADMIN)
        .query_async(&mut conn)
        .await
        .expect("CLIENT SETNAME");
    conn
}

const ADMIN: &str = "omnilock-test-admin";

fn redis_client_subject() -> Option<Subject> {
    single_client("REDIS", 0)?;
    Some(
        Subject::new("redis-byo-client", || async {
            let client = single_client("REDIS", 0).expect("checked above");
            RedisStore::builder(client).build().await
        })
        .with_guarded_writes(common::guarded::opener(
            store_url("REDIS").expect("checked above"),
        ))
        .connection_variant(),
    )
}

fn redis_manager_subject() -> Option<Subject> {
    single_client("REDIS", 0)?;
    Some(
        Subject::new("redis-byo-manager", || async {
            let client = single_client("REDIS", 0).expect("checked above");
            let manager = client
                .get_connection_manager()
                .await
                .map_err(|e| omnilock_core::Error::unavailable(e.to_string()))?;
            RedisStore::builder(client)
                .connection_manager(manager)
                .build()
                .await
        })
        .with_guarded_writes(common::guarded::opener(
            store_url("REDIS").expect("checked above"),
        ))
        .connection_variant(),
    )
}

fn redlock_subject() -> Option<Subject> {
    redlock_clients()?;
    Some(
        Subject::new("redlock-byo", || async {
            RedlockStore::builder(redlock_clients().expect("checked above"))
                .build()
                .await
        })
        .connection_variant(),
    )
}

omnilock_testkit::conformance_main! {
    redis_client => redis_client_subject(),
    redis_manager => redis_manager_subject(),
    redlock => redlock_subject();
    tests:
        builder_uses_the_clients_database_and_the_options,
        commands_run_on_the_applications_connection_manager,
        a_manager_for_another_server_is_refused,
        builders_check_options_like_urls,
        credentials_come_from_the_client,
        tls_client_as_given,
}

/// `CLIENT LIST` lines of the given type whose database is `db`, except
/// this test's admin connections.
async fn connections_on_db(
    admin: &mut redis::aio::MultiplexedConnection,
    kind: &str,
    db: i64,
) -> Vec<String> {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .arg("TYPE")
        .arg(kind)
        .query_async(admin)
        .await
        .unwrap();
    list.lines()
        .filter(|line| line.split(' ').any(|field| field == format!("db={db}")))
        .filter(|line| !line.contains(&format!(" name={ADMIN} ")))
        .map(str::to_string)
        .collect()
}

/// The lock lives where the application's client points (its database),
/// under the builder's prefix, with the builder's TTL; omnilock opened its
/// command connection and its subscription from that client.
async fn builder_uses_the_clients_database_and_the_options() {
    let Some(client) = single_client("REDIS", 8) else {
        return;
    };
    let prefix = format!("byo{}", std::process::id());
    let locks = RedisStore::builder(client)
        .prefix(prefix.clone())
        .ttl(Duration::from_secs(42))
        .build()
        .await
        .expect("build");
    let guard = locks.acquire("job").await.expect("acquire");
    let key = format!("{{{prefix}:job}}");
    let mut db8 = admin("REDIS", 8).await;
    let mut db0 = admin("REDIS", 0).await;
    let ttl: i64 = redis::cmd("PTTL")
        .arg(&key)
        .query_async(&mut db8)
        .await
        .unwrap();
    assert!(
        (40_000..=42_000).contains(&ttl),
        "the lock's key in the client's db 8 has PTTL {ttl} ms, not the builder's 42 s"
    );
    let elsewhere: i64 = redis::cmd("EXISTS")
        .arg(&key)
        .query_async(&mut db0)
        .await
        .unwrap();
    assert_eq!(
        elsewhere, 0,
        "the lock was written to db 0, not the client's"
    );
    // Nothing else in this test binary uses db 8: exactly omnilock's command
    // connection and its wake-up subscription, both from this client.
    assert_eq!(
        connections_on_db(&mut db0, "normal", 8).await.len(),
        1,
        "command connections on db 8"
    );
    assert_eq!(
        connections_on_db(&mut db0, "pubsub", 8).await.len(),
        1,
        "subscriptions on db 8"
    );
    guard.release().await.expect("release");
}

/// With the application's `ConnectionManager`, omnilock's commands run on
/// that very connection and omnilock opens no command connection of its own
/// (only the wake-up subscription).
async fn commands_run_on_the_applications_connection_manager() {
    let Some(client) = single_client("REDIS", 9) else {
        return;
    };
    let mut manager = client.get_connection_manager().await.expect("manager");
    let name = format!("app-{}", std::process::id());
    let _: () = redis::cmd("CLIENT")
        .arg("SETNAME")
        .arg(&name)
        .query_async(&mut manager)
        .await
        .unwrap();
    let locks = RedisStore::builder(client)
        .connection_manager(manager)
        .build()
        .await
        .expect("build");
    let guard = locks.acquire("shared-connection").await.expect("acquire");
    let mut db0 = admin("REDIS", 0).await;
    let normal = connections_on_db(&mut db0, "normal", 9).await;
    assert_eq!(
        normal.len(),
        1,
        "omnilock opened a command connection: {normal:?}"
    );
    let line = &normal[0];
    assert!(
        line.contains(&format!("name={name} ")),
        "not the application's connection: {line}"
    );
    // The acquire script was the last command on it (EVALSHA, or EVAL the
    // first time the server sees the script).
    assert!(line.contains(" cmd=eval"), "{line}");
    assert_eq!(connections_on_db(&mut db0, "pubsub", 9).await.len(), 1);
    guard.release().await.expect("release");
}

/// A `ConnectionManager` that reaches another server than the client would
/// never see wake-ups published: `build` refuses it.
async fn a_manager_for_another_server_is_refused() {
    let (Some(client), Some(nodes)) = (single_client("REDIS", 0), redlock_clients()) else {
        return;
    };
    let other = nodes[0].get_connection_manager().await.expect("manager");
    let refused = RedisStore::builder(client)
        .connection_manager(other)
        .build()
        .await;
    assert_refused(refused, "does not reach");
}

/// Options are checked before any I/O, with the URL's messages: the client
/// here points at a port where nothing listens, so any I/O would answer
/// `Unavailable` instead.
async fn builders_check_options_like_urls() {
    let nowhere = || redis::Client::open("redis://127.0.0.1:1/").unwrap();
    // Also a zero timeout and a 1 ms TTL, as every builder.
    assert_builder_refuses!(RedisStore::builder(nowhere());
        prefix("{x}") => "prefix",
        waiter_lease(Duration::from_millis(1)) => "waiter_lease",
    );
    let two = RedlockStore::builder([nowhere(), nowhere()]).build().await;
    assert_refused(two, "at least 3");
    let year = Duration::from_secs(365 * 86_400);
    let three = RedlockStore::builder([nowhere(), nowhere(), nowhere()]);
    assert_refused(three.ttl(year).build().await, "TTL");
    // The same rules as the URL, word for word.
    assert_same_refusal(
        omnilock_redis::RedisConfig::from_url(
            &StoreUrl::parse("redis://127.0.0.1:1?waiter_lease=1ms").unwrap(),
        ),
        RedisStore::builder(nowhere())
            .waiter_lease(Duration::from_millis(1))
            .build()
            .await,
    );
    // Valid options, unreachable client: Unavailable, naming the node.
    let build = RedisStore::builder(nowhere())
        .connect_timeout(Duration::from_millis(500))
        .build();
    let err = assert_unreachable(build, "127.0.0.1:1", None, Duration::from_secs(10)).await;
    assert!(err.to_string().contains("127.0.0.1:1"), "{err}");
}

/// The credentials are the client's only: an ACL user's client locks; the
/// same client with a wrong password is `Auth`, without the password.
async fn credentials_come_from_the_client() {
    let Some(acl) = single_client("REDIS_ACL", 0) else {
        return;
    };
    let locks = RedisStore::builder(acl)
        .build()
        .await
        .expect("the ACL user builds");
    let name = format!("byo-acl/{}", std::process::id());
    take_and_release(&locks, &name).await;

    let url = StoreUrl::parse(&store_url("REDIS_ACL").unwrap()).unwrap();
    let info = ConnectionAddr::Tcp(url.hosts()[0].host.clone(), url.hosts()[0].port.unwrap())
        .into_connection_info()
        .unwrap()
        .set_redis_settings(
            RedisConnectionInfo::default()
                .set_username("locker")
                .set_password("not-the-password"),
        );
    let refused = RedisStore::builder(redis::Client::open(info).unwrap())
        .build()
        .await;
    let err = assert_refused_as(refused, ErrorKind::Auth, "credentials");
    let shown = format!("{err} {err:?}");
    assert!(!shown.contains("not-the-password"), "{shown}");
}

/// A TLS client the application built (with its own CA) works as given:
/// omnilock adds nothing to its TLS settings.
async fn tls_client_as_given() {
    let Some(url) = store_url("REDIS_TLS") else {
        return;
    };
    let url = StoreUrl::parse(&url).unwrap();
    let host = &url.hosts()[0];
    let ca_path = url
        .clone()
        .take("tls_ca")
        .expect("the TLS URL names its CA");
    let info = ConnectionAddr::TcpTls {
        host: host.host.clone(),
        port: host.port.unwrap(),
        insecure: false,
        tls_params: None,
    }
    .into_connection_info()
    .unwrap()
    .set_redis_settings(
        RedisConnectionInfo::default().set_password(url.password().unwrap().expose()),
    );
    let client = redis::Client::build_with_tls(
        info,
        redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(std::fs::read(ca_path).unwrap()),
        },
    )
    .unwrap();
    let locks = RedisStore::builder(client)
        .build()
        .await
        .expect("TLS build");
    take_and_release(&locks, &unique_name("byo-tls")).await;
}
