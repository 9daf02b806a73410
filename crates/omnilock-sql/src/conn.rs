//! Connections: one pool type per dialect (no sqlx `Any`: it needs the
//! process-wide driver list, which a host application may install itself),
//! the code that opens them, the one place that binds a statement's values,
//! and (in [`errors`]) how the databases' errors are classified.

use std::str::FromStr;

use omnilock_core::{Error, Result};
#[cfg(feature = "sqlite")]
use sqlx::Executor;
use sqlx::query::Query;
use sqlx::{Connection, Database, Encode, Type};

pub(crate) mod errors;

use crate::config::{Dialect, SqlConfig};
use crate::queries::{Args, Param, Statement};
use errors::map_err;

#[cfg(feature = "sqlite")]
use errors::{sqlite_is_busy, sqlite_is_permanent};

#[cfg(not(any(feature = "sqlite", feature = "mysql", feature = "postgres")))]
compile_error!("omnilock-sql needs at least one of the features sqlite, mysql, postgres");

/// Settings of every SQLite connection omnilock opens: WAL lets readers and
/// one writer work at once; the busy timeout makes a writer wait for the
/// file lock instead of failing; `NORMAL` sync is durable across process
/// crashes in WAL mode. Apply them to a pool you hand to
/// [`SqlStore::builder`](crate::SqlStore::builder) as well.
pub const SQLITE_PRAGMAS: &[&str] = &[
    "PRAGMA busy_timeout = 5000",
    "PRAGMA journal_mode = WAL",
    "PRAGMA synchronous = NORMAL",
];

/// Applies [`SQLITE_PRAGMAS`]. Switching a new file to WAL needs the file
/// to itself, and SQLite answers a second connection doing the same at that
/// moment with SQLITE_BUSY at once, busy timeout or not: several processes
/// opening a new file together (cron on many hosts, the first run of a
/// pool) would fail. Busy is retried for up to the busy timeout.
#[cfg(feature = "sqlite")]
async fn apply_sqlite_pragmas(conn: &mut sqlx::SqliteConnection) -> sqlx::Result<()> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let mut backoff = omnilock_core::Backoff::new(
        std::time::Duration::from_millis(5),
        std::time::Duration::from_millis(100),
    );
    for pragma in SQLITE_PRAGMAS {
        loop {
            match conn.execute(*pragma).await {
                Ok(_) => break,
                Err(e) if sqlite_is_busy(&e) && std::time::Instant::now() < deadline => {
                    tokio::time::sleep(backoff.next_delay()).await;
                }
                Err(e) => return Err(e),
            }
        }
    }
    Ok(())
}

/// A pool of one dialect's connections.
#[derive(Debug, Clone)]
pub(crate) enum Pool {
    #[cfg(feature = "sqlite")]
    Sqlite(sqlx::SqlitePool),
    #[cfg(feature = "mysql")]
    MySql(sqlx::MySqlPool),
    #[cfg(feature = "postgres")]
    Postgres(sqlx::PgPool),
}

/// Runs `$body` with `$p` bound to the dialect's own pool: the body is
/// compiled once per dialect, each time against that driver's types.
macro_rules! with_pool {
    ($pool:expr, $p:ident => $body:expr) => {
        match $pool {
            #[cfg(feature = "sqlite")]
            $crate::conn::Pool::Sqlite($p) => $body,
            #[cfg(feature = "mysql")]
            $crate::conn::Pool::MySql($p) => $body,
            #[cfg(feature = "postgres")]
            $crate::conn::Pool::Postgres($p) => $body,
        }
    };
}
pub(crate) use with_pool;

/// Runs `statement` on `conn`: the first column of its row, if any.
macro_rules! fetch_token {
    ($conn:expr, $statement:expr, $args:expr) => {
        query($statement, $args)
            .fetch_optional(&mut *$conn)
            .await
            .and_then(|row| row.map(|row| row.try_get::<i64, _>(0)).transpose())
    };
}
pub(crate) use fetch_token;

impl Pool {
    pub(crate) fn dialect(&self) -> Dialect {
        match self {
            #[cfg(feature = "sqlite")]
            Pool::Sqlite(_) => Dialect::Sqlite,
            #[cfg(feature = "mysql")]
            Pool::MySql(_) => Dialect::MySql,
            #[cfg(feature = "postgres")]
            Pool::Postgres(_) => Dialect::Postgres,
        }
    }

    pub(crate) async fn close(&self) {
        with_pool!(self, p => p.close().await)
    }
}

