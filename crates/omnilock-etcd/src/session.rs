//! A lease and the task that keeps it alive: the etcd side of "this client
//! is still here". Every key a lock puts is attached to a session's lease,
//! so a crashed client's keys vanish when its lease runs out.
//!
//! The session also knows which guards depend on it: when the lease is gone
//! (etcd answered TTL 0, or no keep-alive got through before it could have
//! expired) every one of them is told at once through its lost signal.

use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use etcd_client::{LeaseKeepAliveStream, LeaseKeeper};
use omnilock_core::{
    Backoff, Error, ErrorKind, LostNotifier, Result, SessionGuards, lock_unpoisoned as lock,
    retry_in_background,
};
use tokio::task::JoinHandle;

use crate::conn::Etcd;

/// One kept-alive lease.
pub(crate) struct Session {
    /// The lease ID.
    pub id: i64,
    /// The TTL the user asked for; the lease is at least this long.
    ttl: Duration,
    state: Mutex<State>,
    /// The guards on this lease, told when it is gone.
    guards: SessionGuards,
    keeper: Mutex<Option<JoinHandle<()>>>,
}

struct State {
    /// Until when the lease is known to exist: the send time of the last
    /// acknowledged keep-alive (or of the grant) plus the TTL.
    safe_until: Instant,
}

impl Session {
    /// Grants a lease of at least `ttl` (whole seconds, rounded up: etcd
    /// counts in seconds and may round up further to its minimum) and starts
    /// keeping it alive.
    pub(crate) async fn grant(etcd: &Etcd, ttl: Duration) -> Result<Arc<Session>> {
        let seconds = ttl.as_millis().div_ceil(1000).max(1) as i64;
        let sent = Instant::now();
        let lease = etcd
            .call(|mut c| async move { c.lease_grant(seconds, None).await })
            .await?;
        let id = lease.id();
        let opened = etcd
            .call(|mut c| async move { c.lease_keep_alive(id).await })
            .await;
        let (keeper, stream) = match opened {
            Ok(pair) => pair,
            Err(e) => {
                revoke_in_background(etcd, id);
                return Err(e);
            }
        };
        let session = Arc::new(Session {
            id,
            ttl,
            state: Mutex::new(State {
                safe_until: sent + ttl,
            }),
            guards: SessionGuards::new(),
            keeper: Mutex::new(None),
        });
        let task = tokio::spawn(keep_alive(
            Arc::downgrade(&session),
            etcd.clone(),
            keeper,
            stream,
        ));
        *lock(&session.keeper) = Some(task);
        Ok(session)
    }

    /// Until when every key on this lease is known to exist.
    pub(crate) fn safe_until(&self) -> Instant {
        lock(&self.state).safe_until
    }

    /// Why the lease is gone, if it is.
    pub(crate) fn death(&self) -> Option<Error> {
        self.guards.ended()
    }

    /// Completes with the cause when the lease is gone.
    pub(crate) async fn died(&self) -> Error {
        self.guards.wait_ended().await
    }

    /// Remembers a guard to tell when the lease is gone; returns its ticket.
    pub(crate) fn register(&self, lost: &LostNotifier) -> u64 {
        self.guards.register(lost)
    }

    /// Forgets a released guard.
    pub(crate) fn unregister(&self, ticket: u64) {
        self.guards.unregister(ticket)
    }

    /// Marks the lease gone and tells every guard on it.
    pub(crate) fn kill(&self, cause: Error) {
        if self.guards.end(cause.clone()) {
            tracing::warn!(lease = self.id, error = %cause, "omnilock etcd session lost");
        }
    }

    /// Stops the keep-alive task and revokes the lease, which deletes every
    /// key on it at once (closing the store frees its locks).
    pub(crate) async fn close(&self, etcd: &Etcd) {
        if let Some(task) = lock(&self.keeper).take() {
            task.abort();
        }
        self.kill(Error::new(ErrorKind::LockLost, "the etcd store was closed"));
        let id = self.id;
        let _ = etcd
            .call(|mut c| async move { c.lease_revoke(id).await })
            .await;
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if let Some(task) = lock(&self.keeper).take() {
            task.abort();
        }
    }
}

/// Revokes a lease nobody will use, without waiting for the answer.
pub(crate) fn revoke_in_background(etcd: &Etcd, id: i64) {
    let etcd = etcd.clone();
    // Retried through a short stall: a lease left behind keeps its keys (and
    // any waiter behind them) until its TTL runs out.
    retry_in_background(move || {
        let etcd = etcd.clone();
        async move {
            etcd.call(|mut c| async move { c.lease_revoke(id).await })
                .await
                .map(drop)
        }
    });
}

/// Sends a keep-alive every third of the TTL and moves the safe deadline on
/// each answer. A broken stream is reopened (another member may answer);
/// the session dies when etcd says the lease is gone (TTL 0) or when no
/// answer came before the lease could have expired.
async fn keep_alive(
    session: Weak<Session>,
    etcd: Etcd,
    mut keeper: LeaseKeeper,
    mut stream: LeaseKeepAliveStream,
) {
    let (id, ttl) = match session.upgrade() {
        Some(s) => (s.id, s.ttl),
        None => return,
    };
    let interval = (ttl / 3).max(Duration::from_millis(50));
    let mut backoff = Backoff::new(interval / 8, interval);
    let mut next = tokio::time::Instant::now() + interval;
    loop {
        tokio::time::sleep_until(next).await;
        let Some(s) = session.upgrade() else { return };
        let deadline = tokio::time::Instant::from_std(s.safe_until());
        drop(s);
        let sent = Instant::now();
        if tokio::time::Instant::now() >= deadline {
            if let Some(s) = session.upgrade() {
                s.kill(lease_lost(
                    "no keep-alive got through before the lease could expire",
                ));
            }
            return;
        }
        let answer = tokio::time::timeout_at(deadline, async {
            keeper.keep_alive().await?;
            stream.message().await
        })
        .await;
        let Some(s) = session.upgrade() else { return };
        match answer {
            Ok(Ok(Some(reply))) if reply.ttl() > 0 => {
                let granted = Duration::from_secs(reply.ttl() as u64);
                lock(&s.state).safe_until = sent + ttl.min(granted);
                backoff.reset();
                next = tokio::time::Instant::now() + interval;
            }
            Ok(Ok(Some(_))) => {
                s.kill(lease_lost("etcd reports the lease expired"));
                return;
            }
            // The stream broke (a member died, the connection dropped) or
            // stalled: open a new one, maybe to another member.
            Ok(Ok(None)) | Ok(Err(_)) | Err(_) => {
                tracing::debug!(
                    lease = id,
                    "omnilock etcd keep-alive stream broke; reopening"
                );
                match etcd
                    .call(|mut c| async move { c.lease_keep_alive(id).await })
                    .await
                {
                    Ok((k, st)) => {
                        keeper = k;
                        stream = st;
                        next = tokio::time::Instant::now();
                    }
                    Err(_) => next = tokio::time::Instant::now() + backoff.next_delay(),
                }
            }
        }
    }
}

fn lease_lost(why: &str) -> Error {
    Error::new(ErrorKind::LockLost, format!("etcd session lost: {why}")).with_retryable(true)
}
