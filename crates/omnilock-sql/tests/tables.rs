//! The lock tables: names (reserved words, the longest accepted), layouts
//! that fold distinct lock names together (refused, or migrated when they
//! are omnilock's own older MySQL layout), the record table beside tables
//! made before it.

mod common;

use std::time::Duration;

use common::{connect, drop_tables, raw, stores, unique, with_option};
use omnilock_core::{ErrorKind, Owner, StoreUrl};
use omnilock_sql::SqlConfig;
use omnilock_testkit::store_url;
use sqlx::Executor;

/// Two owners hold `name` and `name + "  "` at once, and each is reported
/// as its own holder.
async fn trailing_spaces_are_distinct(url: &str, label: &str) {
    let locks = connect(url)
        .await
        .unwrap_or_else(|e| panic!("{label}: {e}"));
    let (a, b) = (
        Owner::new("owner-a").unwrap(),
        Owner::new("owner-b").unwrap(),
    );
    let plain = locks
        .lock("backup")
        .owner(&a)
        .try_acquire()
        .await
        .expect("try_acquire")
        .unwrap_or_else(|| panic!("{label}: \"backup\" is busy"));
    let spaced = locks
        .lock("backup  ")
        .owner(&b)
        .try_acquire()
        .await
        .expect("try_acquire")
        .unwrap_or_else(|| panic!("{label}: \"backup  \" is the same lock as \"backup\""));
    let holder = locks
        .holder("backup  ")
        .await
        .expect("holder")
        .expect("held");
    assert_eq!(holder.owner.as_str(), "owner-b", "{label}");
    spaced.release().await.expect("release");
    plain.release().await.expect("release");
}

/// A MySQL table whose names pad trailing spaces (`VARCHAR(256) COLLATE
/// utf8mb4_bin`) is refused, whether or not omnilock manages the tables,
/// and the error names the statement that fixes it: once it has run, the
/// table's rows (and so their tokens) carry on, and names differing only in
/// trailing spaces are distinct locks.
#[tokio::test(flavor = "multi_thread")]
async fn a_padding_mysql_table_is_refused_with_its_fix() {
    let Some(url) = store_url("MYSQL") else {
        return;
    };
    let pool = raw(&url).await;
    let table = unique("padding");
    drop_tables(&pool, &table).await;
    let text = "VARCHAR(256) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin";
    for statement in [
        format!(
            "CREATE TABLE {table} (name {text} NOT NULL PRIMARY KEY, owner {text} NULL,
             holds BIGINT NOT NULL DEFAULT 0, token BIGINT NOT NULL DEFAULT 0,
             expires_at BIGINT NULL, updated_at BIGINT NOT NULL, waiting_until BIGINT NULL)"
        ),
        format!(
            "CREATE TABLE {table}_queue (id BIGINT AUTO_INCREMENT PRIMARY KEY,
             name {text} NOT NULL, owner {text} NOT NULL, expires_at BIGINT NOT NULL,
             KEY {table}_queue_name (name, id))"
        ),
        format!("INSERT INTO {table} (name, holds, token, updated_at) VALUES ('backup', 0, 7, 0)"),
    ] {
        pool.execute(sqlx::AssertSqlSafe(statement.clone()))
            .await
            .expect("a padding table");
    }

    let managed = with_option(&url, &format!("table={table}&fair=true"));
    for url in [with_option(&managed, "create_table=false"), managed.clone()] {
        // Refused until every folding table is fixed: one ALTER per table.
        let mut fixed = 0;
        loop {
            let err = match connect(&url).await {
                Ok(_) => break,
                Err(err) => err,
            };
            assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
            let shown = err.to_string();
            assert!(shown.contains("trailing spaces"), "{shown}");
            assert!(!shown.contains('\n'), "{shown}");
            let alter = shown
                .split_once("convert it with: ")
                .map(|(_, statement)| statement)
                .filter(|statement| statement.starts_with("ALTER TABLE"))
                .unwrap_or_else(|| panic!("no statement in {shown}"));
            if url.contains("create_table=false") {
                // Refused alike with and without create_table: check the
                // managed URL before fixing anything.
                let managed_err = connect(&managed)
                    .await
                    .expect_err("refused when managed too");
                assert_eq!(managed_err.to_string(), shown);
            }
            pool.execute(sqlx::AssertSqlSafe(alter.to_string()))
                .await
                .expect("the statement the error names");
            fixed += 1;
            assert!(fixed <= 2, "still refused after {fixed} fixes: {shown}");
        }
        if fixed > 0 {
            assert_eq!(fixed, 2, "the lock table and its line both fold");
        }
    }
    let types: Vec<(String, String)> = sqlx::query_as(
        "SELECT CAST(CONCAT(TABLE_NAME, '.', COLUMN_NAME) AS CHAR), CAST(DATA_TYPE AS CHAR)
         FROM information_schema.COLUMNS
         WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME IN (?, ?)
           AND COLUMN_NAME IN ('name', 'owner')",
    )
    .bind(&table)
    .bind(format!("{table}_queue"))
    .fetch_all(&pool)
    .await
    .expect("column types");
    assert_eq!(types.len(), 4, "{types:?}");
    assert!(types.iter().all(|(_, t)| t == "varbinary"), "{types:?}");

    let locks = connect(&managed).await.expect("connect");
    let guard = locks
        .try_acquire("backup")
        .await
        .expect("try")
        .expect("free");
    assert_eq!(guard.token(), 8, "the token did not survive the fix");
    guard.release().await.expect("release");
    trailing_spaces_are_distinct(&managed, "mysql after the fix").await;
    drop_tables(&pool, &table).await;
}

