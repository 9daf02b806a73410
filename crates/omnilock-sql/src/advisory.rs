// A build with SQLite only refuses advisory mode in the URL: what follows
// is then never reached.
#![cfg_attr(
    not(any(feature = "mysql", feature = "postgres")),
    allow(unused_imports, unreachable_code, unused_variables, dead_code)
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
//! - **Sessions in an unknown state are never reused:** a session dropped
//!   mid-statement (a cancelled acquire) or after an error is killed from
//!   the store's pool (`KILL`, `pg_terminate_backend`), which ends its wait
//!   and frees whatever it took. Sessions that end clean wait in a small
//!   idle list for the next lock.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use omnilock_core::{AcquireRequest, Error, ErrorKind, Grant, Holder, LockName, Owner, Result};
#[allow(unused_imports)]
use sqlx::{AssertSqlSafe, Executor, Row, SqlSafeStr, SqlStr};

use crate::config::{Dialect, SqlConfig};
use crate::conn::errors::map_err;
use crate::conn::{OwnedConn, Pool, Target};
use crate::queries::advisory::{self as statements, Advisory as Sql};

/// The database's name for one lock: derived from the table and the lock
/// name, so that two tables' locks of one name stay apart. FNV-1a, 64 bits,
/// over `table`, a zero byte and `name`: stable across versions and easy to
/// compute in any language (for an operator looking at `pg_locks` or
/// `performance_schema.metadata_locks`). Two names with one key would only
/// exclude each other, never share a lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Key(u64);

impl Key {
    pub(crate) fn new(table: &str, name: &str) -> Self {
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for byte in table.bytes().chain([0]).chain(name.bytes()) {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
        Key(hash)
    }

    #[cfg_attr(not(feature = "mysql"), allow(dead_code))]
    /// MySQL/MariaDB's lock name (at most 64 characters; hex, so that its
    /// case-insensitive comparison changes nothing).
    fn mysql(self) -> String {
        format!("omnilock:{:016x}", self.0)
    }

    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    /// PostgreSQL's `bigint` key.
    fn postgres(self) -> i64 {
        self.0 as i64
    }

    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    /// PostgreSQL shows a `bigint` key in `pg_locks` as `classid` (high 32
    /// bits) and `objid` (low 32 bits).
    fn postgres_halves(self) -> (i64, i64) {
        ((self.0 >> 32) as i64, (self.0 & 0xffff_ffff) as i64)
    }
}

/// How long a MySQL/MariaDB wait blocks in one `GET_LOCK` before asking
/// again (a cancelled wait is killed, not timed out, so this only bounds a
/// statement's length).
#[cfg_attr(not(feature = "mysql"), allow(dead_code))]
const MYSQL_WAIT_SECS: i64 = 3600;

/// Advisory mode's state in a store.
pub(crate) struct Advisory {
    target: Target,
    config: Arc<SqlConfig>,
    sql: Sql,
    /// The store's pool: sessions are killed from it.
    killer: Pool,
    /// Sessions holding this store's locks, or ready to: a lock taken by a
    /// try goes to one of them; a session that waited joins them once
    /// granted.
    shared: Mutex<Vec<Arc<Shared>>>,
}

impl std::fmt::Debug for Advisory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Advisory").finish_non_exhaustive()
    }
}

/// A connection of advisory mode.
enum SessionConn {
    #[cfg(feature = "mysql")]
    MySql(sqlx::MySqlConnection),
    #[cfg(feature = "postgres")]
    Postgres(sqlx::PgConnection),
}

/// One session and what is needed to kill it from elsewhere.
pub(crate) struct Session {
    conn: SessionConn,
    /// `CONNECTION_ID()` or `pg_backend_pid()`.
    id: i64,
    /// PostgreSQL: the backend's start (microseconds), so that a kill never
    /// hits a later backend that reused the pid.
    started_us: i64,
    /// What the server was told: end the session once idle this long.
    idle_timeout: Duration,
    /// Holds no lock and has no statement in flight: may be dropped without
    /// being killed.
    clean: bool,
    /// The store's pool, to kill this session if it is dropped unclean.
    killer: Pool,
}

