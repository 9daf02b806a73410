//! Semaphores and read-write locks, in both modes: one key per acquisition
//! in the range `<prefix>/%sem/<name>/` or `<prefix>/%rw/<name>/`, on the
//! shared lease of its TTL, valued `<weight> <capacity> <owner>`.
//!
//! Keys are ordered by create revision (also the fencing token). Walking
//! them from the oldest, a key fits while the weights so far, its own
//! included, are within the capacity; the first that does not fit stops the
//! walk. Keys only ever leave the range or join at its end, so a key that
//! fits keeps fitting: it holds, with no further write. Grants are FIFO and
//! a writer (whose weight is the capacity) holds back every reader behind
//! it.
//!
//! No herd: the first waiter watches the range for deletions (a holder
//! leaving); every later waiter watches only its predecessor, which touches
//! its own key when it is granted after waiting. A release thus wakes the
//! first waiter, and each grant the next one.
//!
//! The count (a semaphore's permits) is in every key, and the oldest key's
//! is in force: a key whose count differs from the oldest's is deleted at
//! once and its acquire fails; a key that agrees with the oldest but has a
//! key of another count before it waits for that key to go. So while any
//! holder or waiter exists, nobody is admitted by another count. A waiter
//! also reads the range again every few seconds without an event.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use etcd_client::{
    Compare, CompareOp, GetOptions, KeyValue, PutOptions, SortOrder, SortTarget, Txn, TxnOp,
    WatchFilterType, WatchOptions,
};
use omnilock_core::{
    AcquireRequest, Backoff, Error, ErrorKind, Primitive, Result, Share, complete_or_undo, retry,
    retry_in_background,
};

use super::Grant;
use super::detached::{Entry, backoff};
use super::hold::grant;
use crate::conn::Etcd;
use crate::queue::{abandon, gets, revision};
use crate::session::Session;

/// How often a waiter reads the range again without an event.
const RECHECK: Duration = Duration::from_secs(5);

/// Makes entry keys unique within this process (the lease makes them
/// unique across processes).
static NEXT_ENTRY: AtomicU64 = AtomicU64::new(0);

/// How one acquisition of a semaphore or read-write lock counts (core's
/// [`Share`]).
pub(super) struct Counted(Share);

impl Counted {
    /// `None` for the mutex.
    pub(super) fn of(primitive: Primitive) -> Option<Counted> {
        primitive.share().map(Counted)
    }

    /// Where the key created at `rev` stands among `entries` (the range's
    /// keys up to it, oldest first).
    fn place(&self, entries: &[KeyValue], rev: i64) -> Result<Place> {
        let capacity = self.0.capacity;
        let count = |kv: &KeyValue| parse(kv).map(|(_, count, _)| count);
        let before = || entries.iter().filter(|kv| kv.create_revision() != rev);
        // The oldest key's count is the one in force: a caller with
        // another is refused.
        if let Some(recorded) = before()
            .next()
            .and_then(count)
            .filter(|recorded| *recorded != capacity)
        {
            return Err(Error::permits_conflict(recorded, capacity));
        }
        // A later key with another count has seen the oldest disagree, so
        // its caller is refused and deletes it (or its lease ends). It is
        // waited for, never admitted past: it stands for a count in
        // dispute, and admitting by ours beside it could exceed the count
        // another holder was promised. (Refusing here refused the callers
        // whose count had won, when callers with two counts came at once.)
        if let Some(disputed) =
            before().rfind(|kv| count(kv).is_some_and(|recorded| recorded != capacity))
        {
            return Ok(Place::Behind {
                predecessor: disputed.key().to_vec(),
                first: false,
            });
        }
        let mut previous: Option<(&KeyValue, bool)> = None;
        for (kv, fits) in entries.iter().zip(fits(entries, self.0.capacity)) {
            if kv.create_revision() == rev {
                if fits {
                    return Ok(Place::Fits);
                }
                let (predecessor, first) = previous
                    .map(|(kv, fits)| (kv.key().to_vec(), fits))
                    .expect("a key that does not fit has one before it");
                return Ok(Place::Behind { predecessor, first });
            }
            previous = Some((kv, fits));
        }
        Err(Error::new(
            ErrorKind::LockLost,
            "this acquisition's key is gone from etcd (its lease expired)",
        )
        .with_retryable(true))
    }
}

/// A key's weight, capacity and owner, as [`acquire`] writes them (`None`
/// if it is not ours to read: it then counts as taking everything, which
/// is safe).
pub(super) fn parse(kv: &KeyValue) -> Option<(u64, u64, &str)> {
    let value = std::str::from_utf8(kv.value()).ok()?;
    let mut parts = value.splitn(3, ' ');
    let weight = parts.next()?.parse().ok()?;
    let capacity = parts.next()?.parse().ok()?;
    Some((weight, capacity, parts.next().unwrap_or_default()))
}

