//! The SQL lock store: one row per lock, taken and released by single
//! atomic statements, waited for by polling with backoff and jitter.

use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use omnilock_core::{
    async_trait, complete_or_undo, AcquireRequest, Backend, Backoff, Capabilities, Error,
    ErrorKind, Grant, LocalWaiters, LockName, Owner, Primitive, Result,
};
use sqlx::Row;
use tokio::sync::Notify;

use crate::advisory::Advisory;
use crate::config::SqlConfig;
use crate::conn::errors::map_err;
use crate::conn::Conn;
use crate::conn::{query, with_pool, Pool, Target};
use crate::queries::{Args, Queries, Statement};
use crate::queue::{Attempt, Ticket};
use crate::schema::{self, DDL_WAIT};

/// A lock store on a SQL database. Create it with [`SqlStore::connect`] or
/// through `omnilock::connect("sqlite:///...")`.
#[derive(Clone)]
pub struct SqlStore {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) config: SqlConfig,
    pub(crate) pool: Pool,
    pub(crate) queries: Queries,
    /// Waiters in this process, per lock: a release here (or, on
    /// PostgreSQL, a NOTIFY from any process) wakes one of them at once
    /// instead of at its next poll.
    local_waiters: LocalWaiters,
    /// Fair mode: tickets of abandoned waits still being deleted. An
    /// attempt from this client waits for them first, so that its own
    /// cancelled waits never stand in its way (see `settle_tickets`).
    pub(crate) leaving: AtomicUsize,
    pub(crate) left: Notify,
    /// Advisory mode's sessions (`?mode=advisory`): mutexes are the
    /// database's session locks instead of rows.
    pub(crate) advisory: Option<Advisory>,
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
    /// Wakes every local waiter of `name`: a semaphore permit or
    /// read-write lock side that leaves can admit several.
    pub(crate) fn wake_all_local(&self, name: &LockName) {
        self.local_waiters.wake_all(name);
    }

    pub(crate) fn wake_local(&self, name: &LockName) {
        if self.config.fair {
            // Only the head of the line may take it; let each look.
            self.local_waiters.wake_all(name);
        } else {
            self.local_waiters.wake_one(name);
        }
    }
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
        let target = Target::new(&config)?;
        let queries = Queries::new(config.dialect, &config.table, config.notify, config.fair);
        let mut conn = tokio::time::timeout(config.connect_timeout, target.connect_one(&config))
            .await
            .map_err(|_| {
                Error::unavailable(format!(
                    "no answer from the database at {} within {:?}",
                    config.place, config.connect_timeout
                ))
                .with_backend(kind)
            })??;
        let prepared = prepare(conn.borrow(), &config, &queries).await;
        // Closing (also on error) frees MySQL's DDL lock at once.
        conn.close().await;
        prepared?;
        let pool = target.pool(&config);
        let advisory = config
            .advisory
            .then(|| Advisory::new(&config, target.clone(), pool.clone()));
        Ok(SqlStore::start(config, pool, queries, advisory))
    }

    /// The store over `pool`, whose tables `prepare` has set up.
    pub(crate) fn start(
        config: SqlConfig,
        pool: Pool,
        queries: Queries,
        advisory: Option<Advisory>,
    ) -> Self {
        let store = SqlStore {
            inner: Arc::new(Inner {
                config,
                pool,
                queries,
                local_waiters: LocalWaiters::default(),
                leaving: AtomicUsize::new(0),
                left: Notify::new(),
                advisory,
                listener: Mutex::new(None),
            }),
        };
        #[cfg(feature = "postgres")]
        if let (true, Pool::Postgres(pool)) = (store.inner.config.notify, &store.inner.pool) {
            let task = tokio::spawn(crate::notify::listen(
                Arc::downgrade(&store.inner),
                (*pool.connect_options()).clone(),
                store.inner.config.table.clone(),
            ));
            *omnilock_core::lock_unpoisoned(&store.inner.listener) = Some(task);
        }
        store
    }

    fn kind(&self) -> &'static str {
        self.inner.config.dialect.kind()
    }

    pub(crate) fn err(&self, e: sqlx::Error) -> Error {
        map_err(e, &self.inner.config)
    }

    #[cfg_attr(not(feature = "mysql"), allow(dead_code))]
    pub(crate) fn pool(&self) -> &Pool {
        &self.inner.pool
    }

    pub(crate) fn queries(&self) -> &Queries {
        &self.inner.queries
    }

    pub(crate) async fn release_row(
        &self,
        name: &LockName,
        owner: &Owner,
        token: u64,
    ) -> Result<bool> {
        let queries = &self.inner.queries;
        let args = Args {
            name: name.as_str(),
            owner: owner.as_str(),
            token: token as i64,
            ..Args::default()
        };
        let released = if queries.release_selects_count {
            let err = |e| self.err(e);
            with_pool!(&self.inner.pool, p => {
                let row = query(&queries.release, &args).fetch_one(p).await.map_err(err)?;
                row.try_get::<i64, _>(0).map_err(err)? as u64
            })
        } else {
            self.execute(&queries.release, &args).await?
        };
        if released == 0 {
            return Ok(false);
        }
        self.wake_local(name);
        Ok(true)
    }

    /// Runs a statement that returns no rows; the number of rows it changed.
    pub(crate) async fn execute(&self, statement: &Statement, args: &Args<'_>) -> Result<u64> {
        let err = |e| self.err(e);
        with_pool!(&self.inner.pool, p => {
            Ok(query(statement, args).execute(p).await.map_err(err)?.rows_affected())
        })
    }

    /// Renews mutexes of one TTL with one statement; lock by lock when it
    /// matched fewer rows than locks (some are gone).
    async fn renew_batch(&self, holds: &[(&AcquireRequest, &Grant)]) -> Vec<Result<Instant>> {
        let Some((first, _)) = holds.first() else {
            return Vec::new();
        };
        let Some((size, sql)) = self.inner.queries.renew_batch.for_len(holds.len()) else {
            return futures_util::future::join_all(holds.iter().map(|(r, g)| self.renew(r, g)))
                .await;
        };
        let started = Instant::now();
        let ttl_ms = first.ttl.as_millis() as i64;
        // Padded with the last lock, which the row list then names twice.
        let padded = |i: usize| holds[i.min(holds.len() - 1)];
        let err = |e| self.err(e);
        let matched: Result<u64> = with_pool!(&self.inner.pool, p => {
            let mut q = sqlx::query(sql).bind(ttl_ms);
            for i in 0..size {
                q = q.bind(padded(i).0.name.as_str());
            }
            for i in 0..size {
                let (request, grant) = padded(i);
                q = q
                    .bind(request.name.as_str())
                    .bind(request.owner.as_str())
                    .bind(grant.token as i64);
            }
            q.execute(p).await.map(|r| r.rows_affected()).map_err(err)
        });
        match matched {
            Ok(rows) if rows as usize == holds.len() => {
                holds.iter().map(|_| Ok(started + first.ttl)).collect()
            }
            Ok(_) => {
                futures_util::future::join_all(holds.iter().map(|(r, g)| self.renew(r, g))).await
            }
            Err(e) => holds.iter().map(|_| Err(e.clone())).collect(),
        }
    }

    pub(crate) fn local_notify(&self, name: &LockName) -> Arc<Notify> {
        self.inner.local_waiters.register(name)
    }

    fn wake_local(&self, name: &LockName) {
        self.inner.wake_local(name);
    }

    /// Advisory mode's sessions, when `request` is a mutex in that mode.
    fn advisory_for(&self, request: &AcquireRequest) -> Option<&Advisory> {
        match request.primitive {
            Primitive::Mutex => self.inner.advisory.as_ref(),
            _ => None,
        }
    }
}

