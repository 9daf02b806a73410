//! A fenced table: rows written only with fencing tokens, each write
//! refused when a higher token has written the row. The sink for a
//! resource in a SQL database, whatever store issued the token.

use std::any::Any;

use omnilock_core::{Error, ErrorKind, Result};

use crate::config::{Dialect, check_table};
use crate::guarded::GuardedConnection;

/// A table of named values, each row keeping the highest fencing token that
/// wrote it: a write with a lower token is refused
/// ([`ErrorKind::StaleToken`], with both tokens), the row unchanged. A token
/// equal to the highest is accepted, so one holder may write the same row
/// many times. The token may come from any omnilock store.
///
/// The table is `(name, value, fence)`, the name compared exactly (bytes on
/// MySQL/MariaDB, whose default collations would make `Report` and
/// `report ` one row); [`create`](Self::create) makes it. A write is a
/// conditional `UPDATE` (`WHERE fence <= token`), or an `INSERT` for a new
/// name, each judging the row as it is now, so it may also run inside the
/// application's transaction, beside its other writes, at any isolation
/// level. For rows of your own
/// tables, the same rule is one column and one condition
/// ([docs/fencing.md](https://github.com/omnilock/omnilock/blob/main/docs/fencing.md#a-sql-table-a-fence-column)).
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool, guard: omnilock_core::LockGuard) -> omnilock_core::Result<()> {
/// use omnilock_sql::FencedTable;
///
/// let reports = FencedTable::new("reports")?;
/// let mut conn = pool.acquire().await.expect("a connection");
/// reports.create(&mut *conn).await?;
/// // Err(StaleToken), the row unchanged, when a later holder wrote it.
/// reports.write(&mut *conn, guard.token(), "nightly", b"42 rows").await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct FencedTable {
    table: String,
}

/// The longest row name: the column is `VARCHAR(255)`.
const MAX_NAME_CHARS: usize = 255;

/// The statements of one dialect.
struct Statements {
    create: String,
    update: String,
    claim: String,
    insert: String,
    fence_of: String,
    read: String,
}

impl FencedTable {
    /// The fenced table `table`: a plain SQL identifier (ASCII letters,
    /// digits and `_`, not starting with a digit), else `InvalidConfig`.
    pub fn new(table: &str) -> Result<Self> {
        check_table(table, Dialect::Postgres)?;
        Ok(FencedTable {
            table: table.to_string(),
        })
    }

    /// Creates the table if it does not exist.
    pub async fn create<C: GuardedConnection>(&self, conn: &mut C) -> Result<()> {
        let conn: &mut (dyn Any + Send) = conn;
        let statements = self.statements(dialect_of(conn)?);
        execute(conn, &statements.create, &[]).await.map(drop)
    }

    /// Writes `value` as row `name` with `token`. Errors:
    /// [`ErrorKind::StaleToken`] when a higher token has written or claimed
    /// the row (nothing changed); `InvalidConfig` for a name longer than
    /// 255 characters or a token above `i64::MAX`; the database's own
    /// errors.
    pub async fn write<C: GuardedConnection>(
        &self,
        conn: &mut C,
        token: u64,
        name: &str,
        value: &[u8],
    ) -> Result<()> {
        self.fenced(conn, token, name, Some(value)).await
    }

    /// Raises row `name`'s fence to `token` without writing its value (a
    /// missing row is made, with an empty value): from now on a write with
    /// a lower token is refused. A holder that reads a row and then writes
    /// it claims it first, so that a predecessor that lost the lock but has
    /// not written yet cannot write between the read and the write. Errors
    /// as for [`write`](Self::write).
    pub async fn claim<C: GuardedConnection>(
        &self,
        conn: &mut C,
        token: u64,
        name: &str,
    ) -> Result<()> {
        self.fenced(conn, token, name, None).await
    }