impl Drop for Session {
    fn drop(&mut self) {
        if self.clean {
            return;
        }
        // Dropped outside a runtime (a process exiting): the socket closes
        // and the server ends the session when it notices.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let (pool, id, started_us) = (self.killer.clone(), self.id, self.started_us);
            runtime.spawn(async move {
                if let Err(err) = kill(&pool, id, started_us).await {
                    tracing::debug!(error = %err, session = id, "omnilock advisory: killing a session failed; the server ends it when idle");
                }
            });
        }
    }
}

/// Ends session `id`: its wait (if any) stops and its locks are freed.
async fn kill(pool: &Pool, id: i64, started_us: i64) -> sqlx::Result<()> {
    let _ = started_us;
    match pool {
        #[cfg(feature = "mysql")]
        Pool::MySql(p) => {
            // KILL takes no placeholder; the id is the server's integer.
            p.execute(sqlx::raw_sql(AssertSqlSafe(statements::mysql_kill(id))))
                .await
                .map(|_| ())
        }
        #[cfg(feature = "postgres")]
        Pool::Postgres(p) => sqlx::query(statements::POSTGRES_KILL)
            .bind(id as i32)
            .bind(started_us)
            .execute(p)
            .await
            .map(|_| ()),
        #[allow(unreachable_patterns)]
        _ => Ok(()),
    }
}

/// A session that holds any number of this store's locks, used one
/// statement at a time. Its lease covers them all: one statement every
/// TTL/3 keeps every one held, and if it dies they are all lost together
/// (as with an etcd lease or a ZooKeeper session).
struct Shared {
    /// `None` once the session died or was killed: its locks are lost.
    slot: tokio::sync::Mutex<Option<Holding>>,
    idle_timeout: Duration,
    /// Locks held, mirrored outside the slot for picking a session.
    held: std::sync::atomic::AtomicUsize,
    /// When it last ran a statement (for dropping idle ones).
    used: Mutex<Instant>,
}

/// A session and the keys of the locks it holds. Never takes a key it
/// holds: the database would count that as re-entering (GET_LOCK and
/// pg_advisory_lock nest per session), while to this store it is another
/// owner asking.
struct Holding {
    session: Session,
    keys: HashSet<Key>,
}

impl Shared {
    fn new(session: Session, keys: HashSet<Key>) -> Arc<Self> {
        Arc::new(Shared {
            idle_timeout: session.idle_timeout,
            held: std::sync::atomic::AtomicUsize::new(keys.len()),
            slot: tokio::sync::Mutex::new(Some(Holding { session, keys })),
            used: Mutex::new(Instant::now()),
        })
    }

    /// Known to have died or been killed (a failed statement found out).
    /// A session busy with a statement right now counts as alive.
    fn is_dead(&self) -> bool {
        self.slot.try_lock().is_ok_and(|slot| slot.is_none())
    }

    fn held(&self) -> usize {
        self.held.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn touch(&self, holding: &Holding) {
        self.held
            .store(holding.keys.len(), std::sync::atomic::Ordering::Relaxed);
        *omnilock_core::lock_unpoisoned(&self.used) = Instant::now();
    }
}

/// A held advisory lock: the grant's backend state.
pub(crate) struct Held {
    shared: Arc<Shared>,
    key: Key,
}

/// The server's idle timeout for a TTL: MySQL counts whole seconds (at
/// least 1), rounded up so that the lock never frees before the lease.
fn idle_timeout(dialect: Dialect, ttl: Duration) -> Duration {
    match dialect {
        Dialect::MySql => Duration::from_secs(ttl.as_secs_f64().ceil().max(1.0) as u64),
        _ => ttl.max(Duration::from_millis(1)),
    }
}

/// What a take statement found.
#[derive(Debug, Clone, Copy)]
enum Took {
    Taken(u64),
    Busy,
}

/// Runs `call` to the end even if the caller goes: a statement cut off
/// halfway would leave a shared session in an unknown state.
async fn to_the_end<T: Send + 'static>(
    call: impl std::future::Future<Output = T> + Send + 'static,
) -> T {
    omnilock_core::complete_or_undo(call, |_| async {}).await
}

