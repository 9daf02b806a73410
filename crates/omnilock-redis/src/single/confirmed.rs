//! Writes confirmed with `WAIT` (`?wait_replicas=N`), each on a connection
//! of its own.
//!
//! `WAIT` must run on the connection of the write it confirms, and it
//! blocks that connection until the replicas answer or `wait_timeout`
//! passes. On the store's shared connection every other command of the
//! process would queue behind it, and confirmed writes behind each other: a
//! lagging replica would make each call wait for all the `WAIT`s before
//! it. So a confirmed write takes a connection of its own to the master of
//! its key, kept for the next one when the write went through (at most
//! [`KEPT`] idle). Past [`MOST_CONFIRMING`] at once, or while the master is
//! unknown or will not take another connection, writes go on the shared
//! connection as before.

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{Cmd, RedisFuture, Value};

use super::*;
use crate::conn::{Conn, sent_elsewhere};

/// Idle confirming connections kept for the next confirmed write.
const KEPT: usize = 8;

/// Confirmed writes of one store on connections of their own at once.
const MOST_CONFIRMING: usize = 32;

/// The connection one write runs on.
pub(super) enum WriteConn {
    /// The store's shared connection (no `wait_replicas`, or no connection
    /// of its own to be had).
    Shared(Conn),
    /// A connection of its own, for a write followed by `WAIT`.
    Own(Lane),
}

/// A confirming connection to one master, given back to the kept ones
/// when dropped after every command on it went through.
pub(super) struct Lane {
    conn: MultiplexedConnection,
    address: String,
    /// Where commands go once the master sent one elsewhere (the slot
    /// moved, it is no master now): the shared connection, which follows.
    shared: Conn,
    /// Every command sent on it answered, none sent elsewhere. False while
    /// a command is out: a caller that goes away mid-command (a renewal's
    /// deadline) leaves a connection whose `WAIT` may still be pending.
    healthy: bool,
    _slot: Confirming,
}

/// One of the [`MOST_CONFIRMING`] places, given back when dropped, even if
/// the caller went away while the connection was opened.
struct Confirming(Arc<Inner>);

impl Confirming {
    fn take(inner: &Arc<Inner>) -> Option<Confirming> {
        if inner.confirming.fetch_add(1, Ordering::AcqRel) >= MOST_CONFIRMING {
            inner.confirming.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(Confirming(inner.clone()))
    }
}

impl Drop for Confirming {
    fn drop(&mut self) {
        self.0.confirming.fetch_sub(1, Ordering::AcqRel);
    }
}

impl RedisStore {
    /// The connection for a write on `key`: with `wait_replicas`, one of
    /// its own (see the module's docs).
    pub(super) async fn write_conn(&self, key: &str) -> WriteConn {
        let inner = &self.inner;
        let shared = inner.node.conn_for(key);
        let Some(wait) = inner.options.wait_replicas else {
            return WriteConn::Shared(shared);
        };
        let Some((address, client)) = inner.node.master_for(key) else {
            return WriteConn::Shared(shared);
        };
        let Some(slot) = Confirming::take(inner) else {
            return WriteConn::Shared(shared);
        };
        let kept = {
            let mut kept = lock_unpoisoned(&inner.confirmers);
            let found = kept.iter().position(|(at, _)| *at == address);
            found.map(|i| kept.swap_remove(i).1)
        };
        let conn = match kept {
            Some(conn) => conn,
            None => {
                // The write and its `WAIT` answer within the response
                // timeout plus `wait_timeout`.
                let config = redis::AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(inner.options.connect_timeout))
                    .set_response_timeout(Some(inner.options.response_timeout + wait.timeout));
                match client
                    .get_multiplexed_async_connection_with_config(&config)
                    .await
                {
                    Ok(conn) => conn,
                    Err(err) => {
                        tracing::debug!(error = %err, %address, "omnilock redis: no confirming connection; using the shared one");
                        return WriteConn::Shared(shared);
                    }
                }
            }
        };
        WriteConn::Own(Lane {
            conn,
            address,
            shared,
            healthy: true,
            _slot: slot,
        })
    }
}

impl Drop for Lane {
    fn drop(&mut self) {
        if !self.healthy {
            return;
        }
        // The oldest kept goes first: after a failover, or past KEPT
        // masters, connections to masters no longer asked for do not stay.
        let mut kept = lock_unpoisoned(&self._slot.0.confirmers);
        if kept.len() >= KEPT {
            kept.remove(0);
        }
        kept.push((std::mem::take(&mut self.address), self.conn.clone()));
    }
}

impl ConnectionLike for Lane {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            if !self.healthy {
                return self.shared.req_packed_command(cmd).await;
            }
            self.healthy = false;
            match self.conn.req_packed_command(cmd).await {
                Ok(value) if !sent_elsewhere(&value) => {
                    self.healthy = true;
                    Ok(value)
                }
                // Nothing ran: the shared connection follows.
                Ok(_) => self.shared.req_packed_command(cmd).await,
                Err(e) => Err(e),
            }
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            if !self.healthy {
                return self
                    .shared
                    .req_packed_commands(pipeline, offset, count)
                    .await;
            }
            self.healthy = false;
            match self.conn.req_packed_commands(pipeline, offset, count).await {
                Ok(values) if !values.iter().any(sent_elsewhere) => {
                    self.healthy = true;
                    Ok(values)
                }
                Ok(_) => {
                    self.shared
                        .req_packed_commands(pipeline, offset, count)
                        .await
                }
                Err(e) => Err(e),
            }
        })
    }

    fn get_db(&self) -> i64 {
        self.conn.get_db()
    }
}

impl ConnectionLike for WriteConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            WriteConn::Shared(conn) => conn.req_packed_command(cmd),
            WriteConn::Own(lane) => lane.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            WriteConn::Shared(conn) => conn.req_packed_commands(pipeline, offset, count),
            WriteConn::Own(lane) => lane.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            WriteConn::Shared(conn) => conn.get_db(),
            WriteConn::Own(lane) => lane.get_db(),
        }
    }
}
