//! [`Locks`], the blocking handle to one store: what it is set up with,
//! what it tells about the store, and the calls that take a name.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::{LockGuard, LockRequest, ReadWriteLock, Runtime};
#[cfg(doc)]
use crate::ErrorKind;
use crate::{Capabilities, Holder, Inspection, Listed, LockKind, Operation, Owner, Result};

/// A handle to one lock store, for synchronous code: the blocking
/// counterpart of [`crate::Locks`]. Cheap to clone; clones share the
/// connections and the runtime. Made by [`connect`](super::connect).
///
/// ```
/// let locks = omnilock::blocking::connect("mem://blocking-locks")?;
/// let guard = locks.acquire("reports/daily")?;
/// assert!(locks.try_acquire("reports/daily")?.is_none());
/// drop(guard); // released before `drop` returns
/// assert!(locks.try_acquire("reports/daily")?.is_some());
/// # Ok::<(), omnilock::Error>(())
/// ```
#[derive(Clone)]
pub struct Locks {
    // Declared before the runtime, so connections close while it still runs.
    pub(super) inner: crate::Locks,
    pub(super) runtime: Arc<Runtime>,
}

impl Locks {
    pub(super) fn new(inner: crate::Locks, runtime: Arc<Runtime>) -> Self {
        Locks { inner, runtime }
    }

    /// A handle whose acquisitions use `ttl` unless they set their own.
    ///
    /// ```
    /// use std::time::Duration;
    /// let locks = omnilock::blocking::connect("mem://")?.with_ttl(Duration::from_secs(30))?;
    /// assert_eq!(locks.default_ttl(), Duration::from_secs(30));
    /// # Ok::<(), omnilock::Error>(())
    /// ```
    pub fn with_ttl(&self, ttl: Duration) -> Result<Self> {
        Ok(self.wrap(self.inner.with_ttl(ttl)?))
    }

    /// A handle whose acquisitions all belong to `owner`, so they re-enter
    /// each other's locks.
    ///
    /// ```
    /// use omnilock::Owner;
    /// let locks = omnilock::blocking::connect("mem://")?.with_owner(Owner::random());
    /// let outer = locks.acquire("a")?;
    /// let inner = locks.acquire("a")?; // re-entered: same owner
    /// assert_eq!(inner.token(), outer.token());
    /// # Ok::<(), omnilock::Error>(())
    /// ```
    pub fn with_owner(&self, owner: Owner) -> Self {
        self.wrap(self.inner.with_owner(owner))
    }

    /// A handle whose acquisitions are non-reentrant (or reentrant) by default.
    ///
    /// ```
    /// let locks = omnilock::blocking::connect("mem://")?.with_reentrant(false);
    /// # let _ = locks;
    /// # Ok::<(), omnilock::Error>(())
    /// ```
    pub fn with_reentrant(&self, reentrant: bool) -> Self {
        self.wrap(self.inner.with_reentrant(reentrant))
    }

    /// A handle whose metrics carry the lock name as label `name` (see
    /// [`crate::Locks::with_metrics_names`]).
    ///
    /// ```
    /// let locks = omnilock::blocking::connect("mem://")?.with_metrics_names(true);
    /// # let _ = locks;
    /// # Ok::<(), omnilock::Error>(())
    /// ```
    pub fn with_metrics_names(&self, names: bool) -> Self {
        self.wrap(self.inner.with_metrics_names(names))
    }

    fn wrap(&self, inner: crate::Locks) -> Self {
        Locks {
            inner,
            runtime: self.runtime.clone(),
        }
    }

    /// The lease TTL acquisitions use by default.
    ///
    /// ```
    /// let locks = omnilock::blocking::connect("mem://?ttl=20s")?;
    /// assert_eq!(locks.default_ttl(), std::time::Duration::from_secs(20));
    /// # Ok::<(), omnilock::Error>(())
    /// ```
    pub fn default_ttl(&self) -> Duration {
        self.inner.default_ttl()
    }

