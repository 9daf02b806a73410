//! Following the sentinels' `+switch-master` announcements, so that a
//! failover the old master does not notice (it keeps answering as a master
//! for a while) moves the connection at once.

use std::sync::Weak;
use std::time::Duration;

use futures_util::StreamExt;
use omnilock_core::{Backoff, HostPort};

use super::ask::connect_master;
use super::{SentinelConn, Shared};

/// Listens to one sentinel after another for `+switch-master` of this
/// master and moves the connection when it comes. Holds the store only
/// while handling a message, so dropping the store ends it.
pub(super) async fn watch_switches(shared: Weak<Shared>) {
    let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(2));
    let mut next = 0;
    loop {
        let (client, master_name, timeout) = {
            let Some(strong) = shared.upgrade() else {
                return;
            };
            let (_, client) = &strong.sentinels[next % strong.sentinels.len()];
            (
                client.clone(),
                strong.master_name.clone(),
                strong.config.options.connect_timeout,
            )
        };
        next += 1;
        let subscribed = tokio::time::timeout(timeout, async {
            let mut pubsub = client.get_async_pubsub().await?;
            pubsub.subscribe("+switch-master").await?;
            Ok::<_, redis::RedisError>(pubsub)
        })
        .await;
        let Ok(Ok(pubsub)) = subscribed else {
            tokio::time::sleep(backoff.next_delay()).await;
            continue;
        };
        backoff.reset();
        // A switch may have happened while nobody listened.
        if let Some(strong) = shared.upgrade() {
            let conn = SentinelConn { shared: strong };
            let stale = conn.current().address;
            conn.refresh(&stale).await;
        }
        let mut messages = pubsub.into_on_message();
        while let Some(message) = messages.next().await {
            // "<name> <old host> <old port> <new host> <new port>"
            let Ok(text) = message.get_payload::<String>() else {
                continue;
            };
            let fields: Vec<&str> = text.split(' ').collect();
            if fields.first() != Some(&master_name.as_str()) {
                continue;
            }
            let Some(strong) = shared.upgrade() else {
                return;
            };
            let conn = SentinelConn { shared: strong };
            // The announcement names the new master: go there even while
            // other sentinels, not caught up, still name the old one.
            let port = fields.get(4).and_then(|p| p.parse().ok());
            match (fields.get(3), port) {
                (Some(host), Some(port)) => {
                    let address = HostPort {
                        host: host.to_string(),
                        port: Some(port),
                    };
                    conn.move_to(address).await;
                }
                _ => {
                    let stale = conn.current().address;
                    conn.refresh(&stale).await;
                }
            }
        }
        tokio::time::sleep(backoff.next_delay()).await;
    }
}

impl SentinelConn {
    /// Moves to `address` if it is a master now (a `+switch-master`).
    pub(super) async fn move_to(&self, address: HostPort) {
        let shared = &self.shared;
        let mut last = shared.refreshing.lock().await;
        if self.current().address == address.to_string() {
            return;
        }
        let connect = connect_master(&shared.config, &address);
        match tokio::time::timeout(shared.config.options.connect_timeout, connect).await {
            Ok(Ok(master)) => {
                last.ended(true);
                tracing::warn!(to = %master.address, "omnilock redis: +switch-master; moving");
                match shared.current.write() {
                    Ok(mut current) => *current = master,
                    Err(poisoned) => *poisoned.into_inner() = master,
                }
                shared.moved.notify_waiters();
            }
            _ => tracing::debug!(%address, "omnilock redis: the announced master is not ready"),
        }
    }
}
