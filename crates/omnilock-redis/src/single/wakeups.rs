//! How releases wake this client's waiters: one channel per client, or in
//! a cluster one per lock and client; the listener that delivers the
//! messages, and a waiter's place in the queue.

use super::*;
/// Where releases publish the wake-ups of this client's waiters.
pub(super) enum WakeChannels {
    /// One channel per client, `<prefix>:wake:<client id>`, subscribed at
    /// connect: one server, or the master the sentinels name.
    PerClient { prefix: String },
    /// One channel per lock and client, `{prefix:name}:wake:<client id>` in
    /// the lock's slot, subscribed while waiting: a cluster.
    PerLock(ShardWakeups),
}

/// How the wake-up messages reach the listener task.
pub(super) enum Incoming {
    Subscription(redis::aio::PubSub),
    Pushes(UnboundedReceiver<PushInfo>),
}

impl Inner {
    /// The channel prefix the scripts publish the wake-ups of the lock
    /// whose mutex key is `lock` under (its semaphore and read-write lock
    /// share it).
    pub(super) fn channel_prefix(&self, lock: &str) -> Cow<'_, str> {
        match &self.channels {
            WakeChannels::PerClient { prefix } => Cow::Borrowed(prefix),
            WakeChannels::PerLock(_) => Cow::Owned(format!("{lock}:wake:")),
        }
    }

    /// A wake-up message for `entry`.
    pub(super) fn deliver(&self, entry: &str) {
        self.wakeups.fetch_add(1, Ordering::Relaxed);
        if let Some(notify) = lock_unpoisoned(&self.waiters).get(entry) {
            notify.notify_one();
        }
    }

    /// Wake-ups may have been missed: every local waiter checks again.
    pub(super) fn recheck_all(&self) {
        for notify in lock_unpoisoned(&self.waiters).values() {
            notify.notify_one();
        }
    }
}

impl WakeTarget for Inner {
    fn deliver(&self, _from: usize, entry: &str) {
        Inner::deliver(self, entry);
    }

    fn recheck_all(&self, _from: usize) {
        Inner::recheck_all(self);
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(task) = self.listener.get_mut().ok().and_then(|t| t.take()) {
            task.abort();
        }
    }
}

/// Delivers a cluster's sharded wake-ups to this client's waiters, and
/// unsubscribes the channels of locks no longer waited on. After a dropped
/// connection every local waiter re-checks at once: redis-rs subscribes
/// again, but a release may have published meanwhile.
pub(super) async fn listen_shards(store: Weak<Inner>, mut pushes: UnboundedReceiver<PushInfo>) {
    let mut sweep = tokio::time::interval(LINGER / 2);
    sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            push = pushes.recv() => {
                let Some(push) = push else { return };
                let Some(inner) = store.upgrade() else { return };
                match push.kind {
                    // [channel, message]
                    PushKind::SMessage => {
                        let entry = push.data.into_iter().nth(1).map(redis::from_redis_value::<String>);
                        if let Some(Ok(entry)) = entry {
                            inner.deliver(&entry);
                        }
                    }
                    // The server ended a subscription: its slot moved.
                    PushKind::SUnsubscribe => {
                        let channel = push.data.into_iter().next().map(redis::from_redis_value::<String>);
                        if let (Some(Ok(channel)), WakeChannels::PerLock(shards)) = (channel, &inner.channels)
                            && shards.dropped(&channel) {
                                inner.recheck_all();
                            }
                    }
                    PushKind::Disconnection => {
                        tracing::warn!("omnilock redis: a cluster subscription connection dropped; waiters re-check");
                        if let WakeChannels::PerLock(shards) = &inner.channels {
                            shards.dropped_all();
                        }
                        inner.recheck_all();
                    }
                    _ => {}
                }
            }
            // In a task of its own: messages keep flowing while a slow
            // node holds up an unsubscription.
            _ = sweep.tick() => {
                let store = store.clone();
                tokio::spawn(async move {
                    let Some(inner) = store.upgrade() else { return };
                    if let WakeChannels::PerLock(shards) = &inner.channels {
                        shards.sweep().await;
                    }
                });
            }
        }
    }
}

