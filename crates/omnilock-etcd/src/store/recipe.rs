//! omnilock's own recipe ([`Mode::Recipe`](crate::Mode::Recipe)),
//! [`RecipeStore`]: one shared lease per TTL, a key per owner in the
//! lock's queue, and re-entry by the same owner through another client (the
//! store keeps the count). Owners are in the keys, so it can say who holds
//! a lock, and every part of a `lock_all` goes in one transaction.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_client::{Compare, CompareOp, KeyValue, PutOptions, Txn, TxnOp, WatchOptions};
use omnilock_core::{
    AcquireRequest, Backend, Capabilities, Error, ErrorKind, Holder, HolderChange, Inspection,
    Listed, LockKind, LockName, LockSpec, Owner, Record, Result, async_trait,
};

use super::base::{Base, capabilities, granted};
use super::detached::{Entry, enqueue_safely, try_put};
use super::hold::{self, foreign_valid_until, grant};
use super::inspect;
use super::lock_all::try_put_all;
use super::records;
use super::{Grant, Held};
use crate::config::Mode;
use crate::conn::Etcd;
use crate::queue::{Enqueued, Turn, gets, hold_count};
use crate::session::Session;

/// The [`Backend`] of [`Mode::Recipe`] (the default).
pub(crate) struct RecipeStore {
    base: Base,
}

impl fmt::Debug for RecipeStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.base.debug(f, Mode::Recipe)
    }
}

impl RecipeStore {
    /// The recipe on the connection `etcd`, with no lease granted yet.
    pub(crate) fn new(etcd: Etcd) -> Self {
        RecipeStore {
            base: Base::new(etcd),
        }
    }

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
            let resp = self.base.etcd.txn(txn).await?;
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
                    .with_retryable(true));
                }
            }
        }
        let until = foreign_valid_until(&self.base.etcd, lease, request.ttl).await?;
        let session = self.base.shared_session(request.ttl).await?;
        Ok(grant(request, key, rev, session, Some((lease, until))))
    }

    /// The recipe's mutex: our owner's key in the lock's queue, on the
    /// shared lease; with `wait`, waits for its turn. An owner that holds
    /// or waits through another client re-enters its key instead.
    async fn acquire_mutex(&self, request: &AcquireRequest, wait: bool) -> Result<Option<Grant>> {
        self.base
            .on_shared_session(request.ttl, |session| {
                self.acquire_mutex_on(request, wait, session)
            })
            .await
    }

    /// [`Self::acquire_mutex`] on the lease of `session`.
    async fn acquire_mutex_on(
        &self,
        request: &AcquireRequest,
        wait: bool,
        session: Arc<Session>,
    ) -> Result<Option<Grant>> {
        let lock_prefix = self.base.etcd.lock_prefix(request.name.as_str());
        let key = Etcd::owner_key(&lock_prefix, request.owner.as_str());
        let enqueued = if wait {
            enqueue_safely(&self.base.etcd, &lock_prefix, &key, session.id).await?
        } else {
            match try_put(&self.base.etcd, &lock_prefix, &key, session.id).await? {
                Some(enqueued) => enqueued,
                None => return Ok(None),
            }
        };
        match enqueued {
            Enqueued::Mine { rev, turn } => {
                let mut entry = Entry {
                    etcd: self.base.etcd.clone(),
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
                self.base
                    .etcd
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
                    let turn = self.base.etcd.recheck(&lock_prefix, &key, rev).await?;
                    self.base
                        .etcd
                        .wait_turn(&session, &lock_prefix, &key, rev, turn)
                        .await?;
                }
                let current = self
                    .base
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

#[async_trait]
impl Backend for RecipeStore {
    type Hold = Held;

    fn kind(&self) -> &'static str {
        "etcd"
    }

    fn capabilities(&self) -> Capabilities {
        capabilities(true)
    }

    async fn try_acquire(&self, request: &AcquireRequest) -> Result<Option<Grant>> {
        let mutex = self.acquire_mutex(request, false);
        self.base.acquire(request, false, mutex).await
    }

    async fn try_acquire_all(&self, requests: &[AcquireRequest]) -> Result<Option<Vec<Grant>>> {
        try_put_all(&self.base, requests).await
    }

    async fn acquire(&self, request: &AcquireRequest) -> Result<Grant> {
        let mutex = self.acquire_mutex(request, true);
        granted(self.base.acquire(request, true, mutex).await?)
    }

    async fn release(&self, spec: &LockSpec, grant: &Grant) -> Result<()> {
        self.base.release(spec, grant).await.map(drop)
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

    async fn inspect(&self, name: &LockName, kind: LockKind) -> Result<Inspection> {
        match kind {
            LockKind::Mutex => inspect::mutex(&self.base.etcd, name).await,
            _ => inspect::counted(&self.base.etcd, name, kind).await,
        }
    }

    async fn list(&self, prefix: &str) -> Result<Vec<Listed>> {
        inspect::list(&self.base.etcd, prefix).await
    }

    async fn holder(&self, name: &LockName) -> Result<Option<Holder>> {
        let lock_prefix = self.base.etcd.lock_prefix(name.as_str());
        let Some(kv) = self.base.etcd.holder(&lock_prefix).await? else {
            return Ok(None);
        };
        // A key from `etcdctl lock` (a lease ID) names no owner we know.
        let owner = inspect::key_owner(&lock_prefix, &String::from_utf8_lossy(kv.key()))?;
        Ok(Some(Holder::new(owner, kv.create_revision() as u64)))
    }

    async fn watch_holder(&self, name: &LockName) -> Result<Option<HolderChange>> {
        // Any change in the lock's queue wakes it: the holder is its
        // oldest key, so a change of holder is a change in the queue.
        let lock_prefix = self.base.etcd.lock_prefix(name.as_str());
        let options = WatchOptions::new().with_prefix();
        let (mut watching, _) = self
            .base
            .etcd
            .watch_from_now(lock_prefix.into_bytes(), options)
            .await?;
        Ok(Some(Box::pin(async move {
            // An error or a watch etcd ended wakes the caller too: it
            // reads again, and watches again.
            let _ = watching.fired().await;
        })))
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
        self.base.close(Vec::new()).await;
    }
}
