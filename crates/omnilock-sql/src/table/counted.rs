//! Semaphores and read-write locks on every SQL dialect: one row per
//! acquisition in `<table>_entries` (family, name, owner, weight, capacity,
//! holding, expires_at by the database clock), admitted by the grant rule
//! every store follows (see `omnilock_core::Backend`): rows in id order,
//! each admitted while the weights so far, its own included, fit the
//! capacity.
//!
//! Every attempt is one transaction, and attempts on one name never
//! interleave: SQLite's `BEGIN IMMEDIATE` takes the file's single writer
//! lock; MySQL and PostgreSQL first lock the name's row in `<table>_heads`
//! (an upsert, so the first attempt creates it). Without that, two attempts
//! could each admit themselves beside the other's uncommitted row, and ids
//! could commit out of order. The attempt purges expired rows, checks the
//! count, adds or refreshes the caller's row and, if it fits, marks it
//! holding. The row id is the fencing token (rising across all rows of a
//! name: ids are taken under the head lock). Waiters poll with backoff,
//! woken early by a release in the same process and, on PostgreSQL with
//! NOTIFY, by a release anywhere (the delete notifies `<table>_entries`).

use std::time::{Duration, Instant};

use omnilock_core::{
    AcquireRequest, Backoff, Error, ErrorKind, LockKind, LockName, LockSpec, Owner, Primitive,
    Result, Share, complete_or_undo, retry_in_background, retry_when,
};
use sqlx::Row;

use super::TableStore;
use crate::conn::{query, with_pool};
use crate::queries::{Args, Counted, Statement};
use crate::store::{Grant, HoldKind, SqlHold};

/// What one attempt found.
enum Step {
    /// Admitted: the row id, the token.
    Held(i64),
    /// Waiting (its row stays, unless it was a try); when something may
    /// change (a lease's end), if known.
    Waiting(i64, Option<Duration>),
    /// A try that would wait: nothing was left behind.
    Busy,
}

impl TableStore {
    fn counted_queries(&self) -> &Counted {
        &self.queries().counted
    }

    /// One attempt in one transaction. `row`: the caller's waiting row from
    /// an earlier attempt.
    async fn step(
        &self,
        request: &AcquireRequest,
        share: Share,
        row: Option<i64>,
        wait: bool,
    ) -> Result<Step> {
        let q = self.counted_queries();
        let err = |e| self.err(e);
        let args = Args {
            family: share.family,
            name: request.name.as_str(),
            owner: request.owner.as_str(),
            weight: share.weight as i64,
            capacity: share.capacity as i64,
            lease_ms: self.inner.config.waiting_mark.as_millis() as i64,
            ttl_ms: request.ttl.as_millis() as i64,
            id: row.unwrap_or_default(),
            ..Args::default()
        };
        with_pool!(self.pool(), p => {
            let mut tx = p.begin_with(self.queries().begin).await.map_err(err)?;
            if let Some(head) = &q.head {
                query(head, &args).execute(&mut *tx).await.map_err(err)?;
            }
            query(&q.purge, &args).execute(&mut *tx).await.map_err(err)?;
            let mine = match row {
                Some(id) => {
                    let refreshed = query(&q.refresh, &args)
                        .execute(&mut *tx)
                        .await
                        .map_err(err)?;
                    if refreshed.rows_affected() == 0 {
                        return Err(Error::new(
                            ErrorKind::LockLost,
                            "this waiter's place ran out (it did not poll in time)",
                        )
                        .with_retryable(true));
                    }
                    id
                }
                None => {
                    let other = query(&q.other_capacity, &args)
                        .fetch_optional(&mut *tx)
                        .await
                        .map_err(err)?;
                    if let Some(other) = other {
                        let recorded: i64 = other.try_get(0).map_err(err)?;
                        return Err(Error::permits_conflict(recorded as u64, share.capacity));
                    }
                    if !wait {
                        // A try: only beside holders, nobody waiting, if it fits.
                        let usage = query(&q.usage, &args).fetch_one(&mut *tx).await.map_err(err)?;
                        let waiting: i64 = usage.try_get(0).map_err(err)?;
                        let used: i64 = usage.try_get(1).map_err(err)?;
                        if waiting > 0 || used as u64 + share.weight > share.capacity {
                            tx.commit().await.map_err(err)?;
                            return Ok(Step::Busy);
                        }
                    }
                    let inserted = match &q.inserted_id {
                        None => query(&q.insert, &args).fetch_one(&mut *tx).await.map_err(err)?,
                        Some(read) => {
                            query(&q.insert, &args).execute(&mut *tx).await.map_err(err)?;
                            query(read, &args).fetch_one(&mut *tx).await.map_err(err)?
                        }
                    };
                    inserted.try_get::<i64, _>(0).map_err(err)?
                }
            };
            let args = Args { id: mine, ..args };
            let ahead = query(&q.ahead, &args).fetch_all(&mut *tx).await.map_err(err)?;
            let mut used = 0u64;
            let mut fits = false;
            for entry in &ahead {
                let (id, weight): (i64, i64) = (
                    entry.try_get(0).map_err(err)?,
                    entry.try_get(1).map_err(err)?,
                );
                if used + weight as u64 > share.capacity {
                    break;
                }
                if id == mine {
                    fits = true;
                    break;
                }
                used += weight as u64;
            }
            if fits {
                query(&q.grant, &args).execute(&mut *tx).await.map_err(err)?;
                tx.commit().await.map_err(err)?;
                return Ok(Step::Held(mine));
            }
            let next: Option<i64> = query(&q.next_expiry, &args)
                .fetch_one(&mut *tx)
                .await
                .map_err(err)?
                .try_get(0)
                .map_err(err)?;
            tx.commit().await.map_err(err)?;
            Ok(Step::Waiting(
                mine,
                next.map(|ms| Duration::from_millis(ms.max(0) as u64)),
            ))
        })
    }

