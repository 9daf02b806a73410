//! Table mode (`?mode=table`, the default): one row per lock, taken and
//! released by single atomic statements, waited for by polling with
//! backoff and jitter (see [`queue`]); semaphores and read-write locks in
//! the entries table (see [`counted`]); an operator's reads in
//! [`inspect`]; records in their own table (see [`records`]).

mod backend;
#[cfg(feature = "mysql")]
mod bells;
mod counted;
mod inspect;
mod queue;
mod records;
mod renew;
mod trim;

use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use omnilock_core::{Error, LocalWaiters, LockName, LockSpec, Owner, Result, lock_unpoisoned};
use tokio::sync::Notify;

use crate::config::SqlConfig;
use crate::conn::errors::map_err;
use crate::conn::{Pool, query, with_pool};
use crate::queries::{Args, Queries, Statement};

/// The lock-table mode's store: every primitive is rows of the lock
/// tables. Advisory mode's [`AdvisoryStore`](crate::advisory::AdvisoryStore)
/// holds one for what it keeps on the tables.
#[derive(Clone)]
pub(crate) struct TableStore {
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
    /// Fair mode: this client's ticket holders, oldest first, each woken
    /// on its own.
    pub(crate) line: queue::LocalLine,
    /// The PostgreSQL LISTEN task, stopped with the store.
    listener: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// The task closing the connections a burst left (`trim.rs`), stopped
    /// with the store.
    trimmer: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// MySQL/MariaDB: the mutexes' wake-up locks (see `bells.rs`).
    #[cfg(feature = "mysql")]
    bells: Option<bells::Bells>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(task) = self.listener.get_mut().ok().and_then(|t| t.take()) {
            task.abort();
        }
        if let Some(task) = self.trimmer.get_mut().ok().and_then(|t| t.take()) {
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

    /// Fair mode: wakes this client's waiter holding ticket `id` of
    /// `name`, the head of the line, if it is this client's.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn wake_ticket(&self, name: &LockName, id: i64) {
        self.line.wake_ticket(name, id);
    }

    pub(crate) fn wake_local(&self, name: &LockName) {
        if self.config.fair {
            // Only the head of the line may take it: of this client's
            // waiters, the oldest ticket. One that is still taking its
            // ticket looks again once it has it.
            self.line.wake_head(name);
        } else {
            self.local_waiters.wake_one(name);
        }
    }
}

impl std::fmt::Debug for TableStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TableStore")
            .field("store", &self.inner.config.shown)
            .field("table", &self.inner.config.table)
            .finish()
    }
}

impl TableStore {
    /// The store over `pool`, whose tables `prepare` has set up.
    pub(crate) fn start(config: SqlConfig, pool: Pool, queries: Queries) -> Self {
        #[cfg(feature = "mysql")]
        let bells = match (&pool, config.notify) {
            (Pool::MySql(pool), true) => Some(bells::Bells::start(
                &config.table,
                (*pool.connect_options()).clone(),
                config.pool_size as usize,
            )),
            _ => None,
        };
        let store = TableStore {
            inner: Arc::new(Inner {
                config,
                pool,
                queries,
                local_waiters: LocalWaiters::default(),
                leaving: AtomicUsize::new(0),
                left: Notify::new(),
                line: queue::LocalLine::default(),
                listener: Mutex::new(None),
                trimmer: Mutex::new(None),
                #[cfg(feature = "mysql")]
                bells,
            }),
        };
        #[cfg(feature = "postgres")]
        if let (true, Pool::Postgres(pool)) = (store.inner.config.notify, &store.inner.pool) {
            let task = tokio::spawn(crate::notify::listen(
                Arc::downgrade(&store.inner),
                (*pool.connect_options()).clone(),
                store.inner.config.table.clone(),
            ));
            *lock_unpoisoned(&store.inner.listener) = Some(task);
        }
        *lock_unpoisoned(&store.inner.trimmer) = Some(trim::start(Arc::downgrade(&store.inner)));
        store
    }