impl Advisory {
    pub(crate) fn new(config: &SqlConfig, target: Target, killer: Pool) -> Self {
        Advisory {
            target,
            config: Arc::new(config.clone()),
            sql: Sql::new(config.dialect, &config.table),
            killer,
            shared: Mutex::new(Vec::new()),
        }
    }

    fn key(&self, name: &LockName) -> Key {
        Key::new(&self.config.table, name.as_str())
    }

    fn err(&self, e: sqlx::Error) -> Error {
        map_err(e, &self.config)
    }

    /// The session a try runs on: an empty one (so that each lock has a
    /// session of its own, and `break_lock`, which ends the holder's
    /// session, takes no other lock with it) while the store has fewer than
    /// `sessions`; past that, the least busy one of this TTL, which then
    /// holds several.
    async fn shared_for(&self, ttl: Duration) -> Result<Arc<Shared>> {
        let wanted = idle_timeout(self.config.dialect, ttl);
        {
            let mut list = omnilock_core::lock_unpoisoned(&self.shared);
            // The server ends a session idle for its timeout: let go of
            // empty ones well before that, and of dead ones at once.
            list.retain(|s| {
                !s.is_dead()
                    && (s.held() > 0
                        || omnilock_core::lock_unpoisoned(&s.used).elapsed() < s.idle_timeout / 2)
            });
            let same: Vec<&Arc<Shared>> =
                list.iter().filter(|s| s.idle_timeout == wanted).collect();
            let free = |s: &&&Arc<Shared>| s.slot.try_lock().is_ok();
            if let Some(empty) = same.iter().filter(free).find(|s| s.held() == 0) {
                return Ok(Arc::clone(empty));
            }
            if list.len() >= self.config.advisory_sessions as usize && !same.is_empty() {
                let least = same
                    .iter()
                    .min_by_key(|s| (s.slot.try_lock().is_err(), s.held()))
                    .expect("not empty");
                return Ok(Arc::clone(least));
            }
        }
        let session = self.open(ttl).await?;
        let shared = Shared::new(session, HashSet::new());
        omnilock_core::lock_unpoisoned(&self.shared).push(Arc::clone(&shared));
        Ok(shared)
    }

    /// A session of its own for a wait: an empty shared one nobody else
    /// uses, or a new connection.
    async fn session_for_wait(&self, ttl: Duration) -> Result<Session> {
        let wanted = idle_timeout(self.config.dialect, ttl);
        let claimed = {
            let mut list = omnilock_core::lock_unpoisoned(&self.shared);
            // Only the list refers to it (clones are made under this lock),
            // so nobody can start a statement on it.
            let spare = list.iter().position(|s| {
                s.idle_timeout == wanted
                    && s.held() == 0
                    && Arc::strong_count(s) == 1
                    && omnilock_core::lock_unpoisoned(&s.used).elapsed() < s.idle_timeout / 2
            });
            spare
                .map(|i| list.swap_remove(i))
                .and_then(|s| Arc::try_unwrap(s).ok())
                .and_then(|s| s.slot.into_inner())
                .filter(|h| h.keys.is_empty())
                .map(|h| h.session)
        };
        match claimed {
            Some(session) => Ok(session),
            None => self.open(ttl).await,
        }
    }

