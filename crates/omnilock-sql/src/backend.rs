//! The SQL lock store: one row per lock, taken and released by single
//! atomic statements, waited for by polling with backoff and jitter.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use omnilock_core::{
    async_trait, complete_or_undo, AcquireRequest, Backend, Backoff, Capabilities, Error,
    ErrorKind, Grant, LocalWaiters, LockName, Owner, Result,
};
use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::{AnyConnection, AnyPool, Connection, Executor, Row};
use tokio::sync::Notify;

use crate::config::{Dialect, SqlConfig};
use crate::errors::{map_err, sqlite_is_permanent};
use crate::queries::{Acquire, Queries};
use crate::schema::{self, DDL_WAIT};

/// Settings of every SQLite connection: WAL lets readers and one writer work
/// at once; the busy timeout makes a writer wait for the file lock instead of
/// failing; `NORMAL` sync is durable across process crashes in WAL mode.
pub const SQLITE_PRAGMAS: &[&str] = &[
    "PRAGMA busy_timeout = 5000",
    "PRAGMA journal_mode = WAL",
    "PRAGMA synchronous = NORMAL",
];

/// A lock store on a SQL database. Create it with [`SqlStore::connect`] or
/// through `omnilock::connect("sqlite:///...")`.
#[derive(Clone)]
pub struct SqlStore {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    config: SqlConfig,
    pool: AnyPool,
    queries: Queries,
    /// Waiters in this process, per lock: a release here (or, on
    /// PostgreSQL, a NOTIFY from any process) wakes one of them at once
    /// instead of at its next poll.
    local_waiters: LocalWaiters,
    /// Fair mode: tickets of abandoned waits still being deleted. An
    /// attempt from this client waits for them first, so that its own
    /// cancelled waits never stand in its way (see `settle_tickets`).
    leaving: AtomicUsize,
    left: Notify,
    /// The PostgreSQL LISTEN task, stopped with the store.
    listener: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(task) = self.listener.get_mut().ok().and_then(|t| t.take()) {
            task.abort();
        }
    }
}

impl Inner {
    pub(crate) fn wake_local(&self, name: &LockName) {
        if self.config.fair {
            // Only the head of the line may take it; let each look.
            self.local_waiters.wake_all(name);
        } else {
            self.local_waiters.wake_one(name);
        }
    }
}

/// A place in the fair waiting line; dropping it leaves the line.
struct Ticket {
    id: i64,
    store: SqlStore,
    refreshed: Instant,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let (store, id) = (self.store.clone(), self.id);
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            self.store.inner.leaving.fetch_add(1, Ordering::SeqCst);
            runtime.spawn(async move {
                store.dequeue(id).await;
                if store.inner.leaving.fetch_sub(1, Ordering::SeqCst) == 1 {
                    store.inner.left.notify_waiters();
                }
            });
        }
    }
}

enum Attempt {
    Taken { token: u64 },
    Busy { remaining: Option<Duration> },
}

impl std::fmt::Debug for SqlStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlStore")
            .field("store", &self.inner.config.shown)
            .field("table", &self.inner.config.table)
            .finish()
    }
}

