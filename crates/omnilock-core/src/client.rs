//! [`Locks`], the handle applications use, with the settings it applies
//! to every acquisition.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::backend::{AcquireRequest, Capabilities, Primitive};
use crate::dyn_backend::{DynBackend, ErasedGrant};
use crate::error::{Error, ErrorKind, Operation, Result};
use crate::guard::LockGuard;
use crate::hold::Hold;
use crate::inspect::{Inspection, Listed, LockKind};
use crate::metrics;
use crate::name::{LockName, Owner};
use crate::request::{LockRequest, ReadWriteLock};
use crate::shared::Shared;

/// The lease TTL when neither the URL nor the acquisition sets one.
pub const DEFAULT_TTL: Duration = Duration::from_secs(15);
/// The shortest lease accepted: renewal runs every third of it.
pub const MIN_TTL: Duration = Duration::from_millis(100);
/// The longest lease accepted.
pub const MAX_TTL: Duration = Duration::from_secs(24 * 3600);

/// Settings applied to every acquisition made through a handle.
#[derive(Clone, Debug)]
pub(crate) struct Defaults {
    pub(crate) ttl: Duration,
    pub(crate) owner: Option<Owner>,
    pub(crate) reentrant: bool,
    pub(crate) metrics_names: bool,
}

/// A handle to one lock store: the type applications hold, whatever the
/// store. Cheap to clone; clones share connections.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> omnilock_core::Result<()> {
/// use omnilock_core::{Locks, MemStore};
/// use std::time::Duration;
///
/// let locks = Locks::new(MemStore::named("doc-locks"));
/// let guard = locks.lock("reports/daily").timeout(Duration::from_secs(5)).acquire().await?;
/// println!("holding {} with fencing token {}", guard.name(), guard.token());
/// assert!(locks.try_acquire("reports/daily").await?.is_none());
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Locks {
    pub(crate) shared: Arc<Shared>,
    pub(crate) defaults: Defaults,
}

impl Locks {
    /// Wraps a backend.
    pub fn new(backend: impl DynBackend) -> Self {
        Locks::from_arc(Arc::new(backend))
    }

    /// Wraps a shared backend.
    pub fn from_arc(backend: Arc<dyn DynBackend>) -> Self {
        Locks {
            shared: Arc::new(Shared::new(backend)),
            defaults: Defaults {
                ttl: DEFAULT_TTL,
                owner: None,
                reentrant: true,
                metrics_names: false,
            },
        }
    }

    /// The backend, for the several-lock step of [`Locks::lock_all`].
    pub(crate) fn backend(&self) -> &Arc<dyn DynBackend> {
        &self.shared.backend
    }

    /// The guard of a grant the store has just given: renewal, the lost
    /// signal and release on drop start here. No await may come between
    /// the grant and this call (a cancellation there is the backend's to
    /// undo).
    /// The guard of a fresh grant; `lent`: its owner was lent by
    /// [`Shared::lend_owner`](crate::shared::Shared::lend_owner), and goes
    /// back after a successful release.
    pub(crate) fn guard_for(
        &self,
        request: AcquireRequest,
        grant: ErasedGrant,
        lent: bool,
    ) -> LockGuard {
        let labels = metrics::Labels::new(
            self.backend_kind(),
            request.name.as_str(),
            self.defaults.metrics_names,
        );
        let metrics = metrics::HoldMetrics::start(&labels, &request.lost);
        LockGuard::new(Hold::start(
            self.shared.clone(),
            request,
            grant,
            metrics,
            lent,
        ))
    }

    /// A handle whose acquisitions use `ttl` unless they set their own.
    pub fn with_ttl(&self, ttl: Duration) -> Result<Self> {
        check_ttl(ttl)?;
        let mut locks = self.clone();
        locks.defaults.ttl = ttl;
        Ok(locks)
    }

