//! What only the SQL stores have: their table, their clock, their credentials.

use std::time::Duration;

use omnilock_core::{ErrorKind, Locks, StoreUrl};
use omnilock_sql::{SqlConfig, SqlStore};
use omnilock_testkit::store_url;
use sqlx::{AnyPool, Executor};

async fn connect(url: &str) -> omnilock_core::Result<Locks> {
    let config = SqlConfig::from_url(&StoreUrl::parse(url)?)?;
    Ok(Locks::new(SqlStore::connect(config).await?))
}

async fn raw(url: &str) -> AnyPool {
    sqlx::any::install_default_drivers();
    // The sqlx URL: SQLite needs mode=rwc, the servers take ours as is.
    let url = if url.starts_with("sqlite:") {
        format!("{url}?mode=rwc")
    } else {
        url.to_string()
    };
    AnyPool::connect(&url).await.expect("raw connection")
}

fn stores() -> Vec<(&'static str, String)> {
    let mut all = Vec::new();
    for store in ["SQLITE", "MYSQL", "POSTGRES"] {
        if let Some(url) = store_url(store) {
            all.push((store, url));
        }
    }
    all
}

fn with_option(url: &str, option: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}{option}")
}

fn now_ms(store: &str) -> &'static str {
    match store {
        "SQLITE" => "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)",
        "MYSQL" => "CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)",
        _ => "CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)",
    }
}

/// A lock whose expiry has passed by the database's clock is taken over at
/// once, with a higher token; the stale holder's release is refused.
#[tokio::test(flavor = "multi_thread")]
async fn expired_lock_is_taken_over_by_database_clock() {
    for (store, url) in stores() {
        let table = format!("expiry_{}", store.to_lowercase());
        let url = with_option(&url, &format!("table={table}"));
        let a = connect(&url).await.expect("connect");
        let b = connect(&url).await.expect("connect");
        let stale = a
            .lock("expiring")
            .ttl(Duration::from_secs(3600))
            .acquire()
            .await
            .expect("acquire");
        // Age the row by the database's own clock.
        let pool = raw(store_url(store).unwrap().as_str()).await;
        let aged = format!(
            "UPDATE {table} SET expires_at = {} - 1 WHERE name = 'expiring'",
            now_ms(store)
        );
        pool.execute(sqlx::AssertSqlSafe(aged.clone()))
            .await
            .expect("age the row");
        let fresh = tokio::time::timeout(Duration::from_secs(10), b.try_acquire("expiring"))
            .await
            .expect("in time")
            .expect("try_acquire")
            .unwrap_or_else(|| panic!("{store}: an expired lock was not taken over"));
        assert!(
            fresh.token() > stale.token(),
            "{store}: token did not advance"
        );
        let err = stale.release().await.expect_err("stale release");
        assert_eq!(err.kind(), ErrorKind::NotOwner, "{store}: {err}");
        // The lease was set from the database clock: about TTL from its now.
        let check = format!(
            "SELECT CAST(expires_at - {} AS SIGNED) FROM {table} WHERE name = 'expiring'",
            now_ms(store)
        )
        .replace(
            "AS SIGNED",
            if store == "MYSQL" {
                "AS SIGNED"
            } else {
                "AS BIGINT"
            },
        );
        let remaining: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(check.clone()))
            .fetch_one(&pool)
            .await
            .expect("read expiry");
        let ttl = b.default_ttl().as_millis() as i64;
        assert!(
            remaining > ttl - 10_000 && remaining <= ttl + 1_000,
            "{store}: lease {remaining} ms by the database clock, TTL {ttl} ms"
        );
        fresh.release().await.expect("release");
    }
}

