// A build with SQLite only refuses advisory mode in the URL: what follows
// is then never reached.
#![cfg_attr(
    not(any(feature = "mysql", feature = "postgres")),
    allow(
        unused_imports,
        unreachable_code,
        unused_variables,
        dead_code,
        clippy::never_loop
    )
)]
//! Advisory mode (`?mode=advisory`): a mutex is the database's own session
//! lock, `GET_LOCK` on MySQL/MariaDB and `pg_advisory_lock` on PostgreSQL,
//! held on a connection of its own for as long as the lock is held.
//!
//! - **Why a connection per held lock:** these locks belong to a session and
//!   end with it. That is also the lease: each session is told to end once
//!   idle for the lock's TTL (`wait_timeout`, `idle_session_timeout`), and a
//!   renewal is one statement on it. A holder that crashes frees the lock at
//!   once (its socket closes); one that hangs or is cut off frees it one TTL
//!   after its last statement.
//! - **Push wake-ups:** a waiting acquire blocks inside `GET_LOCK` or
//!   `pg_advisory_lock` on its session, and the database hands it the lock.
//! - **Fencing tokens:** the lock table's row for the name, bumped by the
//!   statement that takes the lock (in the same statement when the lock is
//!   free), which also records the owner for `holder`.
//! - **A session ended from outside** (`pg_terminate_backend`, `KILL`, a
//!   restart) is found within a second by one statement on the pool over
//!   every session that holds locks (`watch.rs`): its locks report lost then,
//!   not at their next renewal.
//! - **Sessions in an unknown state are never reused:** a session dropped
//!   mid-statement (a cancelled acquire) or after an error is killed from
//!   the store's pool (`KILL`, `pg_terminate_backend`), which ends its wait
//!   and frees whatever it took. Sessions that end clean wait in a small
//!   idle list for the next lock.

mod inspect;

mod session;
mod shared;
mod take;
mod watch;

pub(crate) use take::Held;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use omnilock_core::{
    AcquireRequest, Backend, Capabilities, Error, ErrorKind, Holder, Inspection, Listed, LockKind,
    LockName, LockSpec, Owner, Primitive, Record, Result, async_trait,
};

use crate::conn::Target;
use crate::conn::errors::map_err;
use crate::key::Key;
use crate::queries::advisory::Advisory as Sql;
use crate::store::{Grant, SqlHold};
use crate::table::TableStore;
use shared::Shared;

/// Advisory mode's store: mutexes are the database's session locks;
/// semaphores and read-write locks (and the fencing tokens' rows) are the
/// lock tables', through the [`TableStore`] it holds.
pub(crate) struct AdvisoryStore {
    /// The tables: semaphores, read-write locks, the tokens' rows, and the
    /// pool (sessions are killed from it).
    table: TableStore,
    /// Where sessions connect.
    target: Target,
    sql: Sql,
    /// Sessions holding this store's locks, or ready to: a lock taken by a
    /// try goes to one of them; a session that waited joins them once
    /// granted.
    shared: Arc<Mutex<Vec<Arc<Shared>>>>,
    /// The task that looks for sessions ended from outside (`watch.rs`),
    /// once a lock is held.
    watcher: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// Sessions being opened at once, at most [`OPENING_AT_ONCE`]: a burst
    /// of acquisitions (a hundred locks taken side by side) queues for
    /// connections instead of opening them all at once, each a TLS
    /// handshake and a server process, and timing out together.
    opening: tokio::sync::Semaphore,
}

/// How many sessions a store opens at the same time.
const OPENING_AT_ONCE: usize = 8;

impl std::fmt::Debug for AdvisoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let config = self.table.config();
        f.debug_struct("AdvisoryStore")
            .field("store", &config.shown)
            .field("table", &config.table)
            .finish()
    }
}

impl AdvisoryStore {
    pub(crate) fn new(table: TableStore, target: Target) -> Self {
        let config = table.config();
        AdvisoryStore {
            sql: Sql::new(config.dialect, &config.table),
            table,
            target,
            shared: Arc::new(Mutex::new(Vec::new())),
            watcher: Mutex::new(None),
            opening: tokio::sync::Semaphore::new(OPENING_AT_ONCE),
        }
    }

    fn key(&self, name: &LockName) -> Key {
        Key::new(&self.table.config().table, name.as_str())
    }

    fn err(&self, e: sqlx::Error) -> Error {
        map_err(e, self.table.config())
    }
}

impl Drop for AdvisoryStore {
    fn drop(&mut self) {
        if let Some(watcher) = omnilock_core::lock_unpoisoned(&self.watcher).take() {
            watcher.abort();
        }
    }
}

/// Mutexes here; every other primitive on the table.
#[async_trait]
impl Backend for AdvisoryStore {
    type Hold = SqlHold;

