//! What both modes stand on ([`Base`]): the connection, one shared lease
//! per TTL, and the steps that do not depend on how a mutex is queued:
//! semaphores and read-write locks (`counted`), giving a hold back, and
//! breaking a lock.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use omnilock_core::{
    AcquireRequest, Capabilities, Error, ErrorKind, LockName, LockSpec, Result, SessionsPerTtl,
};

use super::Grant;
use super::counted::{self, Counted};
use super::hold::{Held, release_mutex};
use crate::config::Mode;
use crate::conn::Etcd;
use crate::session::Session;

/// The connection and the shared leases (one per TTL asked for) that both
/// [`RecipeStore`](super::recipe::RecipeStore) and
/// [`LockApiStore`](super::lockapi::LockApiStore) hold: the recipe queues
/// its mutexes on them, and both modes their semaphores and read-write
/// locks.
pub(super) struct Base {
    pub(super) etcd: Etcd,
    sessions: SessionsPerTtl<Session>,
}

impl Base {
    /// Stands on the connection `etcd`, with no lease granted yet.
    pub(super) fn new(etcd: Etcd) -> Self {
        Base {
            etcd,
            sessions: SessionsPerTtl::new(|session| session.death().is_none()),
        }
    }

    /// The shared session for `ttl`, granting a new lease if there is none
    /// or the last one died.
    pub(super) async fn shared_session(&self, ttl: Duration) -> Result<Arc<Session>> {
        self.sessions
            .get(ttl, || Session::grant(&self.etcd, ttl))
            .await
    }

    /// Runs `op` on the shared session for `ttl`. A lease etcd no longer
    /// knows (revoked behind omnilock's back, or run out before the
    /// keep-alive task noticed) ends that session, and `op` runs once more
    /// on a new lease: the acquisition that found the lease gone is not the
    /// place to report it (no guard of it was granted).
    pub(super) async fn on_shared_session<T, F, Fut>(&self, ttl: Duration, op: F) -> Result<T>
    where
        F: Fn(Arc<Session>) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let session = self.shared_session(ttl).await?;
        match op(session.clone()).await {
            Err(err) if crate::conn::lease_gone(&err) => {
                session.kill(Error::new(
                    ErrorKind::LockLost,
                    "the etcd lease is gone (revoked, or run out)",
                ));
                op(self.shared_session(ttl).await?).await
            }
            done => done,
        }
    }

    /// Takes (or, with `wait`, waits for) what `request` asks: a semaphore
    /// permit or a side of a read-write lock here, in the same way in both
    /// modes; a mutex through `mutex`, the mode's own acquisition (not run
    /// otherwise).
    pub(super) async fn acquire(
        &self,
        request: &AcquireRequest,
        wait: bool,
        mutex: impl Future<Output = Result<Option<Grant>>>,
    ) -> Result<Option<Grant>> {
        if Counted::of(request.primitive).is_some() {
            return self
                .on_shared_session(request.ttl, |session| {
                    counted::acquire(&self.etcd, session, request, wait)
                })
                .await;
        }
        mutex.await
    }

    /// Gives one hold back: deletes a counted lock's key, or counts a
    /// mutex's hold down (deleting its key on the last). Returns what the
    /// grant carried.
    pub(super) async fn release<'g>(&self, spec: &LockSpec, grant: &'g Grant) -> Result<&'g Held> {
        let held = &grant.hold;
        held.session.unregister(held.ticket);
        if Counted::of(spec.primitive).is_some() {
            counted::release(&self.etcd, &held.key, held.rev).await?;
        } else {
            release_mutex(&self.etcd, held).await?;
        }
        Ok(held)
    }

    /// Deletes the key that holds the mutex `name`, whoever put it.
    pub(super) async fn break_lock(&self, name: &LockName) -> Result<bool> {
        let lock_prefix = self.etcd.lock_prefix(name.as_str());
        let Some(holder) = self.etcd.holder(&lock_prefix).await? else {
            return Ok(false);
        };
        let key = String::from_utf8_lossy(holder.key()).into_owned();
        self.etcd
            .delete_if_created(&key, holder.create_revision())
            .await
    }

    /// Closes the shared sessions and then `more` (a mode's own leases):
    /// revoking a lease deletes every key on it.
    pub(super) async fn close(&self, more: Vec<Arc<Session>>) {
        let shared = self.sessions.take_all();
        for session in shared.into_iter().chain(more) {
            session.close(&self.etcd).await;
        }
    }

    /// The store as its users know it: an `EtcdStore` in `mode`.
    pub(super) fn debug(&self, f: &mut fmt::Formatter<'_>, mode: Mode) -> fmt::Result {
        f.debug_struct("EtcdStore")
            .field("endpoints", &self.etcd.shown)
            .field("mode", &mode)
            .finish_non_exhaustive()
    }
}

/// What a store promises in either mode. `owners_in_keys` for the recipe,
/// whose keys name their owners: re-entry through another client, saying
/// who holds a lock (hence elections and `inspect`) and a one-step
/// `lock_all` need it; etcd's lock protocol names its keys after leases.
pub(super) fn capabilities(owners_in_keys: bool) -> Capabilities {
    Capabilities::none()
        .with_fair(true)
        .with_push_wakeups(true)
        .with_fencing(true)
        .with_cross_process_reentrancy(owners_in_keys)
        .with_lease_renewal(true)
        .with_cross_process(true)
        .with_break_lock(true)
        .with_holder(owners_in_keys)
        .with_check(owners_in_keys)
        // Both modes: a hold knows its key and create revision.
        .with_guarded_write(true)
        .with_election(owners_in_keys)
        // Raft: a grant is committed on a majority of members.
        .with_survives_failover(true)
        .with_semaphore(true)
        .with_rw_lock(true)
        .with_atomic_lock_all(owners_in_keys)
        // The lock protocol's mutex keys name no owner to report.
        .with_inspect(owners_in_keys)
        .with_inspect_waiters(owners_in_keys)
        // Both modes: every lock is a key range.
        .with_list(true)
        // Both modes: a key on a lease of its own, never kept alive.
        .with_records(true)
}

/// What a waiting acquire answers: its grant (a waiting acquisition never
/// comes back with nothing).
pub(super) fn granted(granted: Option<Grant>) -> Result<Grant> {
    granted.ok_or_else(|| Error::new(ErrorKind::Backend, "a waiting acquire returned nothing"))
}