/// A table a DBA created beforehand is used as is; a missing one with
/// `create_table=false` is a clear configuration error.
#[tokio::test(flavor = "multi_thread")]
async fn table_created_by_a_dba_is_used_as_is() {
    for (store, url) in stores() {
        let table = format!("dba_{}", store.to_lowercase());
        let pool = raw(&url).await;
        let (text, int) = match store {
            "SQLITE" => ("TEXT", "INTEGER"),
            "MYSQL" => ("VARBINARY(256)", "BIGINT"),
            _ => ("VARCHAR(256)", "BIGINT"),
        };
        let serial = match store {
            "SQLITE" => "INTEGER PRIMARY KEY AUTOINCREMENT",
            "MYSQL" => "BIGINT AUTO_INCREMENT PRIMARY KEY",
            _ => "BIGSERIAL PRIMARY KEY",
        };
        for dropped in [format!("{table}_queue"), table.clone()] {
            pool.execute(sqlx::AssertSqlSafe(format!(
                "DROP TABLE IF EXISTS {dropped}"
            )))
            .await
            .expect("drop");
        }
        pool.execute(sqlx::AssertSqlSafe(format!(
            "CREATE TABLE {table} (name {text} NOT NULL PRIMARY KEY, owner {text} NULL,
                 holds {int} NOT NULL DEFAULT 0, token {int} NOT NULL DEFAULT 0,
                 expires_at {int} NULL, updated_at {int} NOT NULL, waiting_until {int} NULL)"
        )))
        .await
        .expect("create");
        // The waiting line of fair mode, the default.
        pool.execute(sqlx::AssertSqlSafe(format!(
            "CREATE TABLE {table}_queue (id {serial}, name {text} NOT NULL,
                 owner {text} NOT NULL, expires_at {int} NOT NULL)"
        )))
        .await
        .expect("create the queue");
        pool.execute(sqlx::AssertSqlSafe(format!(
            "CREATE INDEX {table}_queue_name ON {table}_queue (name, id)"
        )))
        .await
        .expect("index the queue");
        let locks = connect(&with_option(
            &url,
            &format!("table={table}&create_table=false"),
        ))
        .await
        .expect("connect to the DBA's table");
        let guard = locks.acquire("dba-made").await.expect("acquire");
        let count: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT COUNT(*) FROM {table} WHERE owner IS NOT NULL"
        )))
        .fetch_one(&pool)
        .await
        .expect("count");
        assert_eq!(count, 1, "{store}: the lock row is not in the DBA's table");
        guard.release().await.expect("release");

        let missing = with_option(&url, "table=nobody_made_this&create_table=false");
        let locks = connect(&missing).await.expect("connect");
        let err = locks.try_acquire("x").await.expect_err("missing table");
        assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{store}: {err}");
        assert!(err.to_string().contains("table"), "{store}: {err}");
    }
}

/// A wrong password or a missing database is a clear error that names the
/// problem and never shows the password.
#[tokio::test(flavor = "multi_thread")]
async fn wrong_password_and_missing_database() {
    for (store, url) in stores() {
        if store == "SQLITE" {
            continue;
        }
        let parsed = StoreUrl::parse(&url).expect("url");
        let password = parsed
            .password()
            .expect("test URLs have a password")
            .expose()
            .to_string();
        let wrong = url.replacen(&password, "not-the-password", 1);
        let err = connect(&wrong).await.expect_err("wrong password");
        assert_eq!(err.kind(), ErrorKind::Auth, "{store}: {err}");
        let shown = format!("{err} {err:?}");
        assert!(shown.contains("credentials"), "{store}: {shown}");
        assert!(!shown.contains("not-the-password"), "{store}: {shown}");
        assert!(!shown.contains(&password), "{store}: {shown}");

        let (base, _) = url.rsplit_once('/').expect("database in URL");
        let err = connect(&format!("{base}/no_such_database"))
            .await
            .expect_err("missing database");
        assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{store}: {err}");
        assert!(err.to_string().contains("does not exist"), "{store}: {err}");
        assert!(!format!("{err:?}").contains(&password), "{store}: {err:?}");
    }
}

/// Nothing listens there: Unavailable, quickly, without the password.
#[tokio::test(flavor = "multi_thread")]
async fn unreachable_server_is_unavailable() {
    for url in [
        "postgres://u:sekrit@127.0.0.1:1/db?connect_timeout=500ms",
        "mysql://u:sekrit@127.0.0.1:1/db?connect_timeout=500ms",
    ] {
        let err = connect(url).await.expect_err("nothing listens on port 1");
        assert_eq!(err.kind(), ErrorKind::Unavailable, "{url}: {err}");
        assert!(err.is_retryable());
        assert!(!format!("{err} {err:?}").contains("sekrit"));
    }
}

