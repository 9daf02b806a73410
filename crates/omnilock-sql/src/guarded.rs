//! Guarded transactions: an application's own writes, in its own
//! transaction on the database that keeps the lock table, that commit only
//! while its lock is held.
//!
//! The check runs inside the caller's transaction and locks the holder's
//! row against change until the transaction ends (`FOR SHARE` on
//! PostgreSQL, `LOCK IN SHARE MODE` on MySQL/MariaDB). Every way the lock
//! can change hands (a takeover after expiry, a break, the holder's own
//! release) is an `UPDATE` of that row, so it waits for the transaction:
//! what the transaction writes commits under the lock, or not at all.
//! SQLite has no row locks: there the check is a write that changes
//! nothing, which takes the database's write lock (one writer at a time)
//! until the transaction ends.

use std::any::Any;

use omnilock_core::{Error, ErrorKind, LockGuard, Result, mutex_grant};
use sqlx::Row;

use crate::config::Dialect;
use crate::conn::{fetch_token, query};
use crate::queries::{Args, Statement};
use crate::store::{HoldKind, SqlHold};
use crate::table::TableStore;

/// A lock guard's hold, to be checked and kept from inside the
/// application's own transaction: the transaction's writes commit only if
/// the lock is still this guard's.
///
/// For a mutex in table mode (the default), on a connection to the
/// database that has the lock table (a connection of the pool the store
/// was built on, say). Call [`keep`](Self::keep) first in the transaction,
/// then write, then commit. Until the transaction ends the lock cannot
/// change hands; its renewal and release wait too, so keep the
/// transaction shorter than the lock's TTL.
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use omnilock_sql::{SqlStore, TxGuard};
///
/// let pool = sqlx::PgPool::connect("postgres://app@db.internal/app").await?;
/// let locks = SqlStore::builder(pool.clone()).build().await?;
/// let guard = locks.acquire("ledger").await?;
///
/// let mut tx = pool.begin().await?;
/// // Err(LockLost) or Err(StaleToken) once the lock is not the guard's.
/// TxGuard::new(&guard)?.keep(&mut *tx).await?;
/// sqlx::query("UPDATE ledger SET balance = balance - 10 WHERE id = 1")
///     .execute(&mut *tx)
///     .await?;
/// tx.commit().await?;
/// guard.release().await?;
/// # Ok(()) }
/// ```
pub struct TxGuard {
    store: TableStore,
    name: String,
    owner: String,
    token: u64,
}

impl std::fmt::Debug for TxGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TxGuard")
            .field("lock", &self.name)
            .field("token", &self.token)
            .finish_non_exhaustive()
    }
}

/// A connection a guarded transaction can run on: `sqlx::PgConnection`,
/// `sqlx::MySqlConnection` or `sqlx::SqliteConnection`, as a transaction
/// hands it out (`&mut *tx`). Sealed.
pub trait GuardedConnection: sealed::Sealed + Any + Send {}

mod sealed {
    pub trait Sealed {}
}

#[cfg(feature = "postgres")]
impl sealed::Sealed for sqlx::PgConnection {}
#[cfg(feature = "postgres")]
impl GuardedConnection for sqlx::PgConnection {}
#[cfg(feature = "mysql")]
impl sealed::Sealed for sqlx::MySqlConnection {}
#[cfg(feature = "mysql")]
impl GuardedConnection for sqlx::MySqlConnection {}
#[cfg(feature = "sqlite")]
impl sealed::Sealed for sqlx::SqliteConnection {}
#[cfg(feature = "sqlite")]
impl GuardedConnection for sqlx::SqliteConnection {}

impl TxGuard {
    /// The guard of a mutex held in a SQL store's table mode.
    /// `Unsupported` for a semaphore permit or a side of a read-write lock,
    /// for advisory mode (the lock lives in a database session, which a
    /// transaction on another connection cannot lock against change), and
    /// for a guard of another store.
    pub fn new(guard: &LockGuard) -> Result<Self> {
        let what = "a guarded transaction";
        let grant = mutex_grant::<SqlHold>(guard, what, "a SQL store")?;
        match &grant.hold.0 {
            HoldKind::Row { store, .. } => Ok(TxGuard {
                store: store.clone(),
                name: guard.name().as_str().to_string(),
                owner: guard.owner().as_str().to_string(),
                token: guard.token(),
            }),
            _ => Err(Error::new(
                ErrorKind::Unsupported,
                format!(
                    "{what} needs table mode: in advisory mode the lock is a database \
                     session's, which a transaction cannot lock against change"
                ),
            )
            .with_lock(guard.name().as_str())),
        }
    }

