//! `lock_all` in one step, the recipe's only: every part's key in one
//! transaction on the shared lease, or none. etcd's lock protocol (a lease
//! per acquisition) and sets of more than 64 parts go part by part.

use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp};
use omnilock_core::{AcquireRequest, Error, ErrorKind, Result};

use super::Grant;
use super::base::Base;
use super::detached::put_txn_detached;
use super::hold::grant;
use crate::conn::Etcd;
use crate::queue::{abandon, gets, revision};

/// etcd refuses a transaction of more than 128 operations (its default
/// `--max-txn-ops`); a larger set goes part by part.
const MOST_PARTS: usize = 64;

/// Why a set of locks is not taken in one step: core then takes it part by
/// part.
pub(super) fn part_by_part() -> Error {
    Error::new(
        ErrorKind::Unsupported,
        "this set goes part by part (etcd's Lock RPC, or more than 64 parts)",
    )
}

/// `lock_all`'s one transaction: every part's key, on the shared
/// session's lease, only if every part's range is empty (nobody holds
/// or waits). The parts share the transaction's revision as their
/// create revision, hence as their token. A retried transaction whose
/// first try had succeeded finds our own keys: then they are ours.
pub(super) async fn try_put_all(
    base: &Base,
    requests: &[AcquireRequest],
) -> Result<Option<Vec<Grant>>> {
    let Some(first) = requests.first() else {
        return Ok(Some(Vec::new()));
    };
    if requests.len() > MOST_PARTS {
        return Err(part_by_part());
    }
    let session = base.shared_session(first.ttl).await?;
    let etcd = &base.etcd;
    let parts: Vec<(String, String)> = requests
        .iter()
        .map(|request| {
            let prefix = etcd.lock_prefix(request.name.as_str());
            let key = Etcd::owner_key(&prefix, request.owner.as_str());
            (prefix, key)
        })
        .collect();
    let lease = session.id;
    let txn = Txn::new()
        .when(
            parts
                .iter()
                .map(|(prefix, _)| {
                    Compare::create_revision(prefix.as_str(), CompareOp::Equal, 0).with_prefix()
                })
                .collect::<Vec<_>>(),
        )
        .and_then(
            parts
                .iter()
                .map(|(_, key)| {
                    TxnOp::put(key.as_str(), "1", Some(PutOptions::new().with_lease(lease)))
                })
                .collect::<Vec<_>>(),
        )
        .or_else(
            parts
                .iter()
                .map(|(_, key)| TxnOp::get(key.as_str(), None))
                .collect::<Vec<_>>(),
        );
    let keys = parts.iter().map(|(_, key)| key.clone()).collect();
    let resp = put_txn_detached(etcd, txn, keys).await?;
    let rev = if resp.succeeded() {
        revision(&resp)
    } else {
        // Ours from a first try that succeeded (all of them, as it was
        // one transaction), or none: then the set is busy.
        let mine: Vec<i64> = gets(&resp)
            .filter_map(|kvs| kvs.into_iter().next())
            .filter(|kv| kv.lease() == lease)
            .map(|kv| kv.create_revision())
            .collect();
        match mine.first() {
            Some(&rev) if mine.len() == parts.len() && mine.iter().all(|&r| r == rev) => rev,
            _ => {
                for ((_, key), rev) in parts.iter().zip(mine) {
                    abandon(etcd, key.clone(), rev);
                }
                return Ok(None);
            }
        }
    };
    Ok(Some(
        requests
            .iter()
            .zip(parts)
            .map(|(request, (_, key))| grant(request, key, rev, session.clone(), None))
            .collect(),
    ))
}
