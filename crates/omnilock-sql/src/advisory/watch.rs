//! Finding a session that ended from outside, between renewals.
//!
//! An advisory lock ends with its session, and a session can be ended from
//! outside at any moment: an operator's `pg_terminate_backend` or `KILL`,
//! `break_lock` from another client, a server restart. The database hands
//! the lock to the next waiter at once, while the holder would learn of it
//! only at its next renewal, up to a third of the TTL later, and work on
//! meanwhile. So while this store holds locks, one statement on its pool
//! every [`WATCH`] lists which of its sessions the server still has. A
//! session missing from the list is asked itself (its renewal statement):
//! the list can be wrong (a pool whose role cannot see the sessions' start,
//! a router that sends the pool elsewhere), the session's own statement is
//! not. If that fails too, its locks report lost at once.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

#[allow(unused_imports)]
use sqlx::Row;

use super::AdvisoryStore;
use super::shared::{Shared, ping};
use crate::conn::Pool;
use crate::queries::advisory::Advisory as Sql;

/// A listed session whose start is not known (MySQL lists none; PostgreSQL
/// hides it from a role without the session user's privileges): listed by
/// ID alone.
const UNSEEN: i64 = i64::MIN;

/// How often the sessions holding locks are looked for.
pub(super) const WATCH: Duration = Duration::from_secs(1);

/// PostgreSQL: which of the process IDs (`$1`) run, with their start
/// (microseconds), so that a later backend on a reused ID does not count.
#[cfg(feature = "postgres")]
const POSTGRES_ALIVE: &str = "SELECT CAST(pid AS BIGINT),
        CAST(EXTRACT(EPOCH FROM backend_start) * 1000000 AS BIGINT)
     FROM pg_stat_activity WHERE pid = ANY($1)";

/// MySQL/MariaDB: the sessions of this account (an account sees its own
/// without the PROCESS privilege). Those marked `Killed` count: MariaDB
/// marks a session whose query was killed too, and the session itself is
/// asked before anything is lost.
#[cfg(feature = "mysql")]
const MYSQL_ALIVE: &str = "SELECT CAST(ID AS SIGNED) FROM information_schema.PROCESSLIST";

impl AdvisoryStore {
    /// Starts the watch, once, when the first lock is held.
    pub(super) fn watch_sessions(&self) {
        let mut watcher = omnilock_core::lock_unpoisoned(&self.watcher);
        if watcher.is_some() {
            return;
        }
        let (list, pool) = (Arc::downgrade(&self.shared), self.table.pool().clone());
        *watcher = Some(tokio::spawn(watch(list, pool, self.sql.clone())));
    }
}

/// Every [`WATCH`] while the store lives: the sessions with locks that the
/// server no longer lists, and that fail their own statement, report their
/// locks lost.
async fn watch(list: Weak<Mutex<Vec<Arc<Shared>>>>, pool: Pool, sql: Sql) {
    loop {
        tokio::time::sleep(WATCH).await;
        let Some(list) = list.upgrade() else {
            return;
        };
        let watched: Vec<Arc<Shared>> = omnilock_core::lock_unpoisoned(&list)
            .iter()
            .filter(|shared| shared.is_watched())
            .cloned()
            .collect();
        drop(list);
        if watched.is_empty() {
            continue;
        }
        // A server that does not answer is the renewals' to report.
        let Ok(alive) = alive(&pool, &watched).await else {
            continue;
        };
        for shared in watched {
            let (id, started_us) = shared.identity();
            // A start the pool's role cannot see counts as alive.
            let listed = alive.contains(&(id, started_us)) || alive.contains(&(id, UNSEEN));
            if !listed && ping(&shared, &sql).await.is_err() {
                shared.ended_outside();
            }
        }
    }
}

/// Which of `sessions` the server has: (ID, start) pairs.
async fn alive(pool: &Pool, sessions: &[Arc<Shared>]) -> sqlx::Result<HashSet<(i64, i64)>> {
    let _ = sessions;
    match pool {
        #[cfg(feature = "postgres")]
        Pool::Postgres(p) => {
            let ids: Vec<i32> = sessions.iter().map(|s| s.identity().0 as i32).collect();
            let rows = sqlx::query(POSTGRES_ALIVE).bind(ids).fetch_all(p).await?;
            rows.iter()
                .map(|row| {
                    Ok((
                        row.try_get(0)?,
                        row.try_get::<Option<i64>, _>(1)?.unwrap_or(UNSEEN),
                    ))
                })
                .collect()
        }
        #[cfg(feature = "mysql")]
        Pool::MySql(p) => {
            let ids: Vec<i64> = sqlx::query_scalar(MYSQL_ALIVE).fetch_all(p).await?;
            Ok(ids.into_iter().map(|id| (id, UNSEEN)).collect())
        }
        // Advisory mode is MySQL/MariaDB and PostgreSQL only.
        #[allow(unreachable_patterns)]
        _ => Ok(sessions.iter().map(|s| (s.identity().0, UNSEEN)).collect()),
    }
}
