//! Benchmark hooks: MySQL/MariaDB's own statement counter, and the floor
//! every SQL lock needs (an INSERT of the lock row + a DELETE of it, each its
//! own autocommit transaction).

use omnilock_core::{async_trait, Error, ErrorKind, Measure, Result};

use crate::backend::SqlStore;
use crate::config::Dialect;

#[async_trait]
impl Measure for SqlStore {
    /// MySQL/MariaDB `Questions` (statements from clients, the `SHOW` itself
    /// included). PostgreSQL's statistics arrive late and SQLite has none.
    async fn requests_served(&self) -> Result<u64> {
        if self.config().dialect != Dialect::MySql {
            return Err(Error::new(
                ErrorKind::Unsupported,
                "no request counter for this database",
            ));
        }
        let row: (String, String) = sqlx::query_as("SHOW GLOBAL STATUS LIKE 'Questions'")
            .fetch_one(self.pool())
            .await
            .map_err(|e| self.err(e))?;
        row.1
            .parse()
            .map_err(|_| Error::new(ErrorKind::Backend, "Questions is not a number"))
    }

    fn floor_ops(&self) -> &'static str {
        "INSERT lock row + DELETE it (autocommit)"
    }

    async fn floor_round(&self) -> Result<()> {
        let table = crate::queries::ident(self.config().dialect, &self.config().table);
        let (insert, delete) = match self.config().dialect {
            Dialect::Postgres => (
                format!("INSERT INTO {table} (name, owner, holds, token, expires_at, updated_at) VALUES ($1, $2, 1, 1, 0, 0)"),
                format!("DELETE FROM {table} WHERE name = $1 AND owner = $2"),
            ),
            _ => (
                format!("INSERT INTO {table} (name, owner, holds, token, expires_at, updated_at) VALUES (?, ?, 1, 1, 0, 0)"),
                format!("DELETE FROM {table} WHERE name = ? AND owner = ?"),
            ),
        };
        let name = format!(".floor/{:016x}", rand::random::<u64>());
        for statement in [insert, delete] {
            sqlx::query(&statement)
                .bind(&name)
                .bind("floor")
                .execute(self.pool())
                .await
                .map_err(|e| self.err(e))?;
        }
        Ok(())
    }
}