/// A server at its connection limit (here the account's, 4 connections)
/// lets the next client in when another closes one. Connecting tries again
/// until its timeout, and a waiting acquire until its own, in table and
/// advisory mode, instead of failing at once; the message is the server's
/// reason, without the server's source line.
#[tokio::test(flavor = "multi_thread")]
async fn a_full_server_is_waited_for() {
    for store in ["POSTGRES_FEW", "MYSQL_FEW"] {
        let base = store_url(store).expect("the account of few connections");
        for mode in ["mode=table", "mode=advisory"] {
            let url = with_option(&base, &format!("{mode}&table=omnilock_few"));
            let what = format!("{store} {mode}");
            // The tables first, while there is room.
            connect(&url).await.expect("connect").close().await;

            let full = fill(&base).await;
            let refused = connect(&with_option(&url, "connect_timeout=500ms"))
                .await
                .map(|_| ())
                .expect_err("no room: refused once its timeout passed");
            assert_eq!(refused.kind(), ErrorKind::Unavailable, "{what}: {refused}");
            assert!(refused.is_retryable(), "{what}: {refused}");
            assert!(
                refused.message().contains("refused one more connection")
                    && !refused.message().contains(" at line "),
                "{what}: {refused}"
            );

            let connecting = tokio::spawn({
                let url = with_option(&url, "connect_timeout=10s");
                async move { connect(&url).await }
            });
            tokio::time::sleep(Duration::from_millis(500)).await;
            close_all(full).await;
            let locks = connecting
                .await
                .unwrap()
                .unwrap_or_else(|e| panic!("{what}: connect once a connection closed: {e}"));

            let full = fill(&base).await;
            let name = format!("full-{}", std::process::id());
            let waiting = tokio::spawn({
                let locks = locks.clone();
                async move {
                    let guard = locks
                        .lock(&name)
                        .timeout(Duration::from_secs(20))
                        .acquire()
                        .await?;
                    guard.release().await
                }
            });
            tokio::time::sleep(Duration::from_millis(500)).await;
            close_all(full).await;
            waiting
                .await
                .unwrap()
                .unwrap_or_else(|e| panic!("{what}: acquire once a connection closed: {e}"));
            locks.close().await;
        }
    }
}

/// Advisory mode needs to see its own session's start in pg_stat_activity
/// (to end its sessions, and no other). An account whose `role` setting
/// switches to another role (the TLS test account) cannot: a configuration
/// error that says so, not a decoding error.
#[tokio::test(flavor = "multi_thread")]
async fn advisory_mode_refuses_an_account_that_switches_role() {
    let url = store_url("POSTGRES_TLS").expect("the TLS account");
    let locks = connect(&with_option(&url, "mode=advisory"))
        .await
        .expect("connect");
    let err = locks
        .acquire("switched-role")
        .await
        .map(|_| ())
        .expect_err("no session it can see");
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
    assert!(err.message().contains("role"), "{err}");
    locks.close().await;
}

/// Connections of `url`'s account until the server refuses one more for
/// the account's limit (any other failure fails the test: the scenario
/// needs a full server, not one that did not answer).
async fn fill(url: &str) -> Vec<sqlx::AnyConnection> {
    use sqlx::Connection;
    sqlx::any::install_default_drivers();
    let mut open = Vec::new();
    for _ in 0..16 {
        match sqlx::AnyConnection::connect(url).await {
            Ok(conn) => open.push(conn),
            Err(sqlx::Error::Database(e))
                // PostgreSQL's too_many_connections; MySQL's 1203
                // (max_user_connections) and 1226 (a resource limit),
                // whose SQLSTATE is 42000.
                if matches!(e.code().as_deref(), Some("53300" | "42000" | "08004")) =>
            {
                return open;
            }
            Err(e) => panic!(
                "connection {} of the limited account: not a refusal for the limit: {e}",
                open.len() + 1
            ),
        }
    }
    panic!("16 connections and no refusal: is the account limited?");
}

async fn close_all(open: Vec<sqlx::AnyConnection>) {
    use sqlx::Connection;
    for conn in open {
        let _ = conn.close().await;
    }
}

