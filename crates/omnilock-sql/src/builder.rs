//! A store on the application's own sqlx pool: the same options as the
//! URL, set by typed methods, on connections and credentials the
//! application already has. The store is of the mode the settings pick:
//! table mode, or advisory mode with [`SqlStoreBuilder::advisory`].

use std::time::Duration;

use omnilock_core::{Error, Locks, Result, Secret, check_ttl};

use crate::config::{self, DEFAULT_TABLE, Dialect, SqlConfig};
use crate::conn::{Conn, Pool, Target};
use crate::queries::Queries;
use crate::store::{SqlStore, prepare};
use crate::tls::TlsOptions;

/// An application's sqlx pool, of any dialect omnilock was built with:
/// made from a `sqlx::PgPool`, `sqlx::MySqlPool` or `sqlx::SqlitePool` by
/// `From` (so [`SqlStore::builder`] takes any of them).
#[derive(Debug, Clone)]
pub struct SqlPool(pub(crate) Pool);

#[cfg(feature = "postgres")]
impl From<sqlx::PgPool> for SqlPool {
    fn from(pool: sqlx::PgPool) -> Self {
        SqlPool(Pool::Postgres(pool))
    }
}

#[cfg(feature = "mysql")]
impl From<sqlx::MySqlPool> for SqlPool {
    fn from(pool: sqlx::MySqlPool) -> Self {
        SqlPool(Pool::MySql(pool))
    }
}

#[cfg(feature = "sqlite")]
impl From<sqlx::SqlitePool> for SqlPool {
    fn from(pool: sqlx::SqlitePool) -> Self {
        SqlPool(Pool::Sqlite(pool))
    }
}

/// Settings for a store on an application's pool; see [`SqlStore::builder`].
///
/// Each method is the URL option of the same name. What the URL says about
/// connections (`pool`, `sslmode` and the certificates, user, password)
/// belongs to the pool the application built.
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `build` is awaited"]
pub struct SqlStoreBuilder {
    pool: Pool,
    table: String,
    max_poll: Duration,
    connect_timeout: Duration,
    create_table: bool,
    notify: Option<bool>,
    fair: Option<bool>,
    advisory: bool,
    sessions: u32,
    ttl: Option<Duration>,
}

impl SqlStore {
    /// A store on a pool the application already has (`sqlx::PgPool`,
    /// `sqlx::MySqlPool` or `sqlx::SqlitePool`), so that omnilock shares its
    /// connections and credentials instead of opening a second set.
    ///
    /// omnilock takes connections from the pool only for single statements
    /// (and, once, to create or check its table); PostgreSQL's NOTIFY
    /// listener opens one more connection with the pool's connect options,
    /// so it never holds one of the pool's. On a SQLite pool, set
    /// [`SQLITE_PRAGMAS`](crate::SQLITE_PRAGMAS) yourself (at least the busy
    /// timeout), as omnilock does on its own connections.
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> omnilock_core::Result<()> {
    /// use std::time::Duration;
    /// use omnilock_sql::SqlStore;
    ///
    /// let pool = sqlx::PgPool::connect("postgres://app@db.internal/app").await.unwrap();
    /// let locks = SqlStore::builder(pool.clone())
    ///     .table("app_locks")
    ///     .ttl(Duration::from_secs(30))
    ///     .build()
    ///     .await?;
    /// let guard = locks.acquire("nightly-report").await?;
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn builder(pool: impl Into<SqlPool>) -> SqlStoreBuilder {
        let pool = pool.into().0;
        SqlStoreBuilder {
            pool,
            table: DEFAULT_TABLE.to_string(),
            max_poll: config::DEFAULT_MAX_POLL,
            connect_timeout: config::DEFAULT_CONNECT_TIMEOUT,
            create_table: true,
            notify: None,
            fair: None,
            advisory: false,
            sessions: config::DEFAULT_SESSIONS as u32,
            ttl: None,
        }
    }
}

impl SqlStoreBuilder {
    /// The lock table (`?table=`, default `omnilock_locks`).
    pub fn table(mut self, table: impl Into<String>) -> Self {
        self.table = table.into();
        self
    }

    /// The longest pause between two polls of a busy lock (`?max_poll=`,
    /// default 250ms).
    pub fn max_poll(mut self, max_poll: Duration) -> Self {
        self.max_poll = max_poll;
        self
    }

    /// How long to wait for the database when setting up (`?connect_timeout=`,
    /// default 5s). Waiting for a pool connection is the pool's own
    /// `acquire_timeout`.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Whether to create the tables if missing (`?create_table=`, default true).
    pub fn create_table(mut self, create: bool) -> Self {
        self.create_table = create;
        self
    }

    /// Wake waiters in other processes through the database (`?notify=`,
    /// default true): PostgreSQL by LISTEN/NOTIFY, MySQL/MariaDB's mutexes
    /// by a wake-up `GET_LOCK`. SQLite has neither.
    pub fn notify(mut self, notify: bool) -> Self {
        self.notify = Some(notify);
        self
    }

    /// Serve waiters in request order (`?fair=`, default true; false in
    /// advisory mode, where the database picks the next waiter).
    pub fn fair(mut self, fair: bool) -> Self {
        self.fair = Some(fair);
        self
    }

