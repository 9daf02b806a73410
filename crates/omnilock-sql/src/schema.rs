//! The lock tables: created on first use and checked, under one DDL lock
//! per database, so that any number of
//! clients using a fresh database at once never race on the catalog.
//!
//! - PostgreSQL: a transaction holding `pg_advisory_xact_lock(DDL_LOCK_KEY)`.
//! - MySQL/MariaDB: `GET_LOCK('omnilock_ddl:<md5 of the database name>')` on
//!   the connection (DDL commits on its own there).
//! - SQLite: a `BEGIN IMMEDIATE` transaction (the file's write lock), which
//!   also tells at connect time whether the file can be written at all.
//!
//! Every name a lock is looked up by must compare byte for byte. The check
//! refuses tables whose `name` or `owner` columns fold names together (the
//! error names the `ALTER TABLE` that fixes them): MySQL `VARCHAR` with a PAD
//! SPACE collation (every `utf8mb4` collation before MySQL 8's `_0900_`
//! ones, `utf8mb4_bin` included, ignores trailing spaces), PostgreSQL
//! `CHAR(n)` or a nondeterministic collation, SQLite `COLLATE NOCASE`/`RTRIM`.

use std::time::Duration;

use omnilock_core::{Error, Result};
// Which of these a build uses depends on the dialect features.
#[allow(unused_imports)]
use sqlx::{AssertSqlSafe, Connection, Executor, Row};

#[allow(unused_imports)]
use crate::config::{Dialect, SqlConfig};
use crate::conn::Conn;
use crate::conn::errors::map_err;
#[allow(unused_imports)]
use crate::queries::{Queries, ident, queue_names, records_name, schema as statements};

/// The PostgreSQL advisory lock key that serializes omnilock's DDL in a
/// database: "omnilock" in ASCII.
#[cfg(feature = "postgres")]
const DDL_LOCK_KEY: i64 = 0x6f6d_6e69_6c6f_636b;

/// How long a client waits for another one's table creation.
pub(crate) const DDL_WAIT: Duration = Duration::from_secs(60);

/// Creates the tables if allowed and missing, then checks their layout; on
/// `conn`, a connection that the caller
/// closes on error (which also frees the DDL lock).
pub(crate) async fn prepare(conn: Conn<'_>, config: &SqlConfig, queries: &Queries) -> Result<()> {
    let err = |e| map_err(e, config);
    match conn {
        #[cfg(feature = "postgres")]
        Conn::Postgres(conn) => {
            let mut tx = conn.begin().await.map_err(err)?;
            if config.create_table {
                sqlx::query(statements::POSTGRES_DDL_LOCK)
                    .bind(DDL_LOCK_KEY)
                    .execute(&mut *tx)
                    .await
                    .map_err(err)?;
                for statement in &queries.create {
                    tx.execute(statement.clone()).await.map_err(err)?;
                }
            }
            check_postgres(&mut tx, config).await?;
            tx.commit().await.map_err(err)
        }
        #[cfg(feature = "sqlite")]
        Conn::Sqlite(conn) => {
            let mut tx = conn
                .begin_with(statements::SQLITE_DDL_BEGIN)
                .await
                .map_err(err)?;
            if config.create_table {
                for statement in &queries.create {
                    tx.execute(statement.clone()).await.map_err(err)?;
                }
            }
            if check_sqlite(&mut tx, config).await? {
                probe_sqlite_write(&mut tx, config).await?;
            }
            tx.commit().await.map_err(err)
        }
        #[cfg(feature = "mysql")]
        Conn::MySql(conn) => {
            if config.create_table {
                let got: Option<i64> =
                    sqlx::query_scalar(AssertSqlSafe(statements::mysql_ddl_lock()))
                        .bind(DDL_WAIT.as_secs() as i64)
                        .fetch_one(&mut *conn)
                        .await
                        .map_err(err)?;
                if got != Some(1) {
                    return Err(Error::unavailable(format!(
                        "another client kept the table lock of {} for {DDL_WAIT:?} (creating {})",
                        config.place, config.table
                    )));
                }
                for statement in &queries.create {
                    conn.execute(statement.clone()).await.map_err(err)?;
                }
            }
            check_mysql(conn, config).await?;
            if config.create_table {
                sqlx::query(AssertSqlSafe(statements::mysql_ddl_unlock()))
                    .execute(&mut *conn)
                    .await
                    .map_err(err)?;
            }
            Ok(())
        }
    }
}

