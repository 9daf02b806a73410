//! The statements that set up and check the lock tables (see
//! `crate::schema`): the DDL lock each dialect takes, the catalog queries
//! that find columns which fold lock names together, the MySQL statement
//! that fixes such columns (named in the refusal), and SQLite's write probe. The tables'
//! `CREATE` statements are each dialect's (`Queries::create`).

#[allow(unused_imports)]
use super::{ident, text_type};
#[allow(unused_imports)]
use crate::config::Dialect;

/// PostgreSQL: the transaction's DDL lock; binds the key.
#[cfg(feature = "postgres")]
pub(crate) const POSTGRES_DDL_LOCK: &str =
    "SELECT 1 FROM (SELECT pg_advisory_xact_lock($1)) AS ddl_lock";

/// SQLite: the DDL transaction, which takes the file's write lock at once.
#[cfg(feature = "sqlite")]
pub(crate) const SQLITE_DDL_BEGIN: &str = "BEGIN IMMEDIATE";

/// MySQL/MariaDB: the DDL lock's name, one per database.
#[cfg(feature = "mysql")]
const MYSQL_DDL_LOCK_NAME: &str = "CONCAT('omnilock_ddl:', MD5(DATABASE()))";

/// MySQL/MariaDB: takes the DDL lock; binds the wait in seconds.
#[cfg(feature = "mysql")]
pub(crate) fn mysql_ddl_lock() -> String {
    let lock = MYSQL_DDL_LOCK_NAME;
    format!("SELECT GET_LOCK({lock}, ?)")
}

/// MySQL/MariaDB: frees the DDL lock.
#[cfg(feature = "mysql")]
pub(crate) fn mysql_ddl_unlock() -> String {
    let lock = MYSQL_DDL_LOCK_NAME;
    format!("SELECT RELEASE_LOCK({lock})")
}

/// MySQL/MariaDB: `(table, column, data type, collation)` of the `name`
/// and `owner` columns of three tables; binds their names.
#[cfg(feature = "mysql")]
pub(crate) const MYSQL_NAME_COLUMNS: &str =
    "SELECT CAST(TABLE_NAME AS CHAR), CAST(COLUMN_NAME AS CHAR),
                CAST(DATA_TYPE AS CHAR), CAST(COALESCE(COLLATION_NAME, '') AS CHAR)
         FROM information_schema.COLUMNS
         WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME IN (?, ?, ?)
           AND COLUMN_NAME IN ('name', 'owner')";

/// MySQL/MariaDB: converts table `name`'s `name` and `owner` columns to the
/// binary type; `owner_null` is `NULL` or `NOT NULL`, `None` for a table
/// without `owner` (the records).
#[cfg(feature = "mysql")]
pub(crate) fn mysql_exact_columns(name: &str, owner_null: Option<&str>) -> String {
    let text = text_type(Dialect::MySql);
    let owner = owner_null
        .map(|null| format!(", MODIFY owner {text} {null}"))
        .unwrap_or_default();
    format!(
        "ALTER TABLE {} MODIFY name {text} NOT NULL{owner}",
        ident(Dialect::MySql, name),
    )
}

/// PostgreSQL: `(table, column, type, collation)` of the first `name` or
/// `owner` column of three tables that is `CHAR(n)` or has a
/// nondeterministic collation; binds the tables' quoted names.
#[cfg(feature = "postgres")]
pub(crate) const POSTGRES_FOLDING_COLUMNS: &str =
    "SELECT CAST(c.relname AS TEXT), CAST(a.attname AS TEXT),
                CAST(format_type(a.atttypid, a.atttypmod) AS TEXT),
                CAST(COALESCE(co.collname, '') AS TEXT)
         FROM pg_attribute a
         JOIN pg_class c ON c.oid = a.attrelid
         LEFT JOIN pg_collation co ON co.oid = a.attcollation
         WHERE a.attrelid IN (to_regclass($1), to_regclass($2), to_regclass($3))
           AND a.attname IN ('name', 'owner') AND NOT a.attisdropped
           AND (a.atttypid = 'bpchar'::regtype OR NOT COALESCE(co.collisdeterministic, TRUE))
         LIMIT 1";

/// SQLite: `(name, sql)` of three tables, by name in any case; binds them.
#[cfg(feature = "sqlite")]
pub(crate) const SQLITE_TABLES: &str = "SELECT name, sql FROM sqlite_master
         WHERE type = 'table' AND lower(name) IN (lower(?1), lower(?2), lower(?3))";

/// SQLite: the write probe's row in lock table `table_name`; binds the
/// probe's name.
#[cfg(feature = "sqlite")]
pub(crate) fn sqlite_write_probe(table_name: &str) -> String {
    let table = ident(Dialect::Sqlite, table_name);
    format!("INSERT OR REPLACE INTO {table} (name, holds, token, updated_at) VALUES (?1, 0, 0, 0)")
}

/// SQLite: the savepoint the write probe is taken back to, and released.
#[cfg(feature = "sqlite")]
pub(crate) const SQLITE_PROBE_SAVEPOINT: &str = "SAVEPOINT omnilock_probe";
#[cfg(feature = "sqlite")]
pub(crate) const SQLITE_PROBE_UNDO: &str = "ROLLBACK TO omnilock_probe";
#[cfg(feature = "sqlite")]
pub(crate) const SQLITE_PROBE_RELEASE: &str = "RELEASE omnilock_probe";
