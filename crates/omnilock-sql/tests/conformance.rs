//! The conformance suite on each SQL database, found through
//! `OMNILOCK_TEST_{SQLITE,MYSQL,POSTGRES}_URL`; over TLS with accounts that
//! may connect only that way (`OMNILOCK_TEST_{MYSQL,POSTGRES}_TLS_URL`,
//! verify-full); and through `SqlStore::builder` on the application's own
//! sqlx pool instead of a URL.

mod common;

use common::{advisory_subject, subject, tls_subject, unfair_subject};
use omnilock_sql::SqlStore;
use omnilock_testkit::{Subject, store_url};

/// The store at `$OMNILOCK_TEST_<store>_URL`, each client built on a sqlx
/// pool of its own through `SqlStore::builder`, as an application that
/// already has a pool would.
pub fn pool_subject(store: &str) -> Option<Subject> {
    let url = store_url(store)?;
    let for_clients = url.clone();
    // Its own table, as for TLS; the CLI's clients get it through the URL.
    let table = "omnilock_pool";
    let url = format!("{url}?table={table}");
    let store = store.to_string();
    Some(
        Subject::new(format!("{}-pool", store.to_lowercase()), move || {
            let (url, store) = (for_clients.clone(), store.clone());
            async move {
                let pool: omnilock_sql::SqlPool = match store.as_str() {
                    "POSTGRES" => sqlx::PgPool::connect(&url).await.expect("pool").into(),
                    "MYSQL" => sqlx::MySqlPool::connect(&url).await.expect("pool").into(),
                    _ => common::sqlite_pool(&url).await.into(),
                };
                SqlStore::builder(pool).table(table).build().await
            }
        })
        .with_guarded_writes({
            let url = url.clone();
            move || {
                let url = url.clone();
                async move { common::guarded::open(&url).await }
            }
        })
        .with_url(url)
        // The grant statements are the URL subject's; what the
        // application's pool adds is the connections.
        .connection_variant(),
    )
}

omnilock_testkit::conformance_main! {
    #[cfg(feature = "postgres")]
    postgres_tls => tls_subject("POSTGRES"),
    #[cfg(feature = "mysql")]
    mysql_tls => tls_subject("MYSQL"),
    #[cfg(feature = "postgres")]
    postgres_pool => pool_subject("POSTGRES"),
    #[cfg(feature = "mysql")]
    mysql_pool => pool_subject("MYSQL"),
    #[cfg(feature = "sqlite")]
    sqlite_pool => pool_subject("SQLITE"),
    #[cfg(feature = "sqlite")]
    sqlite => subject("SQLITE"),
    #[cfg(feature = "mysql")]
    mysql => subject("MYSQL"),
    #[cfg(feature = "postgres")]
    postgres => subject("POSTGRES"),
    #[cfg(feature = "sqlite")]
    sqlite_unfair => unfair_subject("SQLITE"),
    #[cfg(feature = "mysql")]
    mysql_unfair => unfair_subject("MYSQL"),
    #[cfg(feature = "postgres")]
    postgres_unfair => unfair_subject("POSTGRES"),
    #[cfg(feature = "mysql")]
    mysql_advisory => advisory_subject("MYSQL"),
    #[cfg(feature = "postgres")]
    postgres_advisory => advisory_subject("POSTGRES"),
}