    /// A handle whose acquisitions all belong to `owner`, so they re-enter
    /// each other's locks.
    pub fn with_owner(&self, owner: Owner) -> Self {
        let mut locks = self.clone();
        locks.defaults.owner = Some(owner);
        locks
    }

    /// A handle whose acquisitions are non-reentrant by default.
    pub fn with_reentrant(&self, reentrant: bool) -> Self {
        let mut locks = self.clone();
        locks.defaults.reentrant = reentrant;
        locks
    }

    /// A handle whose acquisitions label their metrics with the lock name
    /// (label `name`) as well as the store (label `store`). Off by default:
    /// every distinct lock name becomes a series of its own in the metrics
    /// exporter, so turn it on only for a bounded set of names. Without the
    /// cargo feature `metrics` there are no metrics and this changes nothing.
    /// See [docs/observability.md](https://github.com/omnilock/omnilock/blob/main/docs/observability.md).
    ///
    /// ```
    /// let locks = omnilock_core::Locks::new(omnilock_core::MemStore::new());
    /// let labelled = locks.with_metrics_names(true);
    /// # let _ = labelled;
    /// ```
    pub fn with_metrics_names(&self, names: bool) -> Self {
        let mut locks = self.clone();
        locks.defaults.metrics_names = names;
        locks
    }

    /// The lease TTL acquisitions use by default.
    pub fn default_ttl(&self) -> Duration {
        self.defaults.ttl
    }

