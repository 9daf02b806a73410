//! Locks taken inside the caller's own transaction, released by its commit
//! or rollback.
//!
//! The hold is the lock's row, written in that transaction: its token goes
//! up and its owner stays NULL. The row lock the write takes (PostgreSQL,
//! MySQL/MariaDB) or the database's write lock (SQLite) keeps every other
//! acquisition of the name out until the transaction ends; after it, the
//! row is free with the new token (commit) or as it was (rollback).
//!
//! Before writing, a read on the store's own pool (a fresh view, whatever
//! the transaction has read) looks for a live holder: a busy lock is
//! reported without touching its row, so the holder's renewals never wait
//! for a transaction that did not get the lock. Only a holder that takes
//! the lock between that read and the write makes the write miss; the
//! missed row then stays locked by the transaction until it ends (InnoDB
//! keeps the locks of rows an `UPDATE` read; PostgreSQL locks a row that
//! changed under a waiting `UPDATE` before checking it again), and on
//! SQLite the database (the write began a write transaction). That holder's
//! renewals and release then wait for the transaction, so a waiting take
//! stops there (`WouldDeadlock`) instead of waiting for a holder it holds
//! up.

use std::any::Any;
use std::time::Duration;

use omnilock_core::{Backoff, Error, ErrorKind, LockName, Result};
use sqlx::{Connection, Row};

use crate::config::Dialect;
#[cfg(any(feature = "postgres", feature = "sqlite"))]
use crate::conn::fetch_token;
use crate::conn::{query, with_pool};
use crate::guarded::GuardedConnection;
use crate::queries::Args;
use crate::table::TableStore;

/// A lock held by the application's own transaction (see
/// [`SqlStore::try_lock_in`](crate::SqlStore::try_lock_in)): it ends with
/// the transaction's commit or rollback, and has no lease, renewal or
/// release of its own.
///
/// Its [`token`](Self::token) is above every earlier holder's. Use it only
/// inside the same transaction (a [`FencedTable`](crate::FencedTable) write
/// on the same connection, say): a rolled-back transaction's token is
/// handed out again to the next holder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxLock {
    name: LockName,
    token: u64,
}

impl TxLock {
    /// The lock's name.
    pub fn name(&self) -> &str {
        self.name.as_str()
    }

    /// The fencing token this transaction took.
    pub fn token(&self) -> u64 {
        self.token
    }
}

/// What one attempt found.
enum Attempt {
    Taken(u64),
    /// Held by another; the transaction untouched.
    Busy,
    /// Taken by another between the check and the write, which missed but
    /// keeps the row (PostgreSQL, MySQL/MariaDB) or the database (SQLite)
    /// locked by the transaction until it ends: the new holder's renewals
    /// and release wait for it, so waiting for that holder would deadlock.
    Missed,
}

impl TableStore {
    /// Takes `name` inside the transaction `conn` is in, if it is free.
    pub(crate) async fn try_lock_in(
        &self,
        conn: &mut (dyn Any + Send),
        name: &str,
    ) -> Result<Option<TxLock>> {
        let name = LockName::new(name)?;
        match self.attempt_in(conn, &name).await? {
            Attempt::Taken(token) => Ok(Some(TxLock { name, token })),
            Attempt::Busy | Attempt::Missed => Ok(None),
        }
    }

    /// Takes `name` inside the transaction `conn` is in, waiting up to
    /// `timeout` for it to be free.
    pub(crate) async fn lock_in(
        &self,
        conn: &mut (dyn Any + Send),
        name: &str,
        timeout: Duration,
    ) -> Result<TxLock> {
        let name = LockName::new(name)?;
        // A timeout past the clock's range waits as long as one can.
        let now = tokio::time::Instant::now();
        let deadline = now
            .checked_add(timeout)
            .unwrap_or_else(|| now + Duration::from_secs(100 * 365 * 86_400));
        let mut backoff = Backoff::new(Duration::from_millis(2), self.inner.config.max_poll);
        loop {
            match self.attempt_in(conn, &name).await? {
                Attempt::Taken(token) => return Ok(TxLock { name, token }),
                Attempt::Missed => {
                    return Err(Error::new(
                        ErrorKind::WouldDeadlock,
                        "another client took the lock between the check and the write; this \
                         transaction now holds up that holder's renewals and release, so \
                         waiting for it would deadlock: roll the transaction back and try again",
                    )
                    .with_backend(self.inner.config.dialect.kind())
                    .with_lock(name.as_str()));
                }
                Attempt::Busy => {}
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return Err(Error::new(
                    ErrorKind::Timeout,
                    format!("the lock was not free within {timeout:?}"),
                )
                .with_backend(self.inner.config.dialect.kind())
                .with_lock(name.as_str()));
            }
            tokio::time::sleep(backoff.next_delay().min(deadline - now)).await;
        }
    }

