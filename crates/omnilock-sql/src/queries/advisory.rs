//! Advisory mode's statements (see `crate::advisory`): the session locks
//! (`GET_LOCK`, `pg_advisory_lock`), the token bump on the lock table's row
//! that goes with them, and the statements that set up, name and end an
//! advisory session.
//!
//! Unlike the table mode's [`Statement`](super::Statement)s, these are
//! bound by the code that runs them: the lock's key is a string on
//! MySQL/MariaDB and a `bigint` (or its two halves) on PostgreSQL, which
//! [`Args`](super::Args) does not carry.

// A build with SQLite only refuses advisory mode in the URL: its
// statements are then never read.
#![cfg_attr(not(any(feature = "mysql", feature = "postgres")), allow(dead_code))]

use std::sync::Arc;

use sqlx::{AssertSqlSafe, SqlSafeStr, SqlStr};

use super::ident;
use crate::config::Dialect;

/// The statements of advisory mode on the lock table and the session
/// locks, per dialect. "Binds" lists the values in placeholder order; `key`
/// is the lock's key (MySQL/MariaDB: its string; PostgreSQL: its `bigint`,
/// or the two halves `pg_locks` shows).
#[derive(Debug, Clone)]
pub(crate) struct Advisory {
    /// Takes the lock if free and bumps the token in one statement.
    /// Binds name, owner, key.
    pub take_now: SqlStr,
    /// Blocks until the lock is ours (MySQL: or the timeout passes).
    /// Binds key (MySQL: and the timeout in seconds).
    pub wait: SqlStr,
    /// Bumps the token after a wait (the lock is ours already).
    /// Binds name, owner.
    pub fence: SqlStr,
    /// Binds key.
    pub release: SqlStr,
    /// A statement that restarts the session's idle clock. Binds nothing.
    pub renew: SqlStr,
    /// The row's owner, token and `updated_at` (when the token was bumped:
    /// the hold began) while the lock is held. Binds MySQL: name, key;
    /// PostgreSQL: the key's halves, name.
    pub holder: SqlStr,
    /// MySQL: the connection holding the lock; PostgreSQL: terminates it,
    /// giving its pid and whether the signal went out.
    /// Binds MySQL: key; PostgreSQL: the key's halves.
    pub break_lock: SqlStr,
    /// The sessions holding the lock now (MySQL: the one; PostgreSQL: the
    /// pids). Binds MySQL: key; PostgreSQL: the key's halves.
    pub holding: SqlStr,
    /// PostgreSQL: how many sessions wait for the lock. Binds the key's
    /// halves. MySQL/MariaDB cannot tell (its waits show only in
    /// `performance_schema`, often off).
    pub waiting: Option<SqlStr>,
    /// PostgreSQL: the key halves of every advisory lock held in this
    /// database (`list`). Binds nothing. MySQL/MariaDB asks
    /// [`mysql_used_locks`] of each candidate instead.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub held_keys: Option<SqlStr>,
}

fn sql(text: String) -> SqlStr {
    AssertSqlSafe(Arc::<str>::from(text)).into_sql_str()
}