    pub(crate) fn config(&self) -> &SqlConfig {
        &self.inner.config
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
        if self.execute(&queries.release, &args).await? == 0 {
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

    pub(crate) fn local_notify(&self, name: &LockName) -> Arc<Notify> {
        self.inner.local_waiters.register(name)
    }

    fn wake_local(&self, name: &LockName) {
        self.inner.wake_local(name);
    }

    /// Whether waiters wait on bells (MySQL/MariaDB with `notify`).
    pub(crate) fn has_bells(&self) -> bool {
        #[cfg(feature = "mysql")]
        if self.inner.bells.is_some() {
            return true;
        }
        false
    }

    /// This store just took `name`'s row (a mutex), after waiting for it
    /// if `contended`: on MySQL/MariaDB, its bell is taken for waiters
    /// elsewhere (see `bells.rs`). True when a bell was asked for, to be
    /// let go once with the hold.
    pub(crate) fn took(&self, name: &LockName, contended: bool) -> bool {
        #[cfg(feature = "mysql")]
        if let Some(bells) = &self.inner.bells {
            bells.take(name.as_str(), contended);
            return true;
        }
        let _ = (name, contended);
        false
    }

    /// The hold `grant` of `spec` has ended: freed, found no longer ours,
    /// or lost. Its bell, if it has one still taken, is let go (once).
    pub(crate) fn freed(&self, spec: &LockSpec, grant: &crate::store::Grant) {
        if !grant.hold.take_bell() {
            return;
        }
        #[cfg(feature = "mysql")]
        if let Some(bells) = &self.inner.bells {
            bells.free(spec.name.as_str());
        }
        let _ = spec;
    }

    /// Fair mode: ticket `id` joined the line. On MySQL/MariaDB its bell
    /// is taken, for the waiter behind it to wait on (see `bells.rs`).
    pub(crate) fn joined_line(&self, id: i64) {
        #[cfg(feature = "mysql")]
        if let Some(bells) = &self.inner.bells {
            bells.take_ticket(id);
        }
        let _ = id;
    }

    /// Fair mode: ticket `id` of `name` left the line, and its row is
    /// gone. On MySQL/MariaDB the waiter behind it hears: this client's at
    /// once, another's by the ticket's bell. (Elsewhere waiters do not
    /// wait on the one ahead: a release wakes the head.)
    pub(crate) fn left_line(&self, name: &LockName, id: i64) {
        #[cfg(feature = "mysql")]
        if let Some(bells) = &self.inner.bells {
            self.inner.line.wake_behind(name, id);
            bells.free_ticket(id);
        }
        let _ = (name, id);
    }

    /// Waits for `name`'s holder elsewhere to let go. On MySQL/MariaDB, up
    /// to `patience` on the lock's bell; where there is no bell to wait on
    /// (another database, or a holder whose bell is not taken), sleeps
    /// `delay`, the poll's pace. True when a release ended the wait.
    pub(crate) async fn wait_for_release(
        &self,
        name: &LockName,
        delay: Duration,
        patience: Duration,
    ) -> bool {
        #[cfg(feature = "mysql")]
        if let Some(bells) = &self.inner.bells {
            return rung_or_paced(bells.wait(name.as_str(), patience), delay).await;
        }
        let _ = (name, patience);
        tokio::time::sleep(delay).await;
        false
    }

    /// Fair mode on MySQL/MariaDB: waits up to `patience` for ticket
    /// `ahead` to leave the line, on its bell; where there is none to wait
    /// on, sleeps `delay`. True when its leaving ended the wait.
    pub(crate) async fn wait_behind(
        &self,
        ahead: i64,
        delay: Duration,
        patience: Duration,
    ) -> bool {
        #[cfg(feature = "mysql")]
        if let Some(bells) = &self.inner.bells {
            return rung_or_paced(bells.wait_behind(ahead, patience), delay).await;
        }
        let _ = (ahead, patience);
        tokio::time::sleep(delay).await;
        false
    }

    /// Stops what the store runs beside its pool: the PostgreSQL listener,
    /// the trimming task, the MySQL/MariaDB bell ringer.
    pub(crate) fn stop_background(&self) {
        if let Some(task) = lock_unpoisoned(&self.inner.listener).take() {
            task.abort();
        }
        if let Some(task) = lock_unpoisoned(&self.inner.trimmer).take() {
            task.abort();
        }
        #[cfg(feature = "mysql")]
        if let Some(bells) = &self.inner.bells {
            bells.stop();
        }
    }
}

/// A bell's wait: true when it rang. Otherwise it never returns sooner
/// than polling would (`delay`): a free bell, or a server that rounds the
/// wait down to whole seconds (MySQL), answers at once.
#[cfg(feature = "mysql")]
async fn rung_or_paced(wait: impl Future<Output = bells::Rung>, delay: Duration) -> bool {
    let started = std::time::Instant::now();
    if wait.await == bells::Rung::Rang {
        return true;
    }
    tokio::time::sleep(delay.saturating_sub(started.elapsed())).await;
    false
}
