//! The entry point: [`SqlStore`] connects and hands out the store of the
//! configured mode.

use std::sync::Arc;
use std::time::{Duration, Instant};

use omnilock_core::{
    AcquireRequest, Backend, Capabilities, Error, Holder, Inspection, Listed, LockKind, LockName,
    LockSpec, Owner, Record, Result, async_trait,
};

use crate::advisory::AdvisoryStore;
use crate::advisory::Held;
use crate::config::SqlConfig;
use crate::conn::{Conn, Pool, Target};
use crate::guarded::GuardedConnection;
use crate::in_tx::{TxLock, any_conn};
use crate::queries::Queries;
use crate::schema::{self, DDL_WAIT};
use crate::table::TableStore;

/// What a SQL grant carries to release and renew it (a lock row, an entry
/// row's id, or the database session holding an advisory lock); opaque
/// outside the crate.
pub struct SqlHold(pub(crate) HoldKind);

/// The kinds of [`SqlHold`].
pub(crate) enum HoldKind {
    /// A mutex's row: owner and token are all a release needs. `bell` is
    /// true while the hold's bell (MySQL/MariaDB, see `table/bells.rs`) is
    /// still to be let go: it goes once, at the release or at the loss,
    /// whichever comes first. `store`: the table the row is in, for a
    /// guarded transaction (`guarded.rs`).
    Row {
        bell: std::sync::atomic::AtomicBool,
        store: TableStore,
    },
    /// A semaphore's or read-write lock's entry row.
    Entry(i64),
    /// An advisory lock, held by a database session.
    Session(Held),
}

impl SqlHold {
    /// The entry row of a semaphore permit or a side of a read-write lock.
    pub(crate) fn entry(&self) -> Result<i64> {
        match self.0 {
            HoldKind::Entry(id) => Ok(id),
            _ => Err(not_this_kind()),
        }
    }

    /// The session of an advisory lock.
    pub(crate) fn session(&self) -> Result<&Held> {
        match &self.0 {
            HoldKind::Session(held) => Ok(held),
            _ => Err(not_this_kind()),
        }
    }
}

/// A grant whose state is not the one this path made (never through a
/// `Locks` handle).
fn not_this_kind() -> Error {
    Error::new(omnilock_core::ErrorKind::Backend, "grant of another kind")
}

/// A grant of a SQL store.
pub(crate) type Grant = omnilock_core::Grant<SqlHold>;

/// A grant on a lock row of `store`; `bell`: the store took the lock's
/// bell for it.
pub(crate) fn row_grant(store: &TableStore, token: u64, valid_until: Instant, bell: bool) -> Grant {
    omnilock_core::Grant::new(token, valid_until).with_hold(SqlHold(HoldKind::Row {
        bell: std::sync::atomic::AtomicBool::new(bell),
        store: store.clone(),
    }))
}

impl SqlHold {
    /// Whether this hold's bell is still to be let go; true at most once.
    pub(crate) fn take_bell(&self) -> bool {
        match &self.0 {
            HoldKind::Row { bell, .. } => bell.swap(false, std::sync::atomic::Ordering::SeqCst),
            _ => false,
        }
    }
}

/// A lock store on a SQL database. Create it with [`SqlStore::connect`],
/// [`SqlStore::builder`] or through `omnilock::connect("sqlite:///...")`.
///
/// A thin entry point: it picks the store of the configured mode (inside
/// the crate, `TableStore` or `AdvisoryStore`), holds it and passes every
/// call on to it. In table mode (the default) every primitive is rows of
/// the lock tables; in advisory mode (`?mode=advisory`) mutexes are the
/// database's advisory locks, and semaphores and read-write locks stay on
/// the tables.
#[derive(Clone)]
pub struct SqlStore {
    mode: Arc<dyn Backend<Hold = SqlHold>>,
    /// Table mode's store, for locks taken in the caller's transaction
    /// (`None` in advisory mode).
    table: Option<TableStore>,
}

impl std::fmt::Debug for SqlStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("SqlStore").field(&self.mode).finish()
    }
}