/// A connection whose bytes break the protocol during the handshake (cut or
/// garbled on its way: here a peer that answers PostgreSQL's SSLRequest
/// with a byte it never sends) is `Unavailable` and retryable, like any
/// connection that did not go through, not a `Backend` error that ends a
/// waiting acquire.
#[tokio::test(flavor = "multi_thread")]
async fn a_garbled_handshake_is_unavailable() {
    use tokio::io::AsyncWriteExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let _ = socket.write_all(b"X").await;
        }
    });
    let url = format!("postgres://u:sekrit@127.0.0.1:{port}/db?connect_timeout=2s");
    let err = connect(&url).await.map(|_| ()).expect_err("garbled");
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert!(err.is_retryable(), "{err}");
    assert!(err.message().contains("SSLRequest"), "the reason: {err}");
    assert!(!format!("{err} {err:?}").contains("sekrit"));
}

/// Many clients using a store for the first time at once all connect: the
/// table is created once, and a creator that loses the race is not an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_first_use_creates_the_table_once() {
    for (store, url) in stores() {
        let table = format!("race_{}_{}", store.to_lowercase(), std::process::id());
        let url = with_option(&url, &format!("table={table}&fair=true"));
        let connects = (0..8).map(|_| {
            let url = url.clone();
            tokio::spawn(async move { connect(&url).await })
        });
        for result in futures_util::future::join_all(connects).await {
            let locks = result
                .expect("task")
                .unwrap_or_else(|e| panic!("{store}: {e}"));
            let guard = locks.try_acquire("race").await.expect("try_acquire");
            drop(guard);
        }
        let pool = raw(&url.split('?').next().unwrap().replace("?", "")).await;
        let _ = pool
            .execute(sqlx::AssertSqlSafe(format!(
                "DROP TABLE IF EXISTS {table}_queue"
            )))
            .await;
        let _ = pool
            .execute(sqlx::AssertSqlSafe(format!("DROP TABLE IF EXISTS {table}")))
            .await;
    }
}

/// PostgreSQL pushes semaphore and read-write lock releases: the delete of
/// an entry notifies `<table>_entries` with the lock name, in the same
/// statement, so a waiter in any process wakes at once instead of at its
/// next poll (the store's listener routes that channel to every waiter of
/// the name). Checked with a listener of our own on that channel.
#[tokio::test(flavor = "multi_thread")]
async fn postgres_release_of_a_permit_notifies_its_waiters() {
    let Some(url) = store_url("POSTGRES") else {
        return;
    };
    let table = "notify_counted";
    let locks = connect(&with_option(&url, &format!("table={table}")))
        .await
        .expect("connect");
    let mut listener = sqlx::postgres::PgListener::connect(&url)
        .await
        .expect("a listener");
    listener
        .listen(&format!("{table}_entries"))
        .await
        .expect("LISTEN");
    let name = format!("notify-{}", std::process::id());
    for side in ["permit", "writer"] {
        let guard = match side {
            "permit" => locks.semaphore(&name, 2).acquire().await,
            _ => locks.rw_lock(&name).write().acquire().await,
        }
        .expect("acquire");
        guard.release().await.expect("release");
        let notification = tokio::time::timeout(Duration::from_secs(10), listener.recv())
            .await
            .unwrap_or_else(|_| panic!("no NOTIFY within 10 s of the {side}'s release"))
            .expect("the listener's connection");
        assert_eq!(notification.payload(), name, "{side}");
    }
}

