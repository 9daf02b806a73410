//! Inspection on one master: who holds a lock of each kind and who waits
//! (one read-only script per lock, a consistent snapshot), and the held
//! locks under a name prefix (`SCAN` of every master, then each lock found
//! read as an inspection reads it).
//!
//! No key carries a time of acquisition: a holder's `since` is read from
//! its fencing token, which the scripts draw above the server's clock in
//! microseconds (`next_token` in `lua/common.lua`), so a token is the
//! server's clock at the grant plus one, unless the fence counter was ahead
//! of the clock then (the clock stepped back, or a failover to a master
//! whose clock is behind): `since` may then read late, and a token ahead of
//! the server's clock now gives none.

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::stream::{self, StreamExt, TryStreamExt};
use omnilock_core::{
    Error, Held, Inspection, Listed, LockKind, LockName, Owner, RW_CAPACITY, Result, Side, Waiting,
};

use super::RedisStore;
use crate::scripts::inspect::CountedView;
use crate::scripts::keys::{CountedKeys, family};

/// How many locks found by a listing are read at once.
const READS_AT_ONCE: usize = 32;

impl RedisStore {
    /// Lock `kind` of `name` as [`omnilock_core::Backend::inspect`] reports
    /// it.
    pub(super) async fn inspect_lock(&self, name: &LockName, kind: LockKind) -> Result<Inspection> {
        match family(kind) {
            None => self.inspect_mutex(name).await,
            Some(family) => {
                let keys = CountedKeys::new(&self.inner.options.prefix, name.as_str(), family);
                let view = self.read_counted(&keys).await?;
                counted_inspection(name, kind, view)
            }
        }
    }

    async fn inspect_mutex(&self, name: &LockName) -> Result<Inspection> {
        let inner = &self.inner;
        let keys = self.keys(name);
        let mut conn = inner.node.conn_for(&keys.lock);
        let view = inner
            .scripts
            .inspect(&mut conn, &keys)
            .await
            .map_err(|e| inner.node.err(e))?;
        let mut seen = Inspection::free(name.as_str(), LockKind::Mutex);
        if let Some(holder) = view.holder {
            seen.holders.push(
                Held::new(Owner::new(&holder.owner)?, holder.token, Side::Exclusive)
                    .since(since(holder.token, view.now_us))
                    .lease_left(holder.lease_left),
            );
        }
        // A mutex's line keeps each waiter's entry, not its owner.
        seen.waiters = Some(
            view.waiters
                .iter()
                .map(|_| Waiting::new(None, Side::Exclusive))
                .collect(),
        );
        Ok(seen)
    }

    /// The live entries of a semaphore or read-write lock, read in one
    /// script run on its master.
    pub(super) async fn read_counted(&self, keys: &CountedKeys) -> Result<CountedView> {
        let inner = &self.inner;
        let mut conn = inner.node.conn_for(&keys.lock);
        inner
            .scripts
            .inspect_counted(&mut conn, keys)
            .await
            .map_err(|e| inner.node.err(e))
    }

    /// The locks with holders whose names start with `prefix`: the keys
    /// under it on every master, each lock then read (a key outlives its
    /// holders by a little, and a lease that ran out is no holder).
    pub(super) async fn list_locks(&self, prefix: &str) -> Result<Vec<Listed>> {
        let inner = &self.inner;
        let scans = inner.node.masters().await?.into_iter().map(|mut conn| {
            let key_prefix = &inner.options.prefix;
            async move { crate::scan::locks_under(&mut conn, key_prefix, prefix).await }
        });
        let mut found: BTreeSet<(LockName, LockKind)> = BTreeSet::new();
        for scanned in futures_util::future::join_all(scans).await {
            found.extend(scanned.map_err(|e| inner.node.err(e))?);
        }
        let held: Vec<Option<Listed>> = stream::iter(found)
            .map(|(name, kind)| async move {
                let seen = self.inspect_lock(&name, kind).await?;
                Ok::<_, Error>((!seen.is_free()).then(|| Listed::new(name.as_str(), kind)))
            })
            .buffered(READS_AT_ONCE)
            .try_collect()
            .await?;
        Ok(held.into_iter().flatten().collect())
    }
}

/// A semaphore's or read-write lock's entries as an inspection: holders by
/// token (the order of their grants), waiters in line order, a semaphore's
/// recorded permits while it has entries.
fn counted_inspection(name: &LockName, kind: LockKind, view: CountedView) -> Result<Inspection> {
    let mut seen = Inspection::free(name.as_str(), kind);
    if kind == LockKind::Semaphore && !view.entries.is_empty() {
        seen.permits = view.capacity.and_then(|c| u32::try_from(c).ok());
    }
    let mut waiters = Vec::new();
    for entry in &view.entries {
        let side = match kind {
            LockKind::Semaphore => Side::Permit,
            _ if entry.weight >= RW_CAPACITY => Side::Write,
            _ => Side::Read,
        };
        let owner = Owner::new(&entry.owner)?;
        if entry.holding {
            seen.holders.push(
                Held::new(owner, entry.token, side)
                    .since(since(entry.token, view.now_us))
                    .lease_left(Some(entry.time_left)),
            );
        } else {
            waiters.push(Waiting::new(Some(owner), side));
        }
    }
    seen.holders.sort_by_key(|held| held.token);
    seen.waiters = Some(waiters);
    Ok(seen)
}

/// When a hold with `token` began by the server's clock (see the module's
/// notes): `None` for a token ahead of the server's clock now, which was
/// not drawn from it.
fn since(token: u64, now_us: u64) -> Option<SystemTime> {
    let at = token.checked_sub(1)?;
    (at <= now_us).then(|| UNIX_EPOCH + Duration::from_micros(at))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_reads_the_token_as_the_clock() {
        let now = 1_700_000_000_000_000;
        assert_eq!(
            since(now - 5_000_000 + 1, now),
            Some(UNIX_EPOCH + Duration::from_micros(now - 5_000_000))
        );
        assert_eq!(since(now + 2, now), None);
        assert_eq!(since(0, now), None);
    }
}
