//! [`LockGuard`]: proof of holding a lock, with its fencing token and lost signal.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::backend::Primitive;
use crate::error::{Error, ErrorKind, Result};
use crate::hold::Hold;
use crate::name::{LockName, Owner};

/// A held lock. Release it with [`release`](Self::release) to learn the
/// outcome; dropping it releases in the background (never blocking, never
/// panicking, also outside a runtime).
///
/// While the guard lives, the lease is renewed every third of its TTL. If
/// renewal fails or the store reports the lock gone, the lost signal fires:
/// [`lost`](Self::lost) completes and [`is_held`](Self::is_held) turns false.
/// Between renewals [`safe_until`](Self::safe_until) tells how long the lock
/// is known to be held by this process's clock.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> omnilock_core::Result<()> {
/// use omnilock_core::{Locks, MemStore};
/// let locks = Locks::new(MemStore::new());
/// let guard = locks.acquire("inventory").await?;
/// let token = guard.token(); // send with every write to the protected resource
/// tokio::select! {
///     _ = async { /* critical section */ } => {}
///     loss = guard.lost() => return Err(loss),
/// }
/// guard.release().await?;
/// # let _ = token; Ok(()) }
/// ```
#[must_use = "dropping the guard releases the lock at once"]
pub struct LockGuard {
    hold: Arc<Hold>,
    released: bool,
}

impl LockGuard {
    pub(crate) fn new(hold: Arc<Hold>) -> Self {
        LockGuard {
            hold,
            released: false,
        }
    }

    pub(crate) fn hold(&self) -> &Arc<Hold> {
        &self.hold
    }

    /// The lock's name.
    pub fn name(&self) -> &LockName {
        &self.hold.spec.name
    }

    /// The owner holding it.
    pub fn owner(&self) -> &Owner {
        &self.hold.spec.owner
    }

    /// The fencing token: strictly increasing per lock name across owners
    /// (where [`crate::Capabilities::fencing`] holds); the same for every
    /// reentrant hold of one acquisition.
    pub fn token(&self) -> u64 {
        self.hold.grant.token
    }

    /// What is held: a mutex, a semaphore permit, a side of a read-write lock.
    pub fn primitive(&self) -> Primitive {
        self.hold.spec.primitive
    }

    /// The store's own record of this hold, for a store crate's extensions
    /// that work on the lock in the store itself (a SQL transaction that
    /// keeps the lock's row, for example). `None` when the guard was not
    /// granted by a store whose grants carry `H`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> omnilock_core::Result<()> {
    /// use omnilock_core::{Locks, LostNotifier, MemStore};
    /// let locks = Locks::new(MemStore::new());
    /// let guard = locks.acquire("inventory").await?;
    /// // A memory grant carries the hold's lost signal, and nothing else.
    /// assert!(guard.store_grant::<LostNotifier>().is_some());
    /// assert!(guard.store_grant::<String>().is_none());
    /// # Ok(()) }
    /// ```
    pub fn store_grant<H: 'static>(&self) -> Option<&crate::Grant<H>> {
        self.hold.grant.downcast()
    }

    /// The lease TTL.
    pub fn ttl(&self) -> Duration {
        self.hold.spec.ttl
    }

    /// How many guards of this owner hold this acquisition in this process.
    pub fn hold_count(&self) -> u32 {
        self.hold.hold_count()
    }

    /// Whether the lock is still known to be held: not lost, not released,
    /// and the lease still valid by the local clock.
    pub fn is_held(&self) -> bool {
        self.hold.is_held()
    }

    /// Until when, by this process's clock, the lock is known to be held. Work
    /// that must finish under the lock should finish before this instant.
    pub fn safe_until(&self) -> Instant {
        self.hold.valid_until()
    }

    /// Completes with a [`crate::ErrorKind::LockLost`] error when the lock is
    /// lost; never completes once the lock is released without having been
    /// lost. Independent of the guard's lifetime, so it can be moved into
    /// another task (abort that task after releasing, or `select!` the
    /// future against the work it guards). The error names the backend and
    /// the lock; when another failure lost the lock (a renewal the store
    /// refused), that failure is its [`underlying`](Error::underlying) error.
    pub fn lost(&self) -> impl Future<Output = Error> + Send + 'static + use<> {
        let fired = self.hold.lost.fired();
        // Stores report losses without knowing the lock's name (a session
        // ends for all its locks at once): add what this guard knows.
        let backend = self.hold.backend().kind();
        let lock = self.hold.spec.name.as_str().to_string();
        async move { fired.await.with_backend(backend).with_lock(lock) }
    }

    /// Whether this guard's hold is still the lock's in the store: its
    /// fencing token is the holder's now (see [`Locks::check`](crate::Locks::check)).
    /// `false` at once, without asking, once the lost signal has fired.
    /// Mutexes only: a semaphore permit or a side of a read-write lock
    /// answers `Unsupported`, as does a store without
    /// [`Capabilities::check`](crate::Capabilities::check).
    pub async fn check(&self) -> Result<bool> {
        let backend = self.hold.backend();
        let spec = &self.hold.spec;
        let context = |e: Error| e.with_backend(backend.kind()).with_lock(spec.name.as_str());
        if spec.primitive != Primitive::Mutex {
            return Err(context(Error::new(
                ErrorKind::Unsupported,
                "check answers for mutexes only, not for a semaphore permit or a side of a \
                 read-write lock",
            )));
        }
        if !backend.capabilities().check {
            return Err(context(Error::new(
                ErrorKind::Unsupported,
                "this store cannot say whether a fencing token still holds the lock",
            )));
        }
        if !self.is_held() {
            return Ok(false);
        }
        backend
            .check(&spec.name, self.token())
            .await
            .map_err(context)
    }

    /// Releases this hold; the last hold of an acquisition releases the lock
    /// in the store. A stale guard (its lease expired and someone else took
    /// the lock) gets [`crate::ErrorKind::NotOwner`] and changes nothing.
    pub async fn release(mut self) -> Result<()> {
        self.released = true;
        if self.hold.leave() {
            self.hold.release_in_store().await
        } else {
            Ok(())
        }
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if !self.released && self.hold.leave() {
            self.hold.clone().release_in_background();
        }
    }
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("name", self.name())
            .field("owner", self.owner())
            .field("token", &self.token())
            .field("held", &self.is_held())
            .finish()
    }
}
