//! [`Locks::lock_all`] for synchronous code: several locks taken as one, all
//! or nothing, without deadlock (see [`crate::Locks::lock_all`] for how).

use std::fmt;

use super::holding::Holding;
use super::{LockGuard, Locks};
#[cfg(doc)]
use crate::ErrorKind;
use crate::{Operation, Result};

impl Locks {
    /// Starts taking every lock in `names` as one: all or nothing, in one
    /// global order (sorted by name), so two callers asking for the same
    /// names in different orders never deadlock. `names` is any list of
    /// names (an array, a slice, a `Vec<String>`, an iterator); they must be
    /// valid lock names, at least one, none twice (checked by `acquire` and
    /// `try_acquire`).
    ///
    /// ```
    /// let locks = omnilock::blocking::connect("mem://")?;
    /// let both = locks.lock_all(&["account/17", "account/4"]).acquire()?;
    /// assert_eq!(both.guards().len(), 2);
    /// assert!(locks.try_acquire("account/4")?.is_none());
    /// both.release()?;
    /// # Ok::<(), omnilock::Error>(())
    /// ```
    pub fn lock_all<I>(&self, names: I) -> MultiLockRequest<'_>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        MultiLockRequest {
            locks: self,
            inner: self.inner.lock_all(names),
        }
    }
}

/// Several locks being configured: the blocking counterpart of
/// [`crate::MultiLockRequest`], with the same options (those of
/// [`AcquireOptions`](crate::AcquireOptions) but `reentrant`). Made by
/// [`Locks::lock_all`]; finish with [`acquire`](Self::acquire) or
/// [`try_acquire`](Self::try_acquire).
///
/// A timeout is for the whole set; the parts taken by then are given back
/// (in the background, as the async request does).
///
/// ```
/// use std::time::Duration;
/// let locks = omnilock::blocking::connect("mem://")?;
/// let held = locks.acquire("b")?;
/// let err = locks.lock_all(&["a", "b"]).timeout(Duration::from_millis(50)).acquire().unwrap_err();
/// assert_eq!(err.kind(), omnilock::ErrorKind::Timeout);
/// assert!(locks.lock("a").timeout(Duration::from_secs(5)).acquire().is_ok()); // not kept
/// # drop(held);
/// # Ok::<(), omnilock::Error>(())
/// ```
#[must_use = "a lock request does nothing until acquired"]
pub struct MultiLockRequest<'a> {
    locks: &'a Locks,
    inner: crate::MultiLockRequest<'a>,
}

impl MultiLockRequest<'_> {
    omnilock_core::option_setters! {
        ttl, owner, timeout, on_wait, options;
        inner(inner): "omnilock",
        "let locks = omnilock::blocking::connect(\"mem://\").unwrap();",
        "locks.lock_all(&[\"a\", \"b\"])"
    }

    /// Waits for every part (up to the timeout, if one is set).
    ///
    /// ```
    /// let locks = omnilock::blocking::connect("mem://")?;
    /// let all = locks.lock_all(&["b", "a"]).acquire()?;
    /// let names: Vec<_> = all.guards().iter().map(|part| part.name().as_str()).collect();
    /// assert_eq!(names, ["a", "b"]); // sorted
    /// # Ok::<(), omnilock::Error>(())
    /// ```
    pub fn acquire(self) -> Result<MultiGuard> {
        let runtime = &self.locks.runtime;
        let all = runtime.block_on(Operation::Acquire, self.inner.acquire())??;
        Ok(self.locks.multi_guard(all))
    }

    /// Takes every part only if none needs waiting: `Ok(None)` when one is
    /// busy, and then none is held when this returns.
    ///
    /// ```
    /// let locks = omnilock::blocking::connect("mem://")?;
    /// let held = locks.acquire("b")?;
    /// assert!(locks.lock_all(&["a", "b"]).try_acquire()?.is_none());
    /// assert!(locks.try_acquire("a")?.is_some()); // "a" was given back
    /// # drop(held);
    /// # Ok::<(), omnilock::Error>(())
    /// ```
    pub fn try_acquire(self) -> Result<Option<MultiGuard>> {
        let runtime = &self.locks.runtime;
        let all = runtime.block_on(Operation::TryAcquire, self.inner.try_acquire())??;
        Ok(all.map(|all| self.locks.multi_guard(all)))
    }
}