impl SqlStore {
    /// Connects, checks the database answers, creates the lock tables if
    /// they are missing (unless `create_table=false`) and checks their
    /// layout (see `docs/backends/sql.md`).
    ///
    /// The first connection is opened on its own, not through the pool, so
    /// that what stops it (a refused connection, a file that is not a
    /// database, a read-only file) is reported at once and by name instead
    /// of as a pool timeout; the pool opens its connections on demand.
    pub async fn connect(config: SqlConfig) -> Result<Self> {
        let kind = config.dialect.kind();
        sqlx::any::install_default_drivers();
        let err = |e| map_err(e, &config);
        let queries = Queries::new(config.dialect, &config.table, config.notify, config.fair);
        let first = async {
            let mut conn = AnyConnection::connect(config.database_url.expose())
                .await
                .map_err(err)?;
            if config.dialect == Dialect::Sqlite {
                for pragma in SQLITE_PRAGMAS {
                    conn.execute(*pragma).await.map_err(err)?;
                }
            }
            Ok::<_, Error>(conn)
        };
        let mut conn = tokio::time::timeout(config.connect_timeout, first)
            .await
            .map_err(|_| {
                Error::unavailable(format!(
                    "no answer from the database at {} within {:?}",
                    config.place, config.connect_timeout
                ))
                .with_backend(kind)
            })??;
        tokio::time::timeout(
            DDL_WAIT + config.connect_timeout,
            schema::prepare(&mut conn, &config, &queries),
        )
        .await
        .map_err(|_| {
            Error::unavailable(format!(
                "creating or checking the lock table at {} took too long",
                config.place
            ))
            .with_backend(kind)
        })??;
        let _ = conn.close().await;
        let mut options = AnyPoolOptions::new()
            .max_connections(config.pool_size)
            .acquire_timeout(config.connect_timeout);
        if config.dialect == Dialect::Sqlite {
            options = options.after_connect(|conn, _meta| {
                Box::pin(async move {
                    for pragma in SQLITE_PRAGMAS {
                        match conn.execute(*pragma).await {
                            Ok(_) => {}
                            // Keep the connection: the statement it serves
                            // fails with this error, at once and by name.
                            Err(e) if sqlite_is_permanent(&e) => return Ok(()),
                            Err(e) => return Err(e),
                        }
                    }
                    Ok(())
                })
            });
        }
        let pool = options
            .connect_lazy(config.database_url.expose())
            .map_err(err)?;
        let store = SqlStore {
            inner: Arc::new(Inner {
                config,
                pool,
                queries,
                local_waiters: LocalWaiters::default(),
                leaving: AtomicUsize::new(0),
                left: Notify::new(),
                listener: Mutex::new(None),
            }),
        };
        #[cfg(feature = "postgres")]
        if store.inner.config.notify {
            let task = tokio::spawn(crate::notify::listen(
                Arc::downgrade(&store.inner),
                store.inner.config.database_url.clone(),
                store.inner.config.table.clone(),
            ));
            *store
                .inner
                .listener
                .lock()
                .unwrap_or_else(|e| e.into_inner()) = Some(task);
        }
        Ok(store)
    }

