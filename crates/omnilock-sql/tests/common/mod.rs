//! Helpers shared by the SQL test binaries.
#![allow(dead_code)]

pub(crate) mod guarded;

use omnilock_core::{Locks, StoreUrl};
use omnilock_sql::{SqlConfig, SqlStore};
use omnilock_testkit::{Subject, store_url};
use sqlx::AnyPool;

/// A client of the store at `url`.
pub(crate) async fn connect(url: &str) -> omnilock_core::Result<Locks> {
    let config = SqlConfig::from_url(&StoreUrl::parse(url)?)?;
    Ok(Locks::new(SqlStore::connect(config).await?))
}

/// A plain sqlx pool on the database of a test URL (no options).
pub(crate) async fn raw(url: &str) -> AnyPool {
    sqlx::any::install_default_drivers();
    let url = url.split('?').next().unwrap_or(url);
    // The sqlx URL: SQLite needs mode=rwc, the servers take ours as is.
    let url = if url.starts_with("sqlite:") {
        format!("{url}?mode=rwc")
    } else {
        url.to_string()
    };
    AnyPool::connect(&url).await.expect("raw connection")
}

/// An application's own SQLite pool on the database file of `url` (no
/// options), with omnilock's pragmas on each connection, as the docs ask
/// of a pool handed to `SqlStore::builder`.
pub(crate) async fn sqlite_pool(url: &str) -> sqlx::SqlitePool {
    let base = url.split('?').next().unwrap_or(url);
    sqlx::sqlite::SqlitePoolOptions::new()
        .after_connect(|conn, _| {
            Box::pin(async move {
                use sqlx::Executor;
                for pragma in omnilock_sql::SQLITE_PRAGMAS {
                    conn.execute(*pragma).await?;
                }
                Ok(())
            })
        })
        .connect(&format!("{base}?mode=rwc"))
        .await
        .expect("the application's SQLite pool")
}

/// The SQL test stores that are configured: (`SQLITE`|`MYSQL`|`POSTGRES`, URL).
pub(crate) fn stores() -> Vec<(&'static str, String)> {
    let mut all = Vec::new();
    for store in ["SQLITE", "MYSQL", "POSTGRES"] {
        if let Some(url) = store_url(store) {
            all.push((store, url));
        }
    }
    all
}

/// `url` with one more query option.
pub(crate) fn with_option(url: &str, option: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}{option}")
}

/// A name unique to this test run (process id and a counter).
pub(crate) fn unique(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!(
        "{prefix}_{}_{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Drops a lock table, its fair-mode line and its records.
pub(crate) async fn drop_tables(pool: &AnyPool, table: &str) {
    use sqlx::Executor;
    for t in [
        format!("{table}_queue"),
        format!("{table}_records"),
        table.to_string(),
    ] {
        let _ = pool
            .execute(sqlx::AssertSqlSafe(format!("DROP TABLE IF EXISTS {t}")))
            .await;
    }
}

/// The store at `$OMNILOCK_TEST_<store>_URL`, as a conformance subject.
pub(crate) fn subject(store: &str) -> Option<Subject> {
    subject_with(store, "")
}

/// The same store without fairness (`fair=false`), on its own table.
pub(crate) fn unfair_subject(store: &str) -> Option<Subject> {
    subject_with(store, "fair=false&table=omnilock_unfair")
}

/// The store in advisory mode (`GET_LOCK`, `pg_advisory_lock`), on its own
/// table: never mixed with table-mode clients of one table.
pub(crate) fn advisory_subject(store: &str) -> Option<Subject> {
    subject_with(store, "mode=advisory&table=omnilock_advisory")
}

/// The store through a TLS-only account, on its own table (scenarios that
/// run at the same time on one database use fixed lock names).
pub(crate) fn tls_subject(store: &str) -> Option<Subject> {
    // The grant statements are the plain subject's; what TLS adds is the
    // connections.
    subject_with(&format!("{store}_TLS"), "table=omnilock_tls").map(Subject::connection_variant)
}

fn subject_with(store: &str, options: &str) -> Option<Subject> {
    let mut url = store_url(store)?;
    if !options.is_empty() {
        url.push(if url.contains('?') { '&' } else { '?' });
        url.push_str(options);
    }
    let for_clients = url.clone();
    Some(
        Subject::new(store.to_lowercase(), move || {
            let url = for_clients.clone();
            async move {
                let config = SqlConfig::from_url(&StoreUrl::parse(&url)?)?;
                Ok(Locks::new(SqlStore::connect(config).await?))
            }
        })
        .with_guarded_writes({
            let url = url.clone();
            move || {
                let url = url.clone();
                async move { guarded::open(&url).await }
            }
        })
        .with_url(url),
    )
}
