//! The lock protocol's leases ([`OwnLeases`]): one per acquisition, and a
//! few released ones kept per TTL for the next acquisition (a grant, a
//! keep-alive stream and a revoke fewer each).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use omnilock_core::{Result, lock_unpoisoned as lock};

use crate::conn::Etcd;
use crate::session::{Session, revoke_in_background};

/// How many released lock-protocol leases to keep per TTL.
const IDLE_LEASES: usize = 16;

/// The leases of [`LockApiStore`](super::lockapi::LockApiStore)'s mutexes.
#[derive(Default)]
pub(super) struct OwnLeases {
    /// One lease per acquisition, remembered to close them.
    own: Mutex<Vec<Weak<Session>>>,
    /// Leases whose acquisition was released, kept alive for the next
    /// acquisition with the same TTL.
    idle: Mutex<HashMap<Duration, Vec<Arc<Session>>>>,
}

impl OwnLeases {
    /// A session for one lock-protocol acquisition: an idle one of `ttl`
    /// if there is one alive, else a new lease.
    pub(super) async fn take(&self, etcd: &Etcd, ttl: Duration) -> Result<Arc<Session>> {
        let reused = lock(&self.idle).get_mut(&ttl).and_then(|idle| {
            idle.retain(|s| s.death().is_none());
            idle.pop()
        });
        if let Some(session) = reused {
            return Ok(session);
        }
        let session = Session::grant(etcd, ttl).await?;
        let mut own = lock(&self.own);
        own.retain(|s| s.strong_count() > 0);
        own.push(Arc::downgrade(&session));
        Ok(session)
    }

    /// Takes back the lease of a released acquisition (its key is gone, so
    /// it holds nothing): kept for the next acquisition, up to a few per
    /// TTL, else revoked.
    pub(super) fn give_back(&self, etcd: &Etcd, ttl: Duration, session: &Arc<Session>) {
        let mut idle = lock(&self.idle);
        let pool = idle.entry(ttl).or_default();
        if pool.len() < IDLE_LEASES && session.death().is_none() {
            pool.push(session.clone());
        } else {
            revoke_in_background(etcd, session.id);
        }
    }

    /// Forgets the idle leases and hands over every lease still in use,
    /// for the store to close.
    pub(super) fn drain(&self) -> Vec<Arc<Session>> {
        lock(&self.idle).clear();
        lock(&self.own)
            .drain(..)
            .filter_map(|s| s.upgrade())
            .collect()
    }
}