    /// The guard's fencing token.
    pub fn token(&self) -> u64 {
        self.token
    }

    /// Checks, inside the transaction `conn` is in, that the lock is still
    /// this guard's (its owner, its token, a live lease by the database's
    /// clock), and keeps it so until the transaction ends.
    ///
    /// Errors, after which the transaction must not commit (roll it back):
    /// - [`ErrorKind::StaleToken`] when another holder has taken the lock
    ///   since, with both tokens ([`Error::tokens`]);
    /// - [`ErrorKind::LockLost`] when nobody has: the lease ran out, or the
    ///   lock was released or broken;
    /// - `InvalidConfig` for a connection to another kind of database than
    ///   the lock's; the database's own errors as for any statement.
    ///
    /// Make it the transaction's first statement: on PostgreSQL at
    /// `REPEATABLE READ` or above, a row renewed after the transaction's
    /// snapshot cannot be locked (a serialization failure, which is safe
    /// to retry with a new transaction).
    pub async fn keep<C: GuardedConnection>(&self, conn: &mut C) -> Result<()> {
        let inner = &self.store.inner;
        let keep = &inner.queries.keep;
        let token_of = &inner.queries.token_of;
        let args = Args {
            name: &self.name,
            owner: &self.owner,
            token: self.token as i64,
            ..Args::default()
        };
        let conn: &mut (dyn Any + Send) = conn;
        let (kept, latest) = self.run(conn, keep, token_of, &args).await?;
        let context = |e: Error| {
            e.with_backend(inner.config.dialect.kind())
                .with_lock(&self.name)
        };
        if kept.is_some() {
            return Ok(());
        }
        match latest {
            Some(latest) if latest as u64 > self.token => {
                Err(context(Error::stale_token(self.token, latest as u64)))
            }
            _ => Err(context(Error::new(
                ErrorKind::LockLost,
                "the lock is no longer this guard's (its lease ran out, or it was released \
                 or broken): roll the transaction back",
            ))),
        }
    }

    /// Runs `keep` on `conn`, and `token_of` when it found nothing.
    async fn run(
        &self,
        conn: &mut (dyn Any + Send),
        keep: &Statement,
        token_of: &Statement,
        args: &Args<'_>,
    ) -> Result<(Option<i64>, Option<i64>)> {
        let err = |e| crate::conn::errors::map_err(e, &self.store.inner.config);
        let dialect = self.store.inner.config.dialect;
        #[cfg(feature = "postgres")]
        if let Some(conn) = conn.downcast_mut::<sqlx::PgConnection>() {
            self.same_dialect(dialect, Dialect::Postgres)?;
            let kept = fetch_token!(conn, keep, args).map_err(err)?;
            if kept.is_some() {
                return Ok((kept, None));
            }
            return Ok((None, fetch_token!(conn, token_of, args).map_err(err)?));
        }
        #[cfg(feature = "mysql")]
        if let Some(conn) = conn.downcast_mut::<sqlx::MySqlConnection>() {
            self.same_dialect(dialect, Dialect::MySql)?;
            let kept = fetch_token!(conn, keep, args).map_err(err)?;
            if kept.is_some() {
                return Ok((kept, None));
            }
            return Ok((None, fetch_token!(conn, token_of, args).map_err(err)?));
        }
        #[cfg(feature = "sqlite")]
        if let Some(conn) = conn.downcast_mut::<sqlx::SqliteConnection>() {
            self.same_dialect(dialect, Dialect::Sqlite)?;
            let kept = fetch_token!(conn, keep, args).map_err(err)?;
            if kept.is_some() {
                return Ok((kept, None));
            }
            return Ok((None, fetch_token!(conn, token_of, args).map_err(err)?));
        }
        // Every `GuardedConnection` is one of the above.
        let _ = (conn, keep, token_of, args, err, dialect);
        Err(Error::new(ErrorKind::Backend, "not a SQL connection"))
    }

    fn same_dialect(&self, lock: Dialect, conn: Dialect) -> Result<()> {
        if lock == conn {
            return Ok(());
        }
        Err(Error::config(format!(
            "the lock {:?} is on {}, the transaction on {}: a guarded transaction runs on \
             the database that keeps the lock table",
            self.name,
            lock.kind(),
            conn.kind()
        )))
    }
}