    fn kind(&self) -> &'static str {
        self.inner.config.dialect.kind()
    }

    pub(crate) fn err(&self, e: sqlx::Error) -> Error {
        map_err(e, &self.inner.config)
    }

    pub(crate) fn config(&self) -> &SqlConfig {
        &self.inner.config
    }

    pub(crate) fn pool(&self) -> &AnyPool {
        &self.inner.pool
    }

    /// The atomic statement(s) that take the lock: `Some(token)` if taken.
    async fn take(&self, request: &AcquireRequest, ticket: Option<i64>) -> Result<Option<u64>> {
        let inner = &self.inner;
        let ttl_ms = request.ttl.as_millis() as i64;
        let (name, owner) = (request.name.as_str(), request.owner.as_str());
        let fair = inner.config.fair;
        // Without a ticket (try-acquire, or a first look) any live ticket is ahead.
        let ticket = ticket.unwrap_or(i64::MAX);
        match &inner.queries.acquire {
            Acquire::Upsert(sql) => {
                let mut query = sqlx::query(sql)
                    .bind(name)
                    .bind(owner)
                    .bind(ttl_ms)
                    .bind(request.reentrant as i64);
                if fair {
                    query = query.bind(ticket);
                }
                let row: Option<AnyRow> = query
                    .fetch_optional(&inner.pool)
                    .await
                    .map_err(|e| self.err(e))?;
                row.map(|row| row.try_get::<i64, _>(0).map(|t| t as u64))
                    .transpose()
                    .map_err(|e| self.err(e))
            }
            Acquire::UpdateThenInsert { update, insert } => {
                let mut query = sqlx::query(update)
                    .bind(owner)
                    .bind(owner)
                    .bind(owner)
                    .bind(ttl_ms)
                    .bind(ttl_ms)
                    .bind(owner)
                    .bind(name);
                if fair {
                    query = query.bind(name).bind(ticket);
                }
                let updated = query
                    .bind(owner)
                    .bind(request.reentrant as i64)
                    .execute(&inner.pool)
                    .await
                    .map_err(|e| self.err(e))?;
                if updated.rows_affected() == 1 {
                    let token = updated.last_insert_id().ok_or_else(|| {
                        Error::new(ErrorKind::Backend, "the database did not report the token")
                    })?;
                    return Ok(Some(token as u64));
                }
                let inserted = sqlx::query(insert)
                    .bind(name)
                    .bind(owner)
                    .bind(ttl_ms)
                    .execute(&inner.pool)
                    .await
                    .map_err(|e| self.err(e))?;
                Ok((inserted.rows_affected() == 1).then_some(1))
            }
        }
    }

    /// One atomic attempt to take the lock; `waiting` when it comes from a
    /// waiting acquire (which then marks the row as waited for).
    async fn attempt(
        &self,
        request: &AcquireRequest,
        waiting: bool,
        ticket: Option<i64>,
    ) -> Result<Attempt> {
        let inner = &self.inner;
        if let Some(token) = self.take(request, ticket).await? {
            // Leave the line in the same (cancellation-proof) call that took
            // the lock, so no one behind ever sees a granted waiter's ticket.
            if let Some(id) = ticket {
                self.dequeue(id).await;
            }
            return Ok(Attempt::Taken { token });
        }
        let row: Option<AnyRow> = sqlx::query(&inner.queries.probe)
            .bind(request.name.as_str())
            .fetch_optional(&inner.pool)
            .await
            .map_err(|e| self.err(e))?;
        let (owner, remaining, marked) = match row {
            Some(row) => (
                row.try_get::<Option<String>, _>(0)
                    .map_err(|e| self.err(e))?,
                row.try_get::<Option<i64>, _>(1).map_err(|e| self.err(e))?,
                row.try_get::<Option<i64>, _>(2).map_err(|e| self.err(e))?,
            ),
            None => (None, None, None),
        };
        // A waiter keeps the row marked as waited for (so releases send
        // NOTIFY), writing only when the mark is half gone: most polls of a
        // busy lock stay read-only.
        let mark = inner.config.waiting_mark.as_millis() as i64;
        if waiting && inner.config.notify && marked.is_none_or(|left| left < mark / 2) {
            sqlx::query(&inner.queries.mark_waiting)
                .bind(mark)
                .bind(request.name.as_str())
                .execute(&inner.pool)
                .await
                .map_err(|e| self.err(e))?;
        }
        if owner.as_deref() == Some(request.owner.as_str()) && !request.reentrant {
            return Err(Error::would_deadlock());
        }
        Ok(Attempt::Busy {
            remaining: remaining.map(|ms| Duration::from_millis(ms.max(0) as u64)),
        })
    }

    /// An attempt that runs to completion even if the caller is cancelled;
    /// a lock it took for a caller that has gone is released at once.
    /// Waits (briefly) until this client's abandoned tickets are deleted.
    async fn settle_tickets(&self) {
        let inner = &self.inner;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
        while inner.leaving.load(Ordering::SeqCst) > 0 {
            let left = inner.left.notified();
            tokio::pin!(left);
            left.as_mut().enable();
            if inner.leaving.load(Ordering::SeqCst) == 0 {
                break;
            }
            if tokio::time::timeout_at(deadline, left).await.is_err() {
                break;
            }
        }
    }

    async fn attempt_detached(
        &self,
        request: &AcquireRequest,
        waiting: bool,
        ticket: Option<i64>,
    ) -> Result<(Attempt, Instant)> {
        if self.inner.config.fair {
            self.settle_tickets().await;
        }
        let store = self.clone();
        let undo_store = self.clone();
        let call_request = request.clone();
        let undo_request = request.clone();
        complete_or_undo(
            async move {
                let started = Instant::now();
                store
                    .attempt(&call_request, waiting, ticket)
                    .await
                    .map(|attempt| (attempt, started))
            },
            move |abandoned| async move {
                if let Ok((Attempt::Taken { token }, _)) = abandoned {
                    let _ = undo_store
                        .release_row(&undo_request.name, &undo_request.owner, token)
                        .await;
                }
            },
        )
        .await
    }

    /// Takes a ticket in the fair waiting line. A ticket whose insert
    /// completes after the caller has gone is removed at once.
    async fn enqueue(&self, request: &AcquireRequest) -> Result<Ticket> {
        let tickets = self.inner.queries.tickets.clone().expect("fair mode");
        let lease = self.inner.config.waiting_mark;
        let (store, undo_store) = (self.clone(), self.clone());
        let (name, owner) = (request.name.clone(), request.owner.clone());
        let id = complete_or_undo(
            async move {
                let inner = &store.inner;
                let _ = sqlx::query(&tickets.sweep)
                    .bind(name.as_str())
                    .execute(&inner.pool)
                    .await;
                let query = sqlx::query(&tickets.enqueue)
                    .bind(name.as_str())
                    .bind(owner.as_str())
                    .bind(lease.as_millis() as i64);
                if inner.config.dialect == Dialect::MySql {
                    let done = query.execute(&inner.pool).await.map_err(|e| store.err(e))?;
                    done.last_insert_id().ok_or_else(|| {
                        Error::new(ErrorKind::Backend, "the database did not report the ticket")
                    })
                } else {
                    let row = query
                        .fetch_one(&inner.pool)
                        .await
                        .map_err(|e| store.err(e))?;
                    row.try_get::<i64, _>(0).map_err(|e| store.err(e))
                }
            },
            move |abandoned: Result<i64>| async move {
                if let Ok(id) = abandoned {
                    undo_store.dequeue(id).await;
                }
            },
        )
        .await?;
        Ok(Ticket {
            id,
            store: self.clone(),
            refreshed: Instant::now(),
        })
    }

    /// Keeps a waiter's ticket alive while it polls.
    async fn refresh(&self, ticket: &mut Ticket) {
        let lease = self.inner.config.waiting_mark;
        if ticket.refreshed.elapsed() < lease / 3 {
            return;
        }
        let tickets = self.inner.queries.tickets.as_ref().expect("fair mode");
        let started = Instant::now();
        let refreshed = sqlx::query(&tickets.heartbeat)
            .bind(lease.as_millis() as i64)
            .bind(ticket.id)
            .execute(&self.inner.pool)
            .await;
        if refreshed.is_ok() {
            ticket.refreshed = started;
        }
    }

    async fn dequeue(&self, id: i64) {
        if let Some(tickets) = &self.inner.queries.tickets {
            let _ = sqlx::query(&tickets.dequeue)
                .bind(id)
                .execute(&self.inner.pool)
                .await;
        }
    }

    async fn release_row(&self, name: &LockName, owner: &Owner, token: u64) -> Result<bool> {
        let query = sqlx::query(&self.inner.queries.release)
            .bind(name.as_str())
            .bind(owner.as_str())
            .bind(token as i64);
        let released = if self.inner.queries.release_selects_count {
            let row = query
                .fetch_one(&self.inner.pool)
                .await
                .map_err(|e| self.err(e))?;
            row.try_get::<i64, _>(0).map_err(|e| self.err(e))? as u64
        } else {
            query
                .execute(&self.inner.pool)
                .await
                .map_err(|e| self.err(e))?
                .rows_affected()
        };
        if released == 0 {
            return Ok(false);
        }
        self.wake_local(name);
        Ok(true)
    }

    fn local_notify(&self, name: &LockName) -> Arc<Notify> {
        self.inner.local_waiters.register(name)
    }

    fn wake_local(&self, name: &LockName) {
        self.inner.wake_local(name);
    }
}

