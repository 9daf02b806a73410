//! Looking at and breaking another owner's advisory lock, from the store's
//! pool.

use std::time::Duration;

use omnilock_core::{Backoff, Error, ErrorKind, Holder, LockName, Owner, Result};

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
        let pool = self.table.pool();
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
        row.map(|(owner, token)| Ok(Holder::new(Owner::new(&owner)?, token as u64)))
            .transpose()
    }
}