    /// One try: the pool's view of the row, then the write in `conn`.
    async fn attempt_in(&self, conn: &mut (dyn Any + Send), name: &LockName) -> Result<Attempt> {
        let Some(exists) = self.free_row(name).await? else {
            return Ok(Attempt::Busy);
        };
        let args = Args {
            name: name.as_str(),
            ..Args::default()
        };
        let context = |e: Error| {
            e.with_backend(self.inner.config.dialect.kind())
                .with_lock(name.as_str())
        };
        self.write_in(conn, exists, &args).await.map_err(context)
    }

    /// Whether `name` is free by the pool's fresh view: `None` when a live
    /// holder has it, else whether its row exists.
    async fn free_row(&self, name: &LockName) -> Result<Option<bool>> {
        let inner = &self.inner;
        let args = Args {
            name: name.as_str(),
            ..Args::default()
        };
        let err = |e| self.err(e);
        let row = with_pool!(&inner.pool, p => {
            match query(&inner.queries.probe, &args).fetch_optional(p).await.map_err(err)? {
                Some(row) => Some(row.try_get::<Option<String>, _>(0).map_err(err)?),
                None => None,
            }
        });
        Ok(match row {
            None => Some(false),
            Some(None) => Some(true),
            Some(Some(_holder)) => None,
        })
    }

    /// Writes the lock's row in `conn`'s transaction: bumps the token of an
    /// existing free row, or creates the row of a name never used.
    async fn write_in(
        &self,
        conn: &mut (dyn Any + Send),
        exists: bool,
        args: &Args<'_>,
    ) -> Result<Attempt> {
        let statements = &self.inner.queries.in_tx;
        let statement = if exists {
            &statements.take
        } else {
            &statements.create
        };
        let dialect = self.inner.config.dialect;
        let err = |e| self.err(e);
        // PostgreSQL: a write that waited for another transaction's row
        // lock and then missed keeps the row locked (it locks the newest
        // version before checking the condition again). SQLite: the write
        // began a write transaction, missed or not.
        #[cfg(feature = "postgres")]
        if let Some(conn) = conn.downcast_mut::<sqlx::PgConnection>() {
            same_dialect(dialect, Dialect::Postgres)?;
            in_transaction(conn.is_in_transaction())?;
            let token = fetch_token!(conn, statement, args).map_err(err)?;
            return Ok(taken(token, Attempt::Missed));
        }
        #[cfg(feature = "sqlite")]
        if let Some(conn) = conn.downcast_mut::<sqlx::SqliteConnection>() {
            same_dialect(dialect, Dialect::Sqlite)?;
            in_transaction(conn.is_in_transaction())?;
            let token = fetch_token!(conn, statement, args).map_err(err)?;
            return Ok(taken(token, Attempt::Missed));
        }
        #[cfg(feature = "mysql")]
        if let Some(conn) = conn.downcast_mut::<sqlx::MySqlConnection>() {
            same_dialect(dialect, Dialect::MySql)?;
            in_transaction(conn.is_in_transaction())?;
            let done = query(statement, args)
                .execute(&mut *conn)
                .await
                .map_err(err)?;
            // InnoDB keeps the lock of the row a missed write read.
            return Ok(match (done.rows_affected(), exists) {
                (0, _) => Attempt::Missed,
                (_, true) => Attempt::Taken(done.last_insert_id()),
                (_, false) => Attempt::Taken(1),
            });
        }
        // Every `GuardedConnection` is one of the above.
        let _ = (conn, statement, args, err, dialect);
        Err(Error::new(ErrorKind::Backend, "not a SQL connection"))
    }
}

/// The attempt a returned token makes; `missed` when none came back.
#[cfg_attr(not(any(feature = "postgres", feature = "sqlite")), allow(dead_code))]
fn taken(token: Option<i64>, missed: Attempt) -> Attempt {
    match token {
        Some(token) => Attempt::Taken(token as u64),
        None => missed,
    }
}

/// A connection outside any transaction would commit the write at once and
/// hold nothing.
fn in_transaction(in_one: bool) -> Result<()> {
    if in_one {
        return Ok(());
    }
    Err(Error::config(
        "the connection is not in a transaction: begin one (`pool.begin()`) and pass `&mut *tx`",
    ))
}

fn same_dialect(lock: Dialect, conn: Dialect) -> Result<()> {
    if lock == conn {
        return Ok(());
    }
    Err(Error::config(format!(
        "the lock table is on {}, the transaction on {}: a lock is taken in a transaction on \
         the database that keeps the lock table",
        lock.kind(),
        conn.kind()
    )))
}

/// The connection as the dialect code downcasts it.
pub(crate) fn any_conn<C: GuardedConnection>(conn: &mut C) -> &mut (dyn Any + Send) {
    conn
}