    /// A new session that ends itself once idle for `ttl`.
    async fn open(&self, ttl: Duration) -> Result<Session> {
        let config = &*self.config;
        let conn = tokio::time::timeout(config.connect_timeout, self.target.connect_one(config))
            .await
            .map_err(|_| {
                Error::unavailable(format!(
                    "no answer from the database at {} within {:?}",
                    config.place, config.connect_timeout
                ))
                .with_backend(config.dialect.kind())
            })?
            .map_err(|e| too_many_sessions(e, config))?;
        let err = |e| map_err(e, config);
        let (conn, id, started_us) = match conn {
            #[cfg(feature = "mysql")]
            OwnedConn::MySql(mut c) => {
                let id: i64 = sqlx::query_scalar(statements::MYSQL_SESSION_ID)
                    .fetch_one(&mut c)
                    .await
                    .map_err(err)?;
                (SessionConn::MySql(c), id, 0)
            }
            #[cfg(feature = "postgres")]
            OwnedConn::Postgres(mut c) => {
                let row = sqlx::query(statements::POSTGRES_SESSION_ID)
                    .fetch_one(&mut c)
                    .await
                    .map_err(err)?;
                let (id, started): (i64, i64) =
                    (row.try_get(0).map_err(err)?, row.try_get(1).map_err(err)?);
                (SessionConn::Postgres(c), id, started)
            }
            #[allow(unreachable_patterns)]
            _ => {
                return Err(Error::config(
                    "advisory mode needs MySQL/MariaDB or PostgreSQL",
                ))
            }
        };
        let mut session = Session {
            conn,
            id,
            started_us,
            idle_timeout: idle_timeout(config.dialect, ttl),
            clean: true,
            killer: self.killer.clone(),
        };
        set_idle_timeout(&mut session).await.map_err(|e| {
            if e.to_string()
                .contains("unrecognized configuration parameter")
            {
                return Error::config(
                    "mode=advisory needs PostgreSQL 14 or later: the lease is the session's \
                     idle_session_timeout",
                )
                .with_backend(config.dialect.kind());
            }
            err(e)
        })?;
        Ok(session)
    }

    /// Takes the lock if it is free: one statement on a shared session.
    /// `Ok(None)` when busy.
    ///
    /// A session can die under a try without this store knowing
    /// (`break_lock` from another client kills the holder's session, and
    /// with it every lock on it); the failed statement finds out and kills
    /// it. Then the try runs once more, on another session. That is safe
    /// whatever the failed statement did: an advisory lock belongs to its
    /// session, so one the dead session may have taken is not this
    /// session's to take twice, and frees when that session ends.
    pub(crate) async fn try_take(&self, request: &AcquireRequest) -> Result<Option<Grant>> {
        match self.try_take_once(request).await {
            Err((err, Some(shared))) if shared.is_dead() => {
                tracing::debug!(error = %err, "omnilock advisory: a shared session died; trying on another");
                self.try_take_once(request).await.map_err(|(err, _)| err)
            }
            result => result.map_err(|(err, _)| err),
        }
    }

    /// One try on one session; a failure names the session it ran on.
    async fn try_take_once(
        &self,
        request: &AcquireRequest,
    ) -> std::result::Result<Option<Grant>, (Error, Option<Arc<Shared>>)> {
        let shared = self.shared_for(request.ttl).await.map_err(|e| (e, None))?;
        let key = self.key(&request.name);
        let started = Instant::now();
        let (sql, on, undo_sql, undo_on) = (
            self.sql.clone(),
            Arc::clone(&shared),
            self.sql.clone(),
            Arc::clone(&shared),
        );
        let (name, owner) = (request.name.to_string(), request.owner.to_string());
        // A caller that goes while the statement runs: the lock it may have
        // taken is given back on the same session.
        let took = omnilock_core::complete_or_undo(
            async move { take_on(&on, &sql, key, &name, &owner).await },
            move |took| async move {
                if let Ok(Took::Taken(_)) = took {
                    let _ = release_on(&undo_on, &undo_sql, key).await;
                }
            },
        )
        .await
        .map_err(|e| (self.err(e), Some(Arc::clone(&shared))))?;
        Ok(match took {
            Took::Taken(token) => Some(held(shared, key, token, started + request.ttl)),
            Took::Busy => None,
        })
    }

