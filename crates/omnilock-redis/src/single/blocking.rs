//! Waiting inside the server. A mutex's waiter on one server (or on
//! Sentinel's master) blocks in `BLPOP` on its own wake-up list, with its
//! next acquire attempt sent right behind on the same connection. A release
//! pushes onto the list of the head of the line, and the server runs that
//! attempt the moment the waiter is unblocked: the hand-off takes the
//! release's round trip, and not one more for the waiter's attempt after a
//! message. The `BLPOP` timeout is the waiter's periodic re-check.
//!
//! Each blocked waiter needs a connection of its own (a blocked connection
//! serves nobody else): at most 32 waiters of a store block at once, and a
//! few idle connections are kept for reuse. A cluster
//! keeps to its sharded messages, and `wait_replicas` to the command
//! connection, whose `WAIT` must follow the script on the same connection.

use redis::aio::MultiplexedConnection;

use super::*;

/// Idle blocking connections kept for the next waiter.
const KEPT: usize = 4;

/// Waiters of one store blocked in the server at once, each on a connection
/// of its own; further waiters wait for their message, so that a crowd of
/// waiters in one process cannot open a crowd of connections.
const MOST_BLOCKED: usize = 32;

/// One waiter's place among the [`MOST_BLOCKED`]; given back when dropped
/// (its round done, in the background if its caller went away).
struct BlockedSlot(Arc<Inner>);

impl BlockedSlot {
    fn take(inner: &Arc<Inner>) -> Option<BlockedSlot> {
        let taken = inner.blocked.fetch_add(1, Ordering::AcqRel);
        if taken >= MOST_BLOCKED {
            inner.blocked.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(BlockedSlot(inner.clone()))
    }
}

impl Drop for BlockedSlot {
    fn drop(&mut self) {
        self.0.blocked.fetch_sub(1, Ordering::AcqRel);
    }
}

impl RedisStore {
    /// Whether a waiter of `request` may block in the server.
    pub(super) fn blocks_in_server(&self, request: &AcquireRequest) -> bool {
        Counted::of(request.primitive).is_none()
            && self.inner.options.wait_replicas.is_none()
            && matches!(self.inner.channels, WakeChannels::PerClient { .. })
    }

    /// Blocks up to `block` for `entry`'s wake-up, then runs the acquire
    /// attempt `call`, to completion even if the caller goes away (a grant
    /// for nobody is released, a place in line taken again is left).
    /// `None` when no blocking connection could be had, or
    /// [`MOST_BLOCKED`] waiters of this store are blocked already: the
    /// caller waits for its message instead.
    pub(super) async fn attempt_after_wake(
        &self,
        request: &AcquireRequest,
        entry: &str,
        call: &str,
        block: Duration,
    ) -> Option<Result<(Attempt, Instant)>> {
        let slot = BlockedSlot::take(&self.inner)?;
        let conn = self.blocking_conn().await?;
        let (store, undo) = (self.clone(), self.clone());
        let (call_request, undo_request) = (request.clone(), request.clone());
        let (entry, call) = (entry.to_string(), call.to_string());
        let undo_entry = entry.clone();
        let result = complete_or_undo(
            async move {
                let _slot = slot;
                let started = Instant::now();
                store
                    .blocked_round(conn, &call_request, &entry, &call, block)
                    .await
                    .map(|attempt| (attempt, started))
            },
            move |abandoned| async move {
                match abandoned {
                    Ok((Attempt::Taken(token), _)) => {
                        let _ = undo.undo(&undo_request, &undo_entry, token, &nonce()).await;
                    }
                    // The attempt put the entry back in line after the
                    // waiter left it: leave it again.
                    Ok((Attempt::Busy(_), _)) => {
                        let _ = undo.leave_line(&undo_request, &undo_entry).await;
                    }
                    _ => {}
                }
            },
        )
        .await;
        Some(result)
    }

    /// One `BLPOP` + attempt on `conn`, which goes back to the kept ones
    /// when the round went through.
    async fn blocked_round(
        &self,
        mut conn: MultiplexedConnection,
        request: &AcquireRequest,
        entry: &str,
        call: &str,
        block: Duration,
    ) -> Result<Attempt> {
        let inner = &self.inner;
        let keys = self.keys(&request.name);
        let acquire = Acquire {
            owner: request.owner.as_str(),
            ttl: request.ttl,
            reentrant: request.reentrant,
            entry,
            entry_lease: inner.options.waiter_lease,
            channel_prefix: &inner.channel_prefix(&keys.lock),
            call,
        };
        let limit = block + inner.options.response_timeout;
        let answer = tokio::time::timeout(
            limit,
            inner
                .scripts
                .acquire_after_wake(&mut conn, &keys, &acquire, block),
        )
        .await;
        match answer {
            Ok(Ok(answer)) => {
                self.keep_blocking_conn(conn);
                self.settle(request, entry, answer, None)
            }
            // A server that lost the script (a restart): the ordinary
            // attempt loads it again.
            Ok(Err(e))
                if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) =>
            {
                self.attempt(request, entry, call, true).await
            }
            Ok(Err(e)) => Err(inner.node.err(e)),
            Err(_) => Err(Error::unavailable(format!(
                "no answer from Redis at {} within {limit:?} (a blocked wait)",
                inner.node.address
            ))),
        }
    }

    /// A kept blocking connection, or a new one to the master of the moment.
    async fn blocking_conn(&self) -> Option<MultiplexedConnection> {
        if let Some(conn) = lock_unpoisoned(&self.inner.blockers).pop() {
            return Some(conn);
        }
        let inner = &self.inner;
        let client = match &inner.node.subscriber {
            Subscriber::Server(client) => (**client).clone(),
            // The master of the moment: a new waiter is no sign of a
            // failover, and asking the sentinels for each would be a query
            // per waiter.
            Subscriber::Sentinel(conn) => conn.master().1,
            Subscriber::Shards(_) => return None,
        };
        // No response timeout of the connection's own: a blocked `BLPOP`
        // answers late by design, and each round has its own limit.
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(inner.options.connect_timeout))
            .set_response_timeout(None);
        match client
            .get_multiplexed_async_connection_with_config(&config)
            .await
        {
            Ok(conn) => Some(conn),
            Err(err) => {
                tracing::debug!(error = %err, "omnilock redis: no blocking connection; waiting for messages");
                None
            }
        }
    }

    fn keep_blocking_conn(&self, conn: MultiplexedConnection) {
        let mut kept = lock_unpoisoned(&self.inner.blockers);
        if kept.len() < KEPT {
            kept.push(conn);
        }
    }
}