    /// The store's short name (`"mem"`, `"redis"`, ...).
    pub fn backend_kind(&self) -> &'static str {
        self.shared.backend.kind()
    }

    /// What the store promises.
    pub fn capabilities(&self) -> Capabilities {
        self.shared.backend.capabilities()
    }

    /// Starts building an acquisition of `name`. An invalid name is reported
    /// by `acquire`/`try_acquire`, before any I/O.
    pub fn lock(&self, name: &str) -> LockRequest<'_> {
        self.request(name, Primitive::Mutex)
    }

    /// Starts building an acquisition of one permit of the counting
    /// semaphore `name`, which admits `permits` holders at once (across
    /// every process using the store). The options are the mutex's; a
    /// permit is never re-entered: each acquisition is a permit of its own.
    ///
    /// The store records `permits` while the semaphore has holders or
    /// waiters; asking with another number then fails with `InvalidConfig`
    /// (it never changes the recorded count). `permits` = 0 is
    /// `InvalidConfig`, and a store without semaphores (see
    /// [`Capabilities::semaphore`]) answers `Unsupported`, both before any
    /// I/O.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> omnilock_core::Result<()> {
    /// use omnilock_core::{Locks, MemStore};
    /// let locks = Locks::new(MemStore::new());
    /// // At most two exports talk to the rate-limited API at once.
    /// let first = locks.semaphore("api/exports", 2).acquire().await?;
    /// let second = locks.semaphore("api/exports", 2).acquire().await?;
    /// assert!(second.token() > first.token());
    /// assert!(locks.semaphore("api/exports", 2).try_acquire().await?.is_none());
    /// first.release().await?;
    /// let third = locks.semaphore("api/exports", 2).try_acquire().await?;
    /// assert!(third.is_some());
    /// # Ok(()) }
    /// ```
    pub fn semaphore(&self, name: &str, permits: u32) -> LockRequest<'_> {
        self.request(name, Primitive::Semaphore { permits })
    }

    /// The read-write lock `name`: [`read`](ReadWriteLock::read) for the
    /// shared side, [`write`](ReadWriteLock::write) for the exclusive one.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> omnilock_core::Result<()> {
    /// use omnilock_core::{Locks, MemStore};
    /// let locks = Locks::new(MemStore::new());
    /// let catalog = locks.rw_lock("catalog");
    /// let reader = catalog.read().acquire().await?;
    /// let another = catalog.read().acquire().await?; // readers share
    /// assert!(catalog.write().try_acquire().await?.is_none());
    /// reader.release().await?;
    /// another.release().await?;
    /// let migration = catalog.write().acquire().await?; // alone
    /// assert!(catalog.read().try_acquire().await?.is_none());
    /// migration.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn rw_lock(&self, name: &str) -> ReadWriteLock<'_> {
        ReadWriteLock::new(self, name)
    }

    /// A request for `name`'s `primitive` with the handle's defaults.
    pub(crate) fn request(&self, name: &str, primitive: Primitive) -> LockRequest<'_> {
        LockRequest::new(self, name, primitive)
    }

    /// Waits for `name` with the handle's defaults and no timeout.
    pub async fn acquire(&self, name: &str) -> Result<LockGuard> {
        self.lock(name).acquire().await
    }

    /// Takes `name` if it is free; `Ok(None)` if someone else holds it.
    pub async fn try_acquire(&self, name: &str) -> Result<Option<LockGuard>> {
        self.lock(name).try_acquire().await
    }

    /// Runs `work` while holding `name`, then releases it. If the lock is lost
    /// first, `work` is dropped (cancelled) and the loss is returned.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> omnilock_core::Result<()> {
    /// let locks = omnilock_core::Locks::new(omnilock_core::MemStore::new());
    /// let total = locks.with_lock("sum", async { 1 + 1 }).await?;
    /// assert_eq!(total, 2);
    /// # Ok(()) }
    /// ```
    pub async fn with_lock<T>(&self, name: &str, work: impl Future<Output = T>) -> Result<T> {
        let guard = self.acquire(name).await?;
        let lost = guard.lost();
        tokio::select! {
            value = work => {
                guard.release().await?;
                Ok(value)
            }
            loss = lost => Err(loss),
        }
    }

    /// Removes `name` whatever its owner (an administrative action; see
    /// [`Capabilities::break_lock`]).
    pub async fn break_lock(&self, name: &str) -> Result<bool> {
        let backend = &self.shared.backend;
        let context = |e: Error| {
            e.with_backend(backend.kind())
                .with_operation(Operation::BreakLock)
                .with_lock(name)
        };
        let name = LockName::new(name).map_err(context)?;
        backend.break_lock(&name).await.map_err(context)
    }

    /// Removes holds of lock `kind` of `name` whatever their owner, as
    /// [`Locks::break_lock`] does for a mutex: every hold, or only those of
    /// `owner`. Returns how many were removed. For a semaphore that is
    /// permits; for a read-write lock, readers and the writer alike; for a
    /// mutex, its holder (`owner` is refused there with `InvalidConfig`:
    /// the store cannot break a mutex only if a given owner still holds it,
    /// and a read followed by a break could remove the next holder).
    /// Waiters stay in line. `Unsupported` where
    /// [`Capabilities::break_lock`] is false or the store does not offer
    /// `kind`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> omnilock_core::Result<()> {
    /// use omnilock_core::{LockKind, Locks, MemStore, Owner};
    /// let locks = Locks::new(MemStore::new());
    /// let stuck = Owner::new("worker-3")?;
    /// let permit = locks.semaphore("uploads", 2).owner(&stuck).acquire().await?;
    /// let other = locks.semaphore("uploads", 2).acquire().await?;
    /// assert_eq!(locks.break_holds("uploads", LockKind::Semaphore, Some(&stuck)).await?, 1);
    /// assert_eq!(permit.lost().await.kind(), omnilock_core::ErrorKind::LockLost);
    /// assert!(other.is_held());
    /// # Ok(()) }
    /// ```
    pub async fn break_holds(
        &self,
        name: &str,
        kind: LockKind,
        owner: Option<&Owner>,
    ) -> Result<usize> {
        let backend = &self.shared.backend;
        let context = |e: Error| {
            e.with_backend(backend.kind())
                .with_operation(Operation::BreakLock)
                .with_lock(name)
        };
        let lock_name = LockName::new(name).map_err(context)?;
        let caps = backend.capabilities();
        let offered = match kind {
            LockKind::Mutex => true,
            LockKind::Semaphore => caps.semaphore,
            LockKind::RwLock => caps.rw_lock,
        };
        if !caps.break_lock || !offered {
            return Err(context(Error::new(
                ErrorKind::Unsupported,
                format!("this store cannot break {kind} holds"),
            )));
        }
        if kind != LockKind::Mutex {
            return backend
                .break_holds(&lock_name, kind, owner)
                .await
                .map_err(context);
        }
        if owner.is_some() {
            return Err(context(Error::config(
                "a mutex is broken whoever holds it: leave out the owner (only a \
                 semaphore's or read-write lock's holds can be broken by owner)",
            )));
        }
        let broke = backend.break_lock(&lock_name).await.map_err(context)?;
        Ok(usize::from(broke))
    }

    /// Stores `value` as the record `name` (records live apart from locks),
    /// replacing any earlier one, for the store to keep `keep` and then drop
    /// it: the store times it, so a writer's clock does not matter. What a
    /// job that must run at most once per period writes when it succeeded,
    /// under its lock. `Unsupported` where [`Capabilities::records`] is
    /// false; `InvalidConfig` for a value over [`crate::MAX_RECORD_BYTES`]
    /// bytes or with control characters, or a keep outside 1 ms to
    /// [`crate::MAX_RECORD_KEEP`].
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> omnilock_core::Result<()> {
    /// use std::time::Duration;
    /// use omnilock_core::{Locks, MemStore};
    /// let locks = Locks::new(MemStore::new());
    /// locks.write_record("nightly/done", "started 02:00", Duration::from_secs(3600)).await?;
    /// let done = locks.read_record("nightly/done").await?.expect("kept for an hour");
    /// assert_eq!(done.value, "started 02:00");
    /// assert!(locks.delete_record("nightly/done").await?);
    /// assert!(locks.read_record("nightly/done").await?.is_none());
    /// # Ok(()) }
    /// ```
    pub async fn write_record(&self, name: &str, value: &str, keep: Duration) -> Result<()> {
        let name = self.record_name(name)?;
        let backend = &self.shared.backend;
        crate::record::check(value, keep).map_err(|e| self.record_context(e, &name))?;
        backend
            .write_record(&name, value, keep)
            .await
            .map_err(|e| self.record_context(e, &name))
    }

    /// The record `name`, if the store still keeps it (see
    /// [`Locks::write_record`]).
    pub async fn read_record(&self, name: &str) -> Result<Option<crate::Record>> {
        let name = self.record_name(name)?;
        self.shared
            .backend
            .read_record(&name)
            .await
            .map_err(|e| self.record_context(e, &name))
    }

    /// Drops the record `name` (an operator's way to let a job run again
    /// within its period); whether there was one.
    pub async fn delete_record(&self, name: &str) -> Result<bool> {
        let name = self.record_name(name)?;
        self.shared
            .backend
            .delete_record(&name)
            .await
            .map_err(|e| self.record_context(e, &name))
    }

    /// `name` checked as a record's name, on a store that keeps records.
    fn record_name(&self, name: &str) -> Result<LockName> {
        let backend = &self.shared.backend;
        let context = |e: Error| e.with_backend(backend.kind()).with_lock(name);
        let checked = LockName::new(name).map_err(context)?;
        if !backend.capabilities().records {
            return Err(context(Error::new(
                ErrorKind::Unsupported,
                "this store cannot keep a record after its writer has gone",
            )));
        }
        Ok(checked)
    }

    fn record_context(&self, e: Error, name: &LockName) -> Error {
        e.with_backend(self.shared.backend.kind())
            .with_lock(name.as_str())
    }

    /// Who holds `name` now (owner and fencing token), read from the store;
    /// `Unsupported` on stores that cannot say (see [`Backend::holder`](crate::Backend::holder)).
    pub async fn holder(&self, name: &str) -> Result<Option<crate::Holder>> {
        let backend = &self.shared.backend;
        let context = |e: Error| e.with_backend(backend.kind()).with_lock(name);
        let name = LockName::new(name).map_err(context)?;
        backend.holder(&name).await.map_err(context)
    }

    /// What the store knows about lock `kind` of `name` now: the holders
    /// (owner, fencing token, side, when each took it and how much lease it
    /// has left, where the store keeps those), a semaphore's permits, and
    /// the waiters where [`Capabilities::inspect_waiters`] (in the order of
    /// grant on a fair store). The answer is read from the store, so it
    /// covers every process; it is a snapshot. `Unsupported` where
    /// [`Capabilities::inspect`] is false or the store does not offer
    /// `kind`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> omnilock_core::Result<()> {
    /// use omnilock_core::{LockKind, Locks, MemStore, Owner};
    /// let locks = Locks::new(MemStore::new());
    /// let owner = Owner::new("report-runner@host-7")?;
    /// let guard = locks.lock("nightly-report").owner(&owner).acquire().await?;
    /// let seen = locks.inspect("nightly-report", LockKind::Mutex).await?;
    /// assert_eq!(seen.holders[0].owner, owner);
    /// assert_eq!(seen.holders[0].token, guard.token());
    /// assert_eq!(seen.waiters.as_deref(), Some(&[][..]));
    /// # Ok(()) }
    /// ```
    pub async fn inspect(&self, name: &str, kind: LockKind) -> Result<Inspection> {
        let backend = &self.shared.backend;
        let context = |e: Error| {
            e.with_backend(backend.kind())
                .with_operation(Operation::Inspect)
                .with_lock(name)
        };
        let name = LockName::new(name).map_err(context)?;
        let caps = backend.capabilities();
        let offered = match kind {
            LockKind::Mutex => true,
            LockKind::Semaphore => caps.semaphore,
            LockKind::RwLock => caps.rw_lock,
        };
        if !caps.inspect || !offered {
            let what = if caps.inspect {
                format!("this store offers no {kind} locks")
            } else {
                "this store cannot report who holds a lock".to_string()
            };
            return Err(context(Error::new(ErrorKind::Unsupported, what)));
        }
        backend.inspect(&name, kind).await.map_err(context)
    }

    /// The held locks whose names start with `prefix` (`""` for all),
    /// sorted by name and kind, read from the store. `Unsupported` where
    /// [`Capabilities::list`] is false. A prefix follows the rules of a
    /// lock name (at most 256 bytes, no control characters) but may be
    /// empty.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> omnilock_core::Result<()> {
    /// use omnilock_core::{LockKind, Listed, Locks, MemStore};
    /// let locks = Locks::new(MemStore::new());
    /// let _a = locks.acquire("jobs/a").await?;
    /// let _b = locks.semaphore("jobs/b", 2).acquire().await?;
    /// let _c = locks.acquire("other").await?;
    /// assert_eq!(
    ///     locks.list("jobs/").await?,
    ///     [Listed::new("jobs/a", LockKind::Mutex), Listed::new("jobs/b", LockKind::Semaphore)]
    /// );
    /// # Ok(()) }
    /// ```
    pub async fn list(&self, prefix: &str) -> Result<Vec<Listed>> {
        let backend = &self.shared.backend;
        let context = |e: Error| {
            e.with_backend(backend.kind())
                .with_operation(Operation::List)
        };
        if !prefix.is_empty() {
            LockName::new(prefix).map_err(context)?;
        }
        if !backend.capabilities().list {
            return Err(context(Error::new(
                ErrorKind::Unsupported,
                "this store cannot list its locks",
            )));
        }
        let mut listed = backend.list(prefix).await.map_err(context)?;
        listed.sort();
        listed.dedup();
        Ok(listed)
    }

    /// Whether `token` is still the fencing token of the holder of the
    /// mutex `name`, asked of the store (Chubby's `CheckSequencer`): for a
    /// resource that cannot keep the highest token itself, the service in
    /// front of it asks before each write. `false` once the hold it came
    /// from was released, lost, broken or ran out, and when another holder
    /// took over; never `true` for a stale token. The answer is about the
    /// moment the store read it: a write after it is safe only for as long
    /// as the lease still runs (a [guarded write](https://github.com/omnilock/omnilock/blob/main/docs/fencing.md)
    /// closes that gap). `Unsupported` where
    /// [`Capabilities::check`](crate::Capabilities::check) is false.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> omnilock_core::Result<()> {
    /// use omnilock_core::{Locks, MemStore};
    /// let locks = Locks::new(MemStore::new());
    /// let guard = locks.acquire("ledger").await?;
    /// let token = guard.token(); // travels with the request to the service
    /// assert!(locks.check("ledger", token).await?);
    /// guard.release().await?;
    /// assert!(!locks.check("ledger", token).await?);
    /// # Ok(()) }
    /// ```
    pub async fn check(&self, name: &str, token: u64) -> Result<bool> {
        let backend = &self.shared.backend;
        let context = |e: Error| e.with_backend(backend.kind()).with_lock(name);
        let name = LockName::new(name).map_err(context)?;
        if !backend.capabilities().check {
            return Err(context(Error::new(
                ErrorKind::Unsupported,
                "this store cannot say whether a fencing token still holds the lock",
            )));
        }
        backend.check(&name, token).await.map_err(context)
    }

    /// A watch of who holds `name` (see
    /// [`Backend::watch_holder`](crate::Backend::watch_holder)); `None`
    /// where the store has none.
    pub(crate) async fn watch_holder(&self, name: &str) -> Result<Option<crate::HolderChange>> {
        let backend = &self.shared.backend;
        let context = |e: Error| e.with_backend(backend.kind()).with_lock(name);
        let name = LockName::new(name).map_err(context)?;
        backend.watch_holder(&name).await.map_err(context)
    }

    /// Closes the store's connections; guards still alive lose their locks.
    ///
    /// First waits (at most [`SETTLE_WITHIN`](crate::SETTLE_WITHIN)) for
    /// the clean-up still under way in this process (for every store it
    /// opened): a dropped waiter's place in line, an acquire undone, a
    /// Redlock release still reaching a slow node. A process that exits
    /// right after `close` leaves nothing of them behind.
    pub async fn close(&self) {
        self.shared
            .closed
            .store(true, std::sync::atomic::Ordering::SeqCst);
        crate::settle(crate::SETTLE_WITHIN).await;
        self.shared.backend.close().await;
    }
}

impl fmt::Debug for Locks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Locks")
            .field("backend", &self.shared.backend)
            .field("defaults", &self.defaults)
            .finish()
    }
}

/// Checks that `ttl` is a lease length every store accepts
/// ([`MIN_TTL`] to [`MAX_TTL`]): an [`crate::ErrorKind::InvalidConfig`] error
/// otherwise. [`Locks::with_ttl`] and [`LockRequest::ttl`] apply it; call it
/// to refuse a bad TTL before any I/O.
///
/// ```
/// use std::time::Duration;
/// assert!(omnilock_core::check_ttl(Duration::from_secs(15)).is_ok());
/// assert!(omnilock_core::check_ttl(Duration::from_millis(1)).is_err());
/// ```
pub fn check_ttl(ttl: Duration) -> Result<()> {
    if ttl < MIN_TTL || ttl > MAX_TTL {
        return Err(Error::config(format!(
            "lease TTL {ttl:?} is out of range ({MIN_TTL:?} to {MAX_TTL:?})"
        )));
    }
    Ok(())
}
