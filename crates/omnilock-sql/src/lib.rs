//! SQL databases as lock stores: MySQL/MariaDB, PostgreSQL and SQLite.
//!
//! One row per lock in a table with a unique key on the lock name (see
//! [docs/backends/sql.md](https://github.com/omnilock/omnilock/blob/main/docs/backends/sql.md) for the schema). Acquire is one atomic statement
//! that takes the lock only if it is free, expired by the database's clock, or
//! already held by the same owner (the hold count rises). Release and renewal
//! are owner- and token-checked. The fencing token is a per-name counter kept
//! in the row, so it survives release and takeover. By default waiters take
//! a ticket and are served in request order (`?fair=false` turns the line
//! off); they are woken by PostgreSQL's `NOTIFY` or, on MySQL/MariaDB, by a
//! wake-up `GET_LOCK`, and poll as a safety net (SQLite only polls). With
//! `?mode=advisory` a mutex is the database's own session lock
//! (`pg_advisory_lock`, `GET_LOCK`) instead of a row.
//!
//! ```no_run
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> omnilock_core::Result<()> {
//! use omnilock_core::{Locks, StoreUrl};
//! use omnilock_sql::{SqlConfig, SqlStore};
//!
//! let config = SqlConfig::from_url(&StoreUrl::parse("sqlite:///tmp/locks.db")?)?;
//! let locks = Locks::new(SqlStore::connect(config).await?);
//! let guard = locks.acquire("nightly-report").await?;
//! guard.release().await?;
//! # Ok(()) }
//! ```

mod advisory;
mod builder;
mod config;
mod conn;
mod fence;
mod guarded;
mod in_tx;
mod key;
#[cfg(feature = "postgres")]
mod notify;
mod queries;
mod schema;
mod store;
mod table;
mod tls;

pub use builder::{SqlPool, SqlStoreBuilder};
pub use config::{DEFAULT_TABLE, Dialect, SqlConfig};
pub use conn::SQLITE_PRAGMAS;
pub use fence::FencedTable;
pub use guarded::{GuardedConnection, TxGuard};
pub use in_tx::TxLock;
pub use store::SqlStore;
pub use tls::{SslMode, TlsOptions};

/// Opens the store a SQL URL names.
async fn connect_url(url: omnilock_core::StoreUrl) -> omnilock_core::Result<omnilock_core::Locks> {
    let config = SqlConfig::from_url(&url)?;
    Ok(omnilock_core::Locks::new(SqlStore::connect(config).await?))
}

/// How `omnilock::connect(url)` opens `mysql://` and `mariadb://` URLs.
#[cfg(feature = "mysql")]
pub const MYSQL_DRIVER: omnilock_core::Driver = omnilock_core::Driver {
    feature: Some("mysql"),
    schemes: &["mysql", "mariadb"],
    connect: |url| Box::pin(connect_url(url)),
};

/// How `omnilock::connect(url)` opens `postgres://` and `postgresql://` URLs.
#[cfg(feature = "postgres")]
pub const POSTGRES_DRIVER: omnilock_core::Driver = omnilock_core::Driver {
    feature: Some("postgres"),
    schemes: &["postgres", "postgresql"],
    connect: |url| Box::pin(connect_url(url)),
};

/// How `omnilock::connect(url)` opens `sqlite://` URLs.
#[cfg(feature = "sqlite")]
pub const SQLITE_DRIVER: omnilock_core::Driver = omnilock_core::Driver {
    feature: Some("sqlite"),
    schemes: &["sqlite"],
    connect: |url| Box::pin(connect_url(url)),
};
