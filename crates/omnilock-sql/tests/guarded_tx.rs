//! Guarded transactions (`TxGuard`): an application's writes in its own
//! transaction commit only while its lock is held, on each SQL database,
//! through the application's own pool.

mod common;

use std::time::Duration;

use omnilock_core::{ErrorKind, Locks};
use omnilock_sql::{FencedTable, SqlStore, TxGuard};
use omnilock_testkit::store_url;

use common::{connect, unique, with_option};

/// The application's pool on a test store's database, with the lock table
/// `table` on it, and a second client of the same table elsewhere (another
/// process, as far as the lock can tell).
macro_rules! app {
    (POSTGRES, $url:expr, $table:expr) => {{
        let pool = sqlx::PgPool::connect($url).await.expect("pool");
        app!(@locks pool, $url, $table)
    }};
    (MYSQL, $url:expr, $table:expr) => {{
        let pool = sqlx::MySqlPool::connect($url).await.expect("pool");
        app!(@locks pool, $url, $table)
    }};
    (SQLITE, $url:expr, $table:expr) => {{
        let pool = common::sqlite_pool($url).await;
        app!(@locks pool, $url, $table)
    }};
    (@locks $pool:expr, $url:expr, $table:expr) => {{
        let pool = $pool;
        let locks = SqlStore::builder(pool.clone())
            .table($table)
            .build()
            .await
            .expect("store on the application's pool");
        let other = connect(&with_option($url, &format!("table={}", $table)))
            .await
            .expect("another client");
        (pool, locks, other)
    }};
}

/// Runs `$check!(STORE, pool, locks, other, app_table, lock_name,
/// lock_table)` on every SQL test store, each with tables of its own.
macro_rules! on_every_database {
    ($check:ident) => {
        on_every_database!(@one POSTGRES, $check);
        on_every_database!(@one MYSQL, $check);
        on_every_database!(@one SQLITE, $check);
    };
    (@one $store:ident, $check:ident) => {
        if let Some(url) = store_url(stringify!($store)) {
            let table = unique("guarded_locks");
            let app_table = unique("guarded_app");
            let (pool, locks, other) = app!($store, &url, &table);
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "CREATE TABLE {app_table} (id INTEGER PRIMARY KEY, token BIGINT NOT NULL)"
            )))
            .execute(&pool)
            .await
            .expect("the application's table");
            $check!($store, pool, locks, other, app_table, unique("ledger"), table);
        }
    };
}

/// The application's write, in its transaction: one row with `token`.
macro_rules! write_row {
    ($tx:expr, $app_table:expr, $token:expr) => {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "INSERT INTO {} (id, token) VALUES (1, {})",
            $app_table, $token
        )))
        .execute(&mut *$tx)
        .await
    };
}

/// How many rows the application's table has.
macro_rules! rows {
    ($pool:expr, $app_table:expr) => {{
        let (count,): (i64,) = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT COUNT(*) FROM {}",
            $app_table
        )))
        .fetch_one(&$pool)
        .await
        .expect("count");
        count
    }};
}

