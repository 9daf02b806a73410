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
    Compare, CompareOp, GetOptions, KeyValue, PutOptions, SortOrder, SortTarget, Txn, TxnOp,
    TxnOpResponse, TxnResponse, WatchFilterType, WatchOptions, WatchStream,
};
use omnilock_core::{Backoff, Error, ErrorKind, Result, retry_in_background};

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

/// A confirmed watch ([`Etcd::watch_from_now`]).
pub(crate) struct Watching {
    stream: WatchStream,
    shown: String,
    /// An event came while the watch was being confirmed.
    fired: bool,
}

impl Watching {
    fn fired_already(stream: WatchStream, shown: &str) -> Self {
        Watching {
            stream,
            shown: shown.to_string(),
            fired: true,
        }
    }

    /// Completes at the first event, with the revision etcd had reached
    /// when it sent it; with 0 (unknown: the caller reads the current
    /// state) when etcd ends the watch, e.g. after a compaction, or the
    /// event came before the watch was confirmed.
    pub(crate) async fn fired(&mut self) -> Result<i64> {
        if self.fired {
            return Ok(0);
        }
        loop {
            match self.stream.message().await {
                Ok(Some(resp)) => {
                    let at = resp.header().map(|h| h.revision()).unwrap_or(0);
                    if resp.canceled() {
                        return Ok(0);
                    }
                    if !resp.events().is_empty() {
                        return Ok(at);
                    }
                }
                Ok(None) => return Ok(0),
                Err(e) => return Err(crate::conn::classify(e, &self.shown)),
            }
        }
    }
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
            .call(|mut c| {
                let prefix = prefix.clone();
                async move { c.get(prefix, Some(first_created())).await }
            })
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
            return Err(queue_key_gone());
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
            let waited = tokio::select! {
                waited = self.next_turn(lock_prefix, key, rev, predecessor, seen_at) => waited,
                cause = session.died() => return Err(cause),
            };
            let err = match waited {
                Ok(next) => {
                    backoff.reset();
                    turn = next;
                    continue;
                }
                Err(err) if err.kind() == ErrorKind::LockLost => {
                    return Err(session.death().unwrap_or(err));
                }
                Err(err) if !err.is_retryable() => return Err(err),
                Err(err) => err,
            };
            tracing::debug!(error = %err, "omnilock etcd watch failed; looking again");
            tokio::select! {
                _ = tokio::time::sleep(backoff.next_delay()) => {}
                cause = session.died() => return Err(cause),
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

    /// Waits for `predecessor` (seen ahead of our key at `seen_at`) to go,
    /// then says what is ahead of us now.
    async fn next_turn(
        &self,
        lock_prefix: &str,
        key: &str,
        rev: i64,
        predecessor: Vec<u8>,
        seen_at: i64,
    ) -> Result<Turn> {
        let options = WatchOptions::new().with_filters([WatchFilterType::NoPut]);
        let (mut watch, from) = self.watch_from_now(predecessor.clone(), options).await?;
        if from > seen_at {
            // It may have gone between our read and the watch's start.
            let now = self.turn_at(lock_prefix, key, rev, from).await?;
            match &now {
                Turn::After {
                    predecessor: still, ..
                } if *still == predecessor => {}
                _ => return Ok(now),
            }
        }
        let at = watch.fired().await?;
        self.turn_at(lock_prefix, key, rev, at).await
    }

    /// What was ahead of our key at revision `at`, read from any member
    /// that has reached it (no consensus round: the state at a past
    /// revision is the same on every member), else as [`Self::recheck`]
    /// does. Reading at a past revision is enough: once no key is older
    /// than ours, none can become so, and the lease keeps ours.
    async fn turn_at(&self, lock_prefix: &str, key: &str, rev: i64, at: i64) -> Result<Turn> {
        if at < rev {
            // Unknown (0: a watch etcd ended; revision 0 would mean "this
            // member's latest", which a lagging member serves stale), or
            // before our key existed: a member behind the one we enqueued
            // on can report the deletion of an earlier key of the same
            // name (an owner's key, a reused lease's key) from before it.
            return self.recheck(lock_prefix, key, rev).await;
        }
        let options = GetOptions::new()
            .with_prefix()
            .with_revision(at)
            .with_serializable()
            .with_max_create_revision(rev)
            .with_sort(SortTarget::Create, SortOrder::Descend)
            .with_limit(2)
            .with_keys_only();
        let prefix = lock_prefix.to_string();
        let read = self
            .call(|mut c| {
                let (prefix, options) = (prefix.clone(), options.clone());
                async move { c.get(prefix, Some(options)).await }
            })
            .await;
        let Ok(mut resp) = read else {
            // Most often this member has not applied `at` yet.
            return self.recheck(lock_prefix, key, rev).await;
        };
        let mut kvs = resp.take_kvs().into_iter();
        match kvs.next() {
            Some(mine) if mine.key() == key.as_bytes() && mine.create_revision() == rev => {}
            _ => return Err(queue_key_gone()),
        }
        Ok(match kvs.next() {
            None => Turn::Held,
            Some(kv) => Turn::After {
                predecessor: kv.key().to_vec(),
                seen_at: at,
            },
        })
    }

    /// Opens a watch of `key` from the current revision and waits until
    /// etcd confirms it; it then reports every event after the revision
    /// returned, without delay. A waiter checks the gap between its read
    /// and that revision with one read.
    ///
    /// Why not a start revision: etcd serves a watch that starts at a past
    /// revision from its catch-up loop, which runs every 100 ms, and under
    /// contention the revision a waiter just read is nearly always past.
    /// Why two watchers on the stream: etcd decides "current" before it
    /// registers the watcher, so a write landing in between puts even a
    /// watch from now in the catch-up group (measured: about 1 wait in 60
    /// with 8 clients contending, each costing up to 100 ms). The second
    /// watcher is registered later; both being caught is rare (the stalls
    /// fell from 21-26 to 0-9 per 8 s run). Events come from either.
    pub(crate) async fn watch_from_now(
        &self,
        key: Vec<u8>,
        options: WatchOptions,
    ) -> Result<(Watching, i64)> {
        let classify = |e| crate::conn::classify(e, &self.shown);
        let (again, again_options) = (key.clone(), options.clone());
        let mut stream = self
            .call(|mut c| {
                let (key, options) = (key.clone(), options.clone());
                async move { c.watch(key, Some(options)).await }
            })
            .await?;
        stream
            .watch(again, Some(again_options))
            .await
            .map_err(classify)?;
        let mut from = 0;
        for _ in 0..2 {
            let created = tokio::time::timeout(self.request_timeout, stream.message()).await;
            match created {
                // Events are only reported after the later watcher's
                // revision: the gap read covers up to there.
                Ok(Ok(Some(resp))) if resp.created() && !resp.canceled() => {
                    from = from.max(resp.header().map(|h| h.revision()).unwrap_or(0));
                }
                Ok(Ok(Some(resp))) if !resp.created() && !resp.canceled() => {
                    // An event for the first watcher before the second
                    // is confirmed: the key changed, look again.
                    return Ok((Watching::fired_already(stream, &self.shown), 0));
                }
                Ok(Ok(Some(resp))) => {
                    // Refused (a compacted revision, a missing permission):
                    // say why, the caller looks again.
                    return Err(Error::unavailable(format!(
                        "etcd {} did not start the watch: {}",
                        self.shown,
                        resp.cancel_reason()
                    )));
                }
                Ok(Ok(None)) => {
                    return Err(Error::unavailable(format!(
                        "etcd {} closed the watch stream before starting it",
                        self.shown
                    )));
                }
                Ok(Err(e)) => return Err(classify(e)),
                Err(_) => {
                    return Err(Error::unavailable(format!(
                        "etcd {}: the watch was not confirmed within {:?}",
                        self.shown, self.request_timeout
                    )));
                }
            }
        }
        let watching = Watching {
            stream,
            shown: self.shown.clone(),
            fired: false,
        };
        Ok((watching, from))
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
        self.call(|mut c| {
            let txn = txn.clone();
            async move { c.txn(txn).await }
        })
        .await
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

/// Our queue key is gone: the acquisition cannot go on.
fn queue_key_gone() -> Error {
    Error::new(
        ErrorKind::LockLost,
        "this client's queue key is gone (its lease expired or the lock was broken)",
    )
    .with_retryable(true)
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
pub(crate) fn gets(resp: &TxnResponse) -> impl Iterator<Item = Vec<KeyValue>> + use<> {
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
