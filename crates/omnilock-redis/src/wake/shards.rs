//! Wake-ups in Redis Cluster: sharded pub/sub.
//!
//! A release in a cluster `SPUBLISH`es the woken entry on
//! `{prefix:name}:wake:<client id>`, a channel in the lock's own slot, so
//! the message goes to the master that ran the script (and its replicas)
//! and never over the cluster bus. A broadcast `PUBLISH` reaches every node
//! instead, and measured 4–40 ms at p99 from one node to another on
//! loopback against 0.35–0.52 ms for `SPUBLISH` ([docs/backends/redis.md](https://github.com/omnilock/omnilock/blob/main/docs/backends/redis.md)).
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

use omnilock_core::{Error, ErrorKind, Result, lock_unpoisoned};
use redis::PushInfo;
use redis::cluster_async::ClusterConnection;
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

use crate::config::RedisConfig;
use crate::conn::map_err;
use crate::scripts::keys::Keys;

/// How long a client keeps a lock's channel after its last waiter there.
pub(crate) const LINGER: Duration = Duration::from_secs(5);

/// This client's sharded subscriptions, one per lock it waits on.
pub(crate) struct ShardWakeups {
    conn: ClusterConnection,
    channels: Mutex<HashMap<String, Channel>>,
    /// One `SSUBSCRIBE`/`SUNSUBSCRIBE` at a time, so that a channel dropped
    /// as idle cannot be unsubscribed after a new waiter subscribed it.
    commands: tokio::sync::Mutex<()>,
    /// How long one `SSUBSCRIBE`/`SUNSUBSCRIBE` may take: a waiter that
    /// subscribes is not re-checking meanwhile.
    command_timeout: Duration,
    /// `SUNSUBSCRIBE`s this client sent whose confirmation has not come
    /// back, per channel: the confirmation is not the server ending it.
    unsubscribing: Mutex<HashMap<String, usize>>,
}

struct Channel {
    waiters: usize,
    subscribed: bool,
    /// Raised whenever the subscription is found gone, so that a
    /// `SSUBSCRIBE` that was under way then does not count as current.
    epoch: u64,
    /// Since when no waiter uses it.
    idle_since: Option<Instant>,
}

impl ShardWakeups {
    /// Connects to the cluster for subscriptions (messages and disconnection
    /// notices arrive on the returned receiver), and tries one subscription:
    /// a server without sharded pub/sub (before Redis 7) or an ACL user
    /// without the channels is refused here, not at the first wait.
    pub(crate) async fn open(
        config: &RedisConfig,
    ) -> Result<(ShardWakeups, UnboundedReceiver<PushInfo>)> {
        let (sender, receiver) = unbounded_channel();
        let conn = crate::conn::cluster::connect(config, Some(sender)).await?;
        let shards = ShardWakeups {
            conn,
            channels: Mutex::new(HashMap::new()),
            commands: tokio::sync::Mutex::new(()),
            command_timeout: config.options.response_timeout,
            unsubscribing: Mutex::new(HashMap::new()),
        };
        let probe = format!(
            "{}:wake:probe-{:016x}",
            Keys::new(&config.options.prefix, "probe").lock,
            rand::random::<u64>()
        );
        let address = "the Redis Cluster";
        let mut conn = shards.conn.clone();
        conn.ssubscribe(&probe).await.map_err(|e| {
            let refused = map_err(e, address);
            if refused.is_retryable() {
                return refused;
            }
            // An ACL user without the channels is refused access; an
            // older server has no sharded channels at all.
            let kind = match refused.kind() {
                ErrorKind::Auth => ErrorKind::Auth,
                _ => ErrorKind::InvalidConfig,
            };
            Error::new(
                kind,
                format!(
                    "{address} refused a sharded subscription (SSUBSCRIBE {probe}): wake-ups \
                     need Redis 7 or later, and an ACL user needs the channels &{{{}*",
                    config.options.prefix
                ),
            )
        })?;
        shards.unsubscribe(&probe).await;
        Ok((shards, receiver))
    }

