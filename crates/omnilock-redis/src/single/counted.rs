//! Semaphores and read-write locks on one Redis master: which keys and
//! weights a primitive uses, and the calls of their scripts (the protocol
//! is in `scripts/counted.rs`), and breaking their holds. The waiting,
//! wake-ups and replica checks are the mutex's.

use omnilock_core::{
    Error, ErrorKind, LockKind, LockName, LockSpec, Owner, Primitive, Result, Share,
};

use super::RedisStore;
use crate::scripts::counted::Held;
use crate::scripts::keys::{CountedKeys, family};

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

    /// Removes the holds of the semaphore or read-write lock `kind` of
    /// `name` (only `owner`'s where given) that are held now: read first,
    /// then broken by token in a second script, so a call that runs twice
    /// cannot break a hold granted in between. Waiters stay in line, and
    /// those that fit now are woken. The holders learn at their next
    /// renewal. How many holds were removed.
    pub(crate) async fn break_counted(
        &self,
        name: &LockName,
        kind: LockKind,
        owner: Option<&Owner>,
    ) -> Result<usize> {
        let Some(family) = family(kind) else {
            return Err(Error::new(
                ErrorKind::Unsupported,
                "a mutex is broken with break_lock",
            ));
        };
        let keys = CountedKeys::new(&self.inner.options.prefix, name.as_str(), family);
        let seen = self.read_counted(&keys).await?;
        let tokens: Vec<u64> = seen
            .entries
            .iter()
            .filter(|e| e.holding && owner.is_none_or(|o| o.as_str() == e.owner))
            .map(|e| e.token)
            .collect();
        if tokens.is_empty() {
            return Ok(0);
        }
        let mut conn = self.inner.node.conn_for(&keys.lock);
        let channel_prefix = self.inner.channel_prefix(&keys.lock);
        self.inner
            .scripts
            .break_counted(&mut conn, &keys, &tokens, &channel_prefix)
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