    /// The store's short name (`"mem"`, `"sqlite"`, ...).
    ///
    /// ```
    /// assert_eq!(omnilock::blocking::connect("mem://")?.backend_kind(), "mem");
    /// # Ok::<(), omnilock::Error>(())
    /// ```
    pub fn backend_kind(&self) -> &'static str {
        self.inner.backend_kind()
    }

    /// What the store promises (see [`Capabilities`]).
    ///
    /// ```
    /// let caps = omnilock::blocking::connect("mem://")?.capabilities();
    /// assert!(caps.fencing);
    /// # Ok::<(), omnilock::Error>(())
    /// ```
    pub fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    /// Starts building an acquisition of `name`. An invalid name is reported
    /// by `acquire`/`try_acquire`.
    ///
    /// ```
    /// use std::time::Duration;
    /// let locks = omnilock::blocking::connect("mem://")?;
    /// let guard = locks
    ///     .lock("jobs/nightly")
    ///     .ttl(Duration::from_secs(30))
    ///     .timeout(Duration::from_secs(5))
    ///     .acquire()?;
    /// assert_eq!(guard.ttl(), Duration::from_secs(30));
    /// # Ok::<(), omnilock::Error>(())
    /// ```
    pub fn lock(&self, name: &str) -> LockRequest<'_> {
        LockRequest::new(self, name, self.inner.lock(name))
    }

    /// Starts building an acquisition of one permit of the counting
    /// semaphore `name`, which admits `permits` holders at once (see
    /// [`crate::Locks::semaphore`]).
    ///
    /// ```
    /// let locks = omnilock::blocking::connect("mem://")?;
    /// let first = locks.semaphore("exports", 2).acquire()?;
    /// let second = locks.semaphore("exports", 2).acquire()?;
    /// assert!(locks.semaphore("exports", 2).try_acquire()?.is_none());
    /// # drop((first, second));
    /// # Ok::<(), omnilock::Error>(())
    /// ```
    pub fn semaphore(&self, name: &str, permits: u32) -> LockRequest<'_> {
        LockRequest::new(self, name, self.inner.semaphore(name, permits))
    }

    /// The read-write lock `name` (see [`crate::Locks::rw_lock`]).
    ///
    /// ```
    /// let locks = omnilock::blocking::connect("mem://")?;
    /// let catalog = locks.rw_lock("catalog");
    /// let reader = catalog.read().acquire()?;
    /// assert!(catalog.write().try_acquire()?.is_none());
    /// reader.release()?;
    /// # Ok::<(), omnilock::Error>(())
    /// ```
    pub fn rw_lock(&self, name: &str) -> ReadWriteLock<'_> {
        ReadWriteLock::new(self, name)
    }

    /// Waits for `name` with the handle's defaults and no timeout.
    ///
    /// ```
    /// let locks = omnilock::blocking::connect("mem://")?;
    /// let guard = locks.acquire("inventory")?;
    /// assert!(guard.is_held());
    /// # Ok::<(), omnilock::Error>(())
    /// ```
    pub fn acquire(&self, name: &str) -> Result<LockGuard> {
        self.lock(name).acquire()
    }

    /// Takes `name` if it is free; `Ok(None)` if someone else holds it.
    ///
    /// ```
    /// let locks = omnilock::blocking::connect("mem://")?;
    /// let first = locks.try_acquire("x")?;
    /// assert!(first.is_some());
    /// assert!(locks.try_acquire("x")?.is_none());
    /// # Ok::<(), omnilock::Error>(())
    /// ```
    pub fn try_acquire(&self, name: &str) -> Result<Option<LockGuard>> {
        self.lock(name).try_acquire()
    }

    /// Runs `work` on this thread while holding `name`, then releases it.
    ///
    /// Synchronous work cannot be cancelled, so it always runs to its end;
    /// if the lock was lost meanwhile the work ran unprotected, and the loss
    /// ([`ErrorKind::LockLost`]) is returned instead of its value. For long
    /// work, watch [`LockGuard::lost_receiver`] and stop early instead.
    ///
    /// ```
    /// let locks = omnilock::blocking::connect("mem://")?;
    /// let total = locks.with_lock("sum", || 1 + 1)?;
    /// assert_eq!(total, 2);
    /// # Ok::<(), omnilock::Error>(())
    /// ```
    pub fn with_lock<T>(&self, name: &str, work: impl FnOnce() -> T) -> Result<T> {
        let guard = self.acquire(name)?;
        let value = work();
        if let Some(loss) = guard.loss() {
            return Err(loss);
        }
        guard.release()?;
        Ok(value)
    }

    /// Removes `name` whatever its owner (an administrative action; see
    /// [`Capabilities::break_lock`]). Returns whether it was held.
    ///
    /// ```
    /// let locks = omnilock::blocking::connect("mem://")?;
    /// let guard = locks.acquire("stuck")?;
    /// assert!(locks.break_lock("stuck")?);
    /// # drop(guard);
    /// # Ok::<(), omnilock::Error>(())
    /// ```
    pub fn break_lock(&self, name: &str) -> Result<bool> {
        self.runtime
            .block_on(Operation::BreakLock, self.inner.break_lock(name))?
    }

    /// Removes holds of lock `kind` of `name` whatever their owner: every
    /// hold, or only `owner`'s (see [`crate::Locks::break_holds`]).
    ///
    /// ```
    /// use omnilock::LockKind;
    /// let locks = omnilock::blocking::connect("mem://")?;
    /// let _permit = locks.semaphore("blocking-uploads", 2).acquire()?;
    /// assert_eq!(locks.break_holds("blocking-uploads", LockKind::Semaphore, None)?, 1);
    /// # Ok::<(), omnilock::Error>(())
    /// ```
    pub fn break_holds(&self, name: &str, kind: LockKind, owner: Option<&Owner>) -> Result<usize> {
        self.runtime.block_on(
            Operation::BreakLock,
            self.inner.break_holds(name, kind, owner),
        )?
    }

    /// Stores `value` as the record `name` for the store to keep `keep`
    /// (see [`crate::Locks::write_record`]).
    ///
    /// ```
    /// use std::time::Duration;
    /// let locks = omnilock::blocking::connect("mem://")?;
    /// locks.write_record("blocking/done", "ran", Duration::from_secs(60))?;
    /// assert_eq!(locks.read_record("blocking/done")?.map(|r| r.value).as_deref(), Some("ran"));
    /// assert!(locks.delete_record("blocking/done")?);
    /// # Ok::<(), omnilock::Error>(())
    /// ```
    pub fn write_record(&self, name: &str, value: &str, keep: Duration) -> Result<()> {
        self.runtime
            .block_on(None, self.inner.write_record(name, value, keep))?
    }

    /// The record `name`, if the store still keeps it (see
    /// [`crate::Locks::read_record`]).
    ///
    /// ```
    /// let locks = omnilock::blocking::connect("mem://")?;
    /// assert!(locks.read_record("blocking/never-written")?.is_none());
    /// # Ok::<(), omnilock::Error>(())
    /// ```
    pub fn read_record(&self, name: &str) -> Result<Option<crate::Record>> {
        self.runtime.block_on(None, self.inner.read_record(name))?
    }

    /// Drops the record `name` (see [`crate::Locks::delete_record`]).
    ///
    /// ```
    /// let locks = omnilock::blocking::connect("mem://")?;
    /// assert!(!locks.delete_record("blocking/never-written")?);
    /// # Ok::<(), omnilock::Error>(())
    /// ```
    pub fn delete_record(&self, name: &str) -> Result<bool> {
        self.runtime
            .block_on(None, self.inner.delete_record(name))?
    }

    /// Who holds `name` now (owner and fencing token), read from the store;
    /// [`ErrorKind::Unsupported`] on stores that cannot say.
    ///
    /// ```
    /// let locks = omnilock::blocking::connect("mem://")?;
    /// let guard = locks.acquire("leader")?;
    /// assert_eq!(locks.holder("leader")?.map(|h| h.token), Some(guard.token()));
    /// # Ok::<(), omnilock::Error>(())
    /// ```
    pub fn holder(&self, name: &str) -> Result<Option<Holder>> {
        self.runtime.block_on(None, self.inner.holder(name))?
    }

    /// What the store knows about lock `kind` of `name` now: holders,
    /// a semaphore's permits, waiters (see [`crate::Locks::inspect`]).
    ///
    /// ```
    /// use omnilock::LockKind;
    /// let locks = omnilock::blocking::connect("mem://")?;
    /// let guard = locks.acquire("nightly")?;
    /// let seen = locks.inspect("nightly", LockKind::Mutex)?;
    /// assert_eq!(seen.holders[0].token, guard.token());
    /// # Ok::<(), omnilock::Error>(())
    /// ```
    pub fn inspect(&self, name: &str, kind: LockKind) -> Result<Inspection> {
        self.runtime
            .block_on(Operation::Inspect, self.inner.inspect(name, kind))?
    }

    /// The held locks whose names start with `prefix` (see
    /// [`crate::Locks::list`]).
    ///
    /// ```
    /// let locks = omnilock::blocking::connect("mem://blocking-list")?;
    /// let _guard = locks.acquire("jobs/nightly")?;
    /// assert_eq!(locks.list("jobs/")?[0].name, "jobs/nightly");
    /// # Ok::<(), omnilock::Error>(())
    /// ```
    pub fn list(&self, prefix: &str) -> Result<Vec<Listed>> {
        self.runtime
            .block_on(Operation::List, self.inner.list(prefix))?
    }

    /// Whether `token` is still the fencing token of the holder of the
    /// mutex `name`, asked of the store: `false` once its hold was
    /// released, lost, broken or ran out, or another holder took over.
    /// [`ErrorKind::Unsupported`] where
    /// [`Capabilities::check`](crate::Capabilities::check) is false.
    ///
    /// ```
    /// let locks = omnilock::blocking::connect("mem://")?;
    /// let guard = locks.acquire("ledger")?;
    /// let token = guard.token();
    /// assert!(locks.check("ledger", token)?);
    /// guard.release()?;
    /// assert!(!locks.check("ledger", token)?);
    /// # Ok::<(), omnilock::Error>(())
    /// ```
    pub fn check(&self, name: &str, token: u64) -> Result<bool> {
        self.runtime.block_on(None, self.inner.check(name, token))?
    }

    /// Closes the store's connections; guards still alive lose their locks.
    /// The runtime stops once the last handle and guard are dropped.
    ///
    /// ```
    /// let locks = omnilock::blocking::connect("mem://")?;
    /// locks.close()?;
    /// # Ok::<(), omnilock::Error>(())
    /// ```
    pub fn close(&self) -> Result<()> {
        self.runtime.block_on(None, self.inner.close())
    }
}

impl fmt::Debug for Locks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("blocking::Locks")
            .field("inner", &self.inner)
            .finish()
    }
}

impl Locks {
    /// The blocking guard of a lock the async API has just granted.
    pub(super) fn guard(&self, inner: crate::LockGuard) -> LockGuard {
        LockGuard::new(inner, self.runtime.clone())
    }
}