/// Tables whose `name` column folds distinct names together are refused on
/// every database: PostgreSQL `CHAR(n)` (trailing spaces insignificant),
/// SQLite `COLLATE NOCASE`, MySQL a case-insensitive collation.
#[tokio::test(flavor = "multi_thread")]
async fn folding_tables_are_refused() {
    for (store, url) in stores() {
        let pool = raw(&url).await;
        let table = unique("folding");
        let name = match store {
            "SQLITE" => "TEXT COLLATE NOCASE",
            "POSTGRES" => "CHAR(256)",
            _ => "VARCHAR(256) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci",
        };
        pool.execute(sqlx::AssertSqlSafe(format!(
            "CREATE TABLE {table} (name {name} NOT NULL PRIMARY KEY, owner VARCHAR(256) NULL,
                 holds BIGINT NOT NULL DEFAULT 0, token BIGINT NOT NULL DEFAULT 0,
                 expires_at BIGINT NULL, updated_at BIGINT NOT NULL, waiting_until BIGINT NULL)"
        )))
        .await
        .expect("create");
        let options = if store == "MYSQL" {
            "create_table=false"
        } else {
            "create_table=true"
        };
        let err = connect(&with_option(&url, &format!("table={table}&{options}")))
            .await
            .expect_err("a folding table");
        assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{store}: {err}");
        assert!(err.to_string().contains(&table), "{store}: {err}");
        drop_tables(&pool, &table).await;
    }
}

/// PostgreSQL: a nondeterministic collation (here ICU, case-insensitive) on
/// the `owner` column is refused too. Skipped where PostgreSQL lacks ICU.
#[tokio::test(flavor = "multi_thread")]
async fn nondeterministic_postgres_collation_is_refused() {
    let Some(url) = store_url("POSTGRES") else {
        return;
    };
    let pool = raw(&url).await;
    let created = pool
        .execute(
            "CREATE COLLATION IF NOT EXISTS omnilock_test_ci
             (provider = icu, locale = 'und-u-ks-level2', deterministic = false)",
        )
        .await;
    if let Err(e) = created {
        eprintln!("no ICU collations here ({e}); skipped");
        return;
    }
    let table = unique("nondeterministic");
    pool.execute(sqlx::AssertSqlSafe(format!(
        "CREATE TABLE {table} (name VARCHAR(256) NOT NULL PRIMARY KEY,
             owner VARCHAR(256) COLLATE omnilock_test_ci NULL,
             holds BIGINT NOT NULL DEFAULT 0, token BIGINT NOT NULL DEFAULT 0,
             expires_at BIGINT NULL, updated_at BIGINT NOT NULL, waiting_until BIGINT NULL)"
    )))
    .await
    .expect("create");
    let err = connect(&with_option(&url, &format!("table={table}")))
        .await
        .expect_err("a nondeterministic collation");
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
    assert!(err.to_string().contains("omnilock_test_ci"), "{err}");
    drop_tables(&pool, &table).await;
}