/// Advisory mode on the application's own pool: its sessions are opened
/// with the pool's connect options, a lock taken through the builder
/// excludes a URL client of the same table (one lock, two ways in), and a
/// SQLite pool refuses the mode by name.
#[tokio::test(flavor = "multi_thread")]
async fn advisory_mode_on_an_application_pool() {
    let table = "omnilock_advisory";
    for (store, url) in stores() {
        let pool: omnilock_sql::SqlPool = match store {
            "POSTGRES" => sqlx::PgPool::connect(&url).await.expect("pool").into(),
            "MYSQL" => sqlx::MySqlPool::connect(&url).await.expect("pool").into(),
            _ => {
                let pool = sqlx::SqlitePool::connect(&format!("{url}?mode=rwc"))
                    .await
                    .expect("pool");
                let err = SqlStore::builder(pool)
                    .advisory(true)
                    .build()
                    .await
                    .expect_err("SQLite has no advisory locks");
                assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
                assert!(err.to_string().contains("SQLite"), "{err}");
                continue;
            }
        };
        let locks = SqlStore::builder(pool)
            .table(table)
            .advisory(true)
            .sessions(4)
            .build()
            .await
            .unwrap_or_else(|e| panic!("{store}: {e}"));
        let other = connect(&with_option(&url, &format!("mode=advisory&table={table}")))
            .await
            .unwrap_or_else(|e| panic!("{store}: {e}"));
        let name = format!("builder-advisory/{}", std::process::id());
        let held = locks
            .try_acquire(&name)
            .await
            .expect("try_acquire")
            .expect("a fresh name is free");
        assert!(
            other.try_acquire(&name).await.expect("probe").is_none(),
            "{store}: a URL client took the lock the builder's client holds"
        );
        let token = held.token();
        held.release().await.expect("release");
        let next = other
            .try_acquire(&name)
            .await
            .expect("try_acquire")
            .unwrap_or_else(|| panic!("{store}: the released lock stays busy"));
        assert!(next.token() > token, "{store}: the token did not rise");
        next.release().await.expect("release");
    }
}

/// Advisory mode, one session for every try (`sessions=1`): `break_lock`
/// from another client kills the session that holds a lock, which this
/// client learns only when its next statement there fails. That try, and
/// the one after it, still take a free lock, on a new session: neither a
/// dead session nor its failed statement reaches the caller.
#[tokio::test(flavor = "multi_thread")]
async fn advisory_try_after_its_shared_session_was_killed() {
    for (store, url) in stores() {
        if store == "SQLITE" {
            continue;
        }
        let url = with_option(
            &url,
            "mode=advisory&sessions=1&table=omnilock_advisory_killed",
        );
        let (ours, admin) = (
            connect(&url).await.expect("connect"),
            connect(&url).await.expect("connect"),
        );
        let run = format!("{}/{store}", std::process::id());
        let broken = ours
            .try_acquire(&format!("killed/{run}"))
            .await
            .expect("try_acquire")
            .expect("a fresh name is free");
        assert!(
            admin
                .break_lock(&format!("killed/{run}"))
                .await
                .expect("break_lock"),
            "{store}: nothing broken"
        );
        for next in ["after-kill", "after-that"] {
            let name = format!("{next}/{run}");
            let guard = ours
                .try_acquire(&name)
                .await
                .unwrap_or_else(|e| panic!("{store}: {next}: {e}"))
                .unwrap_or_else(|| panic!("{store}: {next}: a fresh name is busy"));
            assert!(
                admin.try_acquire(&name).await.expect("probe").is_none(),
                "{store}: {next}: the lock is not held"
            );
            guard.release().await.expect("release");
        }
        drop(broken);
    }
}