    fn kind(&self) -> &'static str {
        self.table.kind()
    }

    fn capabilities(&self) -> Capabilities {
        // The table's, but for what a session lock changes: the database
        // hands a mutex to its waiter, but semaphores and read-write locks
        // stay on the tables, where only PostgreSQL's NOTIFY pushes, so the
        // table's `push_wakeups` claim covers every primitive.
        self.table
            .capabilities()
            // Each hold is a session of its own, and one owner's second
            // session waits like anyone else's.
            .with_cross_process_reentrancy(false)
            // Advisory locks live in the server's memory: a restart frees
            // them (and ends their sessions, so holders are told).
            .with_survives_failover(false)
            .with_atomic_lock_all(false)
            // A session holds the mutex: a transaction cannot lock that.
            .with_guarded_write(false)
            // PostgreSQL's `pg_locks` shows who waits for a mutex (not
            // their owners); MySQL/MariaDB keeps no record of it.
            .with_inspect_waiters(self.sql.waiting.is_some())
    }

    async fn try_acquire(&self, request: &AcquireRequest) -> Result<Option<Grant>> {
        match request.primitive {
            Primitive::Mutex => self.try_take(request).await,
            _ => self.table.try_acquire(request).await,
        }
    }

    async fn acquire(&self, request: &AcquireRequest) -> Result<Grant> {
        match request.primitive {
            Primitive::Mutex => self.take(request).await,
            _ => self.table.acquire(request).await,
        }
    }

    async fn release(&self, spec: &LockSpec, grant: &Grant) -> Result<()> {
        match spec.primitive {
            Primitive::Mutex => self.release_held(grant).await,
            _ => self.table.release(spec, grant).await,
        }
    }

    async fn renew(&self, spec: &LockSpec, grant: &Grant) -> Result<Instant> {
        match spec.primitive {
            Primitive::Mutex => self.renew_held(&[(spec, grant)]).await.remove(0),
            _ => self.table.renew(spec, grant).await,
        }
    }

    /// Mutexes with one statement per session, for all the locks it holds;
    /// the rest as the table renews them.
    async fn renew_all(&self, holds: &[(&LockSpec, &Grant)]) -> Vec<Result<Instant>> {
        let (mutexes, others): (Vec<_>, Vec<_>) = holds
            .iter()
            .copied()
            .partition(|(spec, _)| spec.primitive == Primitive::Mutex);
        let mut mutexes = self.renew_held(&mutexes).await.into_iter();
        let mut others = self.table.renew_all(&others).await.into_iter();
        holds
            .iter()
            .map(|(spec, _)| {
                let renewed = match spec.primitive {
                    Primitive::Mutex => mutexes.next(),
                    _ => others.next(),
                };
                renewed
                    .unwrap_or_else(|| Err(Error::new(ErrorKind::Backend, "internal: not renewed")))
            })
            .collect()
    }

    /// Ends the session holding the mutex `name` (see
    /// [`AdvisoryStore::break_held`]).
    async fn break_lock(&self, name: &LockName) -> Result<bool> {
        self.break_held(name).await
    }

    async fn holder(&self, name: &LockName) -> Result<Option<Holder>> {
        self.holder_of(name).await
    }

    /// Semaphores and read-write locks are the table's.
    async fn break_holds(
        &self,
        name: &LockName,
        kind: LockKind,
        owner: Option<&Owner>,
    ) -> Result<usize> {
        self.table.break_holds(name, kind, owner).await
    }

    /// A mutex from the database's locks (see
    /// [`AdvisoryStore::inspect_mutex`]); the rest from the table.
    async fn inspect(&self, name: &LockName, kind: LockKind) -> Result<Inspection> {
        match kind {
            LockKind::Mutex => self.inspect_mutex(name).await,
            _ => self.table.inspect(name, kind).await,
        }
    }

    /// The table's semaphores and read-write locks (its mutex rows carry
    /// no lease here, so it lists none), and the held mutexes.
    async fn list(&self, prefix: &str) -> Result<Vec<Listed>> {
        let mut listed = self.table.list(prefix).await?;
        listed.extend(self.list_mutexes(prefix).await?);
        Ok(listed)
    }

    /// Records are the table's.
    async fn write_record(&self, name: &LockName, value: &str, keep: Duration) -> Result<()> {
        self.table.write_record(name, value, keep).await
    }

    async fn read_record(&self, name: &LockName) -> Result<Option<Record>> {
        self.table.read_record(name).await
    }

    async fn delete_record(&self, name: &LockName) -> Result<bool> {
        self.table.delete_record(name).await
    }

    /// Lets go of the sessions (held locks end with their guards), then
    /// closes the table's pool.
    async fn close(&self) {
        omnilock_core::lock_unpoisoned(&self.shared).clear();
        self.table.close().await;
    }
}
