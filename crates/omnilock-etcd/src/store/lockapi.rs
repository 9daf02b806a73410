//! etcd's own lock protocol ([`Mode::LockApi`](crate::Mode::LockApi)),
//! [`LockApiStore`]: a lease per acquisition and a key named after it, run
//! client-side. Its keys name no owner, so it cannot say who holds a lock,
//! re-enter a hold of another client, or take a `lock_all` in one step.
//! Semaphores and read-write locks are the recipe's, on the shared leases
//! of [`Base`].

use std::fmt;
use std::time::{Duration, Instant};

use omnilock_core::{
    AcquireRequest, Backend, Capabilities, Error, ErrorKind, Holder, Listed, LockKind, LockName,
    LockSpec, Owner, Record, Result, async_trait,
};

use super::base::{Base, capabilities, granted};
use super::counted::Counted;
use super::detached::{enqueue_safely, try_put};
use super::hold::{self, grant};
use super::inspect;
use super::leases::OwnLeases;
use super::lock_all::part_by_part;
use super::records;
use super::{Grant, Held};
use crate::config::Mode;
use crate::conn::Etcd;
use crate::queue::{Enqueued, Turn};
use crate::session::revoke_in_background;

/// The [`Backend`] of [`Mode::LockApi`] (`?mode=lockapi`).
pub(crate) struct LockApiStore {
    base: Base,
    /// The mutexes' leases, one per acquisition.
    leases: OwnLeases,
}

impl fmt::Debug for LockApiStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.base.debug(f, Mode::LockApi)
    }
}

/// Revokes a per-acquisition lease when an acquire fails or is dropped.
struct Revoke {
    etcd: Etcd,
    lease: i64,
    armed: bool,
}

impl Drop for Revoke {
    fn drop(&mut self) {
        if self.armed {
            revoke_in_background(&self.etcd, self.lease);
        }
    }
}

impl LockApiStore {
    /// The lock protocol on the connection `etcd`, with no lease granted
    /// yet.
    pub(crate) fn new(etcd: Etcd) -> Self {
        LockApiStore {
            base: Base::new(etcd),
            leases: OwnLeases::default(),
        }
    }

    /// etcd's lock protocol (`concurrency.Mutex`, which `etcdctl lock` runs
    /// in the client and the Lock RPC runs inside the server): a lease per
    /// acquisition, the key `<range><lease hex>`, the same queue order. The
    /// waiting happens here, on our own watch of the predecessor, never in
    /// the server's Lock RPC: etcd 3.4's server-side wait shares one
    /// in-process watch stream per member, which a burst of cancelled
    /// waiters deadlocks for good ([docs/backends/etcd.md](https://github.com/omnilock/omnilock/blob/main/docs/backends/etcd.md), `mass_cancel`).
    async fn acquire_mutex(&self, request: &AcquireRequest, wait: bool) -> Result<Option<Grant>> {
        let session = self.leases.take(&self.base.etcd, request.ttl).await?;
        // Revoking the lease deletes whatever key it got, at any stage.
        let mut revoke = Revoke {
            etcd: self.base.etcd.clone(),
            lease: session.id,
            armed: true,
        };
        let lock_prefix = self.base.etcd.lock_prefix(request.name.as_str());
        let key = format!("{lock_prefix}{:x}", session.id);
        let enqueued = if wait {
            enqueue_safely(&self.base.etcd, &lock_prefix, &key, session.id).await?
        } else {
            match try_put(&self.base.etcd, &lock_prefix, &key, session.id).await? {
                Some(enqueued) => enqueued,
                None => return Ok(None),
            }
        };
        let (rev, turn) = match enqueued {
            Enqueued::Mine { rev, turn } => (rev, turn),
            // The key is named after a lease granted for this acquisition.
            Enqueued::Elsewhere { kv, .. } => {
                return Err(Error::new(
                    ErrorKind::Backend,
                    format!(
                        "etcd key {key} exists on lease {:x}, not on this acquisition's lease",
                        kv.lease()
                    ),
                ));
            }
        };
        if let Turn::After { .. } = turn {
            if !wait {
                return Ok(None); // the revoke deletes the key
            }
            request.waiting.raise();
        }
        self.base
            .etcd
            .wait_turn(&session, &lock_prefix, &key, rev, turn)
            .await?;
        revoke.armed = false;
        Ok(Some(grant(request, key, rev, session, None)))
    }
}

#[async_trait]
impl Backend for LockApiStore {
    type Hold = Held;

    fn kind(&self) -> &'static str {
        "etcd"
    }

    fn capabilities(&self) -> Capabilities {
        capabilities(false)
    }

    async fn try_acquire(&self, request: &AcquireRequest) -> Result<Option<Grant>> {
        let mutex = self.acquire_mutex(request, false);
        self.base.acquire(request, false, mutex).await
    }

    async fn try_acquire_all(&self, requests: &[AcquireRequest]) -> Result<Option<Vec<Grant>>> {
        if requests.is_empty() {
            return Ok(Some(Vec::new()));
        }
        Err(part_by_part())
    }

    async fn acquire(&self, request: &AcquireRequest) -> Result<Grant> {
        let mutex = self.acquire_mutex(request, true);
        granted(self.base.acquire(request, true, mutex).await?)
    }

    async fn release(&self, spec: &LockSpec, grant: &Grant) -> Result<()> {
        let held = self.base.release(spec, grant).await?;
        if Counted::of(spec.primitive).is_none() {
            // Our key is gone, so the lease holds nothing: keep it for the
            // next acquisition, up to a few per TTL.
            self.leases
                .give_back(&self.base.etcd, spec.ttl, &held.session);
        }
        Ok(())
    }

    async fn renew(&self, spec: &LockSpec, grant: &Grant) -> Result<Instant> {
        hold::renew(&self.base.etcd, spec, grant).await
    }

    async fn renew_all(&self, holds: &[(&LockSpec, &Grant)]) -> Vec<Result<Instant>> {
        hold::renew_all(&self.base.etcd, holds).await
    }

    async fn break_lock(&self, name: &LockName) -> Result<bool> {
        self.base.break_lock(name).await
    }

    async fn break_holds(
        &self,
        name: &LockName,
        kind: LockKind,
        owner: Option<&Owner>,
    ) -> Result<usize> {
        inspect::break_holds(&self.base.etcd, name, kind, owner).await
    }

    // No `inspect` (not claimed): the lock protocol's keys name no owner,
    // so a mutex's holder could not be told.

    async fn list(&self, prefix: &str) -> Result<Vec<Listed>> {
        inspect::list(&self.base.etcd, prefix).await
    }

    async fn holder(&self, _name: &LockName) -> Result<Option<Holder>> {
        Err(Error::new(
            ErrorKind::Unsupported,
            "etcd's lock protocol does not record owners (use the default mode)",
        ))
    }

    async fn write_record(&self, name: &LockName, value: &str, keep: Duration) -> Result<()> {
        records::write(&self.base.etcd, name, value, keep).await
    }

    async fn read_record(&self, name: &LockName) -> Result<Option<Record>> {
        records::read(&self.base.etcd, name).await
    }

    async fn delete_record(&self, name: &LockName) -> Result<bool> {
        records::delete(&self.base.etcd, name).await
    }

    async fn close(&self) {
        self.base.close(self.leases.drain()).await;
    }
}
