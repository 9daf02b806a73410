//! Closing the connections a burst left behind.
//!
//! sqlx hands its idle connections out in turn (first in, first out), so
//! under steady use none of them is ever idle long enough for its idle
//! timeout: a pool keeps every connection it ever opened, up to `pool`,
//! whatever the load is now. A burst (a store paused for a few seconds, a
//! moment of contention) leaves each client with the connections it needed
//! then, and the next burst adds to them. r2d2 and Go's `database/sql` take
//! connections from a stack for this reason, and Go keeps at most 2 idle by
//! default.
//!
//! So every [`TRIM_EVERY`] a task of the store closes:
//! - the pool's idle connections beyond `max_idle` (`?max_idle=`, default
//!   2) that were idle at the last look too, least recently used first;
//! - MySQL/MariaDB's bell connections (`bells.rs`) beyond `max_idle` that
//!   no wait has used for a whole period.
//!
//! A client then holds what its load needs now, plus `max_idle`, and a
//! burst's connections go within two periods, while a load that keeps
//! needing them keeps them.

use std::sync::Weak;
use std::time::Duration;

use super::Inner;
use crate::conn::with_pool;

/// How often the surplus is looked for.
pub(crate) const TRIM_EVERY: Duration = Duration::from_secs(5);

/// Starts the store's trimming task; it ends with the store.
pub(super) fn start(store: Weak<Inner>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut every = tokio::time::interval(TRIM_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        every.tick().await;
        // The pool's idle count at the last look.
        let mut idle_before = 0;
        loop {
            every.tick().await;
            let Some(inner) = store.upgrade() else {
                return;
            };
            let max_idle = inner.config.max_idle as usize;
            if max_idle < inner.config.pool_size as usize {
                idle_before = with_pool!(&inner.pool, p => trim(p, max_idle, idle_before).await);
            }
            #[cfg(feature = "mysql")]
            if let Some(bells) = &inner.bells {
                for conn in bells.unused(max_idle, TRIM_EVERY) {
                    let _ = sqlx::Connection::close(conn).await;
                }
            }
        }
    })
}

/// Closes idle connections of `pool` beyond `max_idle`, no more than were
/// idle at the last look (`idle_before`) beyond it: connections a steady
/// load takes again at once are left to it. Returns the idle count left.
async fn trim<DB: sqlx::Database>(
    pool: &sqlx::Pool<DB>,
    max_idle: usize,
    idle_before: usize,
) -> usize {
    let surplus = pool.num_idle().min(idle_before).saturating_sub(max_idle);
    for _ in 0..surplus {
        if pool.num_idle() <= max_idle {
            break;
        }
        // The front of sqlx's idle queue: the one released longest ago.
        let Some(conn) = pool.try_acquire() else {
            break;
        };
        if let Err(err) = conn.close().await {
            tracing::debug!(error = %err, "omnilock sql: closing an idle connection failed");
        }
    }
    pool.num_idle()
}