    /// A waiter of this client will listen on `channel`; paired with one
    /// [`ShardWakeups::leave`].
    pub(crate) fn join(&self, channel: &str) {
        let mut channels = lock_unpoisoned(&self.channels);
        let entry = channels.entry(channel.to_string()).or_insert(Channel {
            waiters: 0,
            subscribed: false,
            epoch: 0,
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
        let state = || {
            lock_unpoisoned(&self.channels)
                .get(channel)
                .map(|entry| (entry.subscribed, entry.epoch))
        };
        if let Some((true, _)) = state() {
            return Ok(false);
        }
        let _turn = self.commands.lock().await;
        let epoch = match state() {
            // Another waiter subscribed it while this one waited its turn.
            Some((true, _)) => return Ok(true),
            Some((false, epoch)) => epoch,
            None => return Ok(false),
        };
        let mut conn = self.conn.clone();
        match tokio::time::timeout(self.command_timeout, conn.ssubscribe(channel)).await {
            Ok(subscribed) => subscribed?,
            Err(_) => {
                return Err(redis::RedisError::from((
                    redis::ErrorKind::Io,
                    "SSUBSCRIBE timed out",
                )));
            }
        }
        if let Some(entry) = lock_unpoisoned(&self.channels).get_mut(channel) {
            // Found gone meanwhile: the next round subscribes again.
            if entry.epoch == epoch {
                entry.subscribed = true;
            }
        }
        Ok(true)
    }

    /// The subscription of `channel` is gone or suspect (the server ended
    /// it when its slot moved; a waiter was granted on a re-check): the
    /// next [`ShardWakeups::listen`] subscribes again. True if it was
    /// subscribed. The confirmation of this client's own `SUNSUBSCRIBE`
    /// is not a loss.
    pub(crate) fn dropped(&self, channel: &str) -> bool {
        {
            let mut unsubscribing = lock_unpoisoned(&self.unsubscribing);
            if let Some(pending) = unsubscribing.get_mut(channel) {
                *pending -= 1;
                if *pending == 0 {
                    unsubscribing.remove(channel);
                }
                return false;
            }
        }
        self.suspect(channel)
    }

    /// As [`ShardWakeups::dropped`], for a suspicion of this client's own.
    pub(crate) fn suspect(&self, channel: &str) -> bool {
        lock_unpoisoned(&self.channels)
            .get_mut(channel)
            .is_some_and(|entry| {
                entry.epoch += 1;
                std::mem::replace(&mut entry.subscribed, false)
            })
    }

    /// A connection dropped: every channel is subscribed again on next use.
    pub(crate) fn dropped_all(&self) {
        for entry in lock_unpoisoned(&self.channels).values_mut() {
            entry.epoch += 1;
            entry.subscribed = false;
        }
    }

    /// Unsubscribes the channels idle for [`LINGER`], whether or not they
    /// count as subscribed (a `SSUBSCRIBE` that timed out may have been
    /// applied; redis-rs subscribes again after a reconnect). One
    /// `SUNSUBSCRIBE` each: channels of different slots cannot share one.
    pub(crate) async fn sweep(&self) {
        let _turn = self.commands.lock().await;
        let idle: Vec<String> = {
            let mut channels = lock_unpoisoned(&self.channels);
            let idle = channels
                .iter()
                .filter(|(_, entry)| entry.idle_since.is_some_and(|at| at.elapsed() >= LINGER))
                .map(|(channel, _)| channel.clone())
                .collect::<Vec<_>>();
            for channel in &idle {
                channels.remove(channel);
            }
            idle
        };
        for channel in idle {
            self.unsubscribe(&channel).await;
        }
    }

    /// One `SUNSUBSCRIBE`, within the command timeout; its confirmation is
    /// expected (see [`ShardWakeups::dropped`]).
    async fn unsubscribe(&self, channel: &str) {
        *lock_unpoisoned(&self.unsubscribing)
            .entry(channel.to_string())
            .or_default() += 1;
        let mut conn = self.conn.clone();
        match tokio::time::timeout(self.command_timeout, conn.sunsubscribe(channel)).await {
            Ok(Ok(())) => {}
            failed => {
                tracing::debug!(
                    ?failed,
                    "omnilock redis: cannot unsubscribe an idle channel"
                );
                // No confirmation to wait for (or a late one, which then
                // costs one needless subscription).
                let mut unsubscribing = lock_unpoisoned(&self.unsubscribing);
                if let Some(pending) = unsubscribing.get_mut(channel) {
                    *pending -= 1;
                    if *pending == 0 {
                        unsubscribing.remove(channel);
                    }
                }
            }
        }
    }
}
