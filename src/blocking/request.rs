//! [`LockRequest`] (one acquisition being configured) and [`ReadWriteLock`]:
//! thin wrappers of the async request, whose options they hand on as they
//! come and whose acquisition they run to completion.

use std::fmt;

use super::{LockGuard, Locks};
#[cfg(doc)]
use crate::ErrorKind;
use crate::{Operation, Result};

/// One acquisition being configured: the blocking counterpart of
/// [`crate::LockRequest`], with the same options (every one of
/// [`AcquireOptions`](crate::AcquireOptions), the handle's where unset).
/// Finish with [`acquire`](Self::acquire) or
/// [`try_acquire`](Self::try_acquire).
///
/// ```
/// use std::time::Duration;
/// let locks = omnilock::blocking::connect("mem://")?;
/// let me = omnilock::Owner::random();
/// let guard = locks.lock("a").owner(&me).ttl(Duration::from_secs(10)).acquire()?;
/// assert_eq!(guard.ttl(), Duration::from_secs(10));
/// // The holder asks again, not reentrant: refused at once.
/// let err = locks.lock("a").owner(&me).reentrant(false).acquire().unwrap_err();
/// assert_eq!(err.kind(), omnilock::ErrorKind::WouldDeadlock);
/// # drop(guard);
/// # Ok::<(), omnilock::Error>(())
/// ```
#[must_use = "a lock request does nothing until acquired"]
pub struct LockRequest<'a> {
    locks: &'a Locks,
    /// For `Debug`: the async request does not show its name.
    name: String,
    inner: crate::LockRequest<'a>,
}

impl<'a> LockRequest<'a> {
    pub(super) fn new(locks: &'a Locks, name: &str, inner: crate::LockRequest<'a>) -> Self {
        LockRequest {
            locks,
            name: name.to_string(),
            inner,
        }
    }
}

impl LockRequest<'_> {
    omnilock_core::option_setters! {
        ttl, owner, reentrant, timeout, on_wait, max_hold, min_hold, options;
        inner(inner): "omnilock",
        "let locks = omnilock::blocking::connect(\"mem://\").unwrap();",
        "locks.lock(\"a\")"
    }

    /// Waits for the lock (up to the timeout, if one is set).
    ///
    /// ```
    /// let locks = omnilock::blocking::connect("mem://")?;
    /// let guard = locks.lock("a").acquire()?;
    /// guard.release()?;
    /// # Ok::<(), omnilock::Error>(())
    /// ```
    pub fn acquire(self) -> Result<LockGuard> {
        let guard = self
            .locks
            .runtime
            .block_on(Operation::Acquire, self.inner.acquire())??;
        Ok(self.locks.guard(guard))
    }

    /// Takes the lock only if that needs no waiting: `Ok(None)` when another
    /// owner holds it.
    ///
    /// ```
    /// let locks = omnilock::blocking::connect("mem://")?;
    /// assert!(locks.lock("a").try_acquire()?.is_some());
    /// # Ok::<(), omnilock::Error>(())
    /// ```
    pub fn try_acquire(self) -> Result<Option<LockGuard>> {
        let guard = self
            .locks
            .runtime
            .block_on(Operation::TryAcquire, self.inner.try_acquire())??;
        Ok(guard.map(|guard| self.locks.guard(guard)))
    }
}

impl fmt::Debug for LockRequest<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("blocking::LockRequest")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// A read-write lock of one name, for synchronous code: the blocking
/// counterpart of [`crate::ReadWriteLock`] (many readers or one writer, with
/// the same reentrancy rules). Made by [`Locks::rw_lock`].
///
/// ```
/// let locks = omnilock::blocking::connect("mem://")?;
/// let catalog = locks.rw_lock("catalog");
/// let reader = catalog.read().acquire()?;
/// assert!(catalog.write().try_acquire()?.is_none());
/// reader.release()?;
/// assert!(catalog.write().try_acquire()?.is_some());
/// # Ok::<(), omnilock::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct ReadWriteLock<'a> {
    locks: &'a Locks,
    name: String,
}

impl<'a> ReadWriteLock<'a> {
    pub(super) fn new(locks: &'a Locks, name: &str) -> Self {
        ReadWriteLock {
            locks,
            name: name.to_string(),
        }
    }

    /// Starts building an acquisition of the shared (read) side.
    ///
    /// ```
    /// let locks = omnilock::blocking::connect("mem://")?;
    /// let catalog = locks.rw_lock("catalog");
    /// let first = catalog.read().acquire()?;
    /// let second = catalog.read().acquire()?; // readers share
    /// # drop((first, second));
    /// # Ok::<(), omnilock::Error>(())
    /// ```
    pub fn read(&self) -> LockRequest<'a> {
        let inner = self.locks.inner.rw_lock(&self.name).read();
        LockRequest::new(self.locks, &self.name, inner)
    }

    /// Starts building an acquisition of the exclusive (write) side.
    ///
    /// ```
    /// let locks = omnilock::blocking::connect("mem://")?;
    /// let catalog = locks.rw_lock("catalog");
    /// let writer = catalog.write().acquire()?;
    /// assert!(catalog.read().try_acquire()?.is_none()); // a writer is alone
    /// writer.release()?;
    /// # Ok::<(), omnilock::Error>(())
    /// ```
    pub fn write(&self) -> LockRequest<'a> {
        let inner = self.locks.inner.rw_lock(&self.name).write();
        LockRequest::new(self.locks, &self.name, inner)
    }
}