    /// Waits for the lock: a try, and if busy a wait inside the database on
    /// a session of its own, which then joins the shared ones. Dropped
    /// while waiting, that session is killed, which ends the wait and frees
    /// the lock if it was granted meanwhile.
    pub(crate) async fn take(&self, request: &AcquireRequest) -> Result<Grant> {
        if let Some(grant) = self.try_take(request).await? {
            return Ok(grant);
        }
        request.waiting.raise();
        let mut session = self.session_for_wait(request.ttl).await?;
        session.clean = false;
        let key = self.key(&request.name);
        let err = |e| self.err(e);
        loop {
            let granted = match &mut session.conn {
                #[cfg(not(any(feature = "mysql", feature = "postgres")))]
                _ => unreachable!("advisory mode is refused without mysql or postgres"),
                #[cfg(feature = "mysql")]
                SessionConn::MySql(c) => {
                    let got: Option<i64> = sqlx::query_scalar(self.sql.wait.clone())
                        .bind(key.mysql())
                        .bind(MYSQL_WAIT_SECS)
                        .fetch_one(c)
                        .await
                        .map_err(err)?;
                    got == Some(1)
                }
                #[cfg(feature = "postgres")]
                SessionConn::Postgres(c) => {
                    sqlx::query(self.sql.wait.clone())
                        .bind(key.postgres())
                        .execute(c)
                        .await
                        .map_err(err)?;
                    true
                }
            };
            if granted {
                break;
            }
        }
        // The session's idle clock restarts when this statement arrives,
        // after `started`: the lease runs from there.
        let started = Instant::now();
        let token = fence(
            &mut session,
            &self.sql,
            request.name.as_str(),
            request.owner.as_str(),
        )
        .await
        .map_err(err)?;
        let shared = Shared::new(session, HashSet::from([key]));
        omnilock_core::lock_unpoisoned(&self.shared).push(Arc::clone(&shared));
        Ok(held(shared, key, token, started + request.ttl))
    }

    /// Releases on the session that holds the lock.
    pub(crate) async fn release(&self, grant: &Grant) -> Result<()> {
        let held: &Held = grant.backend_state()?;
        let (shared, sql, key) = (Arc::clone(&held.shared), self.sql.clone(), held.key);
        match to_the_end(async move { release_on(&shared, &sql, key).await }).await {
            Ok(true) => Ok(()),
            Ok(false) => Err(Error::not_owner()),
            Err(e) => Err(self.err(e)),
        }
    }

    /// Renews holds (as `Backend::renew_all`): one statement per session,
    /// which restarts its idle clock for every lock it holds. A session
    /// that is gone means its locks are (or soon will be) gone.
    pub(crate) async fn renew_all(
        &self,
        holds: &[(&AcquireRequest, &Grant)],
    ) -> Vec<Result<Instant>> {
        let mut sessions: Vec<Arc<Shared>> = Vec::new();
        let mut which: Vec<Result<usize>> = Vec::with_capacity(holds.len());
        for (_, grant) in holds {
            which.push(grant.backend_state::<Held>().map(|held| {
                match sessions.iter().position(|s| Arc::ptr_eq(s, &held.shared)) {
                    Some(i) => i,
                    None => {
                        sessions.push(Arc::clone(&held.shared));
                        sessions.len() - 1
                    }
                }
            }));
        }
        let started = Instant::now();
        let pinged = futures_util::future::join_all(sessions.iter().map(|shared| {
            let (shared, sql) = (Arc::clone(shared), self.sql.clone());
            to_the_end(async move { ping(&shared, &sql).await })
        }))
        .await;
        holds
            .iter()
            .zip(which)
            .map(|((request, grant), session)| {
                let i = session?;
                let held: &Held = grant.backend_state()?;
                match &pinged[i] {
                    Ok(keys) if keys.contains(&held.key) => Ok(started + request.ttl),
                    Ok(_) => Err(lost("the lock was released")),
                    Err(why) => Err(lost(format!("the lock's database session is gone ({why})"))),
                }
            })
            .collect()
    }