/// `statement` with its values bound, in the order its placeholders take
/// them.
pub(crate) fn query<'q, DB>(
    statement: &Statement,
    args: &Args<'_>,
) -> Query<'q, DB, <DB as Database>::Arguments>
where
    DB: Database,
    for<'a> &'a str: Encode<'a, DB> + Type<DB>,
    for<'a> i64: Encode<'a, DB> + Type<DB>,
{
    let mut query = sqlx::query::<DB>(statement.sql.clone());
    for param in &statement.params {
        query = match param {
            Param::Name => query.bind(args.name),
            Param::Owner => query.bind(args.owner),
            Param::TtlMs => query.bind(args.ttl_ms),
            Param::Reentrant => query.bind(args.reentrant),
            Param::Ticket => query.bind(args.ticket),
            Param::LeaseMs => query.bind(args.lease_ms),
            Param::Id => query.bind(args.id),
            Param::Token => query.bind(args.token),
            Param::Family => query.bind(args.family),
            Param::Weight => query.bind(args.weight),
            Param::Capacity => query.bind(args.capacity),
            Param::RangeStart => query.bind(args.range_start),
            Param::RangeEnd => query.bind(args.range_end),
            Param::Value => query.bind(args.value),
            Param::KeepMs => query.bind(args.keep_ms),
        };
    }
    query
}

