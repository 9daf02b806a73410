//! What an operator reads and does, in both modes: a lock's holders and
//! waiters ([`mutex`], [`counted`]), the held locks under a name prefix
//! ([`list`]), and removing a semaphore's or read-write lock's holds
//! ([`break_holds`]).
//!
//! Everything is read from the lock's key range in create-revision order
//! (the queue's order), then each distinct lease is asked how long it has
//! left (`LeaseTimeToLive`): a key whose lease ran out holds nothing, even
//! before etcd deletes it. etcd keeps no wall-clock time of a key's
//! creation, so no holder has a `since`.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use etcd_client::{
    Compare, CompareOp, GetOptions, KeyValue, SortOrder, SortTarget, Txn, TxnOp, TxnOpResponse,
};
use omnilock_core::{
    Error, ErrorKind, Held as Holding, Inspection, Listed, LockKind, LockName, Owner, Primitive,
    Result, Side, Waiting,
};

use super::counted::{fits, parse};
use crate::conn::{Etcd, unsegment};
use crate::queue::gets;

/// Lease lookups in flight at once.
const LOOKUPS: usize = 32;

/// Keys removed by one `Txn` of [`break_holds`] (etcd allows 128
/// operations in one).
const BREAK_BATCH: usize = 64;

/// The mutex `name` as omnilock's recipe queues it: the oldest live key
/// holds, the others wait in line. The recipe's keys name their owners;
/// a key of etcd's lock protocol (named after its lease) shows as the
/// owner `lease:<hex>`.
pub(super) async fn mutex(etcd: &Etcd, name: &LockName) -> Result<Inspection> {
    let lock_prefix = etcd.lock_prefix(name.as_str());
    let options = GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Create, SortOrder::Ascend)
        .with_keys_only();
    let range = lock_prefix.clone();
    let kvs = etcd
        .call(|mut c| {
            let (range, options) = (range.clone(), options.clone());
            async move { c.get(range, Some(options)).await }
        })
        .await?
        .take_kvs();
    let leases = leases_left(etcd, &kvs).await?;
    let mut seen = Inspection::free(name.as_str(), LockKind::Mutex);
    let mut waiters = Vec::new();
    for kv in kvs.iter().filter(|kv| leases.alive(kv)) {
        let key = String::from_utf8_lossy(kv.key());
        let owner = key_owner(&lock_prefix, &key)?;
        if seen.holders.is_empty() {
            seen.holders.push(
                Holding::new(owner, kv.create_revision() as u64, Side::Exclusive)
                    .lease_left(leases.left(kv)),
            );
        } else {
            waiters.push(Waiting::new(Some(owner), Side::Exclusive));
        }
    }
    seen.waiters = Some(waiters);
    Ok(seen)
}

/// The owner a mutex key of the range `lock_prefix` names: the recipe's
/// `o:<owner>`, or `lease:<hex>` for a key of etcd's lock protocol.
pub(super) fn key_owner(lock_prefix: &str, key: &str) -> Result<Owner> {
    let named = key
        .strip_prefix(lock_prefix)
        .and_then(|k| k.strip_prefix("o:"))
        .and_then(unsegment)
        .and_then(|owner| Owner::new(&owner).ok());
    match named {
        Some(owner) => Ok(owner),
        None => Owner::new(&format!("lease:{}", key.rsplit('/').next().unwrap_or("?"))),
    }
}

/// The semaphore or read-write lock `name` (by `kind`).
pub(super) async fn counted(etcd: &Etcd, name: &LockName, kind: LockKind) -> Result<Inspection> {
    let (permits, entries) = read_counted(etcd, name, kind).await?;
    let mut seen = Inspection::free(name.as_str(), kind);
    if kind == LockKind::Semaphore {
        seen.permits = permits.and_then(|permits| u32::try_from(permits).ok());
    }
    let mut waiters = Vec::new();
    for entry in entries {
        if entry.holds {
            seen.holders.push(
                Holding::new(entry.owner, entry.token, entry.side).lease_left(entry.lease_left),
            );
        } else {
            waiters.push(Waiting::new(Some(entry.owner), entry.side));
        }
    }
    seen.waiters = Some(waiters);
    Ok(seen)
}

/// One live key of a semaphore or read-write lock.
struct Entry {
    key: Vec<u8>,
    token: u64,
    owner: Owner,
    side: Side,
    holds: bool,
    lease_left: Option<Duration>,
}