/// The tables to check: the lock table, fair mode's line (whether or not
/// this client is fair: another may be) and the records.
fn tables(config: &SqlConfig) -> [String; 3] {
    [
        config.table.clone(),
        queue_names(&config.table).0,
        records_name(&config.table),
    ]
}

/// MySQL/MariaDB: `name` and `owner` must be `VARBINARY` (or `VARCHAR` with
/// a NO PAD binary collation); otherwise the error names the statement that
/// converts them.
#[cfg(feature = "mysql")]
async fn check_mysql(conn: &mut sqlx::MySqlConnection, config: &SqlConfig) -> Result<()> {
    let [table, queue, records] = tables(config);
    let rows = sqlx::query(statements::MYSQL_NAME_COLUMNS)
        .bind(&table)
        .bind(&queue)
        .bind(&records)
        .fetch_all(&mut *conn)
        .await
        .map_err(|e| map_err(e, config))?;
    let mut folding = Vec::new();
    for row in rows {
        let text = |i| row.try_get::<String, _>(i).map_err(|e| map_err(e, config));
        let (name, column, data_type, collation) = (text(0)?, text(1)?, text(2)?, text(3)?);
        let exact = data_type.eq_ignore_ascii_case("varbinary")
            || (data_type.eq_ignore_ascii_case("varchar")
                && (collation.ends_with("_nopad_bin") || collation == "utf8mb4_0900_bin"));
        if !exact && !folding.iter().any(|(t, _)| *t == name) {
            let described = format!("{column} is {data_type} {collation}");
            folding.push((name, described));
        }
    }
    if let Some((name, described)) = folding.into_iter().next() {
        // The records have no owner.
        let owner_null = if name == table {
            Some("NULL")
        } else if name == records {
            None
        } else {
            Some("NOT NULL")
        };
        let alter = statements::mysql_exact_columns(&name, owner_null);
        return Err(Error::config(format!(
            "table {name}: column {described}, which ignores trailing spaces, so distinct \
             lock names would share a lock; convert it with: {alter}"
        )));
    }
    Ok(())
}

/// PostgreSQL: `CHAR(n)` ignores trailing spaces and a nondeterministic
/// collation can equate distinct strings; either is refused.
#[cfg(feature = "postgres")]
async fn check_postgres(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    config: &SqlConfig,
) -> Result<()> {
    let [table, queue, records] = tables(config);
    let row = sqlx::query(statements::POSTGRES_FOLDING_COLUMNS)
        .bind(ident(Dialect::Postgres, &table))
        .bind(ident(Dialect::Postgres, &queue))
        .bind(ident(Dialect::Postgres, &records))
        .fetch_optional(&mut **tx)
        .await
        .map_err(|e| map_err(e, config))?;
    let Some(row) = row else { return Ok(()) };
    let text = |i| row.try_get::<String, _>(i).map_err(|e| map_err(e, config));
    let (name, column, data_type, collation) = (text(0)?, text(1)?, text(2)?, text(3)?);
    Err(Error::config(format!(
        "table {name}: column {column} is {data_type} COLLATE \"{collation}\", under which \
         distinct lock names can compare equal; make it VARCHAR(256) with a deterministic \
         collation (`ALTER TABLE {name} ALTER COLUMN {column} TYPE VARCHAR(256) COLLATE \"C\"`)"
    )))
}