impl fmt::Debug for MultiLockRequest<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("blocking::MultiLockRequest")
            .finish_non_exhaustive()
    }
}

impl Locks {
    fn multi_guard(&self, inner: crate::MultiGuard) -> MultiGuard {
        MultiGuard {
            holding: Holding::new(inner, self.runtime.clone()),
        }
    }
}

/// Several held locks, taken together by [`Locks::lock_all`]: the blocking
/// counterpart of [`crate::MultiGuard`]. Each part is renewed like a single
/// [`LockGuard`]; dropping it releases every part before `drop` returns
/// (on a thread of its own when dropped inside an async runtime, as
/// [`LockGuard`] does).
///
/// ```
/// let locks = omnilock::blocking::connect("mem://")?;
/// let all = locks.lock_all(&["a", "b"]).acquire()?;
/// assert!(all.is_held());
/// drop(all); // both released
/// assert!(locks.lock_all(&["a", "b"]).try_acquire()?.is_some());
/// # Ok::<(), omnilock::Error>(())
/// ```
#[must_use = "dropping the guard releases the locks at once"]
pub struct MultiGuard {
    holding: Holding<crate::MultiGuard>,
}

impl MultiGuard {
    fn inner(&self) -> &crate::MultiGuard {
        self.holding.inner()
    }

    /// The parts, sorted by name, as the async guards: to read each one's
    /// name, token and state. To release or watch a part on its own, take
    /// the parts out with [`into_guards`](Self::into_guards).
    ///
    /// ```
    /// let locks = omnilock::blocking::connect("mem://")?;
    /// let all = locks.lock_all(&["a", "b"]).acquire()?;
    /// assert!(all.guards().iter().all(|part| part.is_held()));
    /// # Ok::<(), omnilock::Error>(())
    /// ```
    pub fn guards(&self) -> &[crate::LockGuard] {
        self.inner().guards()
    }

    /// The fencing token of part `name`, if it is one of the parts.
    ///
    /// ```
    /// let locks = omnilock::blocking::connect("mem://")?;
    /// let all = locks.lock_all(&["a", "b"]).acquire()?;
    /// assert!(all.token("a").is_some());
    /// assert_eq!(all.token("c"), None);
    /// # Ok::<(), omnilock::Error>(())
    /// ```
    pub fn token(&self, name: &str) -> Option<u64> {
        self.inner().token(name)
    }

    /// The parts as separate blocking guards, sorted by name: to release or
    /// watch each on its own. Channels from
    /// [`lost_receiver`](Self::lost_receiver) disconnect, and callbacks from
    /// [`on_lost`](Self::on_lost) are dropped uncalled.
    ///
    /// ```
    /// let locks = omnilock::blocking::connect("mem://")?;
    /// let [a, b]: [_; 2] = locks.lock_all(&["a", "b"]).acquire()?.into_guards().try_into().unwrap();
    /// a.release()?;
    /// assert!(locks.try_acquire("a")?.is_some());
    /// assert!(b.is_held());
    /// # Ok::<(), omnilock::Error>(())
    /// ```
    pub fn into_guards(self) -> Vec<LockGuard> {
        let runtime = self.holding.runtime().clone();
        let parts = self.holding.into_inner().into_guards();
        parts
            .into_iter()
            .map(|part| LockGuard::new(part, runtime.clone()))
            .collect()
    }

    super::holding::holding_methods! {
        is_held, safe_until, lost_receiver, on_lost, release;
        "let locks = omnilock::blocking::connect(\"mem://\")?;\n\
         let name = \"b\";\n\
         let held = locks.lock_all(&[\"a\", name]).acquire()?;"
    }
}

impl fmt::Debug for MultiGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.holding.get() {
            Some(inner) => f.debug_tuple("blocking::MultiGuard").field(inner).finish(),
            None => f.write_str("blocking::MultiGuard(released)"),
        }
    }
}
