//! Looking at and breaking another owner's advisory lock, from the store's
//! pool.

use omnilock_core::{Error, Holder, LockName, Owner, Result};

use super::AdvisoryStore;
#[cfg(feature = "mysql")]
use super::session::kill;
use crate::conn::Pool;

impl AdvisoryStore {
    /// Ends the session holding `name`, whoever it belongs to. Every other
    /// lock on that session is lost with it.
    pub(super) async fn break_held(&self, name: &LockName) -> Result<bool> {
        let pool = self.table.pool();
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
