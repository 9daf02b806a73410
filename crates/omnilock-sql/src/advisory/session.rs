//! Advisory sessions: the connections that hold advisory locks, opened
//! with an idle timeout that is the locks' lease, bounded in how long a
//! statement on them may take, and killed from the store's pool when they
//! are dropped in an unknown state.

use std::time::Duration;

use omnilock_core::{Error, Result};
#[allow(unused_imports)]
use sqlx::{AssertSqlSafe, Executor, Row};

use super::AdvisoryStore;
use crate::config::{Dialect, SqlConfig};
use crate::conn::errors::map_err;
use crate::conn::{OwnedConn, Pool};
use crate::queries::advisory as statements;

/// A connection of advisory mode.
pub(super) enum SessionConn {
    #[cfg(feature = "mysql")]
    MySql(sqlx::MySqlConnection),
    #[cfg(feature = "postgres")]
    Postgres(sqlx::PgConnection),
}

/// One session and what is needed to kill it from elsewhere.
pub(crate) struct Session {
    pub(super) conn: SessionConn,
    /// `CONNECTION_ID()` or `pg_backend_pid()`.
    pub(super) id: i64,
    /// PostgreSQL: the backend's start (microseconds), so that a kill never
    /// hits a later backend that reused the pid.
    pub(super) started_us: i64,
    /// What the server was told: end the session once idle this long.
    pub(super) idle_timeout: Duration,
    /// Holds no lock and has no statement in flight: may be dropped without
    /// being killed.
    pub(super) clean: bool,
    /// The store's pool, to kill this session if it is dropped unclean.
    pub(super) killer: Pool,
}

impl Drop for Session {
    fn drop(&mut self) {
        if self.clean {
            return;
        }
        // Dropped outside a runtime (a process exiting): the socket closes
        // and the server ends the session when it notices.
        let (pool, id, started_us) = (self.killer.clone(), self.id, self.started_us);
        omnilock_core::spawn_cleanup(async move {
            if let Err(err) = kill(&pool, id, started_us).await {
                tracing::debug!(error = %err, session = id, "omnilock advisory: killing a session failed; the server ends it when idle");
            }
        });
    }
}

/// Ends session `id`: its wait (if any) stops and its locks are freed.
pub(super) async fn kill(pool: &Pool, id: i64, started_us: i64) -> sqlx::Result<()> {
    let _ = started_us;
    match pool {
        #[cfg(feature = "mysql")]
        Pool::MySql(p) => {
            // KILL takes no placeholder; the id is the server's integer.
            p.execute(sqlx::raw_sql(AssertSqlSafe(statements::mysql_kill(id))))
                .await
                .map(|_| ())
        }
        #[cfg(feature = "postgres")]
        Pool::Postgres(p) => sqlx::query(statements::POSTGRES_KILL)
            .bind(id as i32)
            .bind(started_us)
            .execute(p)
            .await
            .map(|_| ()),
        #[allow(unreachable_patterns)]
        _ => Ok(()),
    }
}

/// The server's idle timeout for a TTL: MySQL counts whole seconds (at
/// least 1), rounded up so that the lock never frees before the lease.
pub(super) fn idle_timeout(dialect: Dialect, ttl: Duration) -> Duration {
    match dialect {
        Dialect::MySql => Duration::from_secs(ttl.as_secs_f64().ceil().max(1.0) as u64),
        _ => ttl.max(Duration::from_millis(1)),
    }
}