/// Whether each of `entries` (a range's keys, oldest first) holds under
/// `capacity`: its weight and those of every key before it fit, and every
/// key before it holds. Keys only leave the range or join at its end, so
/// a key that holds keeps holding.
pub(super) fn fits(entries: &[KeyValue], capacity: u64) -> impl Iterator<Item = bool> + '_ {
    let mut used = 0u64;
    let mut all_fit = true;
    entries.iter().map(move |kv| {
        let weight = parse(kv).map_or(capacity, |(weight, _, _)| weight);
        used = used.saturating_add(weight);
        all_fit = all_fit && used <= capacity;
        all_fit
    })
}

enum Place {
    Fits,
    /// Waiting behind `predecessor`; `first` when that one holds (then any
    /// holder's leaving may let us in).
    Behind {
        predecessor: Vec<u8>,
        first: bool,
    },
}

impl Place {
    /// Whether this is still waiting behind `predecessor`, as `first` says.
    fn is_behind(&self, predecessor: &[u8], first: bool) -> bool {
        matches!(self, Place::Behind { predecessor: p, first: f } if p == predecessor && *f == first)
    }
}

/// Takes (or, with `wait`, waits for) a semaphore permit or a side of a
/// read-write lock, on `session`, the shared lease of the request's TTL.
pub(super) async fn acquire(
    etcd: &Etcd,
    session: Arc<Session>,
    request: &AcquireRequest,
    wait: bool,
) -> Result<Option<Grant>> {
    let counted = Counted::of(request.primitive).expect("a counted lock");
    let prefix = etcd.counted_prefix(counted.0.family, request.name.as_str());
    let key = format!(
        "{prefix}{:x}-{}",
        session.id,
        NEXT_ENTRY.fetch_add(1, Ordering::Relaxed)
    );
    let value = format!(
        "{} {} {}",
        counted.0.weight, counted.0.capacity, request.owner
    );
    let (rev, mut seen_at, entries) = join(etcd, &prefix, &key, &value, session.id).await?;
    let mut entry = Entry {
        etcd: etcd.clone(),
        key: key.clone(),
        rev,
        armed: true,
    };
    let mut place = match counted.place(&entries, rev) {
        Ok(place) => place,
        Err(err) => {
            // Gone before the error returns: nobody counts it after.
            entry.leave_now().await;
            return Err(err);
        }
    };
    let mut waited = false;
    let mut backoff = Backoff::new(Duration::from_millis(20), Duration::from_secs(1));
    loop {
        let (predecessor, first) = match place {
            Place::Fits => break,
            Place::Behind { predecessor, first } => (predecessor, first),
        };
        if !wait {
            entry.leave_now().await;
            return Ok(None);
        }
        if !waited {
            request.waiting.raise();
            waited = true;
        }
        let (watched_key, options) = if first {
            let options = WatchOptions::new()
                .with_prefix()
                .with_filters([WatchFilterType::NoPut]);
            (prefix.as_bytes().to_vec(), options)
        } else {
            (predecessor.clone(), WatchOptions::new())
        };
        let watched = async {
            let (mut watch, from) = etcd.watch_from_now(watched_key, options).await?;
            if from > seen_at {
                // The range may have moved between our read and the
                // watch's start.
                let (now, entries) = read_up_to(etcd, &prefix, &key, rev).await?;
                let again = counted.place(&entries, rev)?;
                if !again.is_behind(&predecessor, first) {
                    return Ok(Some((now, again)));
                }
            }
            watch.fired().await.map(|_| None)
        };
        // Looked at again now and then even without an event: a
        // predecessor's touch that never landed must not strand us.
        tokio::select! {
            watched = tokio::time::timeout(RECHECK, watched) => {
                match watched {
                    Ok(Ok(Some((now, again)))) => {
                        seen_at = now;
                        place = again;
                        continue;
                    }
                    Ok(Err(err)) if err.kind() == ErrorKind::LockLost => {
                        return Err(session.death().unwrap_or(err));
                    }
                    Ok(Err(err)) => {
                        if !err.is_retryable() {
                            entry.leave_now().await;
                            return Err(err);
                        }
                        tracing::debug!(error = %err, "omnilock etcd watch failed; looking again");
                        tokio::time::sleep(backoff.next_delay()).await;
                    }
                    _ => {}
                }
            }
            cause = session.died() => return Err(cause),
        }
        let (now, entries) = loop {
            match read_up_to(etcd, &prefix, &key, rev).await {
                Ok(read) => break read,
                Err(err) if err.kind() == ErrorKind::Unavailable => {
                    if let Some(cause) = session.death() {
                        return Err(cause);
                    }
                    tokio::time::sleep(backoff.next_delay()).await;
                }
                Err(err) => return Err(session.death().unwrap_or(err)),
            }
        };
        backoff.reset();
        seen_at = now;
        place = match counted.place(&entries, rev) {
            Ok(place) => place,
            Err(err) => {
                // Refused while waiting (a count in dispute): gone before
                // the error returns, as at the first look, so that nobody
                // waits behind a key whose caller has given up.
                entry.leave_now().await;
                return Err(err);
            }
        };
    }
    if waited {
        // The waiter behind us watches our key: tell it we hold now. In
        // the background, so that a caller going away now cannot stop it
        // (nor leave the key with nobody holding it).
        touch_in_background(etcd, &key, rev);
    }
    entry.armed = false;
    Ok(Some(grant(request, key, rev, session, None)))
}

