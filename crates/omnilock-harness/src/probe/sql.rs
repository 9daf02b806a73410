//! SQL databases: MySQL/MariaDB's `Questions` counter (PostgreSQL's
//! statistics arrive late and SQLite has none) and the floor every SQL lock
//! needs: an INSERT of a keyed row and a DELETE of it, each its own
//! autocommit statement, on a table of the probe's own, over a connection
//! without TLS (the raw cost; omnilock pays TLS when its URL asks for it,
//! and `sslmode=prefer`, the default, does).

use std::time::Duration;

use omnilock_core::{Error, Result, StoreUrl};
use sqlx::mysql::{MySqlConnectOptions, MySqlPool, MySqlPoolOptions, MySqlSslMode};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions, PgSslMode};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions};
use sqlx::{Executor, Row};

use super::random_suffix;

pub(super) const FLOOR_OPS: &str = "INSERT keyed row + DELETE it (autocommit, no TLS)";

/// The probe's own table, beside omnilock's.
const TABLE: &str = "omnilock_probe_floor";

/// Runs `$body` with `$pool` bound to the dialect's own pool type.
macro_rules! on_pool {
    ($probe:expr, $pool:ident => $body:expr) => {
        match $probe {
            SqlProbe::MySql($pool) => $body,
            SqlProbe::Postgres($pool) => $body,
            SqlProbe::Sqlite($pool) => $body,
        }
    };
}

pub(super) enum SqlProbe {
    MySql(MySqlPool),
    Postgres(PgPool),
    Sqlite(SqlitePool),
}

impl SqlProbe {
    pub(super) async fn connect(url: &StoreUrl) -> Result<Self> {
        let host = url.hosts().first();
        let (host, port) = (
            host.map_or("localhost".to_string(), |h| h.host.clone()),
            host.and_then(|h| h.port),
        );
        let user = url.username().unwrap_or_default();
        let password = url.password().map(|p| p.expose()).unwrap_or_default();
        let probe = match url.scheme() {
            "mysql" | "mariadb" => {
                let options = MySqlConnectOptions::new()
                    .host(&host)
                    .port(port.unwrap_or(3306))
                    .username(user)
                    .password(password)
                    .database(url.path())
                    .ssl_mode(MySqlSslMode::Disabled);
                let pool = MySqlPoolOptions::new()
                    .max_connections(4)
                    .acquire_timeout(Duration::from_secs(5))
                    .connect_with(options)
                    .await
                    .map_err(fail)?;
                SqlProbe::MySql(pool)
            }
            "postgres" | "postgresql" => {
                let mut options = PgConnectOptions::new()
                    .host(&host)
                    .port(port.unwrap_or(5432))
                    .username(user)
                    .database(url.path())
                    .ssl_mode(PgSslMode::Disable);
                if !password.is_empty() {
                    options = options.password(password);
                }
                let pool = PgPoolOptions::new()
                    .max_connections(4)
                    .acquire_timeout(Duration::from_secs(5))
                    .connect_with(options)
                    .await
                    .map_err(fail)?;
                SqlProbe::Postgres(pool)
            }
            _ => {
                // The settings omnilock's SQLite store uses.
                let options = SqliteConnectOptions::new()
                    .filename(format!("/{}", url.path()))
                    .create_if_missing(true)
                    .journal_mode(SqliteJournalMode::Wal)
                    .busy_timeout(Duration::from_secs(5));
                let pool = SqlitePoolOptions::new()
                    .max_connections(4)
                    .connect_with(options)
                    .await
                    .map_err(fail)?;
                SqlProbe::Sqlite(pool)
            }
        };
        probe.create_table().await?;
        Ok(probe)
    }

    async fn create_table(&self) -> Result<()> {
        let text = match self {
            SqlProbe::Sqlite(_) => "TEXT",
            _ => "VARCHAR(64)",
        };
        let ddl = format!(
            "CREATE TABLE IF NOT EXISTS {TABLE} \
             (name {text} NOT NULL PRIMARY KEY, owner {text} NOT NULL)"
        );
        let ddl = sqlx::AssertSqlSafe(ddl);
        on_pool!(self, pool => pool.execute(ddl).await.map(drop)).map_err(fail)
    }

    /// MySQL/MariaDB `Questions`: statements from clients, the `SHOW`
    /// itself included.
    pub(super) async fn requests_served(&self) -> Result<u64> {
        let SqlProbe::MySql(pool) = self else {
            return Err(super::no_counter("PostgreSQL or SQLite"));
        };
        let questions: String = sqlx::query("SHOW GLOBAL STATUS LIKE 'Questions'")
            .fetch_one(pool)
            .await
            .map_err(fail)?
            .try_get(1)
            .map_err(fail)?;
        questions
            .parse()
            .map_err(|_| Error::unavailable("Questions is not a number"))
    }

    pub(super) async fn floor_round(&self) -> Result<()> {
        let name = random_suffix();
        let statements = match self {
            SqlProbe::Postgres(_) => [
                "INSERT INTO omnilock_probe_floor (name, owner) VALUES ($1, $2)",
                "DELETE FROM omnilock_probe_floor WHERE name = $1 AND owner = $2",
            ],
            _ => [
                "INSERT INTO omnilock_probe_floor (name, owner) VALUES (?, ?)",
                "DELETE FROM omnilock_probe_floor WHERE name = ? AND owner = ?",
            ],
        };
        for statement in statements {
            on_pool!(self, pool => {
                let query = sqlx::query(statement).bind(&name).bind("floor");
                query.execute(pool).await.map(drop)
            })
            .map_err(fail)?;
        }
        Ok(())
    }
}

fn fail(err: sqlx::Error) -> Error {
    Error::unavailable(format!("sql probe: {err}"))
}