impl SqlStore {
    /// Connects, checks the database answers, creates the lock tables if
    /// they are missing (unless `create_table=false`) and checks their
    /// layout (see [docs/backends/sql.md](https://github.com/omnilock/omnilock/blob/main/docs/backends/sql.md)).
    ///
    /// The first connection is opened on its own, not through the pool, so
    /// that what stops it (a refused connection, a file that is not a
    /// database, a read-only file) is reported at once and by name instead
    /// of as a pool timeout; the pool opens its connections on demand.
    pub async fn connect(config: SqlConfig) -> Result<Self> {
        let kind = config.dialect.kind();
        let target = Target::new(&config)?;
        let queries = Queries::new(config.dialect, &config.table, config.notify, config.fair);
        // A server at its connection limit lets the next one in when a
        // client closes one: tried again until the connect timeout.
        let deadline = tokio::time::Instant::now() + config.connect_timeout;
        let mut conn = omnilock_core::retry_when(
            omnilock_core::Backoff::new(Duration::from_millis(50), Duration::from_millis(500)),
            deadline,
            crate::conn::errors::is_connection_limit,
            || async {
                tokio::time::timeout_at(deadline, target.connect_one(&config))
                    .await
                    .map_err(|_| {
                        Error::unavailable(format!(
                            "no answer from the database at {} within {:?}",
                            config.place, config.connect_timeout
                        ))
                        .with_backend(kind)
                    })?
            },
        )
        .await?;
        let prepared = prepare(conn.borrow(), &config, &queries).await;
        // Closing (also on error) frees MySQL's DDL lock at once.
        conn.close().await;
        prepared?;
        let pool = target.pool(&config);
        Ok(SqlStore::start(config, pool, queries, target))
    }

    /// The store of `config`'s mode over `pool`, whose tables `prepare` has
    /// set up; `target` is where advisory mode opens its sessions.
    pub(crate) fn start(config: SqlConfig, pool: Pool, queries: Queries, target: Target) -> Self {
        let advisory = config.advisory;
        let table = TableStore::start(config, pool, queries);
        if advisory {
            SqlStore {
                mode: Arc::new(AdvisoryStore::new(table, target)),
                table: None,
            }
        } else {
            SqlStore {
                mode: Arc::new(table.clone()),
                table: Some(table),
            }
        }
    }

    /// Takes the lock `name` inside the application's own transaction, if
    /// nobody holds it: `Ok(None)` when someone does. The lock is held until
    /// the transaction commits or rolls back; there is nothing to release.
    ///
    /// `conn` is the transaction's connection (`&mut *tx`) to the database
    /// that keeps the lock table. Table mode only: advisory mode answers
    /// `Unsupported` (on PostgreSQL, `pg_advisory_xact_lock` in your own
    /// statement does the same there).
    ///
    /// While the transaction is open, other clients' acquisitions of `name`
    /// wait in the database (a `try_acquire` too), their holder queries do
    /// not see this hold, and the fair line is not consulted: keep the
    /// transaction short. Roll back after `None`: when another client took
    /// the lock between the check and the write, the transaction keeps its
    /// row (SQLite: the database) locked. The check borrows a connection of
    /// the store's pool (keep more than the transactions taking locks at
    /// once); the connection must be in a transaction (`InvalidConfig`). Names are the store's own, without a
    /// [`Locks`](omnilock_core::Locks) handle's namespace. See
    /// [`TxLock`] for what its token is good for, and
    /// docs/backends/sql.md for each database's rules (isolation levels,
    /// SQLite's `BEGIN IMMEDIATE`).
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use omnilock_sql::SqlStore;
    ///
    /// let pool = sqlx::PgPool::connect("postgres://app@db.internal/app").await?;
    /// let store = SqlStore::builder(pool.clone()).build_store().await?;
    ///
    /// let mut tx = pool.begin().await?;
    /// if let Some(lock) = store.try_lock_in(&mut *tx, "ledger").await? {
    ///     sqlx::query("UPDATE ledger SET balance = balance - 10, fence = $1 WHERE id = 1")
    ///         .bind(lock.token() as i64)
    ///         .execute(&mut *tx)
    ///         .await?;
    /// }
    /// tx.commit().await?; // the lock ends here
    /// # Ok(()) }
    /// ```
    pub async fn try_lock_in<C: GuardedConnection>(
        &self,
        conn: &mut C,
        name: &str,
    ) -> Result<Option<TxLock>> {
        self.table_mode(name)?
            .try_lock_in(any_conn(conn), name)
            .await
    }

