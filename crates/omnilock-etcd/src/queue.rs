//! The lock queue in etcd's key space, shared by both modes.
//!
//! A lock named N is the key range `<prefix>/<N>/`. Every contender puts one
//! key there, attached to its lease; keys are ordered by create revision (a
//! global, monotonic counter) and the lowest one holds the lock. A waiter
//! watches only the key just below its own (its predecessor) and looks again
//! when that key is deleted, so a release wakes exactly one waiter. etcd's own
//! Lock RPC uses the same range and order (with lease-ID keys), which is why
//! the two modes, and `etcdctl lock <prefix>/<N>`, exclude one another.

use std::time::Duration;

use etcd_client::{
    Compare, CompareOp, EventType, GetOptions, KeyValue, PutOptions, SortOrder, SortTarget, Txn,
    TxnOp, TxnOpResponse, TxnResponse, WatchFilterType, WatchOptions,
};
use omnilock_core::{retry_in_background, Backoff, Error, ErrorKind, Result};

use crate::conn::Etcd;
use crate::session::Session;

/// What stands between a queued key and the lock.
pub(crate) enum Turn {
    /// Nothing: the key is first, the lock is held.
    Held,
    /// The key created just before ours, and the revision at which it was
    /// seen (watch from the next one so its deletion cannot be missed).
    After { predecessor: Vec<u8>, seen_at: i64 },
}

/// Where an enqueue left us.
pub(crate) enum Enqueued {
    /// Our key, at this revision, with this much ahead of it.
    Mine { rev: i64, turn: Turn },
    /// Our owner already has a key here, on another client's lease.
    Elsewhere { kv: KeyValue, first: bool },
}

impl Etcd {
    /// Puts our key at the end of the queue (or finds the one an earlier,
    /// interrupted attempt put) in one transaction.
    pub(crate) async fn enqueue(
        &self,
        lock_prefix: &str,
        key: &str,
        lease: i64,
    ) -> Result<Enqueued> {
        let txn = Txn::new()
            .when([Compare::create_revision(key, CompareOp::Equal, 0)])
            .and_then([
                TxnOp::put(key, "1", Some(PutOptions::new().with_lease(lease))),
                TxnOp::get(
                    lock_prefix,
                    Some(
                        GetOptions::new()
                            .with_prefix()
                            .with_sort(SortTarget::Create, SortOrder::Descend)
                            .with_limit(2)
                            .with_keys_only(),
                    ),
                ),
            ])
            .or_else([
                TxnOp::get(key, None),
                TxnOp::get(lock_prefix, Some(first_created())),
            ]);
        let resp = self.txn(txn).await?;
        let at = revision(&resp);
        let mut gets = gets(&resp);
        if resp.succeeded() {
            // Newest first: ours, then the one just before it, if any.
            let newest = gets.next().unwrap_or_default();
            let turn = match newest.into_iter().nth(1) {
                None => Turn::Held,
                Some(kv) => Turn::After {
                    predecessor: kv.key().to_vec(),
                    seen_at: at,
                },
            };
            return Ok(Enqueued::Mine { rev: at, turn });
        }
        let mine = gets.next().and_then(|kvs| kvs.into_iter().next());
        let first = gets.next().and_then(|kvs| kvs.into_iter().next());
        let Some(mine) = mine else {
            return Err(Error::unavailable("the queue changed during the enqueue"));
        };
        if mine.lease() == lease {
            // An earlier attempt whose answer was lost did create it.
            let rev = mine.create_revision();
            let turn = self.recheck(lock_prefix, key, rev).await?;
            return Ok(Enqueued::Mine { rev, turn });
        }
        let first = first.is_some_and(|f| f.create_revision() == mine.create_revision());
        Ok(Enqueued::Elsewhere { kv: mine, first })
    }

    /// The oldest key of a lock (its holder), if any.
    pub(crate) async fn holder(&self, lock_prefix: &str) -> Result<Option<KeyValue>> {
        let prefix = lock_prefix.to_string();
        let mut resp = self
            .call(|mut c| async move { c.get(prefix, Some(first_created())).await })
            .await?;
        Ok(resp.take_kvs().into_iter().next())
    }

    /// Looks again at our place: errors with `LockLost` when our key is gone
    /// (lease expired, lock broken), else says whether we hold the lock.
    pub(crate) async fn recheck(&self, lock_prefix: &str, key: &str, rev: i64) -> Result<Turn> {
        let txn = Txn::new()
            .when([Compare::create_revision(key, CompareOp::Equal, rev)])
            .and_then([TxnOp::get(
                lock_prefix,
                Some(
                    GetOptions::new()
                        .with_prefix()
                        .with_max_create_revision(rev - 1)
                        .with_sort(SortTarget::Create, SortOrder::Descend)
                        .with_limit(1)
                        .with_keys_only(),
                ),
            )]);
        let resp = self.txn(txn).await?;
        if !resp.succeeded() {
            return Err(Error::new(
                ErrorKind::LockLost,
                "this client's queue key is gone (its lease expired or the lock was broken)",
            )
            .with_retryable(true));
        }
        let seen_at = revision(&resp);
        Ok(
            match gets(&resp).next().and_then(|kvs| kvs.into_iter().next()) {
                None => Turn::Held,
                Some(kv) => Turn::After {
                    predecessor: kv.key().to_vec(),
                    seen_at,
                },
            },
        )
    }