    /// An attempt that completes even if the caller goes away; a row it
    /// added for a caller that has gone is deleted.
    async fn step_detached(
        &self,
        request: &AcquireRequest,
        share: Share,
        row: Option<i64>,
        wait: bool,
    ) -> Result<(Step, Instant)> {
        let (store, undo) = (self.clone(), self.clone());
        let (request, name) = (request.clone(), request.name.clone());
        complete_or_undo(
            async move {
                let started = Instant::now();
                store
                    .step(&request, share, row, wait)
                    .await
                    .map(|step| (step, started))
            },
            move |abandoned: Result<(Step, Instant)>| async move {
                if let Ok((Step::Held(id) | Step::Waiting(id, _), _)) = abandoned {
                    undo.forget_row(id, &name);
                }
            },
        )
        .await
    }

    /// Deletes row `id` of lock `name` in the background (a dropped
    /// acquire), then wakes this process's waiters of `name`: the row may
    /// have held them back.
    fn forget_row(&self, id: i64, name: &LockName) {
        let (store, name) = (self.clone(), name.clone());
        retry_in_background(move || {
            let (store, name) = (store.clone(), name.clone());
            async move {
                store.delete_row(id, None).await?;
                store.inner.wake_all_local(&name);
                Ok(())
            }
        });
    }

    /// Deletes row `id` (only if it holds, for `owner`, when given);
    /// whether it did.
    async fn delete_row(&self, id: i64, owner: Option<&str>) -> Result<bool> {
        let q = self.counted_queries();
        let args = Args {
            id,
            owner: owner.unwrap_or_default(),
            ..Args::default()
        };
        let statement = if owner.is_some() {
            &q.release
        } else {
            &q.forget
        };
        Ok(self.delete_entries(statement, &args).await? == 1)
    }

    /// Runs one of the entries' deletes: how many rows it deleted.
    async fn delete_entries(&self, statement: &Statement, args: &Args<'_>) -> Result<u64> {
        if !self.counted_queries().deletes_select_count {
            return self.execute(statement, args).await;
        }
        let err = |e| self.err(e);
        with_pool!(self.pool(), p => {
            let row = query(statement, args).fetch_one(p).await.map_err(err)?;
            Ok(row.try_get::<i64, _>(0).map_err(err)? as u64)
        })
    }

    /// Deletes the live holds of the semaphore or read-write lock `kind`
    /// of `name` (only `owner`'s, when given): how many. Their holders
    /// learn at their next renewal; waiters stay in line, and the next
    /// attempt of each (this process's at once) finds the room.
    pub(crate) async fn break_counted(
        &self,
        name: &LockName,
        kind: LockKind,
        owner: Option<&Owner>,
    ) -> Result<usize> {
        let Some(family) = family(kind) else {
            return Err(Error::new(
                ErrorKind::Unsupported,
                "break_holds breaks semaphores and read-write locks; break_lock breaks a mutex",
            ));
        };
        let [all, one] = &self.counted_queries().break_holds;
        let args = Args {
            family,
            name: name.as_str(),
            owner: owner.map(Owner::as_str).unwrap_or_default(),
            ..Args::default()
        };
        let broken = self
            .delete_entries(if owner.is_some() { one } else { all }, &args)
            .await?;
        if broken > 0 {
            self.inner.wake_all_local(name);
        }
        Ok(broken as usize)
    }