/// Any plain identifier works as a table name, reserved words included
/// (every statement quotes it), in fair mode (the waiting line and its
/// index are named after the table); names are checked before connecting.
#[tokio::test(flavor = "multi_thread")]
async fn reserved_words_work_as_table_names() {
    for (store, url) in stores() {
        for table in ["select", "Order"] {
            let pool = raw(&url).await;
            let quoted = |t: &str| match store {
                "MYSQL" => format!("`{t}`"),
                "POSTGRES" => format!("\"{}\"", t.to_lowercase()),
                _ => format!("\"{t}\""),
            };
            let drop_both = || async {
                for t in [format!("{table}_queue"), table.to_string()] {
                    let _ = pool
                        .execute(sqlx::AssertSqlSafe(format!(
                            "DROP TABLE IF EXISTS {}",
                            quoted(&t)
                        )))
                        .await;
                }
            };
            drop_both().await;
            let url = with_option(&url, &format!("table={table}&fair=true"));
            let locks = connect(&url)
                .await
                .unwrap_or_else(|e| panic!("{store} table={table}: {e}"));
            let guard = locks
                .lock("reserved")
                .timeout(Duration::from_secs(10))
                .acquire()
                .await
                .unwrap_or_else(|e| panic!("{store} table={table}: {e}"));
            assert!(locks.holder("reserved").await.expect("holder").is_some());
            guard.release().await.expect("release");
            drop(locks);
            drop_both().await;
        }
    }
}

/// The longest table name each dialect accepts works in fair mode (where
/// `<table>_queue_name` is the longest identifier derived from it); one
/// character more is a configuration error before any connection.
#[tokio::test(flavor = "multi_thread")]
async fn longest_table_name_works_in_fair_mode() {
    for (store, url) in stores() {
        let longest = match store {
            "MYSQL" => 53,
            "POSTGRES" => 52,
            _ => 63,
        };
        let prefix = unique("long");
        let table = format!("{prefix}{}", "x".repeat(longest - prefix.len()));
        let fair = with_option(&url, &format!("table={table}&fair=true"));
        let locks = connect(&fair)
            .await
            .unwrap_or_else(|e| panic!("{store}: {longest} characters: {e}"));
        let guard = locks
            .lock("long")
            .timeout(Duration::from_secs(10))
            .acquire()
            .await
            .unwrap_or_else(|e| panic!("{store}: {e}"));
        // A waiter takes a ticket in <table>_queue, indexed by <table>_queue_name.
        let waiter = connect(&fair).await.expect("connect");
        let waiting = tokio::spawn(async move {
            waiter
                .lock("long")
                .timeout(Duration::from_secs(10))
                .acquire()
                .await
        });
        let pool = raw(&url).await;
        let tickets = format!("SELECT COUNT(*) FROM {table}_queue");
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while sqlx::query_scalar::<_, i64>(sqlx::AssertSqlSafe(tickets.clone()))
            .fetch_one(&pool)
            .await
            .expect("count tickets")
            == 0
        {
            assert!(
                std::time::Instant::now() < deadline,
                "{store}: no ticket taken"
            );
            tokio::task::yield_now().await;
        }
        guard.release().await.expect("release");
        let second = waiting.await.expect("task").expect("the waiter's grant");
        second.release().await.expect("release");

        let too_long = with_option(&url, &format!("table={table}y&fair=true"));
        let err = SqlConfig::from_url(&StoreUrl::parse(&too_long).unwrap()).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{store}: {err}");
        assert!(
            err.to_string().contains(&format!("at most {longest}")),
            "{store}: {err}"
        );
        drop_tables(&pool, &table).await;
    }
}

/// Tables made before records existed: the record table is added beside
/// them at connect; with `create_table=false` a missing one is named by
/// the record calls, and locks work as before.
#[tokio::test(flavor = "multi_thread")]
async fn the_record_table_joins_older_tables() {
    for (store, url) in stores() {
        let pool = raw(&url).await;
        let table = unique("older");
        let url = with_option(&url, &format!("table={table}"));
        connect(&url).await.expect("connect").close().await;
        pool.execute(sqlx::AssertSqlSafe(format!("DROP TABLE {table}_records")))
            .await
            .expect("drop the record table");

        let managed = connect(&with_option(&url, "create_table=false"))
            .await
            .expect("connect without creating");
        let err = managed
            .write_record("job", "done", Duration::from_secs(60))
            .await
            .expect_err("no record table");
        assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{store}: {err}");
        assert!(
            err.to_string().contains(&format!("{table}_records")),
            "{store}: {err}"
        );
        let guard = managed.try_acquire("job").await.expect("try_acquire");
        assert!(guard.is_some(), "{store}: the lock table works");
        drop(guard);
        managed.close().await;

        let locks = connect(&url).await.expect("connect, creating");
        locks
            .write_record("job", "done", Duration::from_secs(60))
            .await
            .unwrap_or_else(|e| panic!("{store}: {e}"));
        let record = locks.read_record("job").await.expect("read").expect("kept");
        assert_eq!(record.value, "done", "{store}");
        locks.close().await;
        drop_tables(&pool, &table).await;
    }
}
