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
//! sends each to the master of the channel's slot and subscribes again after
//! a reconnect or a slot move; a waiter's periodic re-check covers the
//! messages lost meanwhile.

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

    /// A waiter of this client listens on `channel`. True when the
    /// subscription is new: the waiter's place was queued before it, so a
    /// release may have published to nobody, and the caller checks again
    /// at once. Every `join` is paired with a [`ShardWakeups::leave`], also
    /// when it fails (the next `join` tries to subscribe again).
    pub(crate) async fn join(&self, channel: &str) -> redis::RedisResult<bool> {
        {
            let mut channels = lock_unpoisoned(&self.channels);
            let entry = channels.entry(channel.to_string()).or_insert(Channel {
                waiters: 0,
                subscribed: false,
                idle_since: None,
            });
            entry.waiters += 1;
            entry.idle_since = None;
            if entry.subscribed {
                return Ok(false);
            }
        }
        let _turn = self.commands.lock().await;
        let subscribed = |channels: &HashMap<String, Channel>| {
            channels.get(channel).is_some_and(|entry| entry.subscribed)
        };
        // Another waiter subscribed it while this one waited its turn.
        if subscribed(&lock_unpoisoned(&self.channels)) {
            return Ok(true);
        }
        self.conn.clone().ssubscribe(channel).await?;
        if let Some(entry) = lock_unpoisoned(&self.channels).get_mut(channel) {
            entry.subscribed = true;
        }
        Ok(true)
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
