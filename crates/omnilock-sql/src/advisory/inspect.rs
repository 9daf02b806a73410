//! Looking at and breaking another owner's advisory lock, from the store's
//! pool: its holder (the lock table's row, while the database has the
//! lock held), its waiters (PostgreSQL's `pg_locks`), the held mutexes
//! under a prefix, and ending the holder's session.
//!
//! A hold began when its token was bumped (the row's `updated_at`, by the
//! database's clock). Its lease is the holding session's idle timeout,
//! which another session cannot read: `lease_left` is `None`.

use std::time::{Duration, SystemTime};

use omnilock_core::{
    Backoff, Error, ErrorKind, Held, Holder, Inspection, Listed, LockKind, LockName, Owner, Result,
    Side, Waiting,
};

use super::AdvisoryStore;
#[cfg(feature = "mysql")]
use super::session::kill;
use crate::conn::Pool;

/// How long a broken lock's session may take to end and let go of it.
const LET_GO_PATIENCE: Duration = Duration::from_secs(10);

impl AdvisoryStore {
    /// Ends the session holding `name`, whoever it belongs to. Every other
    /// lock on that session is lost with it.
    ///
    /// Returns once the database has let go of the lock: ending a session
    /// is asynchronous on both databases (`KILL` and
    /// `pg_terminate_backend` return before the session has gone), and a
    /// caller that breaks a lock expects it free, or another's, after.
    pub(super) async fn break_held(&self, name: &LockName) -> Result<bool> {
        let pool = self.table.pool();
        let key = self.key(name);
        let err = |e| self.err(e);
        let ended: Vec<i64> = match pool {
            #[cfg(feature = "mysql")]
            Pool::MySql(p) => {
                let holder: Option<i64> = sqlx::query_scalar(self.sql.break_lock.clone())
                    .bind(key.mysql())
                    .fetch_one(p)
                    .await
                    .map_err(err)?;
                let Some(id) = holder else { return Ok(false) };
                match kill(pool, id, 0).await {
                    Ok(()) => vec![id],
                    // ER_NO_SUCH_THREAD: it ended meanwhile.
                    Err(sqlx::Error::Database(db)) if db.code().as_deref() == Some("HY000") => {
                        return Ok(false);
                    }
                    Err(e) => return Err(err(e)),
                }
            }
            #[cfg(feature = "postgres")]
            Pool::Postgres(p) => {
                let (high, low) = key.postgres_halves();
                let signalled: Vec<(i64, bool)> = sqlx::query_as(self.sql.break_lock.clone())
                    .bind(high)
                    .bind(low)
                    .fetch_all(p)
                    .await
                    .map_err(err)?;
                signalled
                    .into_iter()
                    .filter_map(|(pid, sent)| sent.then_some(pid))
                    .collect()
            }
            #[allow(unreachable_patterns)]
            _ => {
                return Err(Error::config(
                    "advisory mode needs MySQL/MariaDB or PostgreSQL",
                ));
            }
        };
        if ended.is_empty() {
            return Ok(false);
        }
        self.wait_let_go(name, &ended).await?;
        Ok(true)
    }

    /// Waits until none of the sessions `ended` holds `name` any more.
    async fn wait_let_go(&self, name: &LockName, ended: &[i64]) -> Result<()> {
        let deadline = tokio::time::Instant::now() + LET_GO_PATIENCE;
        let mut backoff = Backoff::new(Duration::from_millis(2), Duration::from_millis(100));
        loop {
            let holding = self.holding(name).await?;
            if !holding.iter().any(|session| ended.contains(session)) {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(Error::new(
                    ErrorKind::Timeout,
                    format!(
                        "the holder's session was ended but the database still had the lock \
                         after {LET_GO_PATIENCE:?}"
                    ),
                )
                .with_lock(name.as_str()));
            }
            tokio::time::sleep(backoff.next_delay()).await;
        }
    }

    /// The sessions holding `name` now.
    async fn holding(&self, name: &LockName) -> Result<Vec<i64>> {
        let key = self.key(name);
        let err = |e| self.err(e);
        match self.table.pool() {
            #[cfg(feature = "mysql")]
            Pool::MySql(p) => {
                let id: Option<i64> = sqlx::query_scalar(self.sql.holding.clone())
                    .bind(key.mysql())
                    .fetch_one(p)
                    .await
                    .map_err(err)?;
                Ok(id.into_iter().collect())
            }
            #[cfg(feature = "postgres")]
            Pool::Postgres(p) => {
                let (high, low) = key.postgres_halves();
                sqlx::query_scalar(self.sql.holding.clone())
                    .bind(high)
                    .bind(low)
                    .fetch_all(p)
                    .await
                    .map_err(err)
            }
            #[allow(unreachable_patterns)]
            _ => Ok(Vec::new()),
        }
    }