/// The live keys of the semaphore or read-write lock `name`, oldest first,
/// and the count they agree on (the oldest's: a key with another count is
/// on its way out, its acquire refused, and is left out).
async fn read_counted(
    etcd: &Etcd,
    name: &LockName,
    kind: LockKind,
) -> Result<(Option<u64>, Vec<Entry>)> {
    let family = family(kind)?;
    let prefix = etcd.counted_prefix(family, name.as_str());
    let options = GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Create, SortOrder::Ascend);
    let kvs = etcd
        .call(|mut c| {
            let (prefix, options) = (prefix.clone(), options.clone());
            async move { c.get(prefix, Some(options)).await }
        })
        .await?
        .take_kvs();
    let leases = leases_left(etcd, &kvs).await?;
    let mut live: Vec<KeyValue> = kvs.into_iter().filter(|kv| leases.alive(kv)).collect();
    let capacity = live.iter().find_map(|kv| parse(kv).map(|(_, c, _)| c));
    let Some(capacity) = capacity else {
        return Ok((None, Vec::new()));
    };
    live.retain(|kv| parse(kv).is_none_or(|(_, c, _)| c == capacity));
    let holds: Vec<bool> = fits(&live, capacity).collect();
    let mut entries = Vec::with_capacity(live.len());
    for (kv, holds) in live.iter().zip(holds) {
        let parsed = parse(kv);
        let weight = parsed.map_or(capacity, |(w, _, _)| w);
        let owner = match parsed.and_then(|(_, _, o)| Owner::new(o).ok()) {
            Some(owner) => owner,
            None => {
                let key = String::from_utf8_lossy(kv.key());
                Owner::new(&format!("key:{}", key.rsplit('/').next().unwrap_or("?")))?
            }
        };
        let side = match kind {
            LockKind::Semaphore => Side::Permit,
            _ if weight >= capacity => Side::Write,
            _ => Side::Read,
        };
        entries.push(Entry {
            key: kv.key().to_vec(),
            token: kv.create_revision() as u64,
            owner,
            side,
            holds,
            lease_left: leases.left(kv),
        });
    }
    Ok((Some(capacity), entries))
}

/// The key family (`sem`, `rw`) of a semaphore's or read-write lock's
/// range.
fn family(kind: LockKind) -> Result<&'static str> {
    let primitive = match kind {
        LockKind::Semaphore => Primitive::Semaphore { permits: 1 },
        LockKind::RwLock => Primitive::Read,
        other => {
            return Err(Error::new(
                ErrorKind::Unsupported,
                format!("no {other} is counted"),
            ));
        }
    };
    Ok(primitive.share().expect("a counted primitive").family)
}

/// Deletes the keys that hold the semaphore or read-write lock `name` (by
/// `kind`), only `owner`'s where given, each if it is still the key read;
/// how many were deleted. Waiters stay: the first watches the range for
/// deletions and is admitted as room frees; a broken holder learns at its
/// next renewal, which finds its key gone.
pub(super) async fn break_holds(
    etcd: &Etcd,
    name: &LockName,
    kind: LockKind,
    owner: Option<&Owner>,
) -> Result<usize> {
    let (_, entries) = read_counted(etcd, name, kind).await?;
    let doomed: Vec<Entry> = entries
        .into_iter()
        .filter(|e| e.holds && owner.is_none_or(|owner| &e.owner == owner))
        .collect();
    let mut broken = 0;
    for batch in doomed.chunks(BREAK_BATCH) {
        let ops: Vec<TxnOp> = batch
            .iter()
            .map(|e| {
                let key = e.key.clone();
                TxnOp::txn(
                    Txn::new()
                        .when([Compare::create_revision(
                            key.clone(),
                            CompareOp::Equal,
                            e.token as i64,
                        )])
                        .and_then([TxnOp::delete(key, None)]),
                )
            })
            .collect();
        let resp = etcd.txn(Txn::new().and_then(ops)).await?;
        broken += resp
            .op_responses()
            .into_iter()
            .filter(|op| matches!(op, TxnOpResponse::Txn(done) if done.succeeded()))
            .count();
    }
    Ok(broken)
}