/// A connection of the store's dialect, borrowed for setup (table creation
/// and checks).
pub(crate) enum Conn<'a> {
    #[cfg(feature = "sqlite")]
    Sqlite(&'a mut sqlx::SqliteConnection),
    #[cfg(feature = "mysql")]
    MySql(&'a mut sqlx::MySqlConnection),
    #[cfg(feature = "postgres")]
    Postgres(&'a mut sqlx::PgConnection),
}

/// Where omnilock's own pool connects: the URL's settings as sqlx options.
#[derive(Clone)]
pub(crate) enum Target {
    #[cfg(feature = "sqlite")]
    Sqlite(sqlx::sqlite::SqliteConnectOptions),
    #[cfg(feature = "mysql")]
    MySql(sqlx::mysql::MySqlConnectOptions),
    #[cfg(feature = "postgres")]
    Postgres(sqlx::postgres::PgConnectOptions),
}

/// A connection omnilock opened on its own, closed after setup.
pub(crate) enum OwnedConn {
    #[cfg(feature = "sqlite")]
    Sqlite(sqlx::SqliteConnection),
    #[cfg(feature = "mysql")]
    MySql(sqlx::MySqlConnection),
    #[cfg(feature = "postgres")]
    Postgres(sqlx::PgConnection),
}

impl OwnedConn {
    pub(crate) fn borrow(&mut self) -> Conn<'_> {
        match self {
            #[cfg(feature = "sqlite")]
            OwnedConn::Sqlite(c) => Conn::Sqlite(c),
            #[cfg(feature = "mysql")]
            OwnedConn::MySql(c) => Conn::MySql(c),
            #[cfg(feature = "postgres")]
            OwnedConn::Postgres(c) => Conn::Postgres(c),
        }
    }

    pub(crate) async fn close(self) {
        let _ = match self {
            #[cfg(feature = "sqlite")]
            OwnedConn::Sqlite(c) => c.close().await,
            #[cfg(feature = "mysql")]
            OwnedConn::MySql(c) => c.close().await,
            #[cfg(feature = "postgres")]
            OwnedConn::Postgres(c) => c.close().await,
        };
    }
}

/// The answer for a dialect whose cargo feature is off.
#[allow(dead_code)] // unused when every feature is on
fn not_built(dialect: Dialect) -> Error {
    let feature = dialect.kind();
    Error::config(format!(
        "{feature} needs the cargo feature `{feature}` of omnilock (or omnilock-sql)"
    ))
}

impl Target {
    /// The connect options for `config`'s URL; checks the TLS files.
    pub(crate) fn new(config: &SqlConfig) -> Result<Self> {
        config.tls.check_files()?;
        // Our own URL, built from checked parts: a failure here must not
        // quote it (it holds the password).
        let invalid = |_| {
            Error::config(format!("invalid database settings for {}", config.place))
                .with_backend(config.dialect.kind())
        };
        let url = config.database_url.expose();
        match config.dialect {
            #[cfg(feature = "sqlite")]
            Dialect::Sqlite => Ok(Target::Sqlite(
                sqlx::sqlite::SqliteConnectOptions::from_str(url).map_err(invalid)?,
            )),
            #[cfg(feature = "mysql")]
            Dialect::MySql => Ok(Target::MySql(config.tls.apply_mysql(
                sqlx::mysql::MySqlConnectOptions::from_str(url).map_err(invalid)?,
            ))),
            #[cfg(feature = "postgres")]
            Dialect::Postgres => Ok(Target::Postgres(config.tls.apply_postgres(
                sqlx::postgres::PgConnectOptions::from_str(url).map_err(invalid)?,
            ))),
            #[allow(unreachable_patterns)]
            other => Err(not_built(other)),
        }
    }

    /// One connection, outside any pool, so that what stops it (a refused
    /// connection, a certificate, a file that is not a database) is
    /// reported by name instead of as a pool timeout.
    pub(crate) async fn connect_one(&self, config: &SqlConfig) -> Result<OwnedConn> {
        // sqlx's TLS (PostgreSQL tries it by default) takes the process's
        // provider.
        omnilock_core::ensure_crypto_provider();
        let err = |e| map_err(e, config);
        Ok(match self {
            #[cfg(feature = "sqlite")]
            Target::Sqlite(options) => {
                let mut conn = sqlx::SqliteConnection::connect_with(options)
                    .await
                    .map_err(err)?;
                apply_sqlite_pragmas(&mut conn).await.map_err(err)?;
                OwnedConn::Sqlite(conn)
            }
            #[cfg(feature = "mysql")]
            Target::MySql(options) => OwnedConn::MySql(
                sqlx::MySqlConnection::connect_with(options)
                    .await
                    .map_err(err)?,
            ),
            #[cfg(feature = "postgres")]
            Target::Postgres(options) => OwnedConn::Postgres(
                sqlx::PgConnection::connect_with(options)
                    .await
                    .map_err(err)?,
            ),
        })
    }

    /// Where `pool` connects: its own connect options (credentials, TLS),
    /// for connections omnilock opens beside an application's pool.
    pub(crate) fn of_pool(pool: &Pool) -> Self {
        match pool {
            #[cfg(feature = "sqlite")]
            Pool::Sqlite(p) => Target::Sqlite((*p.connect_options()).clone()),
            #[cfg(feature = "mysql")]
            Pool::MySql(p) => Target::MySql((*p.connect_options()).clone()),
            #[cfg(feature = "postgres")]
            Pool::Postgres(p) => Target::Postgres((*p.connect_options()).clone()),
        }
    }

    /// omnilock's pool: `?pool=` connections, opened on demand.
    pub(crate) fn pool(&self, config: &SqlConfig) -> Pool {
        omnilock_core::ensure_crypto_provider();
        macro_rules! options {
            () => {
                sqlx::pool::PoolOptions::new()
                    .max_connections(config.pool_size)
                    .acquire_timeout(config.connect_timeout)
                    // sqlx pings every connection it hands out: a round
                    // trip on the caller's path before each statement, and
                    // after a wait (a hand-off) a slow one. (The ping when
                    // a connection goes back stays: sqlx runs it in the
                    // background.) Only a connection idle long enough for
                    // the server or a firewall to have dropped it is
                    // pinged first (HikariCP's rule); one that fails is
                    // closed and another taken. A statement on a
                    // connection that broke sooner fails as `Unavailable`,
                    // which a waiting acquire, a release and the renewal
                    // retry.
                    .test_before_acquire(false)
                    .before_acquire(ping_if_idle)
            };
        }
        match self {
            #[cfg(feature = "sqlite")]
            Target::Sqlite(options) => Pool::Sqlite(
                options!()
                    .after_connect(|conn: &mut sqlx::SqliteConnection, _meta| {
                        Box::pin(async move {
                            match apply_sqlite_pragmas(conn).await {
                                // Keep the connection: the statement it
                                // serves fails with this error, at once and
                                // by name.
                                Err(e) if sqlite_is_permanent(&e) => Ok(()),
                                result => result,
                            }
                        })
                    })
                    .connect_lazy_with(options.clone()),
            ),
            #[cfg(feature = "mysql")]
            Target::MySql(options) => Pool::MySql(options!().connect_lazy_with(options.clone())),
            #[cfg(feature = "postgres")]
            Target::Postgres(options) => {
                Pool::Postgres(options!().connect_lazy_with(options.clone()))
            }
        }
    }
}

/// How long a pooled connection may sit idle before it is pinged on its way
/// out of the pool.
const PING_AFTER_IDLE: std::time::Duration = std::time::Duration::from_secs(1);

/// The pool's check of a connection it hands out: a ping only after
/// [`PING_AFTER_IDLE`] of idleness (see [`Target::pool`]).
fn ping_if_idle<C: Connection>(
    conn: &mut C,
    meta: sqlx::pool::PoolConnectionMetadata,
) -> futures_util::future::BoxFuture<'_, std::result::Result<bool, sqlx::Error>> {
    Box::pin(async move {
        if meta.idle_for < PING_AFTER_IDLE {
            return Ok(true);
        }
        conn.ping().await.map(|()| true)
    })
}