impl AdvisoryStore {
    /// A new session that ends itself once idle for `ttl`.
    pub(super) async fn open(&self, ttl: Duration) -> Result<Session> {
        let config = self.table.config();
        // The turn to open is waited for outside the connect timeout: it
        // is a queue in this process, not a server that does not answer.
        let _turn = self.opening.acquire().await.map_err(|_| {
            Error::unavailable("the store is closed").with_backend(config.dialect.kind())
        })?;
        let conn = tokio::time::timeout(config.connect_timeout, self.target.connect_one(config))
            .await
            .map_err(|_| {
                Error::unavailable(format!(
                    "no answer from the database at {} within {:?}",
                    config.place, config.connect_timeout
                ))
                .with_backend(config.dialect.kind())
            })?
            .map_err(|e| too_many_sessions(e, config))?;
        let err = |e| map_err(e, config);
        let (conn, id, started_us) = match conn {
            #[cfg(feature = "mysql")]
            OwnedConn::MySql(mut c) => {
                let id: i64 = sqlx::query_scalar(statements::MYSQL_SESSION_ID)
                    .fetch_one(&mut c)
                    .await
                    .map_err(err)?;
                (SessionConn::MySql(c), id, 0)
            }
            #[cfg(feature = "postgres")]
            OwnedConn::Postgres(mut c) => {
                let row = sqlx::query(statements::POSTGRES_SESSION_ID)
                    .fetch_one(&mut c)
                    .await
                    .map_err(err)?;
                let (id, started): (i64, Option<i64>) =
                    (row.try_get(0).map_err(err)?, row.try_get(1).map_err(err)?);
                // pg_stat_activity hides a session's start from a role
                // without the privileges of the user who logged in (an
                // account whose `role` setting switches to another): its
                // sessions could not be told from a later one on the same
                // process ID, nor ended.
                let Some(started) = started else {
                    return Err(Error::config(
                        "mode=advisory cannot see its own session in pg_stat_activity: the \
                         account's `role` setting switches to a role without the privileges of \
                         the user who logged in; log in as that role, or use mode=table",
                    )
                    .with_backend(config.dialect.kind()));
                };
                (SessionConn::Postgres(c), id, started)
            }
            #[allow(unreachable_patterns)]
            _ => {
                return Err(Error::config(
                    "advisory mode needs MySQL/MariaDB or PostgreSQL",
                ));
            }
        };
        let mut session = Session {
            conn,
            id,
            started_us,
            idle_timeout: idle_timeout(config.dialect, ttl),
            clean: true,
            killer: self.table.pool().clone(),
        };
        set_idle_timeout(&mut session).await.map_err(|e| {
            if e.to_string()
                .contains("unrecognized configuration parameter")
            {
                return Error::config(
                    "mode=advisory needs PostgreSQL 14 or later: the lease is the session's \
                     idle_session_timeout",
                )
                .with_backend(config.dialect.kind());
            }
            err(e)
        })?;
        Ok(session)
    }
}

/// Tells the server to end the session once idle for its timeout.
pub(super) async fn set_idle_timeout(session: &mut Session) -> sqlx::Result<()> {
    let timeout = session.idle_timeout;
    match &mut session.conn {
        #[cfg(not(any(feature = "mysql", feature = "postgres")))]
        _ => unreachable!("advisory mode is refused without mysql or postgres"),
        #[cfg(feature = "mysql")]
        SessionConn::MySql(c) => sqlx::query(statements::MYSQL_SET_IDLE_TIMEOUT)
            .bind(timeout.as_secs() as i64)
            .execute(c)
            .await
            .map(|_| ()),
        #[cfg(feature = "postgres")]
        SessionConn::Postgres(c) => sqlx::query(statements::POSTGRES_SET_IDLE_TIMEOUT)
            .bind(timeout.as_millis().to_string())
            .execute(c)
            .await
            .map(|_| ()),
    }
}

/// A statement on a session that does not answer within the session's
/// idle timeout (its lease) fails: the caller then kills the session, so
/// that a lock whose holder was told it is lost cannot stay held by a
/// session that answers late (a database paused, then resumed).
pub(super) async fn bounded<T>(
    limit: Duration,
    statement: impl std::future::Future<Output = sqlx::Result<T>>,
) -> sqlx::Result<T> {
    tokio::time::timeout(limit, statement)
        .await
        .unwrap_or_else(|_| {
            Err(sqlx::Error::Io(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the advisory session did not answer within its lease",
            )))
        })
}

pub(super) fn gone() -> sqlx::Error {
    sqlx::Error::Io(std::io::Error::new(
        std::io::ErrorKind::BrokenPipe,
        "the advisory session was killed or broke",
    ))
}

/// A refusal by the server's connection limit says why advisory mode
/// needs so many connections.
fn too_many_sessions(err: Error, config: &SqlConfig) -> Error {
    if !crate::conn::errors::is_connection_limit(&err) {
        return err;
    }
    Error::unavailable(format!(
        "{}; advisory mode holds a connection of its own per waiting acquire (held locks \
         share a few): raise the server's max_connections, or use mode=table \
         (docs/backends/sql.md, Advisory mode)",
        err.message()
    ))
    .with_backend(config.dialect.kind())
}