    /// Ends the session holding `name`, whoever it belongs to. Every other
    /// lock on that session is lost with it.
    pub(crate) async fn break_lock(&self, pool: &Pool, name: &LockName) -> Result<bool> {
        let key = self.key(name);
        let err = |e| self.err(e);
        match pool {
            #[cfg(feature = "mysql")]
            Pool::MySql(p) => {
                let holder: Option<i64> = sqlx::query_scalar(self.sql.break_lock.clone())
                    .bind(key.mysql())
                    .fetch_one(p)
                    .await
                    .map_err(err)?;
                let Some(id) = holder else { return Ok(false) };
                match kill(pool, id, 0).await {
                    Ok(()) => Ok(true),
                    // ER_NO_SUCH_THREAD: it ended meanwhile.
                    Err(sqlx::Error::Database(db)) if db.code().as_deref() == Some("HY000") => {
                        Ok(false)
                    }
                    Err(e) => Err(err(e)),
                }
            }
            #[cfg(feature = "postgres")]
            Pool::Postgres(p) => {
                let (high, low) = key.postgres_halves();
                let killed: Vec<bool> = sqlx::query_scalar(self.sql.break_lock.clone())
                    .bind(high)
                    .bind(low)
                    .fetch_all(p)
                    .await
                    .map_err(err)?;
                Ok(killed.into_iter().any(|k| k))
            }
            #[allow(unreachable_patterns)]
            _ => Err(Error::config(
                "advisory mode needs MySQL/MariaDB or PostgreSQL",
            )),
        }
    }

    /// Who holds `name`: the row's owner and token, while the database has
    /// the lock held.
    pub(crate) async fn holder(&self, pool: &Pool, name: &LockName) -> Result<Option<Holder>> {
        let key = self.key(name);
        let err = |e| self.err(e);
        let row: Option<(String, i64)> = match pool {
            #[cfg(feature = "mysql")]
            Pool::MySql(p) => sqlx::query_as(self.sql.holder.clone())
                .bind(name.as_str())
                .bind(key.mysql())
                .fetch_optional(p)
                .await
                .map_err(err)?,
            #[cfg(feature = "postgres")]
            Pool::Postgres(p) => {
                let (high, low) = key.postgres_halves();
                sqlx::query_as(self.sql.holder.clone())
                    .bind(high)
                    .bind(low)
                    .bind(name.as_str())
                    .fetch_optional(p)
                    .await
                    .map_err(err)?
            }
            #[allow(unreachable_patterns)]
            _ => None,
        };
        row.map(|(owner, token)| {
            Ok(Holder {
                owner: Owner::new(&owner)?,
                token: token as u64,
            })
        })
        .transpose()
    }

    /// Lets go of the sessions (held locks end with their guards).
    pub(crate) fn close(&self) {
        omnilock_core::lock_unpoisoned(&self.shared).clear();
    }
}

