//! [`Locks`], the handle applications use, and [`LockRequest`], the builder
//! for one acquisition.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use tracing::Instrument;

use crate::backend::{AcquireRequest, Backend, Capabilities, Grant, Primitive};
use crate::error::{Error, ErrorKind, Operation, Result};
use crate::guard::LockGuard;
use crate::hold::Hold;
use crate::metrics;
use crate::name::{LockName, Owner};
use crate::renewal::Renewals;
use crate::signal::{LostNotifier, WaitNotice};
use crate::sync::lock_unpoisoned;

/// The lease TTL when neither the URL nor the acquisition sets one.
pub const DEFAULT_TTL: Duration = Duration::from_secs(15);
/// The shortest lease accepted: renewal runs every third of it.
pub const MIN_TTL: Duration = Duration::from_millis(100);
/// The longest lease accepted.
pub const MAX_TTL: Duration = Duration::from_secs(24 * 3600);

type HoldSlot = Arc<tokio::sync::Mutex<Weak<Hold>>>;

/// A reentrancy slot's key: the name, the owner and which lock of that name
/// (the mutex, or one side of the read-write lock; semaphore permits are
/// never re-entered and have no slot).
type SlotKey = (LockName, Owner, Primitive);

/// What every clone of a [`Locks`] handle shares: the backend and the holds
/// of named owners in this process (for reentrancy without a round trip).
pub(crate) struct Shared {
    pub(crate) backend: Arc<dyn Backend>,
    holds: Mutex<HashMap<SlotKey, HoldSlot>>,
    /// The holds of read-write locks by named owners, readable without
    /// waiting for a slot: whether an owner holds the other side.
    rw_holds: Mutex<HashMap<SlotKey, Weak<Hold>>>,
    /// The renewal schedule of every hold.
    pub(crate) renewals: Arc<Renewals>,
}

impl Shared {
    fn slot(&self, name: &LockName, owner: &Owner, primitive: Primitive) -> HoldSlot {
        let mut holds = lock_unpoisoned(&self.holds);
        holds
            .entry((name.clone(), owner.clone(), primitive))
            .or_default()
            .clone()
    }

    /// The live hold of `owner` on `name`'s read or write side in this
    /// process, if there is one.
    fn held(&self, name: &LockName, owner: &Owner, primitive: Primitive) -> Option<Arc<Hold>> {
        let rw_holds = lock_unpoisoned(&self.rw_holds);
        let hold = rw_holds.get(&(name.clone(), owner.clone(), primitive))?;
        hold.upgrade().filter(|hold| hold.is_held())
    }

    /// Records a new hold of a read-write lock (see [`Shared::held`]).
    fn remember_rw(&self, hold: &Arc<Hold>) {
        let request = &hold.request;
        if matches!(request.primitive, Primitive::Read | Primitive::Write) {
            let key = (
                request.name.clone(),
                request.owner.clone(),
                request.primitive,
            );
            lock_unpoisoned(&self.rw_holds).insert(key, Arc::downgrade(hold));
        }
    }

    /// Drops the reentrancy slot of a released hold unless someone is using it.
    pub(crate) fn forget(&self, hold: &Hold) {
        let mut holds = lock_unpoisoned(&self.holds);
        let key = (
            hold.request.name.clone(),
            hold.request.owner.clone(),
            hold.request.primitive,
        );
        if let Some(slot) = holds.get(&key) {
            if Arc::strong_count(slot) == 1 {
                holds.remove(&key);
            }
        }
        drop(holds);
        let mut rw_holds = lock_unpoisoned(&self.rw_holds);
        if rw_holds
            .get(&key)
            .is_some_and(|h| std::ptr::eq(h.as_ptr(), hold))
        {
            rw_holds.remove(&key);
        }
    }
}

