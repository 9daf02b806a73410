//! [`LockGuard`]: one held lock, for synchronous code.

use std::fmt;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use super::holding::Holding;
use super::Runtime;
#[cfg(doc)]
use crate::{Capabilities, ErrorKind};
use crate::{Error, LockName, Owner, Result};

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

    /// Whether the lock is still known to be held: not lost, and the lease
    /// still valid by the local clock.
    ///
    /// ```
    /// let locks = omnilock::blocking::connect("mem://")?;
    /// let guard = locks.acquire("a")?;
    /// assert!(guard.is_held());
    /// locks.break_lock("a")?;
    /// let _ = guard.lost_receiver().recv(); // the loss arrives
    /// assert!(!guard.is_held());
    /// # Ok::<(), omnilock::Error>(())
    /// ```
    pub fn is_held(&self) -> bool {
        self.inner().is_held()
    }

    /// Until when, by this process's clock, the lock is known to be held.
    /// Work that must finish under the lock should finish before it.
    ///
    /// ```
    /// let locks = omnilock::blocking::connect("mem://")?;
    /// let guard = locks.acquire("a")?;
    /// assert!(guard.safe_until() > std::time::Instant::now());
    /// # Ok::<(), omnilock::Error>(())
    /// ```
    pub fn safe_until(&self) -> Instant {
        self.inner().safe_until()
    }

    /// A channel that receives the loss ([`ErrorKind::LockLost`]) if the
    /// lock is lost while this guard lives. After a clean release or drop
    /// it disconnects instead (`recv` returns `Err`). Each call makes a new
    /// channel; a loss that already happened arrives at once.
    ///
    /// ```
    /// use std::time::Duration;
    /// let locks = omnilock::blocking::connect("mem://")?;
    /// let guard = locks.acquire("a")?;
    /// let lost = guard.lost_receiver();
    /// locks.break_lock("a")?;
    /// let loss = lost.recv_timeout(Duration::from_secs(10)).expect("lost");
    /// assert_eq!(loss.kind(), omnilock::ErrorKind::LockLost);
    /// # Ok::<(), omnilock::Error>(())
    /// ```
    pub fn lost_receiver(&self) -> mpsc::Receiver<Error> {
        self.holding.lost_receiver()
    }

    /// Calls `callback` with the loss ([`ErrorKind::LockLost`]) if the lock
    /// is lost while this guard lives; never after a clean release or drop.
    /// It runs on a thread of its own, so it may block and may use this API.
    ///
    /// ```
    /// use std::time::Duration;
    /// let locks = omnilock::blocking::connect("mem://")?;
    /// let guard = locks.acquire("a")?;
    /// let (tx, rx) = std::sync::mpsc::channel();
    /// guard.on_lost(move |loss| {
    ///     eprintln!("stop writing: {loss}");
    ///     let _ = tx.send(loss.kind());
    /// });
    /// locks.break_lock("a")?;
    /// assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok(omnilock::ErrorKind::LockLost));
    /// # Ok::<(), omnilock::Error>(())
    /// ```
    pub fn on_lost(&self, callback: impl FnOnce(Error) + Send + 'static) {
        self.holding.on_lost(callback)
    }

    /// The loss, if it has happened (without waiting).
    pub(super) fn loss(&self) -> Option<Error> {
        self.holding.loss()
    }

    /// Releases this hold and waits for the store to confirm. A stale guard
    /// (lost, or its lease ran out and someone else took the lock) gets
    /// [`ErrorKind::NotOwner`] and changes nothing.
    ///
    /// ```
    /// let locks = omnilock::blocking::connect("mem://")?;
    /// locks.acquire("a")?.release()?;
    /// assert!(locks.try_acquire("a")?.is_some());
    /// # Ok::<(), omnilock::Error>(())
    /// ```
    pub fn release(self) -> Result<()> {
        self.holding.give_back()
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
