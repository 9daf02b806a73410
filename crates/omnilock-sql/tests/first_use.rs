//! Many clients using a fresh database for the first time at once: the
//! tables are created under a DDL lock (PostgreSQL `pg_advisory_xact_lock`,
//! MySQL `GET_LOCK`), so no client ever fails on the catalog race
//! (PostgreSQL: `type "omnilock_locks" already exists`, SQLSTATE 42710).
//!
//! Each round creates a database through an admin connection (the test
//! stores' PostgreSQL socket with the `postgres` role, MariaDB's socket with
//! `root`), connects 16 clients with separate pools at once, and drops it.
//! On PostgreSQL the admin also holds the schema `public` (a `DROP SCHEMA`
//! in an open transaction) until all 16 clients wait for it, then rolls it
//! back: they all reach the catalog at the same moment (without this gate,
//! the clients' password hashing in a debug build spreads them out and the
//! race rarely shows). The code before the DDL lock failed 33 of 320 first
//! uses this way. MariaDB takes an exclusive metadata lock on the table
//! name for `CREATE TABLE IF NOT EXISTS`, so it never showed the race; the
//! test keeps it honest. Without admin access (stores started elsewhere) a
//! round uses a fresh table name in the test database instead.
//!
//! SQLite: 16 clients open a file that does not exist yet at once. Switching
//! a new file to WAL needs it alone, and SQLite answers a second connection
//! doing the same with SQLITE_BUSY at once, whatever the busy timeout: the
//! `cron_once` example failed 1 run in 30 this way (three "hosts" starting
//! together) before connections retried it.

mod common;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use common::{connect, unique, with_option};
use omnilock_core::StoreUrl;
use omnilock_testkit::store_url;
use sqlx::{AnyPool, Executor};
use tokio::sync::Barrier;

const ROUNDS: usize = 20;
const CLIENTS: usize = 16;

/// An admin pool for `store`, if the test stores allow one.
async fn admin(store: &str, url: &StoreUrl) -> Option<(AnyPool, String)> {
    sqlx::any::install_default_drivers();
    let port = url.hosts().first()?.port?;
    let admin_url = match store {
        "POSTGRES" => {
            let dir = std::env::var("OMNILOCK_TEST_POSTGRES_SOCKET_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|_| {
                    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/stores/postgres")
                });
            if !dir.join(format!(".s.PGSQL.{port}")).exists() {
                return None;
            }
            format!(
                "postgres://postgres@localhost/postgres?host={}&port={port}",
                dir.display()
            )
        }
        _ => {
            let socket = std::env::var("OMNILOCK_TEST_MARIADB_SOCKET").ok()?;
            format!("mysql://root@localhost/mysql?socket={socket}")
        }
    };
    match AnyPool::connect(&admin_url).await {
        Ok(pool) => Some((pool, admin_url)),
        Err(e) => {
            eprintln!("{store}: no admin connection ({e}); using fresh tables instead");
            None
        }
    }
}

/// Where one round's clients connect: a fresh database (dropped by
/// `cleanup`), or a fresh table in the test database.
async fn fresh(store: &str, url: &str, admin: Option<&AnyPool>) -> (String, Option<String>) {
    let name = unique("omnilock_fresh");
    let Some(admin) = admin else {
        return (with_option(url, &format!("table={name}")), None);
    };
    let user = StoreUrl::parse(url)
        .unwrap()
        .username()
        .unwrap()
        .to_string();
    let statements = match store {
        "POSTGRES" => vec![format!("CREATE DATABASE {name} OWNER {user}")],
        _ => vec![
            format!("CREATE DATABASE {name}"),
            format!("GRANT ALL ON {name}.* TO '{user}'@'127.0.0.1'"),
        ],
    };
    for statement in statements {
        admin
            .execute(sqlx::AssertSqlSafe(statement.clone()))
            .await
            .expect("create database");
    }
    let (base, _) = url.rsplit_once('/').expect("database in URL");
    (format!("{base}/{name}"), Some(name))
}

async fn cleanup(store: &str, admin: Option<&AnyPool>, database: Option<String>) {
    if let (Some(admin), Some(name)) = (admin, database) {
        let drop = match store {
            "POSTGRES" => format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
            _ => format!("DROP DATABASE IF EXISTS {name}"),
        };
        admin
            .execute(sqlx::AssertSqlSafe(drop.clone()))
            .await
            .expect("drop database");
    }
}

/// PostgreSQL: an admin transaction in `database` that holds its schema
/// `public` (dropped, not yet committed), so that every client's first
/// `CREATE TABLE` waits for it before it looks at the catalog.
async fn hold_the_catalog(
    admin_url: &str,
    database: &str,
) -> sqlx::Transaction<'static, sqlx::Any> {
    let (base, _) = admin_url.split_once("/postgres?").expect("admin URL");
    let query = admin_url.split_once('?').expect("admin URL").1;
    let pool = AnyPool::connect(&format!("{base}/{database}?{query}"))
        .await
        .expect("admin connection to the fresh database");
    let mut tx = pool.begin().await.expect("begin");
    tx.execute("DROP SCHEMA public CASCADE")
        .await
        .expect("lock the schema in the admin transaction");
    tx
}