/// The locks with holders whose names start with `prefix`: the mutex,
/// semaphore and read-write lock ranges under it, read keys-only in one
/// `Txn` (a name's encoding keeps its prefixes, so each is one range),
/// then the leases of their keys looked up. A lock is held while its range
/// has a live key: the oldest always holds.
pub(super) async fn list(etcd: &Etcd, prefix: &str) -> Result<Vec<Listed>> {
    let root = format!("{}/", etcd.prefix);
    let ranges: Vec<String> = if prefix.is_empty() {
        vec![root.clone()]
    } else {
        let mut ranges = vec![etcd.lock_prefix(prefix)];
        for kind in [LockKind::Semaphore, LockKind::RwLock] {
            ranges.push(etcd.counted_prefix(family(kind)?, prefix));
        }
        // Without the trailing `/`: names that go on after the prefix.
        for range in &mut ranges {
            range.pop();
        }
        ranges
    };
    let options = GetOptions::new().with_prefix().with_keys_only();
    let ops: Vec<TxnOp> = ranges
        .into_iter()
        .map(|range| TxnOp::get(range, Some(options.clone())))
        .collect();
    let resp = etcd.txn(Txn::new().and_then(ops)).await?;
    // Records are no locks (only the whole root, an empty prefix, holds them).
    let records = etcd.records_prefix();
    let kvs: Vec<KeyValue> = gets(&resp)
        .flatten()
        .filter(|kv| !kv.key().starts_with(records.as_bytes()))
        .collect();
    let leases = leases_left(etcd, &kvs).await?;
    let families = [
        (
            format!("%{}/", family(LockKind::Semaphore)?),
            LockKind::Semaphore,
        ),
        (format!("%{}/", family(LockKind::RwLock)?), LockKind::RwLock),
    ];
    let mut listed = BTreeSet::new();
    for kv in kvs.iter().filter(|kv| leases.alive(kv)) {
        let key = String::from_utf8_lossy(kv.key());
        let Some(rest) = key.strip_prefix(&root) else {
            continue;
        };
        let (kind, rest) = families
            .iter()
            .find_map(|(family, kind)| rest.strip_prefix(family.as_str()).map(|r| (*kind, r)))
            .unwrap_or((LockKind::Mutex, rest));
        let Some((segment, _)) = rest.split_once('/') else {
            continue;
        };
        if let Some(name) = unsegment(segment).filter(|n| n.starts_with(prefix)) {
            listed.insert(Listed::new(name, kind));
        }
    }
    Ok(listed.into_iter().collect())
}

/// How long each lease of some keys has left, as etcd answers now.
struct Leases(HashMap<i64, Duration>);

impl Leases {
    /// Whether `kv` still counts: its lease has time left (or it has none).
    fn alive(&self, kv: &KeyValue) -> bool {
        kv.lease() == 0 || self.0.contains_key(&kv.lease())
    }

    /// How long `kv`'s lease has left, if it has one.
    fn left(&self, kv: &KeyValue) -> Option<Duration> {
        self.0.get(&kv.lease()).copied()
    }
}

/// Asks etcd how long each distinct lease of `kvs` has left (the holds of
/// one client share a lease per TTL, so this is one lookup per client),
/// a few lookups side by side. A lease etcd no longer has (TTL -1) ran out.
async fn leases_left(etcd: &Etcd, kvs: &[KeyValue]) -> Result<Leases> {
    let mut distinct: Vec<i64> = kvs
        .iter()
        .map(KeyValue::lease)
        .filter(|l| *l != 0)
        .collect();
    distinct.sort_unstable();
    distinct.dedup();
    let mut left = HashMap::new();
    for batch in distinct.chunks(LOOKUPS) {
        let mut lookups = tokio::task::JoinSet::new();
        for &lease in batch {
            let etcd = etcd.clone();
            lookups.spawn(async move {
                let resp = etcd
                    .call(|mut c| async move { c.lease_time_to_live(lease, None).await })
                    .await?;
                Ok::<_, Error>((lease, resp.ttl()))
            });
        }
        while let Some(joined) = lookups.join_next().await {
            let (lease, ttl) = joined.map_err(|e| {
                Error::new(ErrorKind::Backend, format!("a lease lookup failed: {e}"))
            })??;
            if let Ok(ttl) = u64::try_from(ttl) {
                left.insert(lease, Duration::from_secs(ttl));
            }
        }
    }
    Ok(Leases(left))
}