#[tokio::test(flavor = "multi_thread")]
async fn a_guarded_transaction_commits_while_the_lock_is_held() {
    macro_rules! check {
        ($store:ident, $pool:ident, $locks:ident, $other:ident, $app_table:ident, $name:expr, $table:ident) => {{
            let guard = $locks.acquire(&$name).await.expect("acquire");
            let mut tx = $pool.begin().await.expect("begin");
            let kept = TxGuard::new(&guard).expect("a table-mode mutex");
            kept.keep(&mut *tx).await.expect("the lock is the guard's");
            write_row!(tx, $app_table, guard.token()).expect("write");
            tx.commit().await.expect("commit");
            assert_eq!(rows!($pool, $app_table), 1, "{}", stringify!($store));
            guard.release().await.expect("release");
            let _ = &$other;
        }};
    }
    on_every_database!(check);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_guarded_transaction_is_refused_once_another_holder_took_the_lock() {
    macro_rules! check {
        ($store:ident, $pool:ident, $locks:ident, $other:ident, $app_table:ident, $name:expr, $table:ident) => {{
            let name = $name;
            let guard = $locks.acquire(&name).await.expect("acquire");
            let kept = TxGuard::new(&guard).expect("a table-mode mutex");
            assert!($other.break_lock(&name).await.expect("break"));
            let later = $other.acquire(&name).await.expect("the next holder");
            let mut tx = $pool.begin().await.expect("begin");
            let err = kept.keep(&mut *tx).await.expect_err("a stale guard");
            assert_eq!(
                err.kind(),
                ErrorKind::StaleToken,
                "{}: {err}",
                stringify!($store)
            );
            assert_eq!(err.tokens(), Some((guard.token(), later.token())));
            tx.rollback().await.expect("rollback");
            assert_eq!(rows!($pool, $app_table), 0);
            later.release().await.expect("release");
        }};
    }
    on_every_database!(check);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_guarded_transaction_is_refused_once_the_lock_is_released() {
    macro_rules! check {
        ($store:ident, $pool:ident, $locks:ident, $other:ident, $app_table:ident, $name:expr, $table:ident) => {{
            let guard = $locks.acquire(&$name).await.expect("acquire");
            let kept = TxGuard::new(&guard).expect("a table-mode mutex");
            guard.release().await.expect("release");
            let mut tx = $pool.begin().await.expect("begin");
            let err = kept.keep(&mut *tx).await.expect_err("a released guard");
            assert_eq!(
                err.kind(),
                ErrorKind::LockLost,
                "{}: {err}",
                stringify!($store)
            );
            let _ = &$other;
        }};
    }
    on_every_database!(check);
}

/// The lock cannot change hands while a guarded transaction is open: a
/// break from another client waits for its commit.
#[tokio::test(flavor = "multi_thread")]
async fn a_takeover_waits_for_the_guarded_transaction() {
    macro_rules! check {
        ($store:ident, $pool:ident, $locks:ident, $other:ident, $app_table:ident, $name:expr, $table:ident) => {{
            let name = $name;
            let guard = $locks.acquire(&name).await.expect("acquire");
            let mut tx = $pool.begin().await.expect("begin");
            TxGuard::new(&guard)
                .expect("a table-mode mutex")
                .keep(&mut *tx)
                .await
                .expect("the lock is the guard's");
            let other: Locks = $other.clone();
            let breaker_name = name.clone();
            let mut breaking = tokio::spawn(async move { other.break_lock(&breaker_name).await });
            // A break that does not wait finishes in milliseconds.
            let early = tokio::time::timeout(Duration::from_millis(500), &mut breaking).await;
            assert!(
                early.is_err(),
                "{}: the lock was broken inside the guarded transaction: {early:?}",
                stringify!($store)
            );
            write_row!(tx, $app_table, guard.token()).expect("write");
            tx.commit().await.expect("commit");
            let broke = tokio::time::timeout(Duration::from_secs(30), breaking)
                .await
                .expect("the break goes on after the commit")
                .expect("task")
                .expect("break");
            assert!(
                broke,
                "{}: the break found the lock held",
                stringify!($store)
            );
            assert_eq!(rows!($pool, $app_table), 1);
            assert_eq!(
                guard.release().await.unwrap_err().kind(),
                ErrorKind::NotOwner
            );
        }};
    }
    on_every_database!(check);
}

/// What a guarded transaction cannot guard says so: a semaphore permit, a
/// lock of advisory mode, a connection to another kind of database.
#[tokio::test(flavor = "multi_thread")]
async fn what_cannot_be_guarded_is_refused_clearly() {
    let Some(url) = store_url("POSTGRES") else {
        return;
    };
    let locks = connect(&url).await.expect("connect");
    let permit = locks
        .semaphore(&unique("permits"), 2)
        .acquire()
        .await
        .expect("permit");
    let err = TxGuard::new(&permit).expect_err("a permit");
    assert_eq!(err.kind(), ErrorKind::Unsupported, "{err}");
    permit.release().await.expect("release");

    let advisory = connect(&with_option(&url, "mode=advisory"))
        .await
        .expect("advisory mode");
    let guard = advisory
        .acquire(&unique("advisory"))
        .await
        .expect("acquire");
    let err = TxGuard::new(&guard).expect_err("advisory mode");
    assert_eq!(err.kind(), ErrorKind::Unsupported, "{err}");
    assert!(err.to_string().contains("advisory"), "{err}");
    guard.release().await.expect("release");

    let Some(sqlite) = store_url("SQLITE") else {
        return;
    };
    let guard = locks.acquire(&unique("elsewhere")).await.expect("acquire");
    let elsewhere = sqlx::SqlitePool::connect(&format!("{sqlite}?mode=rwc"))
        .await
        .expect("pool");
    let mut tx = elsewhere.begin().await.expect("begin");
    let err = TxGuard::new(&guard)
        .expect("a table-mode mutex")
        .keep(&mut *tx)
        .await
        .expect_err("a SQLite transaction for a PostgreSQL lock");
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
    guard.release().await.expect("release");
}

/// A fenced table takes writes of the highest token seen or above, refuses
/// a lower one with both tokens and the row unchanged, and writes inside
/// the application's transaction (a rollback undoes it). Bad input gets
/// `InvalidConfig`.
#[tokio::test(flavor = "multi_thread")]
async fn a_fenced_table_refuses_lower_tokens() {
    macro_rules! check {
        ($store:ident, $pool:ident, $locks:ident, $other:ident, $app_table:ident, $name:expr, $table:ident) => {{
            let _ = (&$locks, &$other, &$app_table, $name);
            let table = FencedTable::new(&unique("fenced")).unwrap();
            let mut conn = $pool.acquire().await.expect("connection");
            table.create(&mut *conn).await.expect("create");
            table.create(&mut *conn).await.expect("create again");
            assert_eq!(table.read(&mut *conn, "row").await.unwrap(), None);
            table
                .write(&mut *conn, 5, "row", b"five")
                .await
                .expect("first");
            table
                .write(&mut *conn, 5, "row", b"five")
                .await
                .expect("the same again");
            table
                .write(&mut *conn, 5, "row", b"five'")
                .await
                .expect("same token");
            let big = i64::MAX as u64;
            table
                .write(&mut *conn, big, "row", b"big")
                .await
                .expect("higher");
            let err = table
                .write(&mut *conn, big - 1, "row", b"stale")
                .await
                .unwrap_err();
            assert_eq!(err.kind(), ErrorKind::StaleToken, "{err}");
            assert_eq!(err.tokens(), Some((big - 1, big)));
            assert_eq!(
                table.read(&mut *conn, "row").await.unwrap(),
                Some((b"big".to_vec(), big))
            );
            let err = table
                .write(&mut *conn, big + 1, "row", b"x")
                .await
                .unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
            let long = "n".repeat(256);
            let err = table.write(&mut *conn, 1, &long, b"x").await.unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");

            // A claim raises the fence (making the row, empty, if missing).
            table.claim(&mut *conn, 20, "claimed").await.expect("claim");
            assert_eq!(
                table.read(&mut *conn, "claimed").await.unwrap(),
                Some((Vec::new(), 20))
            );
            let err = table
                .write(&mut *conn, 19, "claimed", b"late")
                .await
                .unwrap_err();
            assert_eq!(err.tokens(), Some((19, 20)), "{err}");
            table
                .claim(&mut *conn, 20, "claimed")
                .await
                .expect("claim again");
            table
                .write(&mut *conn, 20, "claimed", b"mine")
                .await
                .expect("the claimer");

            // Names are compared exactly (MySQL's default collation would
            // make these one row).
            table
                .write(&mut *conn, 3, "Report", b"upper")
                .await
                .expect("Report");
            table
                .write(&mut *conn, 1, "report ", b"lower")
                .await
                .expect("another row");
            assert_eq!(
                table.read(&mut *conn, "Report").await.unwrap(),
                Some((b"upper".to_vec(), 3))
            );
            drop(conn);

            // A transaction that read the row before a later holder wrote
            // it is refused all the same (its snapshot is not what counts).
            let mut conn = $pool.acquire().await.expect("connection");
            table
                .write(&mut *conn, 3, "snap", b"three")
                .await
                .expect("first");
            drop(conn);
            let mut tx = $pool.begin().await.expect("begin");
            let seen = table
                .read(&mut *tx, "snap")
                .await
                .expect("read in the transaction");
            assert_eq!(seen.map(|(_, fence)| fence), Some(3));
            let mut conn = $pool.acquire().await.expect("connection");
            table
                .write(&mut *conn, 9, "snap", b"nine")
                .await
                .expect("a later holder");
            drop(conn);
            let err = table
                .write(&mut *tx, 7, "snap", b"stale")
                .await
                .unwrap_err();
            // SQLite refuses any write from a snapshot older than the last
            // commit, before the fence is looked at.
            let sqlite_busy = stringify!($store) == "SQLITE" && err.is_retryable();
            assert!(err.kind() == ErrorKind::StaleToken || sqlite_busy, "{err}");
            tx.rollback().await.expect("rollback");

            let mut tx = $pool.begin().await.expect("begin");
            table
                .write(&mut *tx, 1, "rolled-back", b"x")
                .await
                .expect("in a transaction");
            tx.rollback().await.expect("rollback");
            let mut conn = $pool.acquire().await.expect("connection");
            assert_eq!(table.read(&mut *conn, "rolled-back").await.unwrap(), None);
        }};
    }
    on_every_database!(check);
    let err = FencedTable::new("1 bad; DROP TABLE x").unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
}

/// The store of the lock table `$table` on `$pool`, for locks taken inside
/// the application's transactions.
macro_rules! tx_store {
    ($pool:expr, $table:expr) => {
        SqlStore::builder($pool.clone())
            .table(&$table)
            .build_store()
            .await
            .expect("the store on the application's pool")
    };
}

/// A lock taken inside a transaction keeps every other holder out until
/// the commit, and the next holder's token is above its own; after a
/// rollback the token is handed out again (the transaction never was).
#[tokio::test(flavor = "multi_thread")]
async fn a_lock_in_a_transaction_holds_until_its_commit() {
    macro_rules! check {
        ($store:ident, $pool:ident, $locks:ident, $other:ident, $app_table:ident, $name:expr, $table:ident) => {{
            let name = $name;
            let store = tx_store!($pool, $table);
            let _ = &$locks;
            let mut tx = $pool.begin().await.expect("begin");
            let lock = store
                .try_lock_in(&mut *tx, &name)
                .await
                .expect("try_lock_in")
                .expect("a free lock");
            assert_eq!(lock.name(), name);
            write_row!(tx, $app_table, lock.token()).expect("write");
            let committing = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let waiter = {
                let (other, name, committing): (Locks, _, _) =
                    ($other.clone(), name.clone(), committing.clone());
                tokio::spawn(async move {
                    let guard = other
                        .lock(&name)
                        .timeout(Duration::from_secs(30))
                        .acquire()
                        .await
                        .expect("the lock after the commit");
                    let after = committing.load(std::sync::atomic::Ordering::SeqCst);
                    (guard, after)
                })
            };
            // Time for a waiter that ignored the transaction to get in.
            tokio::time::sleep(Duration::from_millis(500)).await;
            committing.store(true, std::sync::atomic::Ordering::SeqCst);
            tx.commit().await.expect("commit");
            let (guard, after) = waiter.await.expect("task");
            assert!(
                after,
                "{}: another client got the lock while the transaction held it",
                stringify!($store)
            );
            assert!(
                guard.token() > lock.token(),
                "{}: token {} after {}",
                stringify!($store),
                guard.token(),
                lock.token()
            );
            assert_eq!(rows!($pool, $app_table), 1);
            let guard_token = guard.token();
            guard.release().await.expect("release");

            let mut tx = $pool.begin().await.expect("begin");
            let rolled_back = store
                .lock_in(&mut *tx, &name, Duration::from_secs(10))
                .await
                .expect("lock_in on a free lock");
            assert!(rolled_back.token() > guard_token);
            tx.rollback().await.expect("rollback");
            let next = $other.acquire(&name).await.expect("acquire");
            assert_eq!(
                next.token(),
                rolled_back.token(),
                "{}: a rolled-back transaction's token is handed out again",
                stringify!($store)
            );
            next.release().await.expect("release");
        }};
    }
    on_every_database!(check);
}

/// A held lock is not taken inside a transaction, and the failed try
/// leaves the holder free to renew and release at once (no row lock kept);
/// a waiting take gets the lock once the holder lets go, or times out.
#[tokio::test(flavor = "multi_thread")]
async fn a_held_lock_is_not_taken_in_a_transaction() {
    macro_rules! check {
        ($store:ident, $pool:ident, $locks:ident, $other:ident, $app_table:ident, $name:expr, $table:ident) => {{
            let name = $name;
            let store = tx_store!($pool, $table);
            let _ = &$locks;
            let held = $other.acquire(&name).await.expect("acquire");
            let held_token = held.token();
            let mut tx = $pool.begin().await.expect("begin");
            let busy = store
                .try_lock_in(&mut *tx, &name)
                .await
                .expect("try_lock_in");
            assert_eq!(busy, None, "{}: took a held lock", stringify!($store));
            let err = store
                .lock_in(&mut *tx, &name, Duration::from_millis(200))
                .await
                .expect_err("a held lock");
            assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
            // The transaction is still open: the holder is not held up.
            tokio::time::timeout(Duration::from_secs(10), held.release())
                .await
                .expect("the holder's release does not wait for the transaction")
                .expect("release");
            let lock = store
                .lock_in(&mut *tx, &name, Duration::from_secs(10))
                .await
                .expect("the lock once its holder let go");
            assert!(lock.token() > held_token);
            tx.commit().await.expect("commit");

            let held = $other.acquire(&name).await.expect("acquire");
            let releasing = tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(300)).await;
                held.release().await
            });
            let mut tx = $pool.begin().await.expect("begin");
            let waited = store
                .lock_in(&mut *tx, &name, Duration::from_secs(30))
                .await
                .expect("the lock after the release");
            tx.commit().await.expect("commit");
            releasing.await.expect("task").expect("release");
            assert!(waited.token() > lock.token());
            let _ = &$app_table;
        }};
    }
    on_every_database!(check);
}

