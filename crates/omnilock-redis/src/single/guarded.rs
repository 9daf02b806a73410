//! Guarded writes: an application's own writes, on the Redis master that
//! keeps its lock, applied only while the lock is still its guard's, in one
//! atomic step with the check (a script: `scripts/lua/guarded_write.lua`).

use omnilock_core::{Error, ErrorKind, LockGuard, Result, mutex_grant};
use redis::aio::ConnectionLike;
use redis::cluster_routing::Slot;

use super::{HoldId, RedisStore};
use crate::scripts::guarded::{Guarded, Write};

/// Writes to apply only while a mutex is still held by its guard: the
/// check of the holder (owner and token, and a lease that has not run out)
/// and the writes run as one script on the lock's master, so no other
/// holder can come between them. Build it with [`GuardedWrite::new`], add
/// `SET`, `HSET`, `RPUSH` and `DEL` writes, and [`commit`](Self::commit).
///
/// For mutexes of a [`RedisStore`] (one server, Sentinel, Cluster). On a
/// cluster, every key written must be in the lock's hash slot: name them
/// with [`key`](Self::key) (`commit` refuses a key of another slot). Redlock
/// has no single server to check and write on: `Unsupported`.
///
/// ```no_run
/// # async fn demo(locks: omnilock_core::Locks) -> omnilock_core::Result<()> {
/// use omnilock_redis::GuardedWrite;
///
/// // `locks`: a Redis store, from omnilock::connect("redis://...").
/// let guard = locks.acquire("config/publisher").await?;
/// let write = GuardedWrite::new(&guard)?;
/// let current = write.key("current"); // in the lock's slot
/// // Err(LockLost) or Err(StaleToken) once the lock is not the guard's:
/// // then nothing was written.
/// write.set(current, "v42").commit().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct GuardedWrite {
    store: RedisStore,
    lock: String,
    name: String,
    owner: String,
    token: u64,
    keys: Vec<String>,
    writes: Vec<Write>,
}

impl std::fmt::Debug for GuardedWrite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GuardedWrite")
            .field("lock", &self.name)
            .field("token", &self.token)
            .field("keys", &self.keys)
            .finish_non_exhaustive()
    }
}

/// The namespace of [`GuardedWrite::key`] inside the lock's hash tag, apart
/// from the keys of the lock itself (`:fence`, `:queue`, ...).
const APP: &str = ":app:";

impl GuardedWrite {
    /// Writes guarded by `guard`'s hold, none yet. `Unsupported` for a
    /// semaphore permit, a side of a read-write lock, a Redlock lock or a
    /// lock of another store.
    pub fn new(guard: &LockGuard) -> Result<Self> {
        let grant = mutex_grant::<HoldId>(guard, "a guarded write", "a Redis store")?;
        let store = grant.hold.store.clone();
        Ok(GuardedWrite {
            lock: store.keys(guard.name()).lock,
            store,
            name: guard.name().as_str().to_string(),
            owner: guard.owner().as_str().to_string(),
            token: guard.token(),
            keys: Vec::new(),
            writes: Vec::new(),
        })
    }

    /// The guard's fencing token.
    pub fn token(&self) -> u64 {
        self.token
    }

    /// A key in the lock's hash slot, `{<prefix>:<lock name>}:app:<suffix>`:
    /// on a cluster, the keys a guarded write may write. The same lock
    /// name gives the same key in every process.
    pub fn key(&self, suffix: &str) -> String {
        let mut key = String::with_capacity(self.lock.len() + APP.len() + suffix.len());
        key.push_str(&self.lock);
        key.push_str(APP);
        key.push_str(suffix);
        key
    }

    /// Adds `SET key value`.
    pub fn set(mut self, key: impl Into<String>, value: impl AsRef<[u8]>) -> Self {
        let key = self.index(key.into());
        self.writes.push(Write::Set {
            key,
            value: value.as_ref().to_vec(),
        });
        self
    }

    /// Adds `HSET key field value`.
    pub fn hset(
        mut self,
        key: impl Into<String>,
        field: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
    ) -> Self {
        let key = self.index(key.into());
        self.writes.push(Write::HSet {
            key,
            field: field.as_ref().to_vec(),
            value: value.as_ref().to_vec(),
        });
        self
    }