    /// A semaphore permit or a side of a read-write lock: `None` from a
    /// try that would wait.
    pub(crate) async fn take_counted(
        &self,
        request: &AcquireRequest,
        wait: bool,
    ) -> Result<Option<Grant>> {
        let share = request.primitive.share().expect("a counted lock");
        let granted = |id: i64, started: Instant| {
            omnilock_core::Grant::new(id as u64, started + request.ttl)
                .with_hold(SqlHold(HoldKind::Entry(id)))
        };
        if !wait {
            // A transaction the database rolled back to break a deadlock or
            // a serialization conflict (two first users of a name at once)
            // took nothing: try again for up to 100 ms, rather than hand
            // the caller an error for a lock that may be free. Only those:
            // a reply lost on the way back may have taken a permit, and a
            // second try would take another.
            let rolled_back = |e: &Error| e.kind() == ErrorKind::Backend && e.is_retryable();
            let step = retry_when(
                Backoff::new(Duration::from_millis(2), Duration::from_millis(50)),
                tokio::time::Instant::now() + Duration::from_millis(100),
                rolled_back,
                || self.step_detached(request, share, None, false),
            )
            .await?;
            return match step {
                (Step::Held(id), started) => Ok(Some(granted(id, started))),
                (Step::Waiting(id, _), _) => {
                    self.forget_row(id, &request.name);
                    Ok(None)
                }
                (Step::Busy, _) => Ok(None),
            };
        }
        let notify = self.local_notify(&request.name);
        let mut backoff = Backoff::new(Duration::from_millis(2), self.inner.config.max_poll);
        let mut place = Place {
            store: self.clone(),
            name: request.name.clone(),
            row: None,
        };
        let mut raised = false;
        loop {
            let woken = notify.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            let delay = match self.step_detached(request, share, place.row, true).await {
                Ok((Step::Held(id), started)) => {
                    place.row = None;
                    return Ok(Some(granted(id, started)));
                }
                Ok((Step::Waiting(id, next), _)) => {
                    place.row = Some(id);
                    if !raised {
                        request.waiting.raise();
                        raised = true;
                    }
                    let delay = backoff.next_delay();
                    next.map_or(delay, |r| delay.min(r + Duration::from_millis(1)))
                }
                Ok((Step::Busy, _)) => backoff.next_delay(),
                Err(err) if err.kind() == ErrorKind::LockLost => {
                    // Our place ran out: queue again at the back.
                    place.row = None;
                    backoff.next_delay()
                }
                Err(err) if err.is_retryable() => backoff.next_delay(),
                Err(err) => return Err(err),
            };
            tokio::select! {
                _ = &mut woken => backoff.reset(),
                _ = tokio::time::sleep(delay) => {}
            }
        }
    }

    pub(crate) async fn release_counted(&self, spec: &LockSpec, grant: &Grant) -> Result<()> {
        let id = grant.hold.entry()?;
        if !self.delete_row(id, Some(spec.owner.as_str())).await? {
            return Err(Error::not_owner());
        }
        // A release can admit several waiters (a writer's, readers): let
        // every local one look.
        self.inner.wake_all_local(&spec.name);
        Ok(())
    }

    pub(crate) async fn renew_counted(&self, spec: &LockSpec, grant: &Grant) -> Result<Instant> {
        let id = grant.hold.entry()?;
        let started = Instant::now();
        let args = Args {
            id,
            owner: spec.owner.as_str(),
            ttl_ms: spec.ttl.as_millis() as i64,
            ..Args::default()
        };
        let renewed = self.execute(&self.counted_queries().renew, &args).await?;
        if renewed == 0 {
            return Err(Error::new(
                ErrorKind::LockLost,
                "the permit or read-write lock is no longer held by this owner",
            ));
        }
        Ok(started + spec.ttl)
    }
}

/// The family of `kind`'s entries (see [`Share::family`]); `None` for the
/// mutex, which is a row of the lock table.
pub(crate) fn family(kind: LockKind) -> Option<&'static str> {
    let primitive = match kind {
        LockKind::Semaphore => Primitive::Semaphore { permits: 1 },
        LockKind::RwLock => Primitive::Read,
        _ => return None,
    };
    primitive.share().map(|share| share.family)
}

/// A waiter's row, deleted (in the background) if the acquire ends without
/// the grant.
struct Place {
    store: TableStore,
    name: LockName,
    row: Option<i64>,
}

impl Drop for Place {
    fn drop(&mut self) {
        if let Some(id) = self.row.take() {
            self.store.forget_row(id, &self.name);
        }
    }
}