/// Advisory mode: a holder whose session is ended from outside (here by
/// `break_lock` from another client, which ends it as an operator's
/// `pg_terminate_backend` or `KILL` would) hears it within about a second,
/// through its lost signal: the database has handed the lock on already.
/// Its renewal alone would tell it only a third of the TTL later (10 s
/// here). Both a lock taken by a try (on a shared session) and one waited
/// for (on a session of its own).
#[tokio::test(flavor = "multi_thread")]
async fn a_session_ended_from_outside_is_reported_within_a_second() {
    for (store, url) in stores() {
        if store == "SQLITE" {
            continue;
        }
        let url = with_option(&url, "mode=advisory&table=omnilock_advisory_ended");
        let (ours, admin) = (
            connect(&url).await.expect("connect"),
            connect(&url).await.expect("connect"),
        );
        let run = format!("{}/{store}", std::process::id());
        let ttl = Duration::from_secs(30);
        let tried = ours
            .lock(&format!("ended-tried/{run}"))
            .ttl(ttl)
            .acquire()
            .await
            .expect("acquire");
        // A wait: another holds the name first.
        let waited_for = format!("ended-waited/{run}");
        let first = admin
            .lock(&waited_for)
            .ttl(ttl)
            .acquire()
            .await
            .expect("first");
        let waiting = {
            let (ours, name) = (ours.clone(), waited_for.clone());
            tokio::spawn(async move { ours.lock(&name).ttl(ttl).acquire().await })
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        first.release().await.expect("release");
        let waited = waiting.await.expect("task").expect("waited for");
        // The watch runs every second: nothing it does touches a session
        // that is still there.
        tokio::time::sleep(Duration::from_millis(2500)).await;
        for (what, guard) in [("tried", &tried), ("waited", &waited)] {
            assert!(
                guard.is_held(),
                "{store}: {what}: lost while its session lives"
            );
        }
        for (what, guard) in [("tried", &tried), ("waited", &waited)] {
            let lost = guard.lost();
            let name = guard.name().to_string();
            assert!(
                admin.break_lock(&name).await.expect("break_lock"),
                "{store}: {what}"
            );
            let ended = std::time::Instant::now();
            let err = tokio::time::timeout(Duration::from_secs(8), lost)
                .await
                .unwrap_or_else(|_| panic!("{store}: {what}: no lost signal within 8 s"));
            let heard = ended.elapsed();
            eprintln!("{store} {what}: told {heard:?} after its session ended");
            assert_eq!(err.kind(), ErrorKind::LockLost, "{store}: {what}: {err}");
            assert!(!guard.is_held(), "{store}: {what}");
            assert!(
                heard < Duration::from_millis(2500),
                "{store}: {what}: the holder was told {heard:?} after its session ended"
            );
        }
    }
}

/// omnilock's pool pings a connection only after a second of idleness, so a
/// statement can meet a connection the server has just dropped. Each of
/// them then fails once as `Unavailable` and is left behind: a release and
/// a waiting acquire go through on other connections, a try-acquire either
/// goes through or says `Unavailable`, and exclusion holds throughout.
/// PostgreSQL only: its backends can be picked out by the last statement
/// they ran (this test's table), so that the kill spares every other test
/// running beside it under the same user.
#[tokio::test(flavor = "multi_thread")]
async fn postgres_connections_dropped_by_the_server_are_left_behind() {
    let Some(url) = store_url("POSTGRES") else {
        panic!("OMNILOCK_TEST_POSTGRES_URL is not set");
    };
    let table = "omnilock_dropped_pool";
    let url = with_option(&url, &format!("table={table}&pool=3"));
    let (ours, other) = (
        connect(&url).await.expect("connect"),
        connect(&url).await.expect("connect"),
    );
    let admin = raw(&url).await;
    // Every backend whose last statement named the table (both clients'),
    // except the one asking.
    let kill = || async {
        let killed: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
              WHERE query LIKE '%omnilock_dropped_pool%' AND pid <> pg_backend_pid()) AS k",
        )
        .fetch_one(&admin)
        .await
        .expect("terminate");
        assert!(killed >= 1, "no connection of the stores was found to drop");
    };
    let name = format!("dropped/{}", std::process::id());

    let guard = ours.acquire(&name).await.expect("acquire");
    kill().await;
    guard
        .release()
        .await
        .expect("a release on a dropped connection is retried");
    let theirs = other
        .try_acquire(&name)
        .await
        .expect("try_acquire")
        .expect("the release freed the lock");

    kill().await;
    let waiting = tokio::spawn({
        let (ours, name) = (ours.clone(), name.clone());
        async move { ours.acquire(&name).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !waiting.is_finished(),
        "granted while another holds the lock"
    );
    theirs.release().await.expect("release");
    let guard = tokio::time::timeout(Duration::from_secs(20), waiting)
        .await
        .expect("the waiting acquire finished")
        .expect("task")
        .expect("a waiting acquire on dropped connections is retried");
    guard.release().await.expect("release");

    // A try-acquire meets each dropped connection at most once: it reports
    // `Unavailable` and the next try takes another.
    kill().await;
    for attempt in 0.. {
        match ours.try_acquire(&name).await {
            Ok(Some(guard)) => {
                guard.release().await.expect("release");
                break;
            }
            Ok(None) => panic!("a free lock reported busy"),
            Err(err) => assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}"),
        }
        assert!(attempt < 4, "a dropped connection was used twice");
    }
}