/// Bad input to a lock in a transaction: a bad name, a connection outside
/// any transaction, advisory mode, a transaction on another kind of
/// database.
#[tokio::test(flavor = "multi_thread")]
async fn what_cannot_be_locked_in_a_transaction_is_refused_clearly() {
    let Some(url) = store_url("POSTGRES") else {
        return;
    };
    let pool = sqlx::PgPool::connect(&url).await.expect("pool");
    let store = SqlStore::builder(pool.clone())
        .build_store()
        .await
        .expect("store");
    let mut tx = pool.begin().await.expect("begin");
    for bad in ["", "a\nb", &"x".repeat(257)] {
        let err = store
            .try_lock_in(&mut *tx, bad)
            .await
            .expect_err("a bad name");
        assert_eq!(err.kind(), ErrorKind::InvalidName, "{err}");
    }
    tx.rollback().await.expect("rollback");
    // Outside a transaction the write would commit at once and hold nothing.
    let mut conn = pool.acquire().await.expect("connection");
    let err = store
        .try_lock_in(&mut *conn, "report")
        .await
        .expect_err("no transaction");
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
    drop(conn);

    let advisory = SqlStore::builder(pool.clone())
        .advisory(true)
        .build_store()
        .await
        .expect("advisory mode");
    let mut tx = pool.begin().await.expect("begin");
    let err = advisory
        .try_lock_in(&mut *tx, "report")
        .await
        .expect_err("advisory mode");
    assert_eq!(err.kind(), ErrorKind::Unsupported, "{err}");
    assert!(err.to_string().contains("pg_advisory_xact_lock"), "{err}");
    tx.rollback().await.expect("rollback");

    let Some(sqlite) = store_url("SQLITE") else {
        return;
    };
    let elsewhere = sqlx::SqlitePool::connect(&format!("{sqlite}?mode=rwc"))
        .await
        .expect("pool");
    let mut tx = elsewhere.begin().await.expect("begin");
    let err = store
        .try_lock_in(&mut *tx, "report")
        .await
        .expect_err("a SQLite transaction for a PostgreSQL lock table");
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
}