/// Settings applied to every acquisition made through a handle.
#[derive(Clone, Debug)]
struct Defaults {
    ttl: Duration,
    owner: Option<Owner>,
    reentrant: bool,
    metrics_names: bool,
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
    shared: Arc<Shared>,
    defaults: Defaults,
}

impl Locks {
    /// Wraps a backend.
    pub fn new(backend: impl Backend) -> Self {
        Locks::from_arc(Arc::new(backend))
    }

    /// Wraps a shared backend.
    pub fn from_arc(backend: Arc<dyn Backend>) -> Self {
        Locks {
            shared: Arc::new(Shared {
                backend,
                holds: Mutex::new(HashMap::new()),
                rw_holds: Mutex::new(HashMap::new()),
                renewals: Arc::default(),
            }),
            defaults: Defaults {
                ttl: DEFAULT_TTL,
                owner: None,
                reentrant: true,
                metrics_names: false,
            },
        }
    }

    /// The backend, for the several-lock step of [`Locks::lock_all`].
    pub(crate) fn backend(&self) -> &Arc<dyn Backend> {
        &self.shared.backend
    }

    /// The guard of a grant the store has just given: renewal, the lost
    /// signal and release on drop start here. No await may come between
    /// the grant and this call (a cancellation there is the backend's to
    /// undo).
    pub(crate) fn guard_for(&self, request: AcquireRequest, grant: Grant) -> LockGuard {
        let labels = metrics::Labels::new(
            self.backend_kind(),
            request.name.as_str(),
            self.defaults.metrics_names,
        );
        let metrics = metrics::HoldMetrics::start(&labels, &request.lost);
        LockGuard::new(Hold::start(self.shared.clone(), request, grant, metrics))
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
    /// See `docs/observability.md`.
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
        ReadWriteLock {
            locks: self,
            name: name.to_string(),
        }
    }

    fn request(&self, name: &str, primitive: Primitive) -> LockRequest<'_> {
        LockRequest {
            locks: self,
            name: LockName::new(name),
            primitive,
            ttl: self.defaults.ttl,
            owner: self.defaults.owner.clone(),
            reentrant: self.defaults.reentrant,
            timeout: None,
            waiting: WaitNotice::none(),
        }
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

    /// Who holds `name` now (owner and fencing token), read from the store;
    /// `Unsupported` on stores that cannot say (see [`Backend::holder`]).
    pub async fn holder(&self, name: &str) -> Result<Option<crate::Holder>> {
        let backend = &self.shared.backend;
        let context = |e: Error| e.with_backend(backend.kind()).with_lock(name);
        let name = LockName::new(name).map_err(context)?;
        backend.holder(&name).await.map_err(context)
    }

    /// Closes the store's connections; guards still alive lose their locks.
    pub async fn close(&self) {
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

/// A read-write lock of one name (see [`Locks::rw_lock`]): many readers
/// or one writer.
///
/// Within one process, an owner re-enters its own read or write lock (as
/// with the mutex), and the owner holding the write lock may also take the
/// read lock: that read guard rides on the write hold, so the write lock is
/// freed only when both are released (there is no downgrade to a read
/// lock). An owner holding only the read lock who asks for the write lock
/// gets [`ErrorKind::WouldDeadlock`]: the write would wait for its own
/// read. In the store every acquisition is an entry of its own, so the same
/// owner in another process waits like anyone else.
#[derive(Debug, Clone)]
pub struct ReadWriteLock<'a> {
    locks: &'a Locks,
    name: String,
}

impl<'a> ReadWriteLock<'a> {
    /// Starts building an acquisition of the shared (read) side.
    pub fn read(&self) -> LockRequest<'a> {
        self.locks.request(&self.name, Primitive::Read)
    }

    /// Starts building an acquisition of the exclusive (write) side.
    pub fn write(&self) -> LockRequest<'a> {
        self.locks.request(&self.name, Primitive::Write)
    }
}

