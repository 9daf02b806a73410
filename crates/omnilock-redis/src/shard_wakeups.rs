//! Wake-ups in Redis Cluster: sharded pub/sub.
//!
//! A release in a cluster `SPUBLISH`es the woken entry on
//! `{prefix:name}:wake:<client id>`, a channel in the lock's own slot, so
//! the message goes to the master that ran the script (and its replicas)
//! and never over the cluster bus. A broadcast `PUBLISH` reaches every node
//! instead, and measured 4–40 ms at p99 from one node to another on
//! loopback against 0.35–0.52 ms for `SPUBLISH` (docs/backends/redis.md).
//!
//! The price is a subscription per lock waited on. A client subscribes when
//! its first waiter on a lock queues, and keeps the subscription while it
//! has waiters there and for [`LINGER`] after, so that a lock contended
//! again and again costs one `SSUBSCRIBE` and not one per wait.
//! Subscriptions go through redis-rs's cluster connection in RESP3, which
//! sends each to the master of the channel's slot. When the server ends a
//! subscription (the slot moved) or a connection drops, the channel is
//! marked unsubscribed and the waiters re-check: each waiter makes sure of
//! its channel every time it goes back to waiting, so the next one
//! subscribes again, on the slot's new master. A waiter's periodic
//! re-check covers the messages lost meanwhile.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use omnilock_core::{lock_unpoisoned, Result};
use redis::cluster_async::ClusterConnection;
use redis::PushInfo;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

use crate::config::RedisConfig;

/// How long a client keeps a lock's channel after its last waiter there.
pub(crate) const LINGER: Duration = Duration::from_secs(5);

/// This client's sharded subscriptions, one per lock it waits on.
pub(crate) struct ShardWakeups {
    conn: ClusterConnection,
    channels: Mutex<HashMap<String, Channel>>,
    /// One `SSUBSCRIBE`/`SUNSUBSCRIBE` at a time, so that a channel dropped
    /// as idle cannot be unsubscribed after a new waiter subscribed it.
    commands: tokio::sync::Mutex<()>,
}

struct Channel {
    waiters: usize,
    subscribed: bool,
    /// Since when no waiter uses it.
    idle_since: Option<Instant>,
}

impl ShardWakeups {
    /// Connects to the cluster for subscriptions; messages and disconnection
    /// notices arrive on the returned receiver.
    pub(crate) async fn open(
        config: &RedisConfig,
    ) -> Result<(ShardWakeups, UnboundedReceiver<PushInfo>)> {
        let (sender, receiver) = unbounded_channel();
        let conn = crate::cluster::connect(config, Some(sender)).await?;
        Ok((
            ShardWakeups {
                conn,
                channels: Mutex::new(HashMap::new()),
                commands: tokio::sync::Mutex::new(()),
            },
            receiver,
        ))
    }

    /// A waiter of this client will listen on `channel`; paired with one
    /// [`ShardWakeups::leave`].
    pub(crate) fn join(&self, channel: &str) {
        let mut channels = lock_unpoisoned(&self.channels);
        let entry = channels.entry(channel.to_string()).or_insert(Channel {
            waiters: 0,
            subscribed: false,
            idle_since: None,
        });
        entry.waiters += 1;
        entry.idle_since = None;
    }

    /// A waiter of this client stops listening on `channel`.
    pub(crate) fn leave(&self, channel: &str) {
        if let Some(entry) = lock_unpoisoned(&self.channels).get_mut(channel) {
            entry.waiters = entry.waiters.saturating_sub(1);
            if entry.waiters == 0 {
                entry.idle_since = Some(Instant::now());
            }
        }
    }

    /// Makes sure `channel` (joined) is subscribed; without a request when
    /// it is. True when it was not: the waiter's place was queued before the
    /// subscription, so a release may have published to nobody, and the
    /// caller checks again at once.
    pub(crate) async fn listen(&self, channel: &str) -> redis::RedisResult<bool> {
        let subscribed = || {
            lock_unpoisoned(&self.channels)
                .get(channel)
                .is_some_and(|entry| entry.subscribed)
        };
        if subscribed() {
            return Ok(false);
        }
        let _turn = self.commands.lock().await;
        // Another waiter subscribed it while this one waited its turn.
        if subscribed() {
            return Ok(true);
        }
        self.conn.clone().ssubscribe(channel).await?;
        if let Some(entry) = lock_unpoisoned(&self.channels).get_mut(channel) {
            entry.subscribed = true;
        }
        Ok(true)
    }

    /// The server ended `channel`'s subscription (its slot moved to
    /// another master): the next [`ShardWakeups::listen`] subscribes again.
    /// False for a channel this client dropped itself (no longer in the
    /// map) or had not subscribed.
    pub(crate) fn dropped(&self, channel: &str) -> bool {
        lock_unpoisoned(&self.channels)
            .get_mut(channel)
            .is_some_and(|entry| std::mem::replace(&mut entry.subscribed, false))
    }

    /// A connection dropped: every channel is subscribed again on next use.
    pub(crate) fn dropped_all(&self) {
        for entry in lock_unpoisoned(&self.channels).values_mut() {
            entry.subscribed = false;
        }
    }

    /// Unsubscribes the channels idle for [`LINGER`] (one `SUNSUBSCRIBE`
    /// each: channels of different slots cannot share one).
    pub(crate) async fn sweep(&self) {
        let _turn = self.commands.lock().await;
        let idle: Vec<String> = {
            let mut channels = lock_unpoisoned(&self.channels);
            let idle = channels
                .iter()
                .filter(|(_, entry)| entry.idle_since.is_some_and(|at| at.elapsed() >= LINGER))
                .map(|(channel, _)| channel.clone())
                .collect::<Vec<_>>();
            idle.into_iter()
                .filter(|channel| channels.remove(channel).is_some_and(|e| e.subscribed))
                .collect()
        };
        for channel in idle {
            if let Err(err) = self.conn.clone().sunsubscribe(&channel).await {
                tracing::debug!(error = %err, "omnilock redis: cannot unsubscribe an idle channel");
            }
        }
    }
}
