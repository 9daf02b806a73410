//! Semaphores and read-write locks on one Redis master: which keys and
//! weights a primitive uses, and the calls of their scripts (the protocol
//! is in `scripts.rs`). The waiting, wake-ups and replica checks are the
//! mutex's, in `single.rs`.

use omnilock_core::{AcquireRequest, Primitive, Result, Share};

use crate::node::{evalsha, run_script, CountedKeys};
use crate::single::RedisStore;

/// How one acquisition of a semaphore or read-write lock counts (core's
/// [`Share`]), with its keys.
pub(crate) struct Counted(Share);

impl Counted {
    /// `None` for the mutex.
    pub(crate) fn of(primitive: Primitive) -> Option<Counted> {
        primitive.share().map(Counted)
    }

    pub(crate) fn weight(&self) -> u64 {
        self.0.weight
    }

    pub(crate) fn capacity(&self) -> u64 {
        self.0.capacity
    }

    pub(crate) fn keys(&self, prefix: &str, request: &AcquireRequest) -> CountedKeys {
        CountedKeys::new(prefix, request.name.as_str(), self.0.family)
    }
}

impl RedisStore {
    fn counted_keys(&self, request: &AcquireRequest) -> Option<CountedKeys> {
        Counted::of(request.primitive).map(|c| c.keys(self.prefix(), request))
    }

    /// Releases the held `entry` (fenced by owner and token). `Ok(true)`
    /// released (now or by an earlier run of this release), `Ok(false)` not
    /// held by this owner and token.
    pub(crate) async fn release_counted(
        &self,
        request: &AcquireRequest,
        entry: &str,
        token: u64,
    ) -> Result<bool> {
        let keys = self.counted_keys(request).expect("a counted lock");
        let mut conn = self.node().conn_for(&keys.lock);
        let script = &self.scripts().release_counted;
        let mut eval = evalsha(script, &[&keys.order, &keys.entries, &keys.expiry]);
        eval.arg(entry)
            .arg(request.owner.as_str())
            .arg(token)
            .arg(&*self.channel_prefix_for(&keys.lock))
            .arg(request.ttl.as_millis() as u64);
        let (released, _): (i64, _) = run_script(&mut conn, script, eval, None)
            .await
            .map_err(|e| self.node().err(e))?;
        Ok(released >= 0)
    }

    /// Extends the held `entry`'s lease; `Ok(false)` when it is not held.
    pub(crate) async fn renew_counted(
        &self,
        request: &AcquireRequest,
        entry: &str,
        token: u64,
    ) -> Result<bool> {
        let keys = self.counted_keys(request).expect("a counted lock");
        let mut conn = self.node().conn_for(&keys.lock);
        let script = &self.scripts().renew_counted;
        let mut eval = evalsha(script, &[&keys.order, &keys.entries, &keys.expiry]);
        eval.arg(entry)
            .arg(request.owner.as_str())
            .arg(token)
            .arg(request.ttl.as_millis() as u64);
        let (renewed, _): (i64, _) = run_script(&mut conn, script, eval, None)
            .await
            .map_err(|e| self.node().err(e))?;
        Ok(renewed == 1)
    }

    /// Takes `entry` out of the queue, waiting or holding: a dropped
    /// acquire, or the undo of a grant nobody will use.
    pub(crate) async fn cancel_counted(&self, request: &AcquireRequest, entry: &str) -> Result<()> {
        let keys = self.counted_keys(request).expect("a counted lock");
        let mut conn = self.node().conn_for(&keys.lock);
        let script = &self.scripts().cancel_counted;
        let mut eval = evalsha(script, &[&keys.order, &keys.entries, &keys.expiry]);
        eval.arg(entry).arg(&*self.channel_prefix_for(&keys.lock));
        run_script::<i64>(&mut conn, script, eval, None)
            .await
            .map(drop)
            .map_err(|e| self.node().err(e))
    }
}
