//! [`LockGuard`]: one held lock, for synchronous code.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::Runtime;
use super::holding::Holding;
#[cfg(doc)]
use crate::{Capabilities, ErrorKind};
use crate::{Error, LockName, Owner};

/// A held lock, for synchronous code: the blocking counterpart of
/// [`crate::LockGuard`]. The lease is renewed in the background while it
/// lives.
///
/// Dropping it releases the lock before `drop` returns (errors are ignored;
/// call [`release`](Self::release) to see them). Dropped on a thread inside an
/// async runtime, where waiting is not allowed, it releases on a short-lived
/// thread of its own instead; if even that is impossible (the process is
/// exiting), the store frees the lock when its lease runs out. It never
/// panics.
///
/// A loss (the lease ran out, the lock was broken, the store said it is
/// gone) is reported through [`lost_receiver`](Self::lost_receiver) or
/// [`on_lost`](Self::on_lost), and [`is_held`](Self::is_held) turns false.
///
/// ```
/// use std::time::Duration;
/// let locks = omnilock::blocking::connect("mem://blocking-guard")?;
/// let guard = locks.acquire("inventory")?;
/// let lost = guard.lost_receiver();
/// // ... work, checking now and then:
/// assert!(lost.recv_timeout(Duration::from_millis(10)).is_err()); // not lost
/// guard.release()?;
/// # Ok::<(), omnilock::Error>(())
/// ```
#[must_use = "dropping the guard releases the lock at once"]
pub struct LockGuard {
    holding: Holding<crate::LockGuard>,
}

impl LockGuard {
    pub(super) fn new(inner: crate::LockGuard, runtime: Arc<Runtime>) -> Self {
        LockGuard {
            holding: Holding::new(inner, runtime),
        }
    }

    fn inner(&self) -> &crate::LockGuard {
        self.holding.inner()
    }

    /// The lock's name.
    ///
    /// ```
    /// let locks = omnilock::blocking::connect("mem://")?;
    /// assert_eq!(locks.acquire("a/b")?.name().as_str(), "a/b");
    /// # Ok::<(), omnilock::Error>(())
    /// ```
    pub fn name(&self) -> &LockName {
        self.inner().name()
    }

    /// The owner holding it.
    ///
    /// ```
    /// let locks = omnilock::blocking::connect("mem://")?;
    /// let guard = locks.acquire("a")?;
    /// assert!(!guard.owner().as_str().is_empty());
    /// # Ok::<(), omnilock::Error>(())
    /// ```
    pub fn owner(&self) -> &Owner {
        self.inner().owner()
    }

    /// The fencing token: strictly increasing per lock name (where
    /// [`Capabilities::fencing`] holds). Send it with every write to the
    /// resource the lock protects.
    ///
    /// ```
    /// let locks = omnilock::blocking::connect("mem://")?;
    /// let first = locks.acquire("a")?.token();
    /// let second = locks.acquire("a")?.token();
    /// assert!(second > first);
    /// # Ok::<(), omnilock::Error>(())
    /// ```
    pub fn token(&self) -> u64 {
        self.inner().token()
    }

    /// What is held: a mutex, a semaphore permit, a side of a read-write lock.
    ///
    /// ```
    /// let locks = omnilock::blocking::connect("mem://")?;
    /// assert_eq!(locks.acquire("a")?.primitive(), omnilock::Primitive::Mutex);
    /// # Ok::<(), omnilock::Error>(())
    /// ```
    pub fn primitive(&self) -> crate::Primitive {
        self.inner().primitive()
    }

    /// The store's own record of this hold, for a store crate's extensions
    /// (see [`crate::LockGuard::store_grant`]); `None` when the guard was
    /// not granted by a store whose grants carry `H`.
    ///
    /// ```
    /// let locks = omnilock::blocking::connect("mem://")?;
    /// let guard = locks.acquire("a")?;
    /// assert!(guard.store_grant::<omnilock::raw::LostNotifier>().is_some());
    /// # Ok::<(), omnilock::Error>(())
    /// ```
    pub fn store_grant<H: 'static>(&self) -> Option<&crate::raw::Grant<H>> {
        self.inner().store_grant()
    }

    /// The lease TTL.
    ///
    /// ```
    /// let locks = omnilock::blocking::connect("mem://?ttl=12s")?;
    /// assert_eq!(locks.acquire("a")?.ttl(), std::time::Duration::from_secs(12));
    /// # Ok::<(), omnilock::Error>(())
    /// ```
    pub fn ttl(&self) -> Duration {
        self.inner().ttl()
    }

    /// How many guards of this owner hold this acquisition in this process.
    ///
    /// ```
    /// let locks = omnilock::blocking::connect("mem://")?.with_owner(omnilock::Owner::random());
    /// let outer = locks.acquire("a")?;
    /// let inner = locks.acquire("a")?;
    /// assert_eq!(outer.hold_count(), 2);
    /// # drop(inner);
    /// # Ok::<(), omnilock::Error>(())
    /// ```
    pub fn hold_count(&self) -> u32 {
        self.inner().hold_count()
    }

    /// Whether this guard's hold is still the lock's in the store (its
    /// fencing token is the holder's now); `false` at once once the lost
    /// signal has fired. Mutexes on stores with
    /// [`Capabilities::check`](crate::Capabilities::check).
    ///
    /// ```
    /// let locks = omnilock::blocking::connect("mem://")?;
    /// let guard = locks.acquire("ledger")?;
    /// assert!(guard.check()?);
    /// assert!(locks.break_lock("ledger")?);
    /// assert!(!guard.check()?);
    /// # Ok::<(), omnilock::Error>(())
    /// ```
    pub fn check(&self) -> crate::Result<bool> {
        self.holding
            .runtime()
            .block_on(None, self.inner().check())?
    }

    super::holding::holding_methods! {
        is_held, safe_until, lost_receiver, on_lost, release;
        "let locks = omnilock::blocking::connect(\"mem://\")?;\n\
         let name = \"inventory\";\n\
         let held = locks.acquire(name)?;"
    }

    /// The loss, if it has happened (without waiting).
    pub(super) fn loss(&self) -> Option<Error> {
        self.holding.loss()
    }
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.holding.get() {
            Some(inner) => f
                .debug_struct("blocking::LockGuard")
                .field("name", inner.name())
                .field("token", &inner.token())
                .field("held", &inner.is_held())
                .finish(),
            None => f.write_str("blocking::LockGuard(released)"),
        }
    }
}
