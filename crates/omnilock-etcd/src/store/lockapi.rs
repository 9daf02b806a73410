//! etcd's own lock protocol ([`Mode::LockApi`](crate::Mode::LockApi)): a
//! lease per acquisition and a key named after it, run client-side.

use omnilock_core::{AcquireRequest, Error, ErrorKind, Grant, Result};

use super::detached::{enqueue_safely, try_put};
use super::hold::grant;
use super::EtcdStore;
use crate::conn::Etcd;
use crate::queue::{Enqueued, Turn};
use crate::session::revoke_in_background;

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

impl EtcdStore {
    /// etcd's lock protocol (`concurrency.Mutex`, which `etcdctl lock` runs
    /// in the client and the Lock RPC runs inside the server): a lease per
    /// acquisition, the key `<range><lease hex>`, the same queue order. The
    /// waiting happens here, on our own watch of the predecessor, never in
    /// the server's Lock RPC: etcd 3.4's server-side wait shares one
    /// in-process watch stream per member, which a burst of cancelled
    /// waiters deadlocks for good (docs/backends/etcd.md, `mass_cancel`).
    pub(super) async fn acquire_lockapi(
        &self,
        request: &AcquireRequest,
        wait: bool,
    ) -> Result<Option<Grant>> {
        let session = self.own_session(request.ttl).await?;
        // Revoking the lease deletes whatever key it got, at any stage.
        let mut revoke = Revoke {
            etcd: self.etcd.clone(),
            lease: session.id,
            armed: true,
        };
        let lock_prefix = self.etcd.lock_prefix(request.name.as_str());
        let key = format!("{lock_prefix}{:x}", session.id);
        let enqueued = if wait {
            enqueue_safely(&self.etcd, &lock_prefix, &key, session.id).await?
        } else {
            match try_put(&self.etcd, &lock_prefix, &key, session.id).await? {
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
                ))
            }
        };
        if let Turn::After { .. } = turn {
            if !wait {
                return Ok(None); // the revoke deletes the key
            }
            request.waiting.raise();
        }
        self.etcd
            .wait_turn(&session, &lock_prefix, &key, rev, turn)
            .await?;
        revoke.armed = false;
        Ok(Some(grant(request, key, rev, session, None)))
    }
}