    /// As [`try_lock_in`](Self::try_lock_in), waiting up to `timeout` for
    /// the lock to be free (polling, at most `max_poll` apart): `Timeout`
    /// when it was not. `WouldDeadlock` when another client took the lock
    /// between the check and the write: the transaction then holds up that
    /// holder's release, so roll it back and try again. A lock held by
    /// another transaction makes the write wait in the database, past the
    /// timeout. Dropped while its write waits, it may still take the lock
    /// in the transaction: roll back after cancelling it.
    pub async fn lock_in<C: GuardedConnection>(
        &self,
        conn: &mut C,
        name: &str,
        timeout: Duration,
    ) -> Result<TxLock> {
        self.table_mode(name)?
            .lock_in(any_conn(conn), name, timeout)
            .await
    }

    /// The table store, or `Unsupported` in advisory mode.
    fn table_mode(&self, name: &str) -> Result<&TableStore> {
        self.table.as_ref().ok_or_else(|| {
            Error::new(
                omnilock_core::ErrorKind::Unsupported,
                "a lock inside your transaction needs table mode: in advisory mode locks are \
                 database sessions' (on PostgreSQL, call pg_advisory_xact_lock yourself)",
            )
            .with_backend(self.kind())
            .with_lock(name)
        })
    }
}

#[async_trait]
impl Backend for SqlStore {
    type Hold = SqlHold;

    fn kind(&self) -> &'static str {
        self.mode.kind()
    }

    fn capabilities(&self) -> Capabilities {
        self.mode.capabilities()
    }

    async fn try_acquire(&self, request: &AcquireRequest) -> Result<Option<Grant>> {
        self.mode.try_acquire(request).await
    }

    async fn try_acquire_all(&self, requests: &[AcquireRequest]) -> Result<Option<Vec<Grant>>> {
        self.mode.try_acquire_all(requests).await
    }

    async fn acquire(&self, request: &AcquireRequest) -> Result<Grant> {
        self.mode.acquire(request).await
    }

    async fn release(&self, spec: &LockSpec, grant: &Grant) -> Result<()> {
        self.mode.release(spec, grant).await
    }

    async fn renew(&self, spec: &LockSpec, grant: &Grant) -> Result<Instant> {
        self.mode.renew(spec, grant).await
    }

    async fn renew_all(&self, holds: &[(&LockSpec, &Grant)]) -> Vec<Result<Instant>> {
        self.mode.renew_all(holds).await
    }

    async fn break_lock(&self, name: &LockName) -> Result<bool> {
        self.mode.break_lock(name).await
    }

    async fn break_holds(
        &self,
        name: &LockName,
        kind: LockKind,
        owner: Option<&Owner>,
    ) -> Result<usize> {
        self.mode.break_holds(name, kind, owner).await
    }

    async fn holder(&self, name: &LockName) -> Result<Option<Holder>> {
        self.mode.holder(name).await
    }

    async fn inspect(&self, name: &LockName, kind: LockKind) -> Result<Inspection> {
        self.mode.inspect(name, kind).await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<Listed>> {
        self.mode.list(prefix).await
    }

    async fn write_record(&self, name: &LockName, value: &str, keep: Duration) -> Result<()> {
        self.mode.write_record(name, value, keep).await
    }

    async fn read_record(&self, name: &LockName) -> Result<Option<Record>> {
        self.mode.read_record(name).await
    }

    async fn delete_record(&self, name: &LockName) -> Result<bool> {
        self.mode.delete_record(name).await
    }

    async fn close(&self) {
        self.mode.close().await
    }
}

/// Creates or checks the lock tables on `conn` (see [`schema`]), giving up
/// after waiting [`DDL_WAIT`] for another client's table creation.
pub(crate) async fn prepare(conn: Conn<'_>, config: &SqlConfig, queries: &Queries) -> Result<()> {
    tokio::time::timeout(
        DDL_WAIT + config.connect_timeout,
        schema::prepare(conn, config, queries),
    )
    .await
    .map_err(|_| {
        Error::unavailable(format!(
            "creating or checking the lock table at {} took too long",
            config.place
        ))
        .with_backend(config.dialect.kind())
    })?
}
