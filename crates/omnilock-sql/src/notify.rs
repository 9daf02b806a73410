//! PostgreSQL LISTEN/NOTIFY: a release that frees a lock sends a NOTIFY on
//! the channel named after the table, with the lock name as payload, in the
//! same statement; every store listening on
//! that table wakes one local waiter for that lock at once. In fair mode
//! the payload also names the head of the line's ticket, and only the store
//! whose waiter holds it wakes that waiter. Semaphore and
//! read-write lock entries that leave notify `<table>_entries`, which wakes
//! every local waiter of the name (a release can admit several). Polling stays as
//! the safety net for notifications missed while the listener reconnects.

use std::sync::Weak;
use std::time::Duration;

use omnilock_core::{Backoff, LockName};
use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};

use crate::table::Inner;

/// Listens with a connection of its own (from a one-connection pool on the
/// store's connect options), so the store's pool, or the application's pool
/// it was built on, never loses a connection to it.
pub(crate) async fn listen(store: Weak<Inner>, options: PgConnectOptions, table: String) {
    // The mutex's releases notify on the table's name, the semaphores' and
    // read-write locks' on `<table>_entries`.
    let counted = crate::queries::notify_channel(&table);
    let channels = [table.as_str(), counted.as_str()];
    let mut backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(5));
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .max_lifetime(None)
        .idle_timeout(None)
        .connect_lazy_with(options);
    loop {
        let mut listener = match PgListener::connect_with(&pool).await {
            Ok(listener) => listener,
            Err(err) => {
                tracing::debug!(error = %err, "omnilock postgres listener cannot connect; polling");
                tokio::time::sleep(backoff.next_delay()).await;
                continue;
            }
        };
        if let Err(err) = listener.listen_all(channels).await {
            tracing::debug!(error = %err, "omnilock postgres LISTEN failed; polling");
            tokio::time::sleep(backoff.next_delay()).await;
            continue;
        }
        backoff.reset();
        loop {
            match listener.try_recv().await {
                Ok(Some(notification)) => {
                    let Some(inner) = store.upgrade() else { return };
                    // Fair mode's releases name the head of the line too.
                    let (name, head) = match notification.payload().split_once('\u{1f}') {
                        Some((name, head)) => (name, Some(head.parse::<i64>().ok())),
                        None => (notification.payload(), None),
                    };
                    if let Ok(name) = LockName::new(name) {
                        if notification.channel() == counted {
                            // A freed permit or side can admit several.
                            inner.wake_all_local(&name);
                        } else if let Some(head) = head {
                            // No live ticket: nobody waits in line.
                            if let Some(id) = head {
                                inner.wake_ticket(&name, id);
                            }
                        } else {
                            inner.wake_local(&name);
                        }
                    }
                }
                // The connection dropped; the next call reconnects and
                // re-listens. Waiters poll meanwhile.
                Ok(None) => {
                    if store.strong_count() == 0 {
                        return;
                    }
                }
                Err(err) => {
                    tracing::debug!(error = %err, "omnilock postgres listener failed; reconnecting");
                    tokio::time::sleep(backoff.next_delay()).await;
                    break;
                }
            }
        }
    }
}