/// One acquisition being configured. Finish with [`acquire`](Self::acquire)
/// or [`try_acquire`](Self::try_acquire).
#[must_use = "a lock request does nothing until acquired"]
pub struct LockRequest<'a> {
    locks: &'a Locks,
    name: Result<LockName>,
    primitive: Primitive,
    ttl: Duration,
    owner: Option<Owner>,
    reentrant: bool,
    timeout: Option<Duration>,
    waiting: WaitNotice,
}

impl LockRequest<'_> {
    /// The lease TTL for this acquisition.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// Acquire as `owner` (see [`Owner`]); by default a fresh random owner.
    pub fn owner(mut self, owner: &Owner) -> Self {
        self.owner = Some(owner.clone());
        self
    }

    /// Whether the owner may re-enter a lock it holds (default: yes). When
    /// not, a re-acquire by the holder fails at once with
    /// [`ErrorKind::WouldDeadlock`].
    pub fn reentrant(mut self, reentrant: bool) -> Self {
        self.reentrant = reentrant;
        self
    }

    /// Gives up waiting after `timeout` with [`ErrorKind::Timeout`].
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Calls `callback` once, when the acquire starts to wait because the
    /// lock is busy (for fair stores: once its place in the queue is fixed).
    pub fn on_wait(mut self, callback: impl FnOnce() + Send + 'static) -> Self {
        self.waiting = WaitNotice::new(callback);
        self
    }

    /// Waits for the lock (up to the timeout, if one is set).
    ///
    /// Cancellation-safe: dropping the future leaves nothing behind in the
    /// store and does not delay the next waiter.
    pub async fn acquire(self) -> Result<LockGuard> {
        let guard = self.obtain(true).await?;
        Ok(guard.expect("a waiting acquire returns a guard or an error"))
    }

    /// Takes the lock only if that needs no waiting: `Ok(None)` when another
    /// owner holds it (or, on a fair store, when others are queued).
    pub async fn try_acquire(self) -> Result<Option<LockGuard>> {
        self.obtain(false).await
    }

    async fn obtain(mut self, wait: bool) -> Result<Option<LockGuard>> {
        let backend = self.locks.shared.backend.clone();
        let operation = if wait {
            Operation::Acquire
        } else {
            Operation::TryAcquire
        };
        let raw_name = self.name.as_ref().map(|n| n.to_string()).ok();
        let context = move |e: Error| {
            let e = e.with_backend(backend.kind()).with_operation(operation);
            match &raw_name {
                Some(name) => e.with_lock(name.as_str()),
                None => e,
            }
        };
        let name = self.name.clone().map_err(&context)?;
        check_ttl(self.ttl).map_err(&context)?;
        self.check_primitive().map_err(&context)?;
        let span = tracing::debug_span!(
            "omnilock.acquire",
            lock = %name,
            backend = self.locks.backend_kind(),
            primitive = self.primitive.describe(),
            wait,
        );
        let started = Instant::now();
        let labels = self.labels(&name);
        let (wait_clock, waiting) = metrics::WaitClock::watch(std::mem::take(&mut self.waiting));
        self.waiting = waiting;
        let timeout = self.timeout.filter(|_| wait);
        let attempt = self.attempt(name, wait).instrument(span);
        let result = match timeout {
            None => attempt.await,
            Some(limit) => match tokio::time::timeout(limit, attempt).await {
                Ok(result) => result,
                Err(_) => {
                    metrics::timed_out(&labels);
                    Err(Error::new(
                        ErrorKind::Timeout,
                        format!("lock not acquired within {limit:?}"),
                    ))
                }
            },
        };
        match &result {
            Ok(Some(guard)) => {
                metrics::granted(&labels, started, &wait_clock);
                tracing::debug!(
                    lock = %guard.name(),
                    token = guard.token(),
                    waited = ?started.elapsed(),
                    "omnilock acquired"
                )
            }
            Ok(None) => tracing::debug!("omnilock busy"),
            Err(e) => tracing::debug!(error = %e, "omnilock acquire failed"),
        }
        result.map_err(context)
    }

    /// Refuses, before any I/O, a semaphore of no permits and a primitive
    /// the store does not offer.
    fn check_primitive(&self) -> Result<()> {
        if self.primitive == (Primitive::Semaphore { permits: 0 }) {
            return Err(Error::config("a semaphore needs at least 1 permit"));
        }
        if !self.primitive.offered_by(&self.locks.capabilities()) {
            return Err(Error::new(
                ErrorKind::Unsupported,
                format!(
                    "the {} store offers no {}s (see Capabilities)",
                    self.locks.backend_kind(),
                    self.primitive.describe()
                ),
            ));
        }
        Ok(())
    }

    fn labels(&self, name: &LockName) -> metrics::Labels {
        let with_name = self.locks.defaults.metrics_names;
        metrics::Labels::new(self.locks.backend_kind(), name.as_str(), with_name)
    }

    async fn attempt(self, name: LockName, wait: bool) -> Result<Option<LockGuard>> {
        let owner = match (&self.owner, self.primitive) {
            (Some(owner), Primitive::Mutex | Primitive::Read | Primitive::Write) => owner.clone(),
            // A semaphore permit is never re-entered.
            (Some(owner), Primitive::Semaphore { .. }) => {
                return self.in_store(name, owner.clone(), wait).await
            }
            (None, _) => return self.in_store(name, Owner::random(), wait).await,
        };
        let shared = &self.locks.shared;
        match self.primitive {
            // The write holder may read: the read guard rides on its hold.
            Primitive::Read => {
                if let Some(write) = shared.held(&name, &owner, Primitive::Write) {
                    if write.enter(true)? {
                        return Ok(Some(LockGuard::new(write)));
                    }
                }
            }
            Primitive::Write => {
                if shared.held(&name, &owner, Primitive::Read).is_some() {
                    return Err(Error::new(
                        ErrorKind::WouldDeadlock,
                        format!(
                            "owner {owner} holds the read lock; its write lock would wait for \
                             that read lock for ever (release the read lock first)"
                        ),
                    ));
                }
            }
            Primitive::Mutex | Primitive::Semaphore { .. } => {}
        }
        // A named owner may already hold the lock in this process: re-enter
        // without a round trip. The slot's mutex serializes a named owner's
        // first acquisition, so two tasks of one owner never queue against
        // each other in the store.
        let slot = shared.slot(&name, &owner, self.primitive);
        let mut current = if wait {
            slot.lock_owned().await
        } else {
            match slot.try_lock_owned() {
                Ok(current) => current,
                // The same owner is acquiring it right now: it is busy.
                Err(_) => return Ok(None),
            }
        };
        if let Some(hold) = current.upgrade() {
            if hold.enter(self.reentrant)? {
                return Ok(Some(LockGuard::new(hold)));
            }
        }
        let guard = self.in_store(name, owner, wait).await?;
        if let Some(guard) = &guard {
            *current = Arc::downgrade(guard.hold());
            shared.remember_rw(guard.hold());
        }
        Ok(guard)
    }

    async fn in_store(
        &self,
        name: LockName,
        owner: Owner,
        wait: bool,
    ) -> Result<Option<LockGuard>> {
        let shared = &self.locks.shared;
        let request = AcquireRequest {
            name,
            primitive: self.primitive,
            owner,
            ttl: self.ttl,
            reentrant: self.reentrant && self.primitive == Primitive::Mutex,
            lost: LostNotifier::new(),
            waiting: self.waiting.clone(),
        };
        let grant = if wait {
            Some(shared.backend.acquire(&request).await?)
        } else {
            shared.backend.try_acquire(&request).await?
        };
        // No await between the grant and `Hold::start`: a cancellation here
        // is handled by the backend's own drop path.
        Ok(grant.map(|grant| self.locks.guard_for(request, grant)))
    }
}
