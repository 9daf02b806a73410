//! An operator's reads of the lock tables (`Locks::inspect`,
//! `Locks::list`): a mutex's row and, in fair mode, its line of tickets; a
//! semaphore's or read-write lock's entries; the held names under a
//! prefix. Each is one statement (see `queries/inspect.rs`), so one
//! consistent look; none writes, and none touches the lock path.
//!
//! Leases are read by the database's clock, and a lease that ran out is no
//! holder even before anyone purges its row. The tables keep no time of
//! acquisition (`updated_at` moves with every renewal), so `since` is
//! `None`.

use std::time::Duration;

use omnilock_core::{
    Held, Inspection, Listed, LockKind, LockName, Owner, Primitive, Result, Side, Waiting,
};
use sqlx::Row;

use super::TableStore;
use super::counted::family;
use crate::conn::{query, with_pool};
use crate::queries::{Args, Inspect, MUTEX_KIND, Statement, prefix_end};

impl TableStore {
    /// What the tables know about lock `kind` of `name` now.
    pub(crate) async fn inspect_lock(&self, name: &LockName, kind: LockKind) -> Result<Inspection> {
        match family(kind) {
            Some(family) => self.inspect_entries(name, kind, family).await,
            None => self.inspect_row(name).await,
        }
    }

    /// The mutex: its row's live holder and, in fair mode, the live
    /// tickets of its line in the order they will be served. Without the
    /// line, waiters poll and leave no trace: `waiters` is `None`.
    async fn inspect_row(&self, name: &LockName) -> Result<Inspection> {
        let args = Args {
            name: name.as_str(),
            ..Args::default()
        };
        let err = |e| self.err(e);
        let rows: Vec<(i64, String, i64, Option<i64>)> = with_pool!(self.pool(), p => {
            let rows = query(&self.queries().inspect.mutex, &args)
                .fetch_all(p)
                .await
                .map_err(err)?;
            rows.iter()
                .map(|row| {
                    Ok((
                        row.try_get(0)?,
                        row.try_get(1)?,
                        row.try_get(2)?,
                        row.try_get(3)?,
                    ))
                })
                .collect::<std::result::Result<_, sqlx::Error>>()
                .map_err(err)?
        });
        let fair = self.config().fair;
        let mut seen = Inspection::free(name.as_str(), LockKind::Mutex);
        seen.waiters = fair.then(Vec::new);
        seen.waiters_ordered = fair;
        for (place, owner, token, left_ms) in rows {
            let owner = Owner::new(&owner)?;
            if place == 0 {
                seen.holders.push(
                    Held::new(owner, token as u64, Side::Exclusive).lease_left(left_ms.map(lease)),
                );
            } else if let Some(waiters) = &mut seen.waiters {
                waiters.push(Waiting::new(Some(owner), Side::Exclusive));
            }
        }
        Ok(seen)
    }

    /// A semaphore or read-write lock: its live entries in id order, the
    /// holding ones its holders (the id the token), the others its waiters
    /// in the order the grant rule admits them. Recorded in every mode.
    async fn inspect_entries(
        &self,
        name: &LockName,
        kind: LockKind,
        family: &str,
    ) -> Result<Inspection> {
        let args = Args {
            family,
            name: name.as_str(),
            ..Args::default()
        };
        let err = |e| self.err(e);
        type Entry = (i64, String, i64, i64, i64, i64);
        let rows: Vec<Entry> = with_pool!(self.pool(), p => {
            let rows = query(&self.queries().inspect.entries, &args)
                .fetch_all(p)
                .await
                .map_err(err)?;
            rows.iter()
                .map(|row| {
                    Ok((
                        row.try_get(0)?,
                        row.try_get(1)?,
                        row.try_get(2)?,
                        row.try_get(3)?,
                        row.try_get(4)?,
                        row.try_get(5)?,
                    ))
                })
                .collect::<std::result::Result<_, sqlx::Error>>()
                .map_err(err)?
        });
        let writer = Primitive::Write.share().map(|share| share.weight as i64);
        let mut seen = Inspection::free(name.as_str(), kind);
        let mut waiters = Vec::new();
        for (id, owner, weight, capacity, holding, left_ms) in rows {
            let side = match kind {
                LockKind::Semaphore => {
                    seen.permits = u32::try_from(capacity).ok();
                    Side::Permit
                }
                _ if Some(weight) == writer => Side::Write,
                _ => Side::Read,
            };
            let owner = Owner::new(&owner)?;
            if holding == 1 {
                seen.holders
                    .push(Held::new(owner, id as u64, side).lease_left(Some(lease(left_ms))));
            } else {
                waiters.push(Waiting::new(Some(owner), side));
            }
        }
        seen.waiters = Some(waiters);
        Ok(seen)
    }

    /// The locks of every kind with a live holder whose names start with
    /// `prefix`: one statement over the lock table and the entries, by a
    /// range of names (see [`prefix_end`]).
    pub(crate) async fn list_held(&self, prefix: &str) -> Result<Vec<Listed>> {
        let rows = self
            .names_under(&self.queries().inspect.held, prefix)
            .await?;
        Ok(rows
            .into_iter()
            .filter_map(|mut row| {
                let (name, kind) = (row.pop()?, row.pop()?);
                let kind = [LockKind::Semaphore, LockKind::RwLock]
                    .into_iter()
                    .find(|k| family(*k) == Some(kind.as_str()))
                    .or((kind == MUTEX_KIND).then_some(LockKind::Mutex))?;
                Some(Listed::new(name, kind))
            })
            .collect())
    }

    /// The names starting with `prefix` whose lock rows record an owner,
    /// held or not: advisory mode's candidates, whose holds are the
    /// database sessions' (see `advisory/inspect.rs`).
    pub(crate) async fn owned_names(&self, prefix: &str) -> Result<Vec<String>> {
        let rows = self
            .names_under(&self.queries().inspect.owned, prefix)
            .await?;
        Ok(rows.into_iter().filter_map(|mut row| row.pop()).collect())
    }

    /// The rows (each a list of text columns, the name last) of the one
    /// of `pair` that reads the range of names starting with `prefix`.
    async fn names_under(&self, pair: &[Statement; 2], prefix: &str) -> Result<Vec<Vec<String>>> {
        let end = prefix_end(prefix);
        let args = Args {
            range_start: prefix,
            range_end: end.as_deref().unwrap_or_default(),
            ..Args::default()
        };
        let statement = Inspect::range(pair, end.as_deref());
        let err = |e| self.err(e);
        let rows: Vec<Vec<String>> = with_pool!(self.pool(), p => {
            let rows = query(statement, &args).fetch_all(p).await.map_err(err)?;
            rows.iter()
                .map(|row| (0..row.len()).map(|i| row.try_get(i)).collect())
                .collect::<std::result::Result<_, sqlx::Error>>()
                .map_err(err)?
        });
        // The range is exact; this only guards what a name must start with.
        Ok(rows
            .into_iter()
            .filter(|row| row.last().is_some_and(|name| name.starts_with(prefix)))
            .collect())
    }
}

/// A lease left in milliseconds, as a duration: at least a millisecond,
/// since the row was read as live.
fn lease(left_ms: i64) -> Duration {
    Duration::from_millis(left_ms.max(1) as u64)
}
