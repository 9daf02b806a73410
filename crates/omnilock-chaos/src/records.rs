//! The protected resource as a table in the lock's own SQL database: one
//! row per lock (`value`, and the `token` of the write that left it). Each
//! client's read-modify-write of a row is one transaction of its own. In
//! *guarded* mode `omnilock::sql::TxGuard::keep` opens it, so the write
//! commits only while the lock is held; *unguarded* (the control), nothing
//! does. Either way the client reports each write as the register would:
//! stale when the row it overwrote carries a higher token, a lost update
//! when the row changed since it was read.

use std::time::Duration;

use omnilock::{ErrorKind, LockGuard};
use rand::Rng;

use crate::history::{Event, Op, Phase, Source, refused_write};

/// The table, beside the lock table.
const TABLE: &str = "omnilock_chaos_records";

/// The application's pool on the store's database.
pub enum Records {
    /// PostgreSQL.
    Postgres(sqlx::PgPool),
    /// MySQL or MariaDB.
    MySql(sqlx::MySqlPool),
    /// SQLite.
    Sqlite(sqlx::SqlitePool),
}

/// Runs `$body` with `$pool` bound to whichever pool `$records` has.
macro_rules! with_pool {
    ($records:expr, $pool:ident => $body:expr) => {
        match $records {
            Records::Postgres($pool) => $body,
            Records::MySql($pool) => $body,
            Records::Sqlite($pool) => $body,
        }
    };
}

fn sql(text: String) -> sqlx::AssertSqlSafe<String> {
    sqlx::AssertSqlSafe(text)
}

impl Records {
    /// A pool on the database of store URL `url` (omnilock's options left
    /// out); `None` for a store that is not SQL.
    pub async fn connect(url: &str) -> Result<Option<Records>, String> {
        let base = url.split('?').next().unwrap_or(url);
        let scheme = base.split("://").next().unwrap_or_default();
        let failed = |e: sqlx::Error| format!("the records' database: {e}");
        Ok(Some(match scheme {
            "postgres" | "postgresql" => {
                Records::Postgres(sqlx::PgPool::connect(base).await.map_err(failed)?)
            }
            "mysql" | "mariadb" => {
                let base = base.replacen("mariadb://", "mysql://", 1);
                Records::MySql(sqlx::MySqlPool::connect(&base).await.map_err(failed)?)
            }
            "sqlite" => Records::Sqlite(
                sqlx::sqlite::SqlitePoolOptions::new()
                    .after_connect(|conn, _| {
                        Box::pin(async move {
                            use sqlx::Executor;
                            for pragma in omnilock::sql::SQLITE_PRAGMAS {
                                conn.execute(*pragma).await?;
                            }
                            Ok(())
                        })
                    })
                    .connect(base)
                    .await
                    .map_err(failed)?,
            ),
            _ => return Ok(None),
        }))
    }

    /// A fresh table with a row of value 0 for each of `locks` locks.
    pub async fn prepare(&self, locks: u32) -> Result<(), String> {
        let failed = |e: sqlx::Error| format!("the records' table: {e}");
        let statements = [
            format!("DROP TABLE IF EXISTS {TABLE}"),
            format!(
                "CREATE TABLE {TABLE} (lock_name VARCHAR(100) PRIMARY KEY, \
                 value BIGINT NOT NULL, token BIGINT NOT NULL)"
            ),
        ];
        for statement in statements {
            with_pool!(self, pool => sqlx::query(sql(statement)).execute(pool).await.map(drop))
                .map_err(failed)?;
        }
        for lock in 0..locks {
            let insert = format!("INSERT INTO {TABLE} VALUES ('chaos-{lock}', 0, 0)");
            with_pool!(self, pool => sqlx::query(sql(insert)).execute(pool).await.map(drop))
                .map_err(failed)?;
        }
        Ok(())
    }

    /// One read-modify-write of `guard`'s row, with up to `work` of work
    /// between the read and the write, in a transaction that `guarded`
    /// opens with `TxGuard::keep`. Returns the events to report.
    pub async fn update(
        &self,
        client: u32,
        guard: &LockGuard,
        guarded: bool,
        work: Duration,
    ) -> Vec<Event> {
        let lock = guard.name().as_str().to_string();
        let token = guard.token();
        let event = |source, op, phase| Event::now(source, op, phase).client(client).lock(&lock);
        let mut events = vec![event(Source::Client, Op::Write, Phase::Invoke).token(token)];
        let select = format!("SELECT value, token FROM {TABLE} WHERE lock_name = '{lock}'");
        // SQLite has no row locks: its one writer at a time does the same.
        let for_update = match self {
            Records::Sqlite(_) => "",
            _ => " FOR UPDATE",
        };
        let outcome: Result<Option<Served>, String> = with_pool!(self, pool => async {
            let failed = |e: sqlx::Error| e.to_string();
            let mut tx = pool.begin().await.map_err(failed)?;
            if guarded {
                let kept = match omnilock::sql::TxGuard::new(guard) {
                    Ok(tx_guard) => tx_guard.keep(&mut *tx).await,
                    Err(e) => Err(e),
                };
                match kept {
                    Ok(()) => {}
                    Err(e) if matches!(e.kind(), ErrorKind::StaleToken | ErrorKind::LockLost) => {
                        let _ = tx.rollback().await;
                        return Ok(None);
                    }
                    Err(e) => return Err(e.to_string()),
                }
            }
            let (read, _): (i64, i64) = sqlx::query_as(sql(select.clone()))
                .fetch_one(&mut *tx)
                .await
                .map_err(failed)?;
            let pause = rand::thread_rng().gen_range(Duration::ZERO..=work);
            tokio::time::sleep(pause).await;
            // The row as it is now, locked for the write: what it overwrites.
            let (now, over): (i64, i64) = sqlx::query_as(sql(format!("{select}{for_update}")))
                .fetch_one(&mut *tx)
                .await
                .map_err(failed)?;
            let update = format!(
                "UPDATE {TABLE} SET value = {}, token = {token} WHERE lock_name = '{lock}'",
                read + 1
            );
            sqlx::query(sql(update)).execute(&mut *tx).await.map_err(failed)?;
            tx.commit().await.map_err(failed)?;
            Ok(Some(Served { read, now, over: over as u64 }))
        }
        .await);
        match outcome {
            Ok(Some(served)) => {
                let mut serve = event(Source::Register, Op::Serve, Phase::Ok)
                    .token(token)
                    .detail("write");
                serve.stale = served.over > token;
                serve.lost_update = served.now != served.read;
                serve.value = Some(served.read + 1);
                events.push(serve);
                events.push(event(Source::Client, Op::Write, Phase::Ok));
            }
            Ok(None) => events.extend(refused_write(
                client,
                &lock,
                token,
                "refused: the lock is no longer held",
            )),
            Err(e) => events.push(event(Source::Client, Op::Write, Phase::Fail).detail(e)),
        }
        events
    }
}

/// What a committed write saw: the value it read, the row's value and
/// token just before its write.
struct Served {
    read: i64,
    now: i64,
    over: u64,
}
