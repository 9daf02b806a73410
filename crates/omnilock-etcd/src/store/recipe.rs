//! omnilock's own recipe ([`Mode::Recipe`](crate::Mode::Recipe)): one
//! shared lease per TTL, a key per owner in the lock's queue, and re-entry
//! by the same owner through another client (the store keeps the count).

use etcd_client::{Compare, CompareOp, KeyValue, PutOptions, Txn, TxnOp};
use omnilock_core::{AcquireRequest, Error, ErrorKind, Grant, Result};

use super::detached::{enqueue_safely, try_put, Entry};
use super::hold::{foreign_valid_until, grant};
use super::EtcdStore;
use crate::conn::Etcd;
use crate::queue::{gets, hold_count, Enqueued, Turn};

impl EtcdStore {
    /// Adds one hold to a key our owner holds on another client's lease.
    async fn reenter(&self, request: &AcquireRequest, kv: KeyValue) -> Result<Grant> {
        let key = String::from_utf8_lossy(kv.key()).into_owned();
        let (rev, lease) = (kv.create_revision(), kv.lease());
        let mut kv = kv;
        loop {
            let txn = Txn::new()
                .when([Compare::mod_revision(
                    key.as_str(),
                    CompareOp::Equal,
                    kv.mod_revision(),
                )])
                .and_then([TxnOp::put(
                    key.as_str(),
                    (hold_count(&kv) + 1).to_string(),
                    Some(PutOptions::new().with_ignore_lease()),
                )])
                .or_else([TxnOp::get(key.as_str(), None)]);
            let resp = self.etcd.txn(txn).await?;
            if resp.succeeded() {
                break;
            }
            match gets(&resp).next().and_then(|kvs| kvs.into_iter().next()) {
                Some(now) if now.create_revision() == rev => kv = now,
                _ => {
                    return Err(Error::new(
                        ErrorKind::LockLost,
                        "the owner's hold vanished while re-entering",
                    )
                    .with_retryable(true))
                }
            }
        }
        let until = foreign_valid_until(&self.etcd, lease, request.ttl).await?;
        let session = self.shared_session(request.ttl).await?;
        Ok(grant(request, key, rev, session, Some((lease, until))))
    }

    pub(super) async fn acquire_recipe(
        &self,
        request: &AcquireRequest,
        wait: bool,
    ) -> Result<Option<Grant>> {
        let session = self.shared_session(request.ttl).await?;
        let lock_prefix = self.etcd.lock_prefix(request.name.as_str());
        let key = Etcd::owner_key(&lock_prefix, request.owner.as_str());
        let enqueued = if wait {
            enqueue_safely(&self.etcd, &lock_prefix, &key, session.id).await?
        } else {
            match try_put(&self.etcd, &lock_prefix, &key, session.id).await? {
                Some(enqueued) => enqueued,
                None => return Ok(None),
            }
        };
        match enqueued {
            Enqueued::Mine { rev, turn } => {
                let mut entry = Entry {
                    etcd: self.etcd.clone(),
                    key: key.clone(),
                    rev,
                    armed: true,
                };
                if let Turn::After { .. } = turn {
                    if !wait {
                        return Ok(None); // the entry deletes the key
                    }
                    request.waiting.raise();
                }
                self.etcd
                    .wait_turn(&session, &lock_prefix, &key, rev, turn)
                    .await?;
                entry.armed = false;
                Ok(Some(grant(request, key, rev, session, None)))
            }
            Enqueued::Elsewhere { kv, first } => {
                if !request.reentrant {
                    return Err(Error::would_deadlock());
                }
                if !first {
                    if !wait {
                        return Ok(None);
                    }
                    // Our owner waits in another process: wait behind the
                    // same key (it is not ours to delete), then re-enter.
                    request.waiting.raise();
                    let rev = kv.create_revision();
                    let turn = self.etcd.recheck(&lock_prefix, &key, rev).await?;
                    self.etcd
                        .wait_turn(&session, &lock_prefix, &key, rev, turn)
                        .await?;
                }
                let current = self
                    .etcd
                    .call(|mut c| {
                        let key = key.clone();
                        async move { c.get(key, None).await }
                    })
                    .await?
                    .take_kvs()
                    .into_iter()
                    .next()
                    .filter(|now| now.create_revision() == kv.create_revision())
                    .ok_or_else(|| {
                        Error::new(ErrorKind::LockLost, "the owner's hold vanished")
                            .with_retryable(true)
                    })?;
                self.reenter(request, current).await.map(Some)
            }
        }
    }
}