/// Wake-ups are published through the command connection and arrive on the
/// subscription that `client` opened: with the application's own
/// `ConnectionManager` the two must reach the same server, or every waiter
/// would wait for its periodic re-check. The channel is new and random, so
/// exactly one subscriber there means the same server.
pub(super) async fn check_same_server(node: &Node, channel: &str) -> Result<()> {
    let mut conn = node.conn.clone();
    let (_, subscribers): (String, i64) = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(channel)
        .query_async(&mut conn)
        .await
        .map_err(|e| node.err(e))?;
    if subscribers != 1 {
        return Err(Error::config(format!(
            "the ConnectionManager does not reach the Redis server that the client reaches \
             ({}): give both for the same server",
            node.address
        )));
    }
    Ok(())
}

impl RedisStore {
    /// Takes `entry` out of the line of `request`'s lock, or gives back the
    /// semaphore's or read-write lock's entry (waking the next when the
    /// lock is free).
    pub(super) async fn leave_line(&self, request: &AcquireRequest, entry: &str) -> Result<()> {
        if Counted::of(request.primitive).is_some() {
            return self.cancel_counted(request, entry).await;
        }
        let inner = &self.inner;
        let keys = self.keys(&request.name);
        let mut conn = inner.node.conn_for(&keys.lock);
        let channel_prefix = inner.channel_prefix(&keys.lock);
        inner
            .scripts
            .cancel(&mut conn, &keys, entry, &channel_prefix)
            .await
            .map_err(|e| inner.node.err(e))
    }

    /// In a cluster, marks `place`'s channel for a new subscription.
    pub(super) fn suspect_channel(&self, place: &Place) {
        if let (WakeChannels::PerLock(shards), Some(channel)) =
            (&self.inner.channels, &place.joined)
        {
            shards.suspect(channel);
        }
    }

    /// In a cluster, makes sure this client is subscribed to the channel in
    /// the lock's slot that `place`'s wake-ups arrive on (a local check
    /// when it is). True when the subscription is new. A failure is left to
    /// the waiter's periodic re-check; its next round tries again.
    pub(super) async fn listen_for(&self, place: &mut Place) -> bool {
        let WakeChannels::PerLock(shards) = &self.inner.channels else {
            return false;
        };
        let channel = match &place.joined {
            Some(channel) => channel.clone(),
            None => {
                let channel = self.wake_channel(&place.request.name);
                shards.join(&channel);
                place.joined = Some(channel.clone());
                channel
            }
        };
        shards.listen(&channel).await.unwrap_or_else(|err| {
            tracing::debug!(error = %err, "omnilock redis: cannot subscribe to a lock's channel yet");
            false
        })
    }
}

/// A waiter's place in the queue, left (in the background) if the acquire
/// ends without the lock.
pub(super) struct Place {
    pub(super) store: RedisStore,
    pub(super) request: AcquireRequest,
    pub(super) entry: String,
    pub(super) granted: bool,
    /// The cluster channel this waiter listens on, if it joined one.
    pub(super) joined: Option<String>,
}

impl Drop for Place {
    fn drop(&mut self) {
        let inner = &self.store.inner;
        lock_unpoisoned(&inner.waiters).remove(&self.entry);
        if let (Some(channel), WakeChannels::PerLock(shards)) = (&self.joined, &inner.channels) {
            shards.leave(channel);
        }
        if self.granted {
            return;
        }
        // Leave the queue in the background, retried through a short stall
        // of the server (the waiter lease would otherwise hold up the next
        // in line until it runs out).
        let (store, request, entry) =
            (self.store.clone(), self.request.clone(), self.entry.clone());
        retry_in_background(move || {
            let (store, request, entry) = (store.clone(), request.clone(), entry.clone());
            async move { store.leave_line(&request, &entry).await }
        });
    }
}