/// The one-statement take on a shared session. A failed statement leaves
/// the session in an unknown state: it is killed, and its other locks are
/// lost with it.
async fn take_on(
    shared: &Shared,
    sql: &Sql,
    key: Key,
    name: &str,
    owner: &str,
) -> sqlx::Result<Took> {
    let mut slot = shared.slot.lock().await;
    let Some(holding) = slot.as_mut() else {
        return Err(gone());
    };
    if holding.keys.contains(&key) {
        return Ok(Took::Busy);
    }
    let session = &mut holding.session;
    let was_clean = session.clean;
    session.clean = false;
    let limit = session.idle_timeout;
    let took = bounded(limit, async {
        match &mut session.conn {
            #[cfg(not(any(feature = "mysql", feature = "postgres")))]
            _ => unreachable!("advisory mode is refused without mysql or postgres"),
            #[cfg(feature = "mysql")]
            SessionConn::MySql(c) => sqlx::query(sql.take_now.clone())
                .bind(name)
                .bind(owner)
                .bind(key.mysql())
                .execute(c)
                .await
                .map(|done| match done.rows_affected() {
                    0 => Took::Busy,
                    _ => Took::Taken(done.last_insert_id().max(1)),
                }),
            #[cfg(feature = "postgres")]
            SessionConn::Postgres(c) => sqlx::query_scalar::<_, i64>(sql.take_now.clone())
                .bind(name)
                .bind(owner)
                .bind(key.postgres())
                .fetch_optional(c)
                .await
                .map(|token| token.map_or(Took::Busy, |t| Took::Taken(t as u64))),
        }
    })
    .await;
    match took {
        Ok(Took::Taken(token)) => {
            holding.keys.insert(key);
            shared.touch(holding);
            Ok(Took::Taken(token))
        }
        Ok(Took::Busy) => {
            holding.session.clean = was_clean;
            shared.touch(holding);
            Ok(Took::Busy)
        }
        Err(e) => {
            // Dropped unclean: killed.
            slot.take();
            shared.held.store(0, std::sync::atomic::Ordering::Relaxed);
            Err(e)
        }
    }
}

/// Releases `key` on its session: whether the session held it.
async fn release_on(shared: &Shared, sql: &Sql, key: Key) -> sqlx::Result<bool> {
    let mut slot = shared.slot.lock().await;
    let Some(holding) = slot.as_mut() else {
        // Killed (broken, or by break_lock): nothing is held any more.
        return Ok(false);
    };
    if !holding.keys.contains(&key) {
        return Ok(false);
    }
    let limit = holding.session.idle_timeout;
    let released: sqlx::Result<bool> = bounded(limit, async {
        match &mut holding.session.conn {
            #[cfg(not(any(feature = "mysql", feature = "postgres")))]
            _ => unreachable!("advisory mode is refused without mysql or postgres"),
            #[cfg(feature = "mysql")]
            SessionConn::MySql(c) => sqlx::query_scalar::<_, Option<i64>>(sql.release.clone())
                .bind(key.mysql())
                .fetch_one(c)
                .await
                .map(|got| got == Some(1)),
            #[cfg(feature = "postgres")]
            SessionConn::Postgres(c) => {
                sqlx::query_scalar(sql.release.clone())
                    .bind(key.postgres())
                    .fetch_one(c)
                    .await
            }
        }
    })
    .await;
    match released {
        Ok(released) => {
            holding.keys.remove(&key);
            holding.session.clean = holding.keys.is_empty();
            shared.touch(holding);
            Ok(released)
        }
        Err(e) => {
            slot.take();
            shared.held.store(0, std::sync::atomic::Ordering::Relaxed);
            Err(e)
        }
    }
}

/// One statement on a shared session: the keys it still holds.
async fn ping(shared: &Shared, sql: &Sql) -> Result<HashSet<Key>> {
    let mut slot = shared.slot.lock().await;
    let Some(holding) = slot.as_mut() else {
        return Err(Error::unavailable("the session was killed or broke"));
    };
    // Only this session could release its locks: alive means held.
    let limit = holding.session.idle_timeout;
    let alive: sqlx::Result<()> = bounded(limit, async {
        match &mut holding.session.conn {
            #[cfg(not(any(feature = "mysql", feature = "postgres")))]
            _ => unreachable!("advisory mode is refused without mysql or postgres"),
            #[cfg(feature = "mysql")]
            SessionConn::MySql(c) => sqlx::query(sql.renew.clone()).execute(c).await.map(|_| ()),
            #[cfg(feature = "postgres")]
            SessionConn::Postgres(c) => sqlx::query(sql.renew.clone()).execute(c).await.map(|_| ()),
        }
    })
    .await;
    match alive {
        Ok(_) => {
            shared.touch(holding);
            Ok(holding.keys.clone())
        }
        Err(e) => {
            slot.take();
            shared.held.store(0, std::sync::atomic::Ordering::Relaxed);
            Err(Error::unavailable(e.to_string()))
        }
    }
}

