//! Semaphores and read-write locks on SQLite: one row per acquisition in
//! `<table>_entries` (family, name, owner, weight, capacity, holding,
//! expires_at by the database clock), admitted by the grant rule every
//! store follows (see `omnilock_core::Backend`): rows in id order, each
//! admitted while the weights so far, its own included, fit the capacity.
//!
//! Every attempt is one `BEGIN IMMEDIATE` transaction (SQLite's single
//! writer), so attempts on one file never interleave: it purges expired
//! rows, checks the count, adds or refreshes the caller's row and, if it
//! fits, marks it holding. The row id is the fencing token (rising across
//! all rows, `AUTOINCREMENT`). Waiters poll with backoff, woken early by a
//! release in the same process.
//!
//! MySQL/MariaDB and PostgreSQL need a per-name serialization of their own
//! (concurrent transactions commit auto-increment ids out of order) and do
//! not offer these primitives yet.

use std::time::{Duration, Instant};

use omnilock_core::{
    complete_or_undo, retry_in_background, AcquireRequest, Backoff, Error, ErrorKind, Grant,
    LockName, Result, Share,
};
use sqlx::{AssertSqlSafe, Row};

use crate::conn::Pool;
use crate::queries::{entries_names, ident};
use crate::store::SqlStore;

/// The database clock in milliseconds, as the lock table's statements read it.
const NOW: &str = "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)";

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

/// The row of a grant, for release and renewal.
struct Entry(i64);

impl SqlStore {
    fn entries_table(&self) -> String {
        let (table, _) = entries_names(&self.inner.config.table);
        ident(self.inner.config.dialect, &table)
    }