    /// Waits until our key is first. Cancellation-safe: it only reads.
    pub(crate) async fn wait_turn(
        &self,
        session: &Session,
        lock_prefix: &str,
        key: &str,
        rev: i64,
        mut turn: Turn,
    ) -> Result<()> {
        let mut backoff = Backoff::new(Duration::from_millis(20), Duration::from_secs(1));
        loop {
            let (predecessor, seen_at) = match turn {
                Turn::Held => return Ok(()),
                Turn::After {
                    predecessor,
                    seen_at,
                } => (predecessor, seen_at),
            };
            let watched = tokio::select! {
                watched = self.watch_deletion(predecessor, seen_at + 1) => watched,
                cause = session.died() => return Err(cause),
            };
            if let Err(err) = watched {
                if !err.is_retryable() {
                    return Err(err);
                }
                tracing::debug!(error = %err, "omnilock etcd watch failed; looking again");
                tokio::select! {
                    _ = tokio::time::sleep(backoff.next_delay()) => {}
                    cause = session.died() => return Err(cause),
                }
            } else {
                backoff.reset();
            }
            turn = loop {
                match self.recheck(lock_prefix, key, rev).await {
                    Ok(turn) => break turn,
                    Err(err) if err.kind() == ErrorKind::Unavailable => {
                        if let Some(cause) = session.death() {
                            return Err(cause);
                        }
                        tokio::time::sleep(backoff.next_delay()).await;
                    }
                    Err(err) => return Err(session.death().unwrap_or(err)),
                }
            };
        }
    }

    /// Completes when `key` is deleted at or after revision `from` (also
    /// when etcd cancels the watch, e.g. after a compaction: the caller looks
    /// again either way).
    async fn watch_deletion(&self, key: Vec<u8>, from: i64) -> Result<()> {
        let options = WatchOptions::new()
            .with_start_revision(from)
            .with_filters([WatchFilterType::NoPut]);
        self.watch_once(key, options).await
    }

    /// Waits for the first event `options` select on `key` (a deletion, a
    /// deletion in a range, any change of one key), or for the watch to end.
    pub(crate) async fn watch_once(&self, key: Vec<u8>, options: WatchOptions) -> Result<()> {
        let mut stream = self
            .call(|mut c| async move { c.watch(key, Some(options)).await })
            .await?;
        loop {
            match stream.message().await {
                Ok(Some(resp)) => {
                    if resp.canceled()
                        || resp
                            .events()
                            .iter()
                            .any(|e| matches!(e.event_type(), EventType::Delete | EventType::Put))
                    {
                        return Ok(());
                    }
                }
                Ok(None) => return Ok(()),
                Err(e) => return Err(crate::conn::classify(e, &self.shown)),
            }
        }
    }

    /// Deletes `key` if it is still the one created at `rev`. Returns whether
    /// it was.
    pub(crate) async fn delete_if_created(&self, key: &str, rev: i64) -> Result<bool> {
        let txn = Txn::new()
            .when([Compare::create_revision(key, CompareOp::Equal, rev)])
            .and_then([TxnOp::delete(key, None)]);
        Ok(self.txn(txn).await?.succeeded())
    }

    /// One transaction under the request deadline.
    pub(crate) async fn txn(&self, txn: Txn) -> Result<TxnResponse> {
        self.call(|mut c| async move { c.txn(txn).await }).await
    }
}

/// Deletes a queue key nobody will use, in the background (a dropped
/// acquire must not delay the waiter behind it, nor wait itself).
pub(crate) fn abandon(etcd: &Etcd, key: String, rev: i64) {
    let etcd = etcd.clone();
    retry_in_background(move || {
        let (etcd, key) = (etcd.clone(), key.clone());
        async move { etcd.delete_if_created(&key, rev).await.map(drop) }
    });
}

/// Get options for "the oldest key in the range".
pub(crate) fn first_created() -> GetOptions {
    GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Create, SortOrder::Ascend)
        .with_limit(1)
        .with_keys_only()
}

/// The revision a transaction ran at.
pub(crate) fn revision(resp: &TxnResponse) -> i64 {
    resp.header().map(|h| h.revision()).unwrap_or(0)
}

/// The key-values of each Get in a transaction's answer, in order.
pub(crate) fn gets(resp: &TxnResponse) -> impl Iterator<Item = Vec<KeyValue>> {
    resp.op_responses()
        .into_iter()
        .filter_map(|op| match op {
            TxnOpResponse::Get(mut get) => Some(get.take_kvs()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .into_iter()
}

/// The hold count a queue key stores (1 when the value is not a count, as
/// for keys etcd's Lock RPC puts).
pub(crate) fn hold_count(kv: &KeyValue) -> u64 {
    std::str::from_utf8(kv.value())
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
}