    /// A write of `value` (`None`: the fence alone) with `token`.
    async fn fenced<C: GuardedConnection>(
        &self,
        conn: &mut C,
        token: u64,
        name: &str,
        value: Option<&[u8]>,
    ) -> Result<()> {
        let fence = fence_of_token(token)?;
        check_name(name)?;
        let conn: &mut (dyn Any + Send) = conn;
        let statements = self.statements(dialect_of(conn)?);
        let (update_sql, update) = match value {
            Some(value) => (
                &statements.update,
                vec![
                    Arg::Bytes(value),
                    Arg::Int(fence),
                    Arg::Text(name),
                    Arg::Int(fence),
                ],
            ),
            None => (
                &statements.claim,
                vec![Arg::Int(fence), Arg::Text(name), Arg::Int(fence)],
            ),
        };
        // The UPDATE judges the row as it is now (a current read, also in
        // a REPEATABLE READ transaction) and counts the rows it matched
        // (MySQL too: sqlx asks for found rows), so one that matched wrote.
        if execute(conn, update_sql, &update).await? > 0 {
            return Ok(());
        }
        // No row, or a higher fence. An INSERT that finds the name taken
        // changes nothing (PostgreSQL and SQLite: ON CONFLICT DO NOTHING,
        // which keeps a transaction usable; MySQL: a duplicate key fails
        // the statement alone); then the row exists, and a second UPDATE
        // judges it.
        let insert = [
            Arg::Text(name),
            Arg::Bytes(value.unwrap_or_default()),
            Arg::Int(fence),
        ];
        match execute(conn, &statements.insert, &insert).await {
            Ok(inserted) if inserted > 0 => return Ok(()),
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::Conflict => {}
            Err(e) => return Err(e),
        }
        if execute(conn, update_sql, &update).await? > 0 {
            return Ok(());
        }
        // Refused. The row's fence, read with a lock so that it is the
        // current one (a snapshot could show an older fence).
        let highest = fetch_fence(conn, &statements.fence_of, name)
            .await?
            .unwrap_or(i64::MAX);
        Err(Error::stale_token(token, highest.max(fence) as u64).with_lock(name))
    }

    /// Row `name`'s value and the highest token that wrote it, if it exists.
    pub async fn read<C: GuardedConnection>(
        &self,
        conn: &mut C,
        name: &str,
    ) -> Result<Option<(Vec<u8>, u64)>> {
        let conn: &mut (dyn Any + Send) = conn;
        let statements = self.statements(dialect_of(conn)?);
        fetch_row(conn, &statements.read, name).await
    }

    fn statements(&self, dialect: Dialect) -> Statements {
        // MySQL compares VARCHAR by its collation (case, accents and
        // trailing spaces ignored by default): names are bytes there, so
        // that two names are one row only when they are equal.
        let (quoted, name_type, bytes, mark) = match dialect {
            Dialect::Postgres => (
                format!("\"{}\"", self.table),
                "VARCHAR(255)",
                "BYTEA",
                Mark::Numbered,
            ),
            Dialect::MySql => (
                format!("`{}`", self.table),
                "VARBINARY(1020)",
                "LONGBLOB",
                Mark::Question,
            ),
            Dialect::Sqlite => (
                format!("\"{}\"", self.table),
                "VARCHAR(255)",
                "BLOB",
                Mark::Question,
            ),
        };
        let (insert_tail, locking) = match dialect {
            Dialect::Postgres => (" ON CONFLICT (name) DO NOTHING", " FOR SHARE"),
            Dialect::MySql => ("", " LOCK IN SHARE MODE"),
            Dialect::Sqlite => (" ON CONFLICT (name) DO NOTHING", ""),
        };
        let p = |n: usize| mark.at(n);
        Statements {
            create: format!(
                "CREATE TABLE IF NOT EXISTS {quoted} (name {name_type} NOT NULL PRIMARY KEY, \
                 value {bytes} NOT NULL, fence BIGINT NOT NULL)"
            ),
            update: format!(
                "UPDATE {quoted} SET value = {}, fence = {} WHERE name = {} AND fence <= {}",
                p(1),
                p(2),
                p(3),
                p(4)
            ),
            claim: format!(
                "UPDATE {quoted} SET fence = {} WHERE name = {} AND fence <= {}",
                p(1),
                p(2),
                p(3)
            ),
            insert: format!(
                "INSERT INTO {quoted} (name, value, fence) VALUES ({}, {}, {}){insert_tail}",
                p(1),
                p(2),
                p(3)
            ),
            fence_of: format!("SELECT fence FROM {quoted} WHERE name = {}{locking}", p(1)),
            read: format!("SELECT value, fence FROM {quoted} WHERE name = {}", p(1)),
        }
    }
}

/// How a dialect marks bind parameters.
#[derive(Clone, Copy)]
enum Mark {
    Numbered,
    Question,
}

impl Mark {
    fn at(self, n: usize) -> String {
        match self {
            Mark::Numbered => format!("${n}"),
            Mark::Question => "?".to_string(),
        }
    }
}