    /// Adds `RPUSH key value`: an entry appended to a list, such as a log
    /// or a queue that only the lock's holder may feed.
    pub fn rpush(mut self, key: impl Into<String>, value: impl AsRef<[u8]>) -> Self {
        let key = self.index(key.into());
        self.writes.push(Write::RPush {
            key,
            value: value.as_ref().to_vec(),
        });
        self
    }

    /// Adds `DEL key`.
    pub fn del(mut self, key: impl Into<String>) -> Self {
        let key = self.index(key.into());
        self.writes.push(Write::Del { key });
        self
    }

    /// Checks the hold and applies the writes, in their order, in one
    /// atomic step on the lock's master, through the store's own
    /// connection; with no writes, only checks.
    ///
    /// Errors, after which nothing was written:
    /// - [`ErrorKind::StaleToken`] when another holder has the lock now
    ///   ([`Error::tokens`] gives this guard's token and the holder's);
    /// - [`ErrorKind::LockLost`] when nobody has: its lease ran out, or it
    ///   was released or broken;
    /// - [`ErrorKind::InvalidConfig`] for a key of another hash slot on a
    ///   cluster, or one of the lock's own keys;
    /// - [`ErrorKind::Conflict`] when a write meets a key of another type
    ///   (`HSET` on a list, say), checked before any write is made.
    ///
    /// An `Unavailable` error may come after the writes were applied (the
    /// answer was lost). `SET`, `HSET` and `DEL` may be sent again safely;
    /// an `RPUSH` sent again appends its entry twice.
    ///
    /// The writes reach replicas as every Redis write does, after the
    /// answer and in order with the lock's own: a failover may lose the
    /// last writes, never apply them without the hold that allowed them.
    pub async fn commit(self) -> Result<()> {
        let mut conn = self.store.inner.node.conn_for(&self.lock);
        self.commit_on(&mut conn).await
    }

    /// [`commit`](Self::commit) through `conn`, a connection of the
    /// application's own to the same Redis: the same server, the same
    /// Sentinel master, or (on a cluster) one that routes each command by
    /// its key. A connection to another server finds no lock there:
    /// `LockLost`.
    pub async fn commit_on<C: ConnectionLike>(&self, conn: &mut C) -> Result<()> {
        let refuse = |message: String| {
            Err(Error::new(ErrorKind::InvalidConfig, message).with_lock(&self.name))
        };
        let inner = &self.store.inner;
        let slot = Slot::for_key(&self.lock);
        for key in &self.keys {
            if key.starts_with(&self.lock) && !key[self.lock.len()..].starts_with(APP) {
                return refuse(format!(
                    "{key:?} is a key of the lock itself: a guarded write may not change it"
                ));
            }
            if inner.node.is_cluster() && Slot::for_key(key) != slot {
                return refuse(format!(
                    "{key:?} is in another hash slot than the lock: on a cluster a guarded \
                     write writes only keys of the lock's slot (GuardedWrite::key names them)"
                ));
            }
        }
        let answer = inner
            .scripts
            .guarded_write(
                conn,
                &self.lock,
                &self.keys,
                &self.owner,
                self.token,
                &self.writes,
            )
            .await
            .map_err(|e| inner.node.err(e).with_lock(&self.name))?;
        match answer {
            Guarded::Written => Ok(()),
            Guarded::HeldBy(token) => Err(Error::stale_token(self.token, token)
                .with_backend(inner.kind)
                .with_lock(&self.name)),
            Guarded::WrongType(why) => Err(Error::new(
                ErrorKind::Conflict,
                format!("{why}: nothing was written"),
            )
            .with_backend(inner.kind)
            .with_lock(&self.name)),
            Guarded::Free => Err(Error::new(
                ErrorKind::LockLost,
                "the lock is held by nobody (its lease ran out, or it was released or \
                 broken): nothing was written",
            )
            .with_backend(inner.kind)
            .with_lock(&self.name)),
        }
    }

    /// The index of `key` among the keys written, added if new.
    fn index(&mut self, key: String) -> usize {
        match self.keys.iter().position(|k| *k == key) {
            Some(at) => at,
            None => {
                self.keys.push(key);
                self.keys.len() - 1
            }
        }
    }
}
