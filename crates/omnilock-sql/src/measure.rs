//! Benchmark hooks: MySQL/MariaDB's own statement counter, and the floor
//! every SQL lock needs (an INSERT of the lock row + a DELETE of it, each its
//! own autocommit transaction).

use omnilock_core::{async_trait, Error, ErrorKind, Measure, Result};

#[cfg(feature = "mysql")]
use crate::conn::Pool;
use crate::queries::Args;
use crate::store::SqlStore;
#[cfg(feature = "mysql")]
use sqlx::Row;

#[async_trait]
impl Measure for SqlStore {
    /// MySQL/MariaDB `Questions` (statements from clients, the `SHOW` itself
    /// included). PostgreSQL's statistics arrive late and SQLite has none.
    async fn requests_served(&self) -> Result<u64> {
        #[cfg(feature = "mysql")]
        #[allow(irrefutable_let_patterns)] // when MySQL is the only dialect built
        if let Pool::MySql(p) = self.pool() {
            let err = |e| self.err(e);
            let questions: String = sqlx::query("SHOW GLOBAL STATUS LIKE 'Questions'")
                .fetch_one(p)
                .await
                .map_err(err)?
                .try_get(1)
                .map_err(err)?;
            return questions
                .parse()
                .map_err(|_| Error::new(ErrorKind::Backend, "Questions is not a number"));
        }
        Err(Error::new(
            ErrorKind::Unsupported,
            "no request counter for this database",
        ))
    }

    fn floor_ops(&self) -> &'static str {
        "INSERT lock row + DELETE it (autocommit)"
    }

    async fn floor_round(&self) -> Result<()> {
        let name = format!(".floor/{:016x}", rand::random::<u64>());
        let args = Args {
            name: &name,
            owner: "floor",
            ..Args::default()
        };
        for statement in &self.queries().floor {
            self.execute(statement, &args).await?;
        }
        Ok(())
    }
}
