//! Renewal on the lock table: mutexes in batches, one statement per batch.

use std::time::Instant;

use omnilock_core::{Backend, Error, ErrorKind, LockSpec, Primitive, Result};

use super::TableStore;
use crate::conn::with_pool;
use crate::store::Grant;

impl TableStore {
    /// Mutexes of one TTL are renewed up to 64 per `UPDATE` (see
    /// `queries::RenewBatch`); a batch that matched fewer rows than locks
    /// is renewed lock by lock to find the ones that are gone. Semaphore
    /// permits and read-write locks are renewed each on its own.
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

    /// Renews mutexes of one TTL with one statement; lock by lock when it
    /// matched fewer rows than locks (some are gone).
    async fn renew_batch(&self, holds: &[(&LockSpec, &Grant)]) -> Vec<Result<Instant>> {
        let Some((first, _)) = holds.first() else {
            return Vec::new();
        };
        let Some((size, sql)) = self.inner.queries.renew_batch.for_len(holds.len()) else {
            return futures_util::future::join_all(holds.iter().map(|(r, g)| self.renew(r, g)))
                .await;
        };
        let started = Instant::now();
        let ttl_ms = first.ttl.as_millis() as i64;
        // Padded with the last lock, which the row list then names twice.
        let padded = |i: usize| holds[i.min(holds.len() - 1)];
        let err = |e| self.err(e);
        let matched: Result<u64> = with_pool!(&self.inner.pool, p => {
            let mut q = sqlx::query(sql).bind(ttl_ms);
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
            q.execute(p).await.map(|r| r.rows_affected()).map_err(err)
        });
        match matched {
            Ok(rows) if rows as usize == holds.len() => {
                holds.iter().map(|_| Ok(started + first.ttl)).collect()
            }
            Ok(_) => {
                futures_util::future::join_all(holds.iter().map(|(r, g)| self.renew(r, g))).await
            }
            Err(e) => holds.iter().map(|_| Err(e.clone())).collect(),
        }
    }
}
