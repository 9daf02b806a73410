//! The conformance suite's guarded writes on SQL: records in a table beside
//! the lock table, each written in the application's own transaction that
//! `omnilock_sql::TxGuard` keeps under the lock.

use std::sync::Arc;

use omnilock_core::{Error, ErrorKind, LockGuard, Result, async_trait};
use omnilock_sql::TxGuard;
use omnilock_testkit::{GuardedWrite, GuardedWrites};

const RECORDS: &str = "omnilock_guarded_records";

/// The application's pool on the database of a test URL.
#[derive(Clone)]
enum AppPool {
    Postgres(sqlx::PgPool),
    MySql(sqlx::MySqlPool),
    Sqlite(sqlx::SqlitePool),
}

/// Runs `$body` with `$pool` bound to whichever pool `$app` is.
macro_rules! with_app_pool {
    ($app:expr, $pool:ident => $body:expr) => {
        match $app {
            AppPool::Postgres($pool) => $body,
            AppPool::MySql($pool) => $body,
            AppPool::Sqlite($pool) => $body,
        }
    };
}

fn failed(e: sqlx::Error) -> Error {
    Error::new(
        ErrorKind::Backend,
        format!("the application's statement: {e}"),
    )
}

/// Guarded writes on the database of the store at `url` (its options are
/// omnilock's and are left out).
pub(crate) async fn open(url: &str) -> Arc<dyn GuardedWrites> {
    let base = url.split('?').next().unwrap_or(url);
    let app = if base.starts_with("postgres") {
        AppPool::Postgres(sqlx::PgPool::connect(base).await.expect("app pool"))
    } else if base.starts_with("mysql") || base.starts_with("mariadb") {
        AppPool::MySql(sqlx::MySqlPool::connect(base).await.expect("app pool"))
    } else {
        let pool = super::sqlite_pool(base).await;
        AppPool::Sqlite(pool)
    };
    let create = format!(
        "CREATE TABLE IF NOT EXISTS {RECORDS} (record VARCHAR(200) PRIMARY KEY, value BIGINT NOT NULL)"
    );
    // Subjects open at once: a lost race to create is no failure.
    let _ = with_app_pool!(&app, pool => sqlx::query(sqlx::AssertSqlSafe(create)).execute(pool).await.map(drop));
    Arc::new(SqlRecords { app })
}

struct SqlRecords {
    app: AppPool,
}

#[async_trait]
impl GuardedWrites for SqlRecords {
    fn prepare(&self, guard: &LockGuard, record: &str) -> Result<Box<dyn GuardedWrite>> {
        Ok(Box::new(SqlWrite {
            app: self.app.clone(),
            guard: TxGuard::new(guard)?,
            record: record.to_string(),
        }))
    }

    async fn read(&self, record: &str) -> Result<Option<u64>> {
        let select = format!("SELECT value FROM {RECORDS} WHERE record = '{record}'");
        let value: Option<(i64,)> = with_app_pool!(&self.app, pool => sqlx::query_as(sqlx::AssertSqlSafe(select))
            .fetch_optional(pool)
            .await
            .map_err(failed)?);
        Ok(value.map(|(v,)| v as u64))
    }
}

struct SqlWrite {
    app: AppPool,
    guard: TxGuard,
    record: String,
}

/// Whether the database rolled the transaction back for a deadlock or a
/// serialization conflict: InnoDB's gap locks make two transactions that
/// delete absent records and insert them deadlock now and then, when the
/// suite runs trials side by side. An application runs it again.
fn rolled_back(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(db) if matches!(db.code().as_deref(), Some("40001" | "40P01")))
}

#[async_trait]
impl GuardedWrite for SqlWrite {
    async fn write(&self, value: u64) -> Result<bool> {
        let mut tries = 0;
        loop {
            match self.write_once(value).await {
                Err(Retry(e)) if rolled_back(&e) && tries < 3 => tries += 1,
                Err(Retry(e)) => return Err(failed(e)),
                Ok(written) => return written,
            }
        }
    }
}

/// An application statement's failure, kept whole to look at its code.
struct Retry(sqlx::Error);

impl SqlWrite {
    /// One transaction: `Ok` with the write's outcome (or the guard's
    /// error), `Err` with a statement's failure.
    async fn write_once(&self, value: u64) -> std::result::Result<Result<bool>, Retry> {
        let record = &self.record;
        let delete = format!("DELETE FROM {RECORDS} WHERE record = '{record}'");
        let insert = format!("INSERT INTO {RECORDS} (record, value) VALUES ('{record}', {value})");
        with_app_pool!(&self.app, pool => {
            let mut tx = pool.begin().await.map_err(Retry)?;
            match self.guard.keep(&mut *tx).await {
                Ok(()) => {}
                Err(e) if matches!(e.kind(), ErrorKind::StaleToken | ErrorKind::LockLost) => {
                    tx.rollback().await.map_err(Retry)?;
                    return Ok(Ok(false));
                }
                Err(e) => return Ok(Err(e)),
            }
            sqlx::query(sqlx::AssertSqlSafe(delete)).execute(&mut *tx).await.map_err(Retry)?;
            sqlx::query(sqlx::AssertSqlSafe(insert)).execute(&mut *tx).await.map_err(Retry)?;
            tx.commit().await.map_err(Retry)?;
            Ok(Ok(true))
        })
    }
}
