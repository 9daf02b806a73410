//! The conformance suite on each SQL database, found through
//! `OMNILOCK_TEST_{SQLITE,MYSQL,POSTGRES}_URL`.

use omnilock_core::{Locks, StoreUrl};
use omnilock_sql::{SqlConfig, SqlStore};
use omnilock_testkit::{store_url, Subject};

/// The store at `$OMNILOCK_TEST_<store>_URL`, as a conformance subject.
pub fn subject(store: &str) -> Option<Subject> {
    subject_with(store, "")
}

/// The same store in fair mode, on its own table.
pub fn fair_subject(store: &str) -> Option<Subject> {
    subject_with(store, "fair=true&table=omnilock_fair")
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
        .with_url(url),
    )
}

#[cfg(feature = "sqlite")]
mod sqlite {
    omnilock_testkit::conformance_tests!(super::subject("SQLITE"));
}

#[cfg(feature = "mysql")]
mod mysql {
    omnilock_testkit::conformance_tests!(super::subject("MYSQL"));
}

#[cfg(feature = "postgres")]
mod postgres {
    omnilock_testkit::conformance_tests!(super::subject("POSTGRES"));
}

#[cfg(feature = "sqlite")]
mod sqlite_fair {
    omnilock_testkit::conformance_tests!(super::fair_subject("SQLITE"));
}

#[cfg(feature = "mysql")]
mod mysql_fair {
    omnilock_testkit::conformance_tests!(super::fair_subject("MYSQL"));
}

#[cfg(feature = "postgres")]
mod postgres_fair {
    omnilock_testkit::conformance_tests!(super::fair_subject("POSTGRES"));
}
