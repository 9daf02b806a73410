//! A client's wake-up subscription on one server: each message names the
//! waiter entry a release woke, and goes to the store that owns the waiter.
//! Used by one server or the sentinels' master (one subscription) and by
//! Redlock (one per node); a cluster subscribes per lock instead
//! (`wake/shards.rs`).

use std::sync::Weak;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use omnilock_core::Backoff;

use crate::conn::Subscriber;

pub(crate) mod shards;

/// How often a subscription is PINGed. A connection that died silently (a
/// network path that drops packets, without a reset) delivers nothing and
/// reports nothing: without the PING its waiters would learn of releases
/// only at their periodic re-check, every time, until the operating system
/// gave up on the connection, which takes minutes to hours.
const KEEPALIVE: Duration = Duration::from_secs(2);

/// The least a PING is given: Redlock's reply timeout (250 ms by default)
/// bounds each round of a lock, not a subscription, and a busy machine
/// would otherwise open subscriptions again, and make every waiter
/// re-check, for nothing.
const PONG_AT_LEAST: Duration = Duration::from_secs(1);

/// What a subscription delivers its messages to.
pub(crate) trait WakeTarget: Send + Sync + 'static {
    /// A release on server `from` (the store's own numbering) woke `entry`.
    fn deliver(&self, from: usize, entry: &str);
    /// Wake-ups from server `from` may have been missed (the subscription
    /// dropped): every waiter that counts on them checks again.
    fn recheck_all(&self, from: usize);
}

/// Delivers wake-up messages from server `from` to `store`'s waiters, and
/// re-subscribes (with backoff) when the subscription's connection is lost
/// or does not answer a PING within `response_timeout` but at least
/// [`PONG_AT_LEAST`] ([`KEEPALIVE`]); a subscription may take
/// `connect_timeout`, as it opens a connection.
/// After a loss every waiter re-checks at once, since a release may have
/// been missed. Ends when the store is dropped.
pub(crate) async fn listen<T: WakeTarget>(
    store: Weak<T>,
    from: usize,
    mut pubsub: Option<redis::aio::PubSub>,
    subscriber: Subscriber,
    channel: String,
    connect_timeout: Duration,
    response_timeout: Duration,
) {
    let mut backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(2));
    loop {
        let subscribed = match pubsub.take() {
            Some(subscribed) => subscribed,
            // redis-rs gives the subscription no timeout of its own.
            None => {
                match tokio::time::timeout(connect_timeout, subscriber.subscribe(&channel)).await {
                    Ok(Ok(subscribed)) => subscribed,
                    failed => {
                        if let Ok(Err(err)) = failed {
                            tracing::debug!(error = %err, "omnilock redis: cannot re-subscribe yet");
                        }
                        if store.strong_count() == 0 {
                            return;
                        }
                        tokio::time::sleep(backoff.next_delay()).await;
                        continue;
                    }
                }
            }
        };
        let subscribed_at = Instant::now();
        let moved = subscriber.moved();
        tokio::pin!(moved);
        let (mut sink, mut messages) = subscribed.split();
        let mut keepalive =
            tokio::time::interval_at(tokio::time::Instant::now() + KEEPALIVE, KEEPALIVE);
        keepalive.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let message = tokio::select! {
                message = messages.next() => message,
                // The master moved (Sentinel): subscribe there.
                () = &mut moved => None,
                _ = keepalive.tick() => {
                    let pong = tokio::time::timeout(
                        response_timeout.max(PONG_AT_LEAST),
                        sink.ping::<redis::Value>(),
                    );
                    if matches!(pong.await, Ok(Ok(_))) {
                        continue;
                    }
                    tracing::warn!("omnilock redis: the wake-up subscription did not answer a PING");
                    None
                }
            };
            let Some(message) = message else { break };
            let Some(store) = store.upgrade() else { return };
            if let Ok(entry) = message.get_payload::<String>() {
                store.deliver(from, &entry);
            }
        }
        let Some(target) = store.upgrade() else {
            return;
        };
        tracing::warn!("omnilock redis: wake-up subscription lost or moved; re-subscribing");
        target.recheck_all(from);
        drop(target);
        // A subscription that lasted is not a failing one: start the
        // backoff again; one that drops at once backs off further.
        if subscribed_at.elapsed() > Duration::from_secs(5) {
            backoff.reset();
        }
        tokio::time::sleep(backoff.next_delay()).await;
    }
}
