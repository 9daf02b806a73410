//! A grant and what it carries ([`Held`]), in both modes: making it, giving
//! a mutex back, and renewing one hold or many. A hold lives as long as its
//! key does; the key lives as long as its lease, which the session keeps
//! alive.

use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_client::{Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp};
use omnilock_core::{AcquireRequest, Error, ErrorKind, LockSpec, Result};

use super::Grant;
use super::detached::backoff;
use crate::conn::Etcd;
use crate::queue::{gets, hold_count};
use crate::session::Session;

/// Holds checked by one renewal `Txn` at most.
const RENEW_BATCH: usize = 64;

/// What an etcd grant carries to release and renew it: its key and the
/// key's create revision, which [`crate::is_owner`] compares.
pub struct Held {
    pub(super) key: String,
    pub(super) rev: i64,
    pub(super) session: Arc<Session>,
    pub(super) ticket: u64,
    /// Set when the key lives on another client's lease: the same owner
    /// re-entered a lock it holds in another process.
    pub(super) foreign_lease: Option<i64>,
}

impl Held {
    /// The key this hold acquired, in full (with the store's prefix).
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The revision at which the key was created: while the key exists
    /// with it, the hold is the lock's.
    pub fn create_revision(&self) -> i64 {
        self.rev
    }
}

/// The grant of the key created at `rev` on `session`'s lease (or, with
/// `foreign`, on another client's lease, valid until the instant given).
pub(super) fn grant(
    request: &AcquireRequest,
    key: String,
    rev: i64,
    session: Arc<Session>,
    foreign: Option<(i64, Instant)>,
) -> Grant {
    let ticket = session.register(&request.lost);
    let valid_until = match foreign {
        Some((_, until)) => until.min(session.safe_until()),
        None => session.safe_until(),
    };
    omnilock_core::Grant::new(rev as u64, valid_until).with_hold(Held {
        key,
        rev,
        session,
        ticket,
        foreign_lease: foreign.map(|(lease, _)| lease),
    })
}

/// Gives one hold of a mutex back: deletes the key on its last hold,
/// counts one hold down otherwise; `NotOwner` if the key is gone.
pub(super) async fn release_mutex(etcd: &Etcd, held: &Held) -> Result<()> {
    let key = held.key.as_str();
    let mut uncertain = false;
    let mut backoff = backoff();
    let deadline = tokio::time::Instant::now() + etcd.request_timeout * 2;
    loop {
        // The common case in one round trip: the last hold goes.
        let txn = Txn::new()
            .when([
                Compare::create_revision(key, CompareOp::Equal, held.rev),
                Compare::value(key, CompareOp::Equal, "1"),
            ])
            .and_then([TxnOp::delete(key, None)])
            .or_else([TxnOp::get(key, None)]);
        let resp = match etcd.txn(txn).await {
            Ok(resp) => resp,
            Err(e) if e.is_retryable() && tokio::time::Instant::now() < deadline => {
                uncertain = true;
                tokio::time::sleep(backoff.next_delay()).await;
                continue;
            }
            Err(e) => return Err(e),
        };
        if resp.succeeded() {
            break;
        }
        let kv = gets(&resp)
            .next()
            .and_then(|kvs| kvs.into_iter().next())
            .filter(|kv| kv.create_revision() == held.rev);
        let Some(kv) = kv else {
            // Gone: taken over, expired or broken, unless it was our own
            // earlier attempt that deleted it.
            if uncertain {
                break;
            }
            return Err(Error::not_owner());
        };
        let count = hold_count(&kv);
        if count <= 1 {
            // A key of etcd's lock protocol (empty value) or a count
            // changed under us.
            if etcd.delete_if_created(key, held.rev).await? {
                break;
            }
            continue;
        }
        let txn = Txn::new()
            .when([Compare::mod_revision(
                key,
                CompareOp::Equal,
                kv.mod_revision(),
            )])
            .and_then([TxnOp::put(
                key,
                (count - 1).to_string(),
                Some(PutOptions::new().with_ignore_lease()),
            )]);
        if etcd.txn(txn).await?.succeeded() {
            break;
        }
    }
    Ok(())
}

