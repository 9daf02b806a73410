//! Renewal on the lock table: mutexes in batches, one statement per batch.

use std::collections::HashSet;
use std::time::Instant;

use omnilock_core::{Backend, Error, ErrorKind, LockSpec, Primitive, Result};
use sqlx::Row;

use super::TableStore;
use crate::conn::with_pool;
use crate::queries::BatchStatements;
use crate::store::Grant;

impl TableStore {
    /// Mutexes of one TTL are renewed up to 64 per `UPDATE` (see
    /// `queries::RenewBatch`); a batch that matched fewer rows than locks
    /// asks which of them it renewed. Semaphore permits and read-write
    /// locks are renewed each on its own.
    pub(super) async fn renew_holds(&self, holds: &[(&LockSpec, &Grant)]) -> Vec<Result<Instant>> {
        let mut results: Vec<Option<Result<Instant>>> = holds.iter().map(|_| None).collect();
        let mut mutexes: Vec<usize> = Vec::new();
        for (i, (spec, _)) in holds.iter().enumerate() {
            if spec.primitive == Primitive::Mutex && results[i].is_none() {
                mutexes.push(i);
            }
        }
        // Same TTL next to each other: each batch has one.
        mutexes.sort_by_key(|&i| holds[i].0.ttl);
        let largest = crate::queries::RenewBatch::largest();
        let mut batches: Vec<&[usize]> = Vec::new();
        for same_ttl in mutexes.chunk_by(|&a, &b| holds[a].0.ttl == holds[b].0.ttl) {
            batches.extend(same_ttl.chunks(largest));
        }
        let renewed = futures_util::future::join_all(batches.iter().map(|batch| async {
            let picked: Vec<_> = batch.iter().map(|&i| holds[i]).collect();
            self.renew_batch(&picked).await
        }))
        .await;
        for (batch, renewed) in batches.iter().zip(renewed) {
            for (&i, result) in batch.iter().zip(renewed) {
                results[i] = Some(result);
            }
        }
        let others: Vec<usize> = (0..holds.len()).filter(|&i| results[i].is_none()).collect();
        let each = futures_util::future::join_all(
            others.iter().map(|&i| self.renew(holds[i].0, holds[i].1)),
        )
        .await;
        for (&i, result) in others.iter().zip(each) {
            results[i] = Some(result);
        }
        results
            .into_iter()
            .map(|r| {
                r.unwrap_or_else(|| Err(Error::new(ErrorKind::Backend, "internal: not renewed")))
            })
            .collect()
    }

    /// Renews mutexes of one TTL with one statement. When it matched fewer
    /// rows than locks (some are gone), one more statement names the locks
    /// it renewed; the others are reported lost. Two statements whatever
    /// the batch's size: a store under load is not sent one per lock.
    async fn renew_batch(&self, holds: &[(&LockSpec, &Grant)]) -> Vec<Result<Instant>> {
        let Some((first, _)) = holds.first() else {
            return Vec::new();
        };
        let Some(statements) = self.inner.queries.renew_batch.for_len(holds.len()) else {
            return futures_util::future::join_all(holds.iter().map(|(r, g)| self.renew(r, g)))
                .await;
        };
        let started = Instant::now();
        let renewed_until = started + first.ttl;
        let ttl_ms = first.ttl.as_millis() as i64;
        // A lock held twice (re-entered) in the batch is one row.
        let locks = holds
            .iter()
            .map(|(spec, _)| spec.name.as_str())
            .collect::<HashSet<_>>()
            .len();
        let renewed = match self.renewed_rows(statements, holds, ttl_ms).await {
            Ok(rows) if rows as usize == locks => {
                return holds.iter().map(|_| Ok(renewed_until)).collect();
            }
            Ok(_) => self.held_names(statements, holds).await,
            Err(e) => Err(e),
        };
        match renewed {
            Ok(held) => holds
                .iter()
                .map(|(spec, grant)| {
                    if held.contains(spec.name.as_str()) {
                        Ok(renewed_until)
                    } else {
                        // Lost: its bell would otherwise stay taken until
                        // the guard is dropped, and keep every waiter
                        // waiting `max_poll` per look.
                        self.freed(spec, grant);
                        Err(Error::new(
                            ErrorKind::LockLost,
                            "the lock is no longer held by this owner",
                        ))
                    }
                })
                .collect(),
            Err(e) => holds.iter().map(|_| Err(e.clone())).collect(),
        }
    }

    /// Runs the renewing `UPDATE`: the rows it matched.
    async fn renewed_rows(
        &self,
        statements: &BatchStatements,
        holds: &[(&LockSpec, &Grant)],
        ttl_ms: i64,
    ) -> Result<u64> {
        let err = |e| self.err(e);
        with_pool!(&self.inner.pool, p => {
            let q = sqlx::query(statements.renew.clone()).bind(ttl_ms);
            let q = bind_locks(q, statements.size, holds);
            Ok(q.execute(p).await.map_err(err)?.rows_affected())
        })
    }

    /// The names of the batch's locks that are held by their holds.
    async fn held_names(
        &self,
        statements: &BatchStatements,
        holds: &[(&LockSpec, &Grant)],
    ) -> Result<HashSet<String>> {
        let err = |e| self.err(e);
        with_pool!(&self.inner.pool, p => {
            let q = bind_locks(sqlx::query(statements.held.clone()), statements.size, holds);
            let rows = q.fetch_all(p).await.map_err(err)?;
            rows.iter()
                .map(|row| row.try_get::<String, _>(0))
                .collect::<std::result::Result<HashSet<_>, _>>()
                .map_err(err)
        })
    }
}

/// Binds `size` names, then `size` (name, owner, token) rows, padded with
/// the last lock, which the row list then names twice.
fn bind_locks<'q, DB>(
    mut q: sqlx::query::Query<'q, DB, <DB as sqlx::Database>::Arguments>,
    size: usize,
    holds: &[(&'q LockSpec, &Grant)],
) -> sqlx::query::Query<'q, DB, <DB as sqlx::Database>::Arguments>
where
    DB: sqlx::Database,
    &'q str: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    i64: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    let padded = |i: usize| holds[i.min(holds.len() - 1)];
    for i in 0..size {
        q = q.bind(padded(i).0.name.as_str());
    }
    for i in 0..size {
        let (spec, grant) = padded(i);
        q = q
            .bind(spec.name.as_str())
            .bind(spec.owner.as_str())
            .bind(grant.token as i64);
    }
    q
}