#[async_trait]
impl Backend for SqlStore {
    fn kind(&self) -> &'static str {
        SqlStore::kind(self)
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            fair: self.inner.config.fair,
            push_wakeups: self.inner.config.notify,
            fencing: true,
            cross_process_reentrancy: true,
            lease_renewal: true,
            cross_process: true,
            break_lock: true,
        }
    }

    async fn try_acquire(&self, request: &AcquireRequest) -> Result<Option<Grant>> {
        match self.attempt_detached(request, false, None).await? {
            (Attempt::Taken { token }, started) => {
                Ok(Some(Grant::new(token, started + request.ttl)))
            }
            (Attempt::Busy { .. }, _) => Ok(None),
        }
    }

    async fn acquire(&self, request: &AcquireRequest) -> Result<Grant> {
        let notify = self.local_notify(&request.name);
        let mut backoff = Backoff::new(Duration::from_millis(2), self.inner.config.max_poll);
        // Fair mode: our place in line, given up (in the background) when
        // this future ends, whether granted, failed or dropped.
        let mut ticket: Option<Ticket> = None;
        loop {
            // Listen before looking, so a release between the two is not missed.
            let woken = notify.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            let id = ticket.as_ref().map(|t| t.id);
            let delay = match self.attempt_detached(request, true, id).await {
                Ok((Attempt::Taken { token }, started)) => {
                    return Ok(Grant::new(token, started + request.ttl))
                }
                Ok((Attempt::Busy { .. }, _)) if self.inner.config.fair && ticket.is_none() => {
                    ticket = Some(self.enqueue(request).await?);
                    request.waiting.raise();
                    // Look again at once: the lock may have freed meanwhile.
                    continue;
                }
                Ok((Attempt::Busy { remaining }, _)) => {
                    if let Some(ticket) = &mut ticket {
                        self.refresh(ticket).await;
                    }
                    request.waiting.raise();
                    let delay = backoff.next_delay();
                    // Wake when a crashed holder's lease runs out, not later.
                    remaining.map_or(delay, |r| delay.min(r + Duration::from_millis(1)))
                }
                Err(err) if err.is_retryable() => {
                    tracing::debug!(error = %err, lock = %request.name, "omnilock sql poll failed; retrying");
                    backoff.next_delay()
                }
                Err(err) => return Err(err),
            };
            tokio::select! {
                _ = &mut woken => backoff.reset(),
                _ = tokio::time::sleep(delay) => {}
            }
        }
    }

    async fn release(&self, request: &AcquireRequest, grant: &Grant) -> Result<()> {
        if self
            .release_row(&request.name, &request.owner, grant.token)
            .await?
        {
            Ok(())
        } else {
            Err(Error::not_owner())
        }
    }

    async fn renew(&self, request: &AcquireRequest, grant: &Grant) -> Result<Instant> {
        let started = Instant::now();
        let done = sqlx::query(&self.inner.queries.renew)
            .bind(request.ttl.as_millis() as i64)
            .bind(request.name.as_str())
            .bind(request.owner.as_str())
            .bind(grant.token as i64)
            .execute(&self.inner.pool)
            .await
            .map_err(|e| self.err(e))?;
        if done.rows_affected() == 0 {
            return Err(Error::new(
                ErrorKind::LockLost,
                "the lock is no longer held by this owner",
            ));
        }
        Ok(started + request.ttl)
    }

    async fn break_lock(&self, name: &LockName) -> Result<bool> {
        let done = sqlx::query(&self.inner.queries.break_lock)
            .bind(name.as_str())
            .execute(&self.inner.pool)
            .await
            .map_err(|e| self.err(e))?;
        if done.rows_affected() > 0 {
            self.wake_local(name);
        }
        Ok(done.rows_affected() > 0)
    }

    fn measure(&self) -> Option<&dyn omnilock_core::Measure> {
        Some(self)
    }

    async fn holder(&self, name: &LockName) -> Result<Option<omnilock_core::Holder>> {
        let row: Option<(String, i64)> = sqlx::query_as(&self.inner.queries.holder)
            .bind(name.as_str())
            .fetch_optional(&self.inner.pool)
            .await
            .map_err(|e| self.err(e))?;
        row.map(|(owner, token)| {
            Ok(omnilock_core::Holder {
                owner: omnilock_core::Owner::new(&owner)?,
                token: token as u64,
            })
        })
        .transpose()
    }

    async fn close(&self) {
        self.inner.pool.close().await;
    }
}
