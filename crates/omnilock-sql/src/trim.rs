//! Closing the pool's surplus idle connections.
//!
//! sqlx hands its idle connections out in turn (first in, first out), so
//! under steady use none of them is ever idle long enough for its idle
//! timeout: a pool keeps every connection it ever opened, up to `pool`,
//! whatever the load is now. A burst (a store paused for a few seconds, a
//! moment of contention) leaves each client with the connections it needed
//! then, and the next burst adds to them. r2d2 and Go's `database/sql` took
//! connections from a stack for this reason, and Go keeps at most 2 idle by
//! default. omnilock keeps at most `max_idle` idle connections per store
//! (`?max_idle=`, default 2): a task closes the ones beyond that every
//! [`TRIM_EVERY`], least recently used first. A client then holds what its
//! load needs now, plus `max_idle`.

use std::time::Duration;

use crate::conn::{Pool, with_pool};

/// How often the surplus is closed.
pub(crate) const TRIM_EVERY: Duration = Duration::from_secs(5);

/// Starts closing `pool`'s idle connections beyond `max_idle`; `None` when
/// the pool can never have more (`max_idle` ≥ its size). The task holds
/// the pool: abort it when the store goes.
pub(crate) fn start(
    pool: &Pool,
    max_idle: u32,
    pool_size: u32,
) -> Option<tokio::task::JoinHandle<()>> {
    if max_idle >= pool_size {
        return None;
    }
    let pool = pool.clone();
    Some(tokio::spawn(async move {
        let mut every = tokio::time::interval(TRIM_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        every.tick().await;
        loop {
            every.tick().await;
            with_pool!(&pool, p => trim(p, max_idle as usize).await);
        }
    }))
}

/// Closes idle connections of `pool` until `max_idle` are left (or none is
/// idle any more: a caller took one meanwhile).
async fn trim<DB: sqlx::Database>(pool: &sqlx::Pool<DB>, max_idle: usize) {
    let surplus = pool.num_idle().saturating_sub(max_idle);
    for _ in 0..surplus {
        // The front of sqlx's idle queue: the one released longest ago.
        let Some(conn) = pool.try_acquire() else {
            break;
        };
        if let Err(err) = conn.close().await {
            tracing::debug!(error = %err, "omnilock sql: closing an idle connection failed");
        }
    }
}