    fn sqlite(&self) -> Result<&sqlx::SqlitePool> {
        match &self.inner.pool {
            Pool::Sqlite(pool) => Ok(pool),
            #[allow(unreachable_patterns)]
            _ => Err(Error::new(
                ErrorKind::Unsupported,
                "semaphores and read-write locks are on SQLite only, for now",
            )),
        }
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
        let pool = self.sqlite()?;
        let table = self.entries_table();
        let err = |e| self.err(e);
        let lease_ms = self.inner.config.waiting_mark.as_millis() as i64;
        let (family, name) = (share.family, request.name.as_str());
        let mut tx = pool.begin_with("BEGIN IMMEDIATE").await.map_err(err)?;
        let sql = |text: String| AssertSqlSafe(text);
        sqlx::query(sql(format!(
            "DELETE FROM {table} WHERE family = $1 AND name = $2 AND expires_at <= {NOW}"
        )))
        .bind(family)
        .bind(name)
        .execute(&mut *tx)
        .await
        .map_err(err)?;
        let mine = match row {
            Some(id) => {
                let refreshed = sqlx::query(sql(format!(
                    "UPDATE {table} SET expires_at = {NOW} + $2 WHERE id = $1 AND holding = 0"
                )))
                .bind(id)
                .bind(lease_ms)
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
                let other: Option<i64> = sqlx::query_scalar(sql(format!(
                    "SELECT capacity FROM {table} WHERE family = $1 AND name = $2 \
                     AND capacity <> $3 LIMIT 1"
                )))
                .bind(family)
                .bind(name)
                .bind(share.capacity as i64)
                .fetch_optional(&mut *tx)
                .await
                .map_err(err)?;
                if let Some(recorded) = other {
                    return Err(Error::config(format!(
                        "the semaphore is in use with {recorded} permits, not {}: every user \
                         must ask for the same number",
                        share.capacity
                    )));
                }
                if !wait {
                    // A try: only beside holders, nobody waiting, if it fits.
                    let (waiting, used): (i64, i64) = sqlx::query_as(sql(format!(
                        "SELECT COUNT(*) - COALESCE(SUM(holding), 0), COALESCE(SUM(weight), 0) \
                         FROM {table} WHERE family = $1 AND name = $2"
                    )))
                    .bind(family)
                    .bind(name)
                    .fetch_one(&mut *tx)
                    .await
                    .map_err(err)?;
                    if waiting > 0 || used as u64 + share.weight > share.capacity {
                        tx.commit().await.map_err(err)?;
                        return Ok(Step::Busy);
                    }
                }
                sqlx::query_scalar(sql(format!(
                    "INSERT INTO {table} (family, name, owner, weight, capacity, holding, \
                     expires_at) VALUES ($1, $2, $3, $4, $5, 0, {NOW} + $6) RETURNING id"
                )))
                .bind(family)
                .bind(name)
                .bind(request.owner.as_str())
                .bind(share.weight as i64)
                .bind(share.capacity as i64)
                .bind(lease_ms)
                .fetch_one(&mut *tx)
                .await
                .map_err(err)?
            }
        };
        let ahead = sqlx::query(sql(format!(
            "SELECT id, weight FROM {table} WHERE family = $1 AND name = $2 AND id <= $3 \
             ORDER BY id"
        )))
        .bind(family)
        .bind(name)
        .bind(mine)
        .fetch_all(&mut *tx)
        .await
        .map_err(err)?;
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
            sqlx::query(sql(format!(
                "UPDATE {table} SET holding = 1, expires_at = {NOW} + $2 WHERE id = $1"
            )))
            .bind(mine)
            .bind(request.ttl.as_millis() as i64)
            .execute(&mut *tx)
            .await
            .map_err(err)?;
            tx.commit().await.map_err(err)?;
            return Ok(Step::Held(mine));
        }
        let next: Option<i64> = sqlx::query_scalar(sql(format!(
            "SELECT MIN(expires_at) - {NOW} FROM {table} WHERE family = $1 AND name = $2 \
             AND holding = 1"
        )))
        .bind(family)
        .bind(name)
        .fetch_one(&mut *tx)
        .await
        .map_err(err)?;
        tx.commit().await.map_err(err)?;
        Ok(Step::Waiting(
            mine,
            next.map(|ms| Duration::from_millis(ms.max(0) as u64)),
        ))
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
                store.inner.wake_local(&name);
                Ok(())
            }
        });
    }

    /// Deletes row `id` (only if it holds, for `owner`, when given);
    /// whether it did.
    async fn delete_row(&self, id: i64, owner: Option<&str>) -> Result<bool> {
        let pool = self.sqlite()?;
        let table = self.entries_table();
        let err = |e| self.err(e);
        let deleted = match owner {
            None => sqlx::query(AssertSqlSafe(format!("DELETE FROM {table} WHERE id = $1")))
                .bind(id)
                .execute(pool)
                .await
                .map_err(err)?,
            Some(owner) => sqlx::query(AssertSqlSafe(format!(
                "DELETE FROM {table} WHERE id = $1 AND owner = $2 AND holding = 1 \
                 AND expires_at > {NOW}"
            )))
            .bind(id)
            .bind(owner)
            .execute(pool)
            .await
            .map_err(err)?,
        };
        Ok(deleted.rows_affected() == 1)
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
            Grant::new(id as u64, started + request.ttl).with_state(Entry(id))
        };
        if !wait {
            return match self.step_detached(request, share, None, false).await? {
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

    pub(crate) async fn release_counted(
        &self,
        request: &AcquireRequest,
        grant: &Grant,
    ) -> Result<()> {
        let Entry(id) = grant.backend_state::<Entry>()?;
        if !self.delete_row(*id, Some(request.owner.as_str())).await? {
            return Err(Error::not_owner());
        }
        self.inner.wake_local(&request.name);
        Ok(())
    }

    pub(crate) async fn renew_counted(
        &self,
        request: &AcquireRequest,
        grant: &Grant,
    ) -> Result<Instant> {
        let Entry(id) = grant.backend_state::<Entry>()?;
        let pool = self.sqlite()?;
        let table = self.entries_table();
        let started = Instant::now();
        let renewed = sqlx::query(AssertSqlSafe(format!(
            "UPDATE {table} SET expires_at = MAX(expires_at, {NOW} + $3) \
             WHERE id = $1 AND owner = $2 AND holding = 1 AND expires_at > {NOW}"
        )))
        .bind(*id)
        .bind(request.owner.as_str())
        .bind(request.ttl.as_millis() as i64)
        .execute(pool)
        .await
        .map_err(|e| self.err(e))?;
        if renewed.rows_affected() == 0 {
            return Err(Error::new(
                ErrorKind::LockLost,
                "the permit or read-write lock is no longer held by this owner",
            ));
        }
        Ok(started + request.ttl)
    }
}

/// A waiter's row, deleted (in the background) if the acquire ends without
/// the grant.
struct Place {
    store: SqlStore,
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
