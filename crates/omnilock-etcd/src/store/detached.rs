//! Putting a key into a lock's queue, in both modes, so that a caller who
//! goes away leaves no key behind: the waiting enqueue, the try-acquire's
//! single transaction, and the guard ([`Entry`]) that deletes a queued key
//! when its acquisition fails or is dropped. Each write is retried over
//! transient errors and finished in the background if the caller goes
//! away; then the key it put is deleted.

use std::time::Duration;

use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp, TxnResponse};
use omnilock_core::{Backoff, Result, complete_or_undo, retry};

use crate::conn::Etcd;
use crate::queue::{Enqueued, Turn, abandon, first_created, gets, revision};

/// The retry pace of a queue write, a release and a counted release.
pub(super) fn backoff() -> Backoff {
    Backoff::new(Duration::from_millis(20), Duration::from_millis(500))
}

/// The enqueue, retried over transient errors and finished in the
/// background if the caller goes away (then its key is deleted).
pub(super) async fn enqueue_safely(
    etcd: &Etcd,
    lock_prefix: &str,
    key: &str,
    lease: i64,
) -> Result<Enqueued> {
    let store = etcd.clone();
    let this = EnqueueCall {
        store: etcd.clone(),
        lock_prefix: lock_prefix.to_string(),
        key: key.to_string(),
        lease,
    };
    let undo_key = key.to_string();
    complete_or_undo(this.run(), move |result: Result<Enqueued>| async move {
        if let Ok(Enqueued::Mine { rev, .. }) = result {
            abandon(&store, undo_key, rev);
        }
    })
    .await
}

/// Runs a transaction that puts `keys` when it succeeds, retried over
/// transient errors and finished even if the caller goes away (then
/// the keys it put are deleted in the background).
pub(super) async fn put_txn_detached(
    etcd: &Etcd,
    txn: Txn,
    keys: Vec<String>,
) -> Result<TxnResponse> {
    let (etcd, undo_etcd) = (etcd.clone(), etcd.clone());
    complete_or_undo(
        async move {
            let deadline = tokio::time::Instant::now() + etcd.request_timeout;
            retry(backoff(), deadline, || etcd.txn(txn.clone())).await
        },
        move |result: Result<TxnResponse>| async move {
            if let Ok(resp) = result
                && resp.succeeded()
            {
                for key in keys {
                    abandon(&undo_etcd, key, revision(&resp));
                }
            }
        },
    )
    .await
}

/// A try-acquire's single transaction: put our key only if the lock's
/// range is empty (nobody holds or waits). `None` when it is not and our
/// owner is not the holder.
pub(super) async fn try_put(
    etcd: &Etcd,
    lock_prefix: &str,
    key: &str,
    lease: i64,
) -> Result<Option<Enqueued>> {
    let txn = Txn::new()
        .when([Compare::create_revision(lock_prefix, CompareOp::Equal, 0).with_prefix()])
        .and_then([TxnOp::put(
            key,
            "1",
            Some(PutOptions::new().with_lease(lease)),
        )])
        .or_else([
            TxnOp::get(key, None),
            TxnOp::get(lock_prefix, Some(first_created())),
        ]);
    let call_key = key.to_string();
    let resp = put_txn_detached(etcd, txn, vec![key.to_string()]).await?;
    if resp.succeeded() {
        return Ok(Some(Enqueued::Mine {
            rev: revision(&resp),
            turn: Turn::Held,
        }));
    }
    let mut gets = gets(&resp);
    let mine = gets.next().and_then(|kvs| kvs.into_iter().next());
    let first = gets.next().and_then(|kvs| kvs.into_iter().next());
    let Some(mine) = mine else { return Ok(None) };
    let is_first = first.is_some_and(|f| f.create_revision() == mine.create_revision());
    if mine.lease() == lease {
        // Left by a retried attempt of ours: keep it if it holds.
        let rev = mine.create_revision();
        if is_first {
            return Ok(Some(Enqueued::Mine {
                rev,
                turn: Turn::Held,
            }));
        }
        abandon(etcd, call_key, rev);
        return Ok(None);
    }
    Ok(Some(Enqueued::Elsewhere {
        kv: mine,
        first: is_first,
    }))
}

/// The enqueue as an owned future (it may outlive the caller).
struct EnqueueCall {
    store: Etcd,
    lock_prefix: String,
    key: String,
    lease: i64,
}

impl EnqueueCall {
    async fn run(self) -> Result<Enqueued> {
        let deadline = tokio::time::Instant::now() + self.store.request_timeout * 2;
        let result = retry(backoff(), deadline, || {
            self.store.enqueue(&self.lock_prefix, &self.key, self.lease)
        })
        .await;
        if result.is_err() {
            // An attempt may have been applied without us hearing back: a
            // key on our lease would otherwise sit in the queue for as long
            // as the lease lives.
            let txn = Txn::new()
                .when([Compare::lease(
                    self.key.as_str(),
                    CompareOp::Equal,
                    self.lease,
                )])
                .and_then([TxnOp::delete(self.key.as_str(), None)]);
            if let Err(e) = self.store.txn(txn).await {
                tracing::warn!(error = %e, "omnilock etcd could not clean up after a failed enqueue");
            }
        }
        result
    }
}

/// A queue key that is deleted if the acquire is dropped or fails.
pub(super) struct Entry {
    pub(super) etcd: Etcd,
    pub(super) key: String,
    pub(super) rev: i64,
    pub(super) armed: bool,
}

impl Entry {
    /// Deletes the key now (a busy try-acquire, a refused permits count),
    /// so that the next acquire does not count it; in the background if
    /// that fails.
    pub(super) async fn leave_now(&mut self) {
        if let Ok(true) = self.etcd.delete_if_created(&self.key, self.rev).await {
            self.armed = false;
        }
    }
}

impl Drop for Entry {
    fn drop(&mut self) {
        if self.armed {
            abandon(&self.etcd, std::mem::take(&mut self.key), self.rev);
        }
    }
}
