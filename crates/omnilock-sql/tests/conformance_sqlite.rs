//! The conformance suite on SQLite, at `$OMNILOCK_TEST_SQLITE_URL`.
#![cfg(feature = "sqlite")]

use omnilock_core::{Locks, StoreUrl};
use omnilock_sql::{SqlConfig, SqlStore};
use omnilock_testkit::{store_url, Subject};

fn subject() -> Option<Subject> {
    let url = store_url("SQLITE")?;
    let for_clients = url.clone();
    Some(
        Subject::new("sqlite", move || {
            let url = for_clients.clone();
            async move {
                let config = SqlConfig::from_url(&StoreUrl::parse(&url)?)?;
                Ok(Locks::new(SqlStore::connect(config).await?))
            }
        })
        .with_url(url),
    )
}

omnilock_testkit::conformance_tests!(subject());