/// The narrow race of a lock in a transaction, made to happen on
/// MySQL/MariaDB: another client takes the lock between the check and the
/// write. The missed write keeps the row locked by the transaction, which
/// holds up that holder; a waiting take says so (`WouldDeadlock`) instead
/// of waiting for a holder it holds up.
#[tokio::test(flavor = "multi_thread")]
async fn a_take_that_loses_the_race_does_not_wait_for_the_holder_it_holds_up() {
    let Some(url) = store_url("MYSQL") else {
        return;
    };
    let table = unique("race_locks");
    let (pool, locks, other) = app!(MYSQL, &url, &table);
    let _ = &locks;
    let store = tx_store!(pool, table);
    let name = unique("raced");
    other
        .acquire(&name)
        .await
        .expect("acquire")
        .release()
        .await
        .expect("release");
    // A holder's take, in a transaction left open: the row looks free to
    // the check, and the write waits for this transaction.
    let mut holder = pool.begin().await.expect("begin");
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "UPDATE `{table}` SET owner = 'raw-holder', holds = 1, token = token + 1,
            expires_at = 9999999999999 WHERE name = ?"
    )))
    .bind(&name)
    .execute(&mut *holder)
    .await
    .expect("the holder's take");
    let taking = {
        let (pool, store, name) = (pool.clone(), store.clone(), name.clone());
        tokio::spawn(async move {
            let mut tx = pool.begin().await.expect("begin");
            let result = store
                .lock_in(&mut *tx, &name, Duration::from_secs(60))
                .await;
            tx.rollback().await.expect("rollback");
            result
        })
    };
    // Until the take's write waits for the holder's transaction.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        // The take's write is under way (it cannot end before the commit).
        let (waiting,): (i64,) = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT COUNT(*) FROM information_schema.PROCESSLIST
             WHERE ID <> CONNECTION_ID() AND INFO LIKE '%`{table}` SET token = LAST_INSERT_ID%'"
        )))
        .fetch_one(&pool)
        .await
        .expect("processlist");
        if waiting > 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the take never waited"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    holder.commit().await.expect("commit");
    let err = tokio::time::timeout(Duration::from_secs(20), taking)
        .await
        .expect("the take ends at once, not at its timeout")
        .expect("task")
        .expect_err("a raced take");
    assert_eq!(err.kind(), ErrorKind::WouldDeadlock, "{err}");
    assert!(
        err.to_string().contains("roll the transaction back"),
        "{err}"
    );
}