/// SQLite: a `COLLATE` other than `BINARY` (`NOCASE`, `RTRIM`) in the
/// tables' definitions folds names together; it is refused. Returns whether
/// the lock table exists.
#[cfg(feature = "sqlite")]
async fn check_sqlite(
    tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
    config: &SqlConfig,
) -> Result<bool> {
    let [table, queue, records] = tables(config);
    let rows = sqlx::query(statements::SQLITE_TABLES)
        .bind(&table)
        .bind(&queue)
        .bind(&records)
        .fetch_all(&mut **tx)
        .await
        .map_err(|e| map_err(e, config))?;
    let mut exists = false;
    for row in rows {
        let name: String = row.try_get(0).map_err(|e| map_err(e, config))?;
        exists |= name.eq_ignore_ascii_case(&table);
        let sql: Option<String> = row.try_get(1).map_err(|e| map_err(e, config))?;
        if let Some(collation) = sql.as_deref().and_then(folding_collation) {
            return Err(Error::config(format!(
                "table {name} declares COLLATE {collation}, under which distinct lock names \
                 compare equal; recreate it without that collation"
            )));
        }
    }
    Ok(exists)
}

/// SQLite: writes a row and takes it back, so that a file SQLite may only
/// read (permissions, a read-only file system, a file format from a newer
/// SQLite) is reported now, by name, rather than by the first acquire. In
/// WAL mode neither `BEGIN IMMEDIATE` nor a write that changes nothing
/// notices. The probe's name holds a control character, which no lock name
/// may contain.
#[cfg(feature = "sqlite")]
async fn probe_sqlite_write(
    tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
    config: &SqlConfig,
) -> Result<()> {
    let insert = statements::sqlite_write_probe(&config.table);
    let err = |e| map_err(e, config);
    tx.execute(statements::SQLITE_PROBE_SAVEPOINT)
        .await
        .map_err(err)?;
    let written = sqlx::query(AssertSqlSafe(insert))
        .bind("\u{1}omnilock write probe")
        .execute(&mut **tx)
        .await;
    tx.execute(statements::SQLITE_PROBE_UNDO)
        .await
        .map_err(err)?;
    tx.execute(statements::SQLITE_PROBE_RELEASE)
        .await
        .map_err(err)?;
    written.map(|_| ()).map_err(err)
}

/// The first collation other than `BINARY` named in a `CREATE TABLE`.
#[cfg(feature = "sqlite")]
fn folding_collation(sql: &str) -> Option<String> {
    let tokens: Vec<&str> = sql
        .split(|c: char| c.is_whitespace() || matches!(c, '(' | ')' | ','))
        .filter(|t| !t.is_empty())
        .collect();
    tokens.windows(2).find_map(|pair| {
        let collation = pair[1].trim_matches(|c| matches!(c, '"' | '\'' | '`' | '[' | ']'));
        (pair[0].eq_ignore_ascii_case("collate") && !collation.eq_ignore_ascii_case("binary"))
            .then(|| collation.to_string())
    })
}

#[cfg(all(test, feature = "sqlite"))]
mod tests {
    use super::folding_collation;

    #[test]
    fn sqlite_collations() {
        assert_eq!(
            folding_collation("CREATE TABLE t (name TEXT PRIMARY KEY)"),
            None
        );
        assert_eq!(
            folding_collation("CREATE TABLE t (name TEXT COLLATE \"BINARY\" PRIMARY KEY)"),
            None
        );
        assert_eq!(
            folding_collation("CREATE TABLE t (name TEXT PRIMARY KEY,owner TEXT collate nocase)"),
            Some("nocase".to_string())
        );
        assert_eq!(
            folding_collation("CREATE TABLE t (name TEXT, PRIMARY KEY (name COLLATE RTRIM))"),
            Some("RTRIM".to_string())
        );
    }
}