    /// Who holds `name`: the row's owner and token, while the database has
    /// the lock held.
    pub(super) async fn holder_of(&self, name: &LockName) -> Result<Option<Holder>> {
        let row = self.held_row(name).await?;
        row.map(|(owner, token, _)| Ok(Holder::new(Owner::new(&owner)?, token as u64)))
            .transpose()
    }

    /// The mutex `name` as [`omnilock_core::Backend::inspect`] reports it:
    /// its holder, held since the token was bumped; on PostgreSQL, one
    /// waiter (owner unknown, order the database's) per session waiting
    /// in `pg_locks`; on MySQL/MariaDB, no record of waiters.
    pub(super) async fn inspect_mutex(&self, name: &LockName) -> Result<Inspection> {
        let mut seen = Inspection::free(name.as_str(), LockKind::Mutex);
        if let Some((owner, token, updated_at)) = self.held_row(name).await? {
            let since = SystemTime::UNIX_EPOCH + Duration::from_millis(updated_at.max(0) as u64);
            seen.holders.push(
                Held::new(Owner::new(&owner)?, token as u64, Side::Exclusive).since(Some(since)),
            );
        }
        seen.waiters = self.waiting(name).await?.map(|count| {
            (0..count)
                .map(|_| Waiting::new(None, Side::Exclusive))
                .collect()
        });
        seen.waiters_ordered = false;
        Ok(seen)
    }

    /// The held mutexes whose names start with `prefix`: of the lock
    /// table's rows that record an owner (every name ever taken here),
    /// those whose lock the database has held now.
    pub(super) async fn list_mutexes(&self, prefix: &str) -> Result<Vec<Listed>> {
        let names = self.table.owned_names(prefix).await?;
        if names.is_empty() {
            return Ok(Vec::new());
        }
        let held = self.held_of(&names).await?;
        Ok(names
            .into_iter()
            .zip(held)
            .filter_map(|(name, held)| held.then(|| Listed::new(name, LockKind::Mutex)))
            .collect())
    }

    /// Whether the database has the lock of each of `names` held: on
    /// PostgreSQL, one read of `pg_locks`; on MySQL/MariaDB, `IS_USED_LOCK`
    /// of each, a few hundred to a statement.
    async fn held_of(&self, names: &[String]) -> Result<Vec<bool>> {
        let table = &self.table.config().table;
        let keys = names.iter().map(|name| crate::key::Key::new(table, name));
        let err = |e| self.err(e);
        match self.table.pool() {
            #[cfg(feature = "mysql")]
            Pool::MySql(p) => {
                let keys: Vec<String> = keys.map(|key| key.mysql()).collect();
                let mut held = Vec::with_capacity(keys.len());
                for chunk in keys.chunks(MYSQL_KEYS_AT_ONCE) {
                    let mut query =
                        sqlx::query(crate::queries::advisory::mysql_used_locks(chunk.len()));
                    for key in chunk {
                        query = query.bind(key);
                    }
                    let row = query.fetch_one(p).await.map_err(err)?;
                    for i in 0..chunk.len() {
                        held.push(sqlx::Row::try_get::<i64, _>(&row, i).map_err(err)? == 1);
                    }
                }
                Ok(held)
            }
            #[cfg(feature = "postgres")]
            Pool::Postgres(p) => {
                let statement = self.sql.held_keys.clone().expect("PostgreSQL's statement");
                let locked: std::collections::HashSet<(i64, i64)> = sqlx::query_as(statement)
                    .fetch_all(p)
                    .await
                    .map_err(err)?
                    .into_iter()
                    .collect();
                Ok(keys
                    .map(|key| locked.contains(&key.postgres_halves()))
                    .collect())
            }
            #[allow(unreachable_patterns)]
            _ => Ok(vec![false; names.len()]),
        }
    }

    /// How many sessions wait for `name`; `None` where the database does
    /// not say (MySQL/MariaDB).
    async fn waiting(&self, name: &LockName) -> Result<Option<usize>> {
        match (self.table.pool(), &self.sql.waiting) {
            #[cfg(feature = "postgres")]
            (Pool::Postgres(p), Some(statement)) => {
                let (high, low) = self.key(name).postgres_halves();
                let count: i64 = sqlx::query_scalar(statement.clone())
                    .bind(high)
                    .bind(low)
                    .fetch_one(p)
                    .await
                    .map_err(|e| self.err(e))?;
                Ok(Some(count.max(0) as usize))
            }
            _ => {
                let _ = name;
                Ok(None)
            }
        }
    }

    /// The row of `name` (owner, token, `updated_at`) while the database
    /// has its lock held.
    async fn held_row(&self, name: &LockName) -> Result<Option<(String, i64, i64)>> {
        let pool = self.table.pool();
        let key = self.key(name);
        let err = |e| self.err(e);
        Ok(match pool {
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
        })
    }
}

/// MySQL/MariaDB: how many locks one statement asks about in `list`.
#[cfg(feature = "mysql")]
const MYSQL_KEYS_AT_ONCE: usize = 256;