/// Checks that the hold's key is still there and answers until when it is
/// known to stay.
pub(super) async fn renew(etcd: &Etcd, spec: &LockSpec, grant: &Grant) -> Result<Instant> {
    let held = &grant.hold;
    if let Some(cause) = held.session.death() {
        return Err(cause.with_retryable(false));
    }
    let key = held.key.clone();
    let resp = etcd
        .call(|mut c| {
            let key = key.clone();
            async move { c.get(key, None).await }
        })
        .await?;
    let present = resp
        .kvs()
        .first()
        .is_some_and(|kv| kv.create_revision() == held.rev);
    if !present {
        return Err(key_gone());
    }
    match held.foreign_lease {
        Some(lease) => Ok(foreign_valid_until(etcd, lease, spec.ttl)
            .await?
            .min(held.session.safe_until())),
        None => Ok(held.session.safe_until()),
    }
}

/// Holds on this client's own lease (the usual case) are checked up to
/// 64 per `Txn` (etcd allows 128 operations in one); the lease itself
/// is kept alive by the session. Others are renewed each on its own.
pub(super) async fn renew_all(etcd: &Etcd, holds: &[(&LockSpec, &Grant)]) -> Vec<Result<Instant>> {
    let mut results: Vec<Option<Result<Instant>>> = holds.iter().map(|_| None).collect();
    let own: Vec<(usize, &Held)> = holds
        .iter()
        .enumerate()
        .filter_map(|(i, (_, grant))| {
            let held = &grant.hold;
            (held.foreign_lease.is_none() && held.session.death().is_none()).then_some((i, held))
        })
        .collect();
    for batch in own.chunks(RENEW_BATCH) {
        let ops: Vec<TxnOp> = batch
            .iter()
            .map(|(_, held)| TxnOp::get(held.key.clone(), Some(GetOptions::new().with_keys_only())))
            .collect();
        let checked = etcd.txn(Txn::new().and_then(ops)).await;
        let found: Vec<Vec<etcd_client::KeyValue>> = match &checked {
            Ok(resp) => gets(resp).collect(),
            Err(_) => Vec::new(),
        };
        for (n, (i, held)) in batch.iter().enumerate() {
            results[*i] = Some(match &checked {
                Err(err) => Err(err.clone()),
                Ok(_) => {
                    let present = found
                        .get(n)
                        .and_then(|kvs| kvs.first())
                        .is_some_and(|kv| kv.create_revision() == held.rev);
                    if present {
                        Ok(held.session.safe_until())
                    } else {
                        Err(key_gone())
                    }
                }
            });
        }
    }
    for (i, (spec, grant)) in holds.iter().enumerate() {
        if results[i].is_none() {
            results[i] = Some(renew(etcd, spec, grant).await);
        }
    }
    results.into_iter().flatten().collect()
}

/// Until when a key on another client's lease is known to stay.
pub(super) async fn foreign_valid_until(etcd: &Etcd, lease: i64, ttl: Duration) -> Result<Instant> {
    let sent = Instant::now();
    let resp = etcd
        .call(|mut c| async move { c.lease_time_to_live(lease, None).await })
        .await?;
    if resp.ttl() <= 0 {
        return Err(Error::new(
            ErrorKind::LockLost,
            "the holder's lease expired",
        ));
    }
    Ok(sent + ttl.min(Duration::from_secs(resp.ttl() as u64)))
}

/// A renewal found the hold's key gone, or another in its place.
fn key_gone() -> Error {
    Error::new(
        ErrorKind::LockLost,
        "the lock's key is gone from etcd (lease expired or lock broken)",
    )
}
