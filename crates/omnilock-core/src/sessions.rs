//! One store session per TTL, opened on demand and shared by every lock
//! asking for that TTL: the machinery of backends whose sessions are leases
//! (an etcd lease, a ZooKeeper session).
//!
//! Opening a session is a network round trip or more, and a stalled server
//! can make it take seconds. Only callers wanting the *same* TTL wait for
//! it: each TTL has its own once-cell, and the map of cells is locked only to
//! find or replace a cell, never across an `await`.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::OnceCell;

use crate::error::Result;
use crate::sync::lock_unpoisoned;

type Slot<S> = Arc<OnceCell<Arc<S>>>;

/// Sessions of type `S`, at most one live per TTL.
pub struct SessionsPerTtl<S> {
    slots: Mutex<HashMap<Duration, Slot<S>>>,
    is_alive: fn(&S) -> bool,
}

impl<S> SessionsPerTtl<S> {
    /// No sessions yet; `is_alive` tells a session that can still be
    /// handed out from one that has ended (expired, closed).
    pub fn new(is_alive: fn(&S) -> bool) -> Self {
        SessionsPerTtl {
            slots: Mutex::new(HashMap::new()),
            is_alive,
        }
    }

    /// The live session for `ttl`, opened with `open` if there is none or
    /// the last one ended. Callers for the same TTL share one opening; a
    /// failed opening is not kept, so the next caller tries again.
    pub async fn get<F, Fut>(&self, ttl: Duration, open: F) -> Result<Arc<S>>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<Arc<S>>>,
    {
        loop {
            let slot = lock_unpoisoned(&self.slots).entry(ttl).or_default().clone();
            let mut opened_here = false;
            let session = slot
                .get_or_try_init(|| {
                    opened_here = true;
                    open()
                })
                .await?;
            // A session this call just opened is handed out as it is: it was
            // alive a moment ago, and looping on it could go on for ever.
            if opened_here || (self.is_alive)(session) {
                return Ok(session.clone());
            }
            // Ended: empty the TTL's slot, unless another caller already has.
            let mut slots = lock_unpoisoned(&self.slots);
            if slots.get(&ttl).is_some_and(|s| Arc::ptr_eq(s, &slot)) {
                slots.remove(&ttl);
            }
        }
    }

    /// Takes every open session out (to close them); openings still under
    /// way are left to finish on their own.
    pub fn take_all(&self) -> Vec<Arc<S>> {
        lock_unpoisoned(&self.slots)
            .drain()
            .filter_map(|(_, slot)| slot.get().cloned())
            .collect()
    }
}

impl<S> std::fmt::Debug for SessionsPerTtl<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ttls: Vec<Duration> = lock_unpoisoned(&self.slots).keys().copied().collect();
        f.debug_struct("SessionsPerTtl")
            .field("ttls", &ttls)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

    use super::*;
    use crate::Error;

    #[derive(Debug)]
    struct FakeSession {
        ttl: Duration,
        alive: AtomicBool,
    }

    fn fake(ttl: Duration) -> Arc<FakeSession> {
        Arc::new(FakeSession {
            ttl,
            alive: AtomicBool::new(true),
        })
    }

    fn sessions() -> SessionsPerTtl<FakeSession> {
        SessionsPerTtl::new(|s| s.alive.load(Ordering::SeqCst))
    }

    const SLOW: Duration = Duration::from_secs(1);
    const FAST: Duration = Duration::from_secs(2);

    /// The fix for the stall: a session for one TTL that never finishes
    /// opening does not hold up a session for another TTL.
    #[tokio::test]
    async fn a_stalled_opening_does_not_block_another_ttl() {
        let sessions = Arc::new(sessions());
        let stalled = sessions.clone();
        let (started_tx, started_rx) = tokio::sync::oneshot::channel();
        let stuck = tokio::spawn(async move {
            let started = std::sync::Mutex::new(Some(started_tx));
            stalled
                .get(SLOW, || {
                    if let Some(tx) = started.lock().unwrap().take() {
                        let _ = tx.send(());
                    }
                    std::future::pending()
                })
                .await
        });
        started_rx.await.expect("the slow opening started");
        let other = tokio::time::timeout(
            Duration::from_secs(5),
            sessions.get(FAST, || async { Ok(fake(FAST)) }),
        )
        .await
        .expect("another TTL is not held up by the stalled opening")
        .expect("opened");
        assert_eq!(other.ttl, FAST);
        assert!(!stuck.is_finished());
        stuck.abort();
    }

    #[tokio::test]
    async fn callers_for_one_ttl_share_one_opening() {
        let sessions = sessions();
        let opened = AtomicU32::new(0);
        let open = || async {
            opened.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(50)).await;
            Ok(fake(SLOW))
        };
        let (a, b) = tokio::join!(sessions.get(SLOW, open), sessions.get(SLOW, open));
        assert!(Arc::ptr_eq(&a.unwrap(), &b.unwrap()));
        assert_eq!(opened.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn failed_openings_are_not_kept_and_ended_sessions_are_replaced() {
        let sessions = sessions();
        let err = sessions
            .get(SLOW, || async { Err(Error::unavailable("down")) })
            .await
            .expect_err("the opening fails");
        assert!(err.is_retryable());
        let first = sessions
            .get(SLOW, || async { Ok(fake(SLOW)) })
            .await
            .expect("a retry opens");
        let again = sessions
            .get(SLOW, || async { panic!("the live session is reused") })
            .await
            .unwrap();
        assert!(Arc::ptr_eq(&first, &again));
        first.alive.store(false, Ordering::SeqCst);
        let second = sessions
            .get(SLOW, || async { Ok(fake(SLOW)) })
            .await
            .unwrap();
        assert!(!Arc::ptr_eq(&first, &second));
        assert_eq!(sessions.take_all().len(), 1);
        assert!(sessions.take_all().is_empty());
    }
}