/// Fair mode: the waiters at the front of the line that poll at the line's
/// pace rather than slowing down to `max_poll`.
const FAST_LINE: i64 = 8;

#[async_trait]
impl Backend for SqlStore {
    fn kind(&self) -> &'static str {
        SqlStore::kind(self)
    }

    fn capabilities(&self) -> Capabilities {
        let advisory = self.inner.advisory.is_some();
        Capabilities {
            fair: self.inner.config.fair,
            // Advisory mode: the database hands a mutex to its waiter, but
            // semaphores and read-write locks stay on the tables, where only
            // PostgreSQL's NOTIFY pushes: the claim covers every primitive.
            push_wakeups: self.inner.config.notify,
            fencing: true,
            // Advisory mode: each hold is a session of its own, and one
            // owner's second session waits like anyone else's.
            cross_process_reentrancy: !advisory,
            lease_renewal: true,
            cross_process: true,
            break_lock: true,
            holder: true,
            election: true,
            // A committed row survives a restart of the server; a
            // failover to an asynchronous replica is outside what the
            // library sees (docs/backends/sql.md).
            // Advisory locks live in the server's memory: a restart frees
            // them (and ends their sessions, so holders are told).
            survives_failover: !advisory,
            semaphore: true,
            rw_lock: true,
            atomic_lock_all: !advisory,
        }
    }

    async fn try_acquire(&self, request: &AcquireRequest) -> Result<Option<Grant>> {
        if let Some(advisory) = self.advisory_for(request) {
            return advisory.try_take(request).await;
        }
        if request.primitive != Primitive::Mutex {
            return self.take_counted(request, false).await;
        }
        match self.attempt_detached(request, false, None).await? {
            (Attempt::Taken { token }, started) => {
                Ok(Some(Grant::new(token, started + request.ttl)))
            }
            (Attempt::Busy { .. }, _) => Ok(None),
        }
    }

    async fn try_acquire_all(&self, requests: &[AcquireRequest]) -> Result<Option<Vec<Grant>>> {
        if self.inner.config.fair {
            self.settle_tickets().await;
        }
        let (store, undo_store) = (self.clone(), self.clone());
        let (call_requests, undo_requests) = (requests.to_vec(), requests.to_vec());
        let (tokens, started) = complete_or_undo(
            async move {
                let started = Instant::now();
                let tokens = store.take_all(&call_requests).await?;
                Ok((tokens, started))
            },
            // Taken for a caller that has gone: give every part back.
            move |abandoned: Result<(Option<Vec<u64>>, Instant)>| async move {
                if let Ok((Some(tokens), _)) = abandoned {
                    for (request, token) in undo_requests.iter().zip(tokens) {
                        let _ = undo_store
                            .release_row(&request.name, &request.owner, token)
                            .await;
                    }
                }
            },
        )
        .await?;
        Ok(tokens.map(|tokens| {
            requests
                .iter()
                .zip(tokens)
                .map(|(request, token)| Grant::new(token, started + request.ttl))
                .collect()
        }))
    }

    async fn acquire(&self, request: &AcquireRequest) -> Result<Grant> {
        if let Some(advisory) = self.advisory_for(request) {
            return advisory.take(request).await;
        }
        if request.primitive != Primitive::Mutex {
            return self.take_counted(request, true).await?.ok_or_else(|| {
                Error::new(ErrorKind::Backend, "a waiting acquire returned nothing")
            });
        }
        let notify = self.local_notify(&request.name);
        let mut backoff = Backoff::new(Duration::from_millis(2), self.inner.config.max_poll);
        // Fair mode: our place in line, given up (in the background) when
        // this future ends, whether granted, failed or dropped.
        let mut ticket: Option<Ticket> = None;
        // Fair mode: how many waiters were ahead of us at the last look.
        let mut last_ahead: Option<i64> = None;
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
                        // The front of the line polls as often as the line
                        // moves: its pace starts over each time a waiter
                        // ahead has gone. Without a push, a head that had
                        // slowed down to `max_poll` while it waited learnt
                        // of its turn up to `max_poll` late, on every
                        // hand-off (8 clients on their own connections: 13
                        // grants/s). Only the front: a long line whose
                        // every waiter sped up at each hand-off would be a
                        // polling herd.
                        if let Ok(ahead) = self.ahead(request, ticket.id).await {
                            if ahead < FAST_LINE && last_ahead.is_some_and(|last| ahead < last) {
                                backoff.reset();
                            }
                            last_ahead = Some(ahead);
                        }
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
        if let Some(advisory) = self.advisory_for(request) {
            return advisory.release(grant).await;
        }
        if request.primitive != Primitive::Mutex {
            return self.release_counted(request, grant).await;
        }
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
        if let Some(advisory) = self.advisory_for(request) {
            return advisory.renew_all(&[(request, grant)]).await.remove(0);
        }
        if request.primitive != Primitive::Mutex {
            return self.renew_counted(request, grant).await;
        }
        let started = Instant::now();
        let args = Args {
            name: request.name.as_str(),
            owner: request.owner.as_str(),
            ttl_ms: request.ttl.as_millis() as i64,
            token: grant.token as i64,
            ..Args::default()
        };
        if self.execute(&self.inner.queries.renew, &args).await? == 0 {
            return Err(Error::new(
                ErrorKind::LockLost,
                "the lock is no longer held by this owner",
            ));
        }
        Ok(started + request.ttl)
    }

    /// Mutexes of one TTL are renewed up to 64 per `UPDATE` (see
    /// `queries::RenewBatch`); a batch that matched fewer rows than locks
    /// is renewed lock by lock to find the ones that are gone. Semaphore
    /// permits and read-write locks are renewed each on its own.
    async fn renew_all(&self, holds: &[(&AcquireRequest, &Grant)]) -> Vec<Result<Instant>> {
        let mut results: Vec<Option<Result<Instant>>> = holds.iter().map(|_| None).collect();
        if let Some(advisory) = &self.inner.advisory {
            // One statement per session, for all the locks it holds.
            let mutexes: Vec<usize> = (0..holds.len())
                .filter(|&i| holds[i].0.primitive == Primitive::Mutex)
                .collect();
            let picked: Vec<_> = mutexes.iter().map(|&i| holds[i]).collect();
            for (&i, result) in mutexes.iter().zip(advisory.renew_all(&picked).await) {
                results[i] = Some(result);
            }
        }
        let mut mutexes: Vec<usize> = Vec::new();
        for (i, (request, _)) in holds.iter().enumerate() {
            if request.primitive == Primitive::Mutex && results[i].is_none() {
                mutexes.push(i);
            }
        }
        // Same TTL next to each other: each batch has one.
        mutexes.sort_by_key(|&i| holds[i].0.ttl);
        let largest = crate::queries::RenewBatch::largest();
        let mut batches: Vec<&[usize]> = Vec::new();
        for same_ttl in mutexes.chunk_by(|&a, &b| holds[a].0.ttl == holds[b].0.ttl) {
            batches.extend(same_ttl.chunks(largest));
        }
        let renewed = futures_util::future::join_all(batches.iter().map(|batch| async {
            let picked: Vec<_> = batch.iter().map(|&i| holds[i]).collect();
            self.renew_batch(&picked).await
        }))
        .await;
        for (batch, renewed) in batches.iter().zip(renewed) {
            for (&i, result) in batch.iter().zip(renewed) {
                results[i] = Some(result);
            }
        }
        let others: Vec<usize> = (0..holds.len()).filter(|&i| results[i].is_none()).collect();
        let each = futures_util::future::join_all(
            others.iter().map(|&i| self.renew(holds[i].0, holds[i].1)),
        )
        .await;
        for (&i, result) in others.iter().zip(each) {
            results[i] = Some(result);
        }
        results
            .into_iter()
            .map(|r| {
                r.unwrap_or_else(|| Err(Error::new(ErrorKind::Backend, "internal: not renewed")))
            })
            .collect()
    }

    async fn break_lock(&self, name: &LockName) -> Result<bool> {
        if let Some(advisory) = &self.inner.advisory {
            return advisory.break_lock(&self.inner.pool, name).await;
        }
        let args = Args {
            name: name.as_str(),
            ..Args::default()
        };
        let broken = self.execute(&self.inner.queries.break_lock, &args).await? > 0;
        if broken {
            self.wake_local(name);
        }
        Ok(broken)
    }

    async fn holder(&self, name: &LockName) -> Result<Option<omnilock_core::Holder>> {
        if let Some(advisory) = &self.inner.advisory {
            return advisory.holder(&self.inner.pool, name).await;
        }
        let args = Args {
            name: name.as_str(),
            ..Args::default()
        };
        let err = |e| self.err(e);
        let row: Option<(String, i64)> = with_pool!(&self.inner.pool, p => {
            match query(&self.inner.queries.holder, &args).fetch_optional(p).await.map_err(err)? {
                Some(row) => Some((row.try_get(0).map_err(err)?, row.try_get(1).map_err(err)?)),
                None => None,
            }
        });
        row.map(|(owner, token)| {
            Ok(omnilock_core::Holder {
                owner: omnilock_core::Owner::new(&owner)?,
                token: token as u64,
            })
        })
        .transpose()
    }

    async fn close(&self) {
        if let Some(advisory) = &self.inner.advisory {
            advisory.close();
        }
        self.inner.pool.close().await;
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