    /// Advisory mode (`?mode=advisory`, MySQL/MariaDB and PostgreSQL):
    /// mutexes are the database's session locks. Their sessions are opened
    /// with the pool's connect options but are not the pool's: each held
    /// lock keeps one (see [docs/backends/sql.md](https://github.com/omnilock/omnilock/blob/main/docs/backends/sql.md), *Advisory mode*).
    pub fn advisory(mut self, advisory: bool) -> Self {
        self.advisory = advisory;
        self
    }

    /// Advisory mode: sessions opened for held locks before they share
    /// them (`?sessions=`, default 64).
    pub fn sessions(mut self, sessions: u32) -> Self {
        self.sessions = sessions;
        self
    }

    /// The default lease of the returned handle's locks (`?ttl=`, default 15s).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// Checks the settings, creates or checks the lock tables through the
    /// pool, and returns the handle.
    ///
    /// Errors: [`InvalidConfig`](omnilock_core::ErrorKind::InvalidConfig) for
    /// a setting the URL would refuse (a bad table name, `notify` on a
    /// database other than PostgreSQL, `advisory` on SQLite or with `fair`,
    /// a TTL out of range);
    /// [`Unavailable`](omnilock_core::ErrorKind::Unavailable) when the
    /// pool gives no connection.
    pub async fn build(self) -> Result<Locks> {
        let ttl = self.ttl;
        let locks = Locks::new(self.build_store().await?);
        match ttl {
            Some(ttl) => locks.with_ttl(ttl),
            None => Ok(locks),
        }
    }

    /// As [`build`](Self::build), returning the store itself (to wrap in
    /// [`Locks::new`] yourself; the `ttl` setting is the handle's, so it
    /// does not apply here).
    pub async fn build_store(self) -> Result<SqlStore> {
        let dialect = self.pool.dialect();
        config::check_table(&self.table, dialect)?;
        config::check_max_poll(self.max_poll)?;
        config::check_connect_timeout(self.connect_timeout)?;
        config::check_mode(dialect, self.advisory, self.fair == Some(true))?;
        config::check_sessions(u64::from(self.sessions))?;
        if let Some(ttl) = self.ttl {
            check_ttl(ttl)?;
        }
        let notify = match (dialect, self.notify) {
            (Dialect::Postgres | Dialect::MySql, notify) => notify.unwrap_or(true),
            (Dialect::Sqlite, Some(true)) => {
                return Err(Error::config(
                    "notify is PostgreSQL's and MySQL/MariaDB's; this pool is SQLite's",
                ));
            }
            (Dialect::Sqlite, _) => false,
        };
        let place = place(&self.pool);
        let config = SqlConfig {
            dialect,
            database_url: Secret::new(String::new()),
            shown: format!("{}://{place} (application pool)", dialect.kind()),
            place,
            table: self.table,
            max_poll: self.max_poll,
            connect_timeout: self.connect_timeout,
            // The application's pool size: MySQL/MariaDB's waiters block on
            // bells on as many connections of their own (see `bells.rs`).
            pool_size: max_connections(&self.pool),
            // The application's pool: its connections are its own.
            max_idle: max_connections(&self.pool),
            create_table: self.create_table,
            notify,
            waiting_mark: config::waiting_mark(self.max_poll),
            fair: self.fair.unwrap_or(!self.advisory),
            tls: TlsOptions::default(),
            advisory: self.advisory,
            advisory_sessions: self.sessions,
        };
        let queries = Queries::new(dialect, &config.table, notify, config.fair);
        prepare_on_pool(&self.pool, &config, &queries).await?;
        let target = Target::of_pool(&self.pool);
        Ok(SqlStore::start(config, self.pool, queries, target))
    }
}

/// Sets up the tables on one of the pool's connections. On error the
/// connection is closed, not returned: it may hold MySQL's DDL lock or be
/// inside a transaction.
async fn prepare_on_pool(pool: &Pool, config: &SqlConfig, queries: &Queries) -> Result<()> {
    let err = |e| crate::conn::errors::map_err(e, config);
    macro_rules! on_one {
        ($p:expr, $variant:ident) => {{
            let mut conn = $p.acquire().await.map_err(err)?;
            let prepared = prepare(Conn::$variant(&mut *conn), config, queries).await;
            if prepared.is_err() {
                let _ = conn.close().await;
            }
            prepared
        }};
    }
    match pool {
        #[cfg(feature = "sqlite")]
        Pool::Sqlite(p) => on_one!(p, Sqlite),
        #[cfg(feature = "mysql")]
        Pool::MySql(p) => on_one!(p, MySql),
        #[cfg(feature = "postgres")]
        Pool::Postgres(p) => on_one!(p, Postgres),
    }
}

/// What errors name: the server's `host:port`, or the SQLite file.
/// How many connections the application's pool may open.
fn max_connections(pool: &Pool) -> u32 {
    crate::conn::with_pool!(pool, p => p.options().get_max_connections())
}

fn place(pool: &Pool) -> String {
    match pool {
        #[cfg(feature = "sqlite")]
        Pool::Sqlite(p) => p.connect_options().get_filename().display().to_string(),
        #[cfg(feature = "mysql")]
        Pool::MySql(p) => {
            let o = p.connect_options();
            format!("{}:{}", o.get_host(), o.get_port())
        }
        #[cfg(feature = "postgres")]
        Pool::Postgres(p) => {
            let o = p.connect_options();
            format!("{}:{}", o.get_host(), o.get_port())
        }
    }
}