/// Waits until `count` sessions of `database` wait for a lock.
async fn until_waiting(admin: &AnyPool, database: &str, count: i64) {
    let deadline = Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = $1 AND wait_event_type = 'Lock'",
        )
        .bind(database)
        .fetch_one(admin)
        .await
        .expect("pg_stat_activity");
        if waiting >= count {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{waiting} of {count} clients wait"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

async fn first_use_never_races(store: &str) {
    let Some(url) = store_url(store) else {
        return;
    };
    let admin = admin(store, &StoreUrl::parse(&url).unwrap()).await;
    let (admin, admin_url) = match admin {
        Some((pool, url)) => (Some(pool), Some(url)),
        None => (None, None),
    };
    let started = Instant::now();
    let mut failures = Vec::new();
    for round in 0..ROUNDS {
        let (base, database) = fresh(store, &url, admin.as_ref()).await;
        let held = match (&admin_url, &database) {
            (Some(admin_url), Some(database)) if store == "POSTGRES" => {
                Some(hold_the_catalog(admin_url, database).await)
            }
            _ => None,
        };
        // Fair mode: two tables and an index, the most DDL there is.
        let url = with_option(&base, "fair=true&pool=1&notify=false");
        let barrier = Arc::new(Barrier::new(CLIENTS));
        let clients = (0..CLIENTS).map(|_| {
            let (url, barrier) = (url.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                connect(&url).await
            })
        });
        let clients = futures_util::future::join_all(clients);
        let clients = match held {
            Some(held) => {
                let (results, ()) = tokio::join!(clients, async {
                    let admin = admin.as_ref().expect("admin");
                    until_waiting(admin, database.as_deref().unwrap(), CLIENTS as i64).await;
                    held.rollback().await.expect("rollback");
                });
                results
            }
            None => clients.await,
        };
        let mut connected = Vec::new();
        for result in clients {
            match result.expect("client task") {
                Ok(locks) => connected.push(locks),
                Err(e) => failures.push(format!("round {round}: {e}")),
            }
        }
        // The tables work: a lock taken, a second client sees it busy.
        if let [first, second, ..] = connected.as_slice() {
            let guard = first.try_acquire("first").await.expect("try_acquire");
            let guard = guard.unwrap_or_else(|| panic!("{store}: busy in a fresh database"));
            assert!(second.try_acquire("first").await.expect("try").is_none());
            guard.release().await.expect("release");
        }
        for locks in connected {
            locks.close().await;
        }
        cleanup(store, admin.as_ref(), database).await;
    }
    assert!(
        failures.is_empty(),
        "{store}: {} of {} first uses failed: {failures:#?}",
        failures.len(),
        ROUNDS * CLIENTS
    );
    eprintln!(
        "{store}: {ROUNDS} rounds of {CLIENTS} first users in {:?} ({})",
        started.elapsed(),
        if admin.is_some() {
            "fresh databases"
        } else {
            "fresh tables"
        }
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_fresh_database_has_no_first_use_race() {
    first_use_never_races("POSTGRES").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mysql_fresh_database_has_no_first_use_race() {
    first_use_never_races("MYSQL").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_fresh_file_has_no_first_use_race() {
    let dir = std::env::temp_dir().join(unique("omnilock-first-use"));
    std::fs::create_dir_all(&dir).unwrap();
    let mut failures = Vec::new();
    for round in 0..ROUNDS {
        let url = format!("sqlite://{}/round{round}.db", dir.display());
        let barrier = Arc::new(Barrier::new(CLIENTS));
        let clients = (0..CLIENTS).map(|client| {
            let (url, barrier) = (url.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                // Spread over a few milliseconds, so that some switch the
                // file to WAL while others create the table.
                let spread = (client as u64 * 7919 + round as u64 * 104729) % 4000;
                tokio::time::sleep(std::time::Duration::from_micros(spread)).await;
                // As the cron_once example does: connect, then at once
                // use the pool.
                let locks = connect(&url).await?;
                if let Some(guard) = locks.try_acquire(&format!("c{client}")).await? {
                    guard.release().await?;
                }
                Ok::<_, omnilock_core::Error>(locks)
            })
        });
        let mut connected = Vec::new();
        for result in futures_util::future::join_all(clients).await {
            match result.expect("client task") {
                Ok(locks) => connected.push(locks),
                Err(e) => failures.push(format!("round {round}: {e}")),
            }
        }
        if let [first, second, ..] = connected.as_slice() {
            let guard = first.try_acquire("first").await.expect("try_acquire");
            let guard = guard.expect("free in a fresh file");
            assert!(second.try_acquire("first").await.expect("try").is_none());
            guard.release().await.expect("release");
        }
        for locks in connected {
            locks.close().await;
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        failures.is_empty(),
        "{} of {} first uses failed: {failures:#?}",
        failures.len(),
        ROUNDS * CLIENTS
    );
}