/// Bumps the token of a lock the session holds.
async fn fence(session: &mut Session, sql: &Sql, name: &str, owner: &str) -> sqlx::Result<u64> {
    match &mut session.conn {
        #[cfg(not(any(feature = "mysql", feature = "postgres")))]
        _ => unreachable!("advisory mode is refused without mysql or postgres"),
        #[cfg(feature = "mysql")]
        SessionConn::MySql(c) => {
            let done = sqlx::query(sql.fence.clone())
                .bind(name)
                .bind(owner)
                .execute(c)
                .await?;
            Ok(done.last_insert_id().max(1))
        }
        #[cfg(feature = "postgres")]
        SessionConn::Postgres(c) => {
            let token: i64 = sqlx::query_scalar(sql.fence.clone())
                .bind(name)
                .bind(owner)
                .fetch_one(c)
                .await?;
            Ok(token as u64)
        }
    }
}

/// A statement on a session that does not answer within the session's
/// idle timeout (its lease) fails: the caller then kills the session, so
/// that a lock whose holder was told it is lost cannot stay held by a
/// session that answers late (a database paused, then resumed).
async fn bounded<T>(
    limit: Duration,
    statement: impl std::future::Future<Output = sqlx::Result<T>>,
) -> sqlx::Result<T> {
    tokio::time::timeout(limit, statement)
        .await
        .unwrap_or_else(|_| {
            Err(sqlx::Error::Io(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the advisory session did not answer within its lease",
            )))
        })
}

fn gone() -> sqlx::Error {
    sqlx::Error::Io(std::io::Error::new(
        std::io::ErrorKind::BrokenPipe,
        "the advisory session was killed or broke",
    ))
}

/// A refused connection says why advisory mode needs so many, when the
/// server's connection limit refused it.
fn too_many_sessions(err: Error, config: &SqlConfig) -> Error {
    let text = err.to_string();
    let limit = [
        "Too many connections",
        "too many clients",
        "connection slots are reserved",
    ];
    if !limit.iter().any(|l| text.contains(l)) {
        return err;
    }
    Error::unavailable(format!(
        "the database at {} refused one more connection ({text}); advisory mode holds a \
         connection of its own per waiting acquire (held locks share a few): raise the \
         server's max_connections, or use mode=table (docs/backends/sql.md, Advisory mode)",
        config.place
    ))
    .with_backend(config.dialect.kind())
}

fn lost(message: impl Into<String>) -> Error {
    Error::new(ErrorKind::LockLost, message)
}

fn held(shared: Arc<Shared>, key: Key, token: u64, valid_until: Instant) -> Grant {
    Grant::new(token, valid_until).with_state(Held { shared, key })
}

/// Tells the server to end the session once idle for its timeout.
async fn set_idle_timeout(session: &mut Session) -> sqlx::Result<()> {
    let timeout = session.idle_timeout;
    match &mut session.conn {
        #[cfg(not(any(feature = "mysql", feature = "postgres")))]
        _ => unreachable!("advisory mode is refused without mysql or postgres"),
        #[cfg(feature = "mysql")]
        SessionConn::MySql(c) => sqlx::query(statements::MYSQL_SET_IDLE_TIMEOUT)
            .bind(timeout.as_secs() as i64)
            .execute(c)
            .await
            .map(|_| ()),
        #[cfg(feature = "postgres")]
        SessionConn::Postgres(c) => sqlx::query(statements::POSTGRES_SET_IDLE_TIMEOUT)
            .bind(timeout.as_millis().to_string())
            .execute(c)
            .await
            .map(|_| ()),
    }
}