/// MySQL/MariaDB table mode pushes a mutex's hand-off: the holder's store
/// takes the lock's wake-up `GET_LOCK` (its bell) while it holds the row, a
/// waiter blocks on that bell inside the database, and the release wakes
/// it at once. With `max_poll=30s` and a one-minute lease the waiter's
/// wait on the bell lasts 30 s, so a grant within 10 s of the release can
/// only be the push. The holder lets the bell go with the row. The waiter
/// is a URL client, then a store on the application's own pool.
#[tokio::test(flavor = "multi_thread")]
async fn mysql_release_wakes_a_waiter_through_the_bell() {
    let Some(url) = store_url("MYSQL") else {
        return;
    };
    for application_pool in [false, true] {
        let ring = Bell::held(&url, "bells", "max_poll=30s", Duration::from_secs(60)).await;
        let (guard, admin, name) = (ring.guard, ring.admin.clone(), ring.name);
        let waiter = if application_pool {
            let pool = sqlx::MySqlPool::connect(&url).await.expect("pool");
            SqlStore::builder(pool)
                .table("bells")
                .max_poll(Duration::from_secs(30))
                .build()
                .await
                .expect("a store on the application's pool")
        } else {
            ring.other
        };
        let bell_holder = || ring_holder(&admin, &ring.bell);
        let waiting = tokio::spawn(async move {
            let guard = waiter
                .lock(&name)
                .ttl(Duration::from_secs(60))
                .acquire()
                .await
                .expect("the waiter's acquire");
            (guard, std::time::Instant::now())
        });
        until("the waiter blocks on the bell", || async {
            bell_waits(&admin).await > 0
        })
        .await;
        let released = std::time::Instant::now();
        guard.release().await.expect("release");
        let (next, granted) = tokio::time::timeout(Duration::from_secs(10), waiting)
            .await
            .unwrap_or_else(|_| {
                panic!("application pool {application_pool}: the waiter was not woken within 10 s of the release")
            })
            .expect("the waiter's task");
        assert!(granted.duration_since(released) < Duration::from_secs(10));
        next.release().await.expect("the waiter's release");
        until("the bell is let go with the last hold", || async {
            bell_holder().await.is_none()
        })
        .await;
    }
}

/// Fair mode wakes one waiter per hand-off, not the line: every ticket in
/// the line has a bell of its own, held by its store while it waits; the
/// head waits on the holder's bell and each other waiter on the bell of
/// the one ahead. Three waiters of three clients, with `max_poll=30s`, are
/// then served in their order, each within 10 s of the release before
/// (so by a push, not a poll).
#[tokio::test(flavor = "multi_thread")]
async fn mysql_fair_line_waits_each_on_the_one_ahead() {
    let Some(url) = store_url("MYSQL") else {
        return;
    };
    let table = "bells_line";
    let ring = Bell::held(&url, table, "max_poll=30s", Duration::from_secs(60)).await;
    let (admin, name) = (ring.admin.clone(), ring.name.clone());
    let tickets = || async {
        sqlx::query_scalar::<_, i64>("SELECT id FROM bells_line_queue WHERE name = ? ORDER BY id")
            .bind(name.clone())
            .fetch_all(&admin)
            .await
            .expect("the line")
    };
    let url = with_option(&url, &format!("table={table}&max_poll=30s"));
    let (granted_tx, mut granted) = tokio::sync::mpsc::unbounded_channel();
    let mut waiters = Vec::new();
    for i in 0..3 {
        let locks = connect(&url).await.expect("connect");
        let (name, granted_tx) = (name.clone(), granted_tx.clone());
        waiters.push(tokio::spawn(async move {
            let guard = locks
                .lock(&name)
                .ttl(Duration::from_secs(60))
                .acquire()
                .await
                .expect("a waiter's acquire");
            granted_tx.send((i, guard)).expect("the test listens");
        }));
        until("the waiter takes its ticket", || async {
            tickets().await.len() == i + 1
        })
        .await;
    }
    let ids = tickets().await;
    until(
        "each ticket's bell is held, and every waiter blocks",
        || async {
            let mut held = true;
            for id in &ids {
                held &= ring_holder(&admin, &ticket_bell(table, *id))
                    .await
                    .is_some();
            }
            held && bell_waits(&admin).await >= 3
        },
    )
    .await;
    ring.guard.release().await.expect("release");
    for expected in 0..3 {
        let (i, guard) = tokio::time::timeout(Duration::from_secs(10), granted.recv())
            .await
            .unwrap_or_else(|_| panic!("waiter {expected} was not woken within 10 s"))
            .expect("a grant");
        assert_eq!(i, expected, "the line was served out of order");
        guard.release().await.expect("a waiter's release");
    }
    for waiter in waiters {
        waiter.await.expect("a waiter's task");
    }
}