impl Advisory {
    pub(crate) fn new(dialect: Dialect, table_name: &str) -> Self {
        let table = ident(dialect, table_name);
        match dialect {
            Dialect::MySql => {
                let now = super::MYSQL_NOW;
                // The row keeps the token across holders; `expires_at` NULL
                // and `holds` 0 say no table-mode hold is in it.
                let upsert = "ON DUPLICATE KEY UPDATE token = LAST_INSERT_ID(token + 1),
                        owner = VALUES(owner), holds = 0, expires_at = NULL,
                        updated_at = VALUES(updated_at)";
                Advisory {
                    take_now: sql(format!(
                        "INSERT INTO {table} (name, owner, holds, token, expires_at, updated_at)
                         SELECT ?, ?, 0, LAST_INSERT_ID(1), NULL, {now} FROM DUAL
                         WHERE GET_LOCK(?, 0) = 1 {upsert}"
                    )),
                    wait: sql("SELECT GET_LOCK(?, ?)".into()),
                    fence: sql(format!(
                        "INSERT INTO {table} (name, owner, holds, token, expires_at, updated_at)
                         VALUES (?, ?, 0, LAST_INSERT_ID(1), NULL, {now}) {upsert}"
                    )),
                    release: sql("SELECT RELEASE_LOCK(?)".into()),
                    // Only this session could release its locks (a kill ends
                    // it): alive means held.
                    renew: sql("SELECT 1".into()),
                    holder: sql(format!(
                        "SELECT CAST(owner AS CHAR), token, updated_at FROM {table}
                         WHERE name = ? AND IS_USED_LOCK(?) IS NOT NULL"
                    )),
                    break_lock: sql("SELECT IS_USED_LOCK(?)".into()),
                    holding: sql("SELECT IS_USED_LOCK(?)".into()),
                    waiting: None,
                    held_keys: None,
                }
            }
            _ => {
                let now = super::POSTGRES_NOW;
                let upsert = format!(
                    "ON CONFLICT (name) DO UPDATE SET token = {table}.token + 1,
                        owner = excluded.owner, holds = 0, expires_at = NULL,
                        updated_at = excluded.updated_at
                     RETURNING token"
                );
                // The advisory locks of this database in `pg_locks` (a
                // `bigint` key's have `objsubid` 1).
                let advisory = "FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1
                        AND database = (SELECT oid FROM pg_database WHERE datname = current_database())";
                // The lock's entries: the holder's (`granted`), waiters'.
                let lock = format!(
                    "{advisory} AND classid = CAST($1 AS BIGINT)::oid
                        AND objid = CAST($2 AS BIGINT)::oid"
                );
                let entry = format!("{lock} AND granted");
                Advisory {
                    take_now: sql(format!(
                        "INSERT INTO {table} (name, owner, holds, token, expires_at, updated_at)
                         SELECT $1, $2, 0, 1, NULL, {now} WHERE pg_try_advisory_lock($3) {upsert}"
                    )),
                    wait: sql("SELECT 1 FROM (SELECT pg_advisory_lock($1)) AS waited".into()),
                    fence: sql(format!(
                        "INSERT INTO {table} (name, owner, holds, token, expires_at, updated_at)
                         VALUES ($1, $2, 0, 1, NULL, {now}) {upsert}"
                    )),
                    release: sql("SELECT pg_advisory_unlock($1)".into()),
                    // Only this session can unlock its lock: alive means held.
                    renew: sql("SELECT 1".into()),
                    holder: sql(format!(
                        "SELECT owner, token, updated_at FROM {table} WHERE name = $3
                         AND EXISTS (SELECT 1 {entry})"
                    )),
                    break_lock: sql(format!(
                        "SELECT CAST(pid AS BIGINT), pg_terminate_backend(pid) {entry}"
                    )),
                    holding: sql(format!("SELECT CAST(pid AS BIGINT) {entry}")),
                    waiting: Some(sql(format!("SELECT COUNT(*) {lock} AND NOT granted"))),
                    held_keys: Some(sql(format!(
                        "SELECT CAST(classid AS BIGINT), CAST(objid AS BIGINT) {advisory}
                         AND granted"
                    ))),
                }
            }
        }
    }
}

/// MySQL/MariaDB: whether each of `count` locks is held, 1 or 0, as the
/// columns of one row. Binds the keys.
#[cfg(feature = "mysql")]
pub(crate) fn mysql_used_locks(count: usize) -> SqlStr {
    let columns = vec!["CAST(IS_USED_LOCK(?) IS NOT NULL AS SIGNED)"; count];
    sql(format!("SELECT {}", columns.join(", ")))
}

/// MySQL/MariaDB: the session's id, as `KILL` takes it.
#[cfg(feature = "mysql")]
pub(crate) const MYSQL_SESSION_ID: &str = "SELECT CAST(CONNECTION_ID() AS SIGNED)";

/// PostgreSQL: the session's pid and the backend's start in microseconds.
#[cfg(feature = "postgres")]
pub(crate) const POSTGRES_SESSION_ID: &str = "SELECT CAST(pid AS BIGINT),
                        CAST(EXTRACT(EPOCH FROM backend_start) * 1000000 AS BIGINT)
                     FROM pg_stat_activity WHERE pid = pg_backend_pid()";

/// MySQL/MariaDB: ends the session once idle this many seconds (binds them).
#[cfg(feature = "mysql")]
pub(crate) const MYSQL_SET_IDLE_TIMEOUT: &str = "SET SESSION wait_timeout = ?";

/// PostgreSQL: ends the session once idle this long (binds milliseconds, as
/// text).
#[cfg(feature = "postgres")]
pub(crate) const POSTGRES_SET_IDLE_TIMEOUT: &str =
    "SELECT set_config('idle_session_timeout', $1, false)";

/// MySQL/MariaDB: ends session `id`. `KILL` takes no placeholder; the id is
/// the server's integer.
#[cfg(feature = "mysql")]
pub(crate) fn mysql_kill(id: i64) -> String {
    format!("KILL {id}")
}

/// PostgreSQL: ends the backend with pid `$1`, only if it started at `$2`
/// (microseconds), so that a kill never hits a later backend that reused
/// the pid.
#[cfg(feature = "postgres")]
pub(crate) const POSTGRES_KILL: &str =
    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid = $1
             AND CAST(EXTRACT(EPOCH FROM backend_start) * 1000000 AS BIGINT) = $2";
