//! Semaphores and read-write locks on one Redis master: which keys and
//! weights a primitive uses, and the calls of their scripts (the protocol
//! is in `scripts/counted.rs`). The waiting, wake-ups and replica checks are the
//! mutex's.

use omnilock_core::{LockSpec, Primitive, Result, Share};

use super::RedisStore;
use crate::scripts::counted::Held;
use crate::scripts::keys::CountedKeys;

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

    pub(crate) fn keys(&self, prefix: &str, request: &LockSpec) -> CountedKeys {
        CountedKeys::new(prefix, request.name.as_str(), self.0.family)
    }
}

impl RedisStore {
    fn counted_keys(&self, request: &LockSpec) -> Option<CountedKeys> {
        Counted::of(request.primitive).map(|c| c.keys(&self.inner.options.prefix, request))
    }

    /// Releases the held `entry` (fenced by owner and token). `Ok(true)`
    /// released (now or by an earlier run of this release), `Ok(false)` not
    /// held by this owner and token.
    pub(crate) async fn release_counted(
        &self,
        request: &LockSpec,
        entry: &str,
        token: u64,
    ) -> Result<bool> {
        let keys = self.counted_keys(request).expect("a counted lock");
        let mut conn = self.inner.node.conn_for(&keys.lock);
        let held = held(request, entry, token);
        let channel_prefix = self.inner.channel_prefix(&keys.lock);
        self.inner
            .scripts
            .release_counted(&mut conn, &keys, &held, &channel_prefix)
            .await
            .map_err(|e| self.inner.node.err(e))
    }

    /// Extends the held `entry`'s lease; `Ok(false)` when it is not held.
    pub(crate) async fn renew_counted(
        &self,
        request: &LockSpec,
        entry: &str,
        token: u64,
    ) -> Result<bool> {
        let keys = self.counted_keys(request).expect("a counted lock");
        let mut conn = self.inner.node.conn_for(&keys.lock);
        self.inner
            .scripts
            .renew_counted(&mut conn, &keys, &held(request, entry, token))
            .await
            .map_err(|e| self.inner.node.err(e))
    }

    /// Takes `entry` out of the queue, waiting or holding: a dropped
    /// acquire, or the undo of a grant nobody will use.
    pub(crate) async fn cancel_counted(&self, request: &LockSpec, entry: &str) -> Result<()> {
        let keys = self.counted_keys(request).expect("a counted lock");
        let mut conn = self.inner.node.conn_for(&keys.lock);
        let channel_prefix = self.inner.channel_prefix(&keys.lock);
        self.inner
            .scripts
            .cancel_counted(&mut conn, &keys, entry, &channel_prefix)
            .await
            .map_err(|e| self.inner.node.err(e))
    }
}

/// `request`'s held `entry` with `token`.
fn held<'a>(request: &'a LockSpec, entry: &'a str, token: u64) -> Held<'a> {
    Held {
        entry,
        owner: request.owner.as_str(),
        token,
        ttl: request.ttl,
    }
}