/// A hold that is lost (here: broken by another client) lets its bell go
/// as soon as its store learns of the loss, while its guard still lives:
/// else every waiter would wait `max_poll` per look until the guard drops.
#[tokio::test(flavor = "multi_thread")]
async fn mysql_lost_hold_lets_its_bell_go() {
    let Some(url) = store_url("MYSQL") else {
        return;
    };
    let ring = Bell::held(&url, "bells_lost", "max_poll=250ms", Duration::from_secs(3)).await;
    let (guard, breaker, name) = (ring.guard, ring.other, ring.name);
    let bell_holder = || ring_holder(&ring.admin, &ring.bell);
    assert!(breaker.break_lock(&name).await.expect("break"));
    tokio::time::timeout(Duration::from_secs(10), guard.lost())
        .await
        .expect("the holder learns of the loss at its next renewal");
    until("the lost hold's bell is let go", || async {
        bell_holder().await.is_none()
    })
    .await;
    drop(guard);
}

/// A MySQL lock held by one client (`guard`), with its bell taken, a second
/// client of the same table, and an admin pool to look at the bell.
struct Bell {
    guard: omnilock_core::LockGuard,
    other: Locks,
    admin: AnyPool,
    name: String,
    bell: String,
}

impl Bell {
    async fn held(url: &str, table: &str, options: &str, ttl: Duration) -> Bell {
        let url = with_option(url, &format!("table={table}&{options}"));
        let (holder, other) = (
            connect(&url).await.expect("connect"),
            connect(&url).await.expect("connect"),
        );
        let admin = raw(&store_url("MYSQL").expect("url")).await;
        let name = format!("{table}-{}", std::process::id());
        let bell = bell_name(table, &name);
        let guard = holder
            .lock(&name)
            .ttl(ttl)
            .acquire()
            .await
            .expect("acquire");
        until("the holder's store takes the bell", || async {
            ring_holder(&admin, &bell).await.is_some()
        })
        .await;
        Bell {
            guard,
            other,
            admin,
            name,
            bell,
        }
    }
}

/// How many sessions are blocked in a waiter's bell statement.
async fn bell_waits(admin: &AnyPool) -> i64 {
    sqlx::query_scalar(
        "SELECT COUNT(*) FROM information_schema.PROCESSLIST
         WHERE STATE = 'User lock' AND INFO LIKE 'SELECT IS_FREE_LOCK%'",
    )
    .fetch_one(admin)
    .await
    .expect("PROCESSLIST")
}

/// The session that holds `bell`, if any.
async fn ring_holder(admin: &AnyPool, bell: &str) -> Option<i64> {
    sqlx::query_scalar::<_, Option<i64>>("SELECT IS_USED_LOCK(?)")
        .bind(bell.to_string())
        .fetch_one(admin)
        .await
        .expect("IS_USED_LOCK")
}

/// Table mode's bell name for `name` on `table` (FNV-1a over the table, a
/// zero byte and the name, as the store computes it).
fn bell_name(table: &str, name: &str) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in table.bytes().chain([0]).chain(name.bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("omnilock-bell:{hash:016x}")
}

/// Fair mode's bell name for ticket `id` of `table` (the FNV-1a key of
/// the table with an empty name, and the id).
fn ticket_bell(table: &str, id: i64) -> String {
    let hash = bell_name(table, "");
    let hash = hash.trim_start_matches("omnilock-bell:");
    format!("omnilock-line:{hash}:{id}")
}

/// Waits (up to 10 s) until `done` answers true.
async fn until<F, Fut>(what: &str, done: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !done().await {
        assert!(
            std::time::Instant::now() < deadline,
            "{what}: not within 10 s"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
