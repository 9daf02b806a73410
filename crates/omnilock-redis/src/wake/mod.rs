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

/// What a subscription delivers its messages to.
pub(crate) trait WakeTarget: Send + Sync + 'static {
    /// A release on server `from` (the store's own numbering) woke `entry`.
    fn deliver(&self, from: usize, entry: &str);
    /// Wake-ups from server `from` may have been missed (the subscription
    /// dropped): every waiter that counts on them checks again.
    fn recheck_all(&self, from: usize);
}

/// Delivers wake-up messages from server `from` to `store`'s waiters, and
/// re-subscribes (with backoff) when the subscription's connection is lost.
/// After a loss every waiter re-checks at once, since a release may have
/// been missed. Ends when the store is dropped.
pub(crate) async fn listen<T: WakeTarget>(
    store: Weak<T>,
    from: usize,
    mut pubsub: Option<redis::aio::PubSub>,
    subscriber: Subscriber,
    channel: String,
    connect_timeout: Duration,
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
        let mut messages = subscribed.into_on_message();
        loop {
            let message = tokio::select! {
                message = messages.next() => message,
                // The master moved (Sentinel): subscribe there.
                () = &mut moved => None,
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