/// One bind parameter.
enum Arg<'a> {
    Text(&'a str),
    Bytes(&'a [u8]),
    Int(i64),
}

fn fence_of_token(token: u64) -> Result<i64> {
    i64::try_from(token).map_err(|_| {
        Error::config(format!(
            "the token {token} is above what a BIGINT fence column holds ({})",
            i64::MAX
        ))
    })
}

fn check_name(name: &str) -> Result<()> {
    let chars = name.chars().count();
    if chars > MAX_NAME_CHARS {
        return Err(Error::config(format!(
            "a fenced row's name is at most {MAX_NAME_CHARS} characters, not {chars}"
        )));
    }
    Ok(())
}

fn failed(e: sqlx::Error) -> Error {
    #[cfg(feature = "sqlite")]
    if crate::conn::errors::sqlite_is_busy(&e) {
        return Error::unavailable(
            "the fenced table: SQLite is busy (another writer, or a transaction whose snapshot \
             is older than the last write): retry, in a new transaction",
        );
    }
    match &e {
        sqlx::Error::Database(db) if db.is_unique_violation() => Error::new(
            ErrorKind::Conflict,
            "another writer inserted the row at the same moment",
        ),
        sqlx::Error::Database(db) => Error::new(
            ErrorKind::Backend,
            format!("the fenced table: the database answered {}", db.message()),
        ),
        sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut => {
            Error::unavailable("the fenced table: cannot reach the database")
        }
        _ => Error::new(ErrorKind::Backend, format!("the fenced table: {e}")),
    }
}

/// The dialect of a [`GuardedConnection`].
fn dialect_of(conn: &mut (dyn Any + Send)) -> Result<Dialect> {
    #[cfg(feature = "postgres")]
    if conn.is::<sqlx::PgConnection>() {
        return Ok(Dialect::Postgres);
    }
    #[cfg(feature = "mysql")]
    if conn.is::<sqlx::MySqlConnection>() {
        return Ok(Dialect::MySql);
    }
    #[cfg(feature = "sqlite")]
    if conn.is::<sqlx::SqliteConnection>() {
        return Ok(Dialect::Sqlite);
    }
    let _ = conn;
    // Every `GuardedConnection` is one of the above.
    Err(Error::new(ErrorKind::Backend, "not a SQL connection"))
}

/// Binds `args` to `sql` for database `$db`.
macro_rules! bound {
    ($db:ty, $sql:expr, $args:expr) => {{
        let mut query = sqlx::query::<$db>(sqlx::AssertSqlSafe($sql.to_string()));
        for arg in $args {
            query = match arg {
                Arg::Text(text) => query.bind(text.to_string()),
                Arg::Bytes(bytes) => query.bind(bytes.to_vec()),
                Arg::Int(int) => query.bind(*int),
            };
        }
        query
    }};
}

/// Runs `$body` with `$conn` as whichever connection `conn` is, `$db` its
/// database.
macro_rules! on_connection {
    ($conn:expr, |$c:ident, $db:ident| $body:expr) => {{
        #[cfg(feature = "postgres")]
        if let Some($c) = $conn.downcast_mut::<sqlx::PgConnection>() {
            type $db = sqlx::Postgres;
            return $body;
        }
        #[cfg(feature = "mysql")]
        if let Some($c) = $conn.downcast_mut::<sqlx::MySqlConnection>() {
            type $db = sqlx::MySql;
            return $body;
        }
        #[cfg(feature = "sqlite")]
        if let Some($c) = $conn.downcast_mut::<sqlx::SqliteConnection>() {
            type $db = sqlx::Sqlite;
            return $body;
        }
        Err(Error::new(ErrorKind::Backend, "not a SQL connection"))
    }};
}

/// Runs `sql` with `args`: the rows it changed.
async fn execute(conn: &mut (dyn Any + Send), sql: &str, args: &[Arg<'_>]) -> Result<u64> {
    on_connection!(conn, |c, Db| bound!(Db, sql, args)
        .execute(&mut *c)
        .await
        .map(|done| done.rows_affected())
        .map_err(failed))
}

async fn fetch_fence(conn: &mut (dyn Any + Send), sql: &str, name: &str) -> Result<Option<i64>> {
    use sqlx::Row;
    on_connection!(conn, |c, Db| bound!(Db, sql, &[Arg::Text(name)])
        .fetch_optional(&mut *c)
        .await
        .and_then(|row| row.map(|row| row.try_get::<i64, _>(0)).transpose())
        .map_err(failed))
}

async fn fetch_row(
    conn: &mut (dyn Any + Send),
    sql: &str,
    name: &str,
) -> Result<Option<(Vec<u8>, u64)>> {
    use sqlx::Row;
    on_connection!(conn, |c, Db| bound!(Db, sql, &[Arg::Text(name)])
        .fetch_optional(&mut *c)
        .await
        .and_then(|row| {
            row.map(|row| {
                Ok((
                    row.try_get::<Vec<u8>, _>(0)?,
                    row.try_get::<i64, _>(1)? as u64,
                ))
            })
            .transpose()
        })
        .map_err(failed))
}