/// Puts our key (once, even if the call is retried) and reads the range
/// up to it in one transaction: our key's create revision, the revision
/// read at, and the keys up to ours, oldest first. If the caller goes
/// away meanwhile, the key is deleted.
async fn join(
    etcd: &Etcd,
    prefix: &str,
    key: &str,
    value: &str,
    lease: i64,
) -> Result<(i64, i64, Vec<KeyValue>)> {
    let range = GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Create, SortOrder::Ascend);
    let txn = Txn::new()
        .when([Compare::create_revision(key, CompareOp::Equal, 0)])
        .and_then([
            TxnOp::put(key, value, Some(PutOptions::new().with_lease(lease))),
            TxnOp::get(prefix, Some(range.clone())),
        ])
        .or_else([TxnOp::get(prefix, Some(range))]);
    let (etcd, undo_etcd) = (etcd.clone(), etcd.clone());
    let (call_key, undo_key) = (key.to_string(), key.to_string());
    complete_or_undo(
        async move {
            let deadline = tokio::time::Instant::now() + etcd.request_timeout * 2;
            let resp = match retry(backoff(), deadline, || etcd.txn(txn.clone())).await {
                Ok(resp) => resp,
                Err(err) => {
                    // A try may have been applied without us hearing
                    // back: the key, unique to this acquisition, would
                    // otherwise sit in the range as long as the lease.
                    delete_in_background(&etcd, &call_key);
                    return Err(err);
                }
            };
            let seen_at = revision(&resp);
            let mut entries = gets(&resp).next().unwrap_or_default();
            let Some(at) = entries
                .iter()
                .position(|kv| kv.key() == call_key.as_bytes())
            else {
                return Err(Error::new(
                    ErrorKind::Backend,
                    "etcd did not keep the semaphore's key",
                ));
            };
            let rev = entries[at].create_revision();
            entries.truncate(at + 1);
            Ok((rev, seen_at, entries))
        },
        move |joined: Result<(i64, i64, Vec<KeyValue>)>| async move {
            if let Ok((rev, _, _)) = joined {
                abandon(&undo_etcd, undo_key, rev);
            }
        },
    )
    .await
}

/// The range's keys up to ours (oldest first) and the revision read at;
/// `LockLost` if ours is gone.
async fn read_up_to(
    etcd: &Etcd,
    prefix: &str,
    key: &str,
    rev: i64,
) -> Result<(i64, Vec<KeyValue>)> {
    let txn = Txn::new()
        .when([Compare::create_revision(key, CompareOp::Equal, rev)])
        .and_then([TxnOp::get(
            prefix,
            Some(
                GetOptions::new()
                    .with_prefix()
                    .with_max_create_revision(rev)
                    .with_sort(SortTarget::Create, SortOrder::Ascend),
            ),
        )]);
    let resp = etcd.txn(txn).await?;
    if !resp.succeeded() {
        return Err(Error::new(
            ErrorKind::LockLost,
            "this acquisition's key is gone from etcd (its lease expired)",
        )
        .with_retryable(true));
    }
    Ok((revision(&resp), gets(&resp).next().unwrap_or_default()))
}

/// Releases a semaphore permit or a side of a read-write lock: deletes
/// its key if it is still the one granted.
pub(super) async fn release(etcd: &Etcd, key: &str, rev: i64) -> Result<()> {
    let deadline = tokio::time::Instant::now() + etcd.request_timeout * 2;
    let mut tries = 0;
    let deleted = retry(backoff(), deadline, || {
        tries += 1;
        etcd.delete_if_created(key, rev)
    })
    .await?;
    // A retry may find the key gone because the first try deleted it.
    if deleted || tries > 1 {
        return Ok(());
    }
    Err(Error::not_owner())
}

/// Rewrites our key's value (same lease, same create revision) so that the
/// waiter watching it looks again; retried over transient errors. If it
/// never lands, that waiter looks again at its periodic re-read.
fn touch_in_background(etcd: &Etcd, key: &str, rev: i64) {
    let (etcd, key) = (etcd.clone(), key.to_string());
    retry_in_background(move || {
        let (etcd, key) = (etcd.clone(), key.clone());
        async move {
            let txn = Txn::new()
                .when([Compare::create_revision(
                    key.as_str(),
                    CompareOp::Equal,
                    rev,
                )])
                .and_then([TxnOp::put(
                    key.as_str(),
                    "",
                    Some(PutOptions::new().with_ignore_value().with_ignore_lease()),
                )]);
            etcd.txn(txn).await.map(drop)
        }
    });
}

/// Deletes `key` (unique to one acquisition), retried over transient
/// errors.
fn delete_in_background(etcd: &Etcd, key: &str) {
    let (etcd, key) = (etcd.clone(), key.to_string());
    retry_in_background(move || {
        let (etcd, key) = (etcd.clone(), key.clone());
        async move {
            etcd.call(|mut c| {
                let key = key.clone();
                async move { c.delete(key, None).await }
            })
            .await
            .map(drop)
        }
    });
}
