//! A synchronous API for programs without an async runtime, in the manner of
//! `reqwest::blocking`: the same stores, semantics and errors as the async
//! API, with calls that block the calling thread until they are done.
//!
//! ```
//! use std::time::Duration;
//!
//! let locks = omnilock::blocking::connect("mem://blocking-intro?ttl=10s")?;
//! let guard = locks.lock("billing/close-month").timeout(Duration::from_secs(30)).acquire()?;
//! println!("token {}", guard.token());
//! guard.release()?;
//! # Ok::<(), omnilock::Error>(())
//! ```
//!
//! # The runtime inside
//! Each [`connect`] starts a small tokio runtime of its own (one worker
//! thread, named `omnilock-blocking`) that renews leases, watches for lost
//! locks and drives the store's connections. Every clone of the [`Locks`]
//! handle and every guard share it; it stops when the last of them is
//! dropped. Connect once and clone the handle rather than connecting per
//! call. A handle can be used from many threads at once: each call blocks
//! only its own thread.
//!
//! # Not inside an async runtime
//! Blocking a thread of an async runtime stalls every task scheduled on it,
//! and on omnilock's own runtime it could deadlock. So every blocking call
//! made on a thread that is inside a tokio runtime (a task, a runtime worker,
//! or `tokio::task::spawn_blocking`) returns at once an error of kind
//! [`ErrorKind::WouldDeadlock`] saying so, instead of blocking. Use the async
//! API ([`crate::connect`]) there, or call from a thread of your own
//! (`std::thread::spawn`).
//!
//! A guard dropped on such a thread cannot wait for its release: it releases
//! on a short-lived thread of its own instead, so dropping never blocks a
//! runtime, deadlocks or panics (see [`LockGuard`]).
//!
//! Leader elections are here too ([`Locks::election`]), without the async
//! API's `observe` (poll [`Election::leader`] instead).

use std::fmt;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;

use crate::{
    lock_unpoisoned, Capabilities, Error, ErrorKind, Holder, LockName, Operation, Owner, Primitive,
    Result,
};

/// How long dropping the last handle waits for the runtime's threads to stop.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(1);

/// Connects to the store named by `url` (the same URLs as
/// [`crate::connect`]), starting the runtime this handle and its clones
/// share.
///
/// Errors: those of [`crate::connect`]; [`ErrorKind::Unavailable`] if the
/// runtime cannot start; [`ErrorKind::WouldDeadlock`] when called inside an
/// async runtime (see the [module docs](self)).
///
/// ```
/// let locks = omnilock::blocking::connect("mem://")?;
/// assert_eq!(locks.backend_kind(), "mem");
/// let err = omnilock::blocking::connect("nosuch://host").unwrap_err();
/// assert_eq!(err.kind(), omnilock::ErrorKind::InvalidConfig);
/// # Ok::<(), omnilock::Error>(())
/// ```
pub fn connect(url: &str) -> Result<Locks> {
    refuse_inside_async(Some(Operation::Connect))?;
    let runtime = Runtime::start()?;
    let inner = runtime.block_on(Operation::Connect, crate::connect(url))??;
    Ok(Locks { inner, runtime })
}

/// Whether this thread is inside a tokio runtime, where blocking is refused.
fn inside_async() -> bool {
    tokio::runtime::Handle::try_current().is_ok()
}

fn refuse_inside_async(operation: Option<Operation>) -> Result<()> {
    if inside_async() {
        let err = Error::new(
            ErrorKind::WouldDeadlock,
            "omnilock::blocking was called inside an async runtime, where blocking would \
             stall (or deadlock) it: use the async API (omnilock::connect) there, or call \
             from a thread of your own (std::thread::spawn)",
        )
        .with_retryable(false);
        return Err(match operation {
            Some(operation) => err.with_operation(operation),
            None => err,
        });
    }
    Ok(())
}

/// The runtime one [`connect`] started, shared by its handles and guards.
struct Runtime {
    /// `None` only while being dropped.
    tokio: Option<tokio::runtime::Runtime>,
}

impl Runtime {
    fn start() -> Result<Arc<Self>> {
        // One worker is plenty: it only renews leases, watches signals and
        // drives connections; the callers' threads poll their own calls.
        let tokio = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("omnilock-blocking")
            .enable_all()
            .build()
            .map_err(|e| {
                Error::unavailable(format!("cannot start omnilock's runtime: {e}"))
                    .with_operation(Operation::Connect)
            })?;
        Ok(Arc::new(Runtime { tokio: Some(tokio) }))
    }

    fn tokio(&self) -> &tokio::runtime::Runtime {
        self.tokio
            .as_ref()
            .expect("the runtime lives until dropped")
    }

    /// Runs `future` to completion on the calling thread; refused inside an
    /// async runtime.
    fn block_on<F: Future>(
        &self,
        operation: impl Into<Option<Operation>>,
        future: F,
    ) -> Result<F::Output> {
        refuse_inside_async(operation.into())?;
        Ok(self.tokio().block_on(future))
    }

    fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) -> JoinHandle<()> {
        self.tokio().spawn(task)
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        let Some(tokio) = self.tokio.take() else {
            return;
        };
        // Waiting for the worker to stop is not allowed on a runtime thread
        // (tokio panics), and the last handle may well be dropped there, e.g.
        // by an `on_lost` callback that owned it.
        if inside_async() {
            tokio.shutdown_background();
        } else {
            tokio.shutdown_timeout(SHUTDOWN_GRACE);
        }
    }
}

impl fmt::Debug for Runtime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Runtime")
    }
}

/// A handle to one lock store, for synchronous code: the blocking
/// counterpart of [`crate::Locks`]. Cheap to clone; clones share the
/// connections and the runtime. Made by [`connect`].
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
    inner: crate::Locks,
    runtime: Arc<Runtime>,
}

impl Locks {
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
        self.request(name, Primitive::Mutex)
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
        self.request(name, Primitive::Semaphore { permits })
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
        ReadWriteLock {
            locks: self,
            name: name.to_string(),
        }
    }

    fn request(&self, name: &str, primitive: Primitive) -> LockRequest<'_> {
        LockRequest {
            locks: self,
            name: name.to_string(),
            primitive,
            ttl: None,
            owner: None,
            reentrant: None,
            timeout: None,
            on_wait: None,
        }
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

/// One acquisition being configured: the blocking counterpart of
/// [`crate::LockRequest`], with the same options. Finish with
/// [`acquire`](Self::acquire) or [`try_acquire`](Self::try_acquire).
///
/// ```
/// use std::time::Duration;
/// let locks = omnilock::blocking::connect("mem://")?;
/// let guard = locks.lock("a").ttl(Duration::from_secs(10)).try_acquire()?;
/// assert!(guard.is_some());
/// # Ok::<(), omnilock::Error>(())
/// ```
#[must_use = "a lock request does nothing until acquired"]
pub struct LockRequest<'a> {
    locks: &'a Locks,
    name: String,
    primitive: Primitive,
    ttl: Option<Duration>,
    owner: Option<Owner>,
    reentrant: Option<bool>,
    timeout: Option<Duration>,
    on_wait: Option<Box<dyn FnOnce() + Send + 'static>>,
}

impl<'a> LockRequest<'a> {
    /// The lease TTL for this acquisition.
    ///
    /// ```
    /// use std::time::Duration;
    /// let locks = omnilock::blocking::connect("mem://")?;
    /// let guard = locks.lock("a").ttl(Duration::from_secs(5)).acquire()?;
    /// assert_eq!(guard.ttl(), Duration::from_secs(5));
    /// # Ok::<(), omnilock::Error>(())
    /// ```
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// Acquire as `owner` (see [`Owner`]); by default a fresh random owner.
    ///
    /// ```
    /// let locks = omnilock::blocking::connect("mem://")?;
    /// let me = omnilock::Owner::random();
    /// let guard = locks.lock("a").owner(&me).acquire()?;
    /// assert_eq!(guard.owner(), &me);
    /// # Ok::<(), omnilock::Error>(())
    /// ```
    pub fn owner(mut self, owner: &Owner) -> Self {
        self.owner = Some(owner.clone());
        self
    }

    /// Whether the owner may re-enter a lock it holds (default: the
    /// handle's, normally yes). When not, a re-acquire by the holder fails
    /// at once with [`ErrorKind::WouldDeadlock`].
    ///
    /// ```
    /// let locks = omnilock::blocking::connect("mem://")?;
    /// let me = omnilock::Owner::random();
    /// let held = locks.lock("a").owner(&me).acquire()?;
    /// let err = locks.lock("a").owner(&me).reentrant(false).acquire().unwrap_err();
    /// assert_eq!(err.kind(), omnilock::ErrorKind::WouldDeadlock);
    /// # drop(held);
    /// # Ok::<(), omnilock::Error>(())
    /// ```
    pub fn reentrant(mut self, reentrant: bool) -> Self {
        self.reentrant = Some(reentrant);
        self
    }

    /// Gives up waiting after `timeout` with [`ErrorKind::Timeout`].
    ///
    /// ```
    /// use std::time::Duration;
    /// let locks = omnilock::blocking::connect("mem://")?;
    /// let held = locks.acquire("busy")?;
    /// let err = locks.lock("busy").timeout(Duration::from_millis(50)).acquire().unwrap_err();
    /// assert_eq!(err.kind(), omnilock::ErrorKind::Timeout);
    /// # drop(held);
    /// # Ok::<(), omnilock::Error>(())
    /// ```
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Calls `callback` once, when the acquire starts to wait because the
    /// lock is busy. It may run on the runtime's thread: keep it short and do
    /// not block in it (sending on a channel is the usual thing to do).
    ///
    /// ```
    /// use std::time::Duration;
    /// let locks = omnilock::blocking::connect("mem://")?;
    /// let held = locks.acquire("queue")?;
    /// let (tx, rx) = std::sync::mpsc::channel();
    /// let waiter = {
    ///     let locks = locks.clone();
    ///     std::thread::spawn(move || locks.lock("queue").on_wait(move || tx.send(()).unwrap()).acquire())
    /// };
    /// rx.recv_timeout(Duration::from_secs(10)).expect("the waiter waits");
    /// drop(held);
    /// assert!(waiter.join().unwrap().is_ok());
    /// # Ok::<(), omnilock::Error>(())
    /// ```
    pub fn on_wait(mut self, callback: impl FnOnce() + Send + 'static) -> Self {
        self.on_wait = Some(Box::new(callback));
        self
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
        let (locks, request) = self.into_async();
        let guard = locks
            .runtime
            .block_on(Operation::Acquire, request.acquire())??;
        Ok(locks.guard(guard))
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
        let (locks, request) = self.into_async();
        let guard = locks
            .runtime
            .block_on(Operation::TryAcquire, request.try_acquire())??;
        Ok(guard.map(|guard| locks.guard(guard)))
    }

    fn into_async(self) -> (&'a Locks, crate::LockRequest<'a>) {
        let locks = self.locks;
        let mut request = match self.primitive {
            Primitive::Mutex => locks.inner.lock(&self.name),
            Primitive::Semaphore { permits } => locks.inner.semaphore(&self.name, permits),
            Primitive::Read => locks.inner.rw_lock(&self.name).read(),
            Primitive::Write => locks.inner.rw_lock(&self.name).write(),
        };
        if let Some(ttl) = self.ttl {
            request = request.ttl(ttl);
        }
        if let Some(owner) = &self.owner {
            request = request.owner(owner);
        }
        if let Some(reentrant) = self.reentrant {
            request = request.reentrant(reentrant);
        }
        if let Some(timeout) = self.timeout {
            request = request.timeout(timeout);
        }
        if let Some(callback) = self.on_wait {
            request = request.on_wait(callback);
        }
        (locks, request)
    }
}

/// A read-write lock of one name (see [`crate::ReadWriteLock`]): many
/// readers or one writer.
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

impl fmt::Debug for LockRequest<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("blocking::LockRequest")
            .field("name", &self.name)
            .field("ttl", &self.ttl)
            .field("owner", &self.owner)
            .field("reentrant", &self.reentrant)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl Locks {
    fn guard(&self, inner: crate::LockGuard) -> LockGuard {
        LockGuard {
            holding: Holding::new(inner, self.runtime.clone()),
        }
    }
}

/// What a blocking guard or leadership wraps: something held that can be
/// lost and must be given back.
trait Held: Send + 'static {
    fn lost(&self) -> impl Future<Output = Error> + Send + 'static;
    fn give_back(self) -> impl Future<Output = Result<()>>;
}

impl Held for crate::LockGuard {
    fn lost(&self) -> impl Future<Output = Error> + Send + 'static {
        crate::LockGuard::lost(self)
    }

    fn give_back(self) -> impl Future<Output = Result<()>> {
        self.release()
    }
}

impl Held for crate::Leadership {
    fn lost(&self) -> impl Future<Output = Error> + Send + 'static {
        crate::Leadership::lost(self)
    }

    fn give_back(self) -> impl Future<Output = Result<()>> {
        self.resign()
    }
}

/// The machinery shared by [`LockGuard`] and [`Leadership`]: the lost
/// signal as a channel or a callback, giving back on request, and giving
/// back on drop without blocking a runtime.
struct Holding<T: Held> {
    /// `None` only once given back or dropped.
    inner: Option<T>,
    /// Tasks forwarding the lost signal; they never end by themselves after
    /// a clean release, so the holding stops them.
    watchers: Mutex<Vec<JoinHandle<()>>>,
    runtime: Arc<Runtime>,
}

impl<T: Held> Holding<T> {
    fn new(inner: T, runtime: Arc<Runtime>) -> Self {
        Holding {
            inner: Some(inner),
            watchers: Mutex::new(Vec::new()),
            runtime,
        }
    }

    fn inner(&self) -> &T {
        self.inner
            .as_ref()
            .expect("only taken out by give_back or drop, which end the holding")
    }

    fn lost_receiver(&self) -> mpsc::Receiver<Error> {
        let (tx, rx) = mpsc::channel();
        let lost = self.inner().lost();
        self.watch(async move {
            let _ = tx.send(lost.await);
        });
        rx
    }

    fn on_lost(&self, callback: impl FnOnce(Error) + Send + 'static) {
        let lost = self.inner().lost();
        self.watch(async move {
            let loss = lost.await;
            // Not on the runtime's only worker: the callback may block, or
            // call this API, which refuses to run on a runtime thread.
            let spawned = std::thread::Builder::new()
                .name("omnilock-on-lost".into())
                .spawn(move || callback(loss));
            if let Err(e) = spawned {
                tracing::warn!(error = %e, "omnilock: cannot start a thread for on_lost");
            }
        });
    }

    fn watch(&self, task: impl Future<Output = ()> + Send + 'static) {
        let task = self.runtime.spawn(task);
        lock_unpoisoned(&self.watchers).push(task);
    }

    fn stop_watchers(&self) {
        for task in lock_unpoisoned(&self.watchers).drain(..) {
            task.abort();
        }
    }

    /// The loss, if it has happened (without waiting).
    fn loss(&self) -> Option<Error> {
        let lost = std::pin::pin!(self.inner().lost());
        let mut context = std::task::Context::from_waker(std::task::Waker::noop());
        match lost.poll(&mut context) {
            std::task::Poll::Ready(loss) => Some(loss),
            std::task::Poll::Pending => None,
        }
    }

    fn give_back(mut self) -> Result<()> {
        // Checked first: refused here, the drop gives it back instead.
        refuse_inside_async(Some(Operation::Release))?;
        self.stop_watchers();
        let Some(inner) = self.inner.take() else {
            return Ok(());
        };
        self.runtime
            .block_on(Operation::Release, inner.give_back())?
    }
}

impl<T: Held> Drop for Holding<T> {
    fn drop(&mut self) {
        self.stop_watchers();
        let Some(inner) = self.inner.take() else {
            return;
        };
        let runtime = self.runtime.clone();
        if !inside_async() {
            // Given back before `drop` returns, as blocking code expects: the
            // next `acquire` anywhere can succeed at once. A panic in here
            // (tokio's thread-locals already gone at thread exit) must not
            // escape a destructor; the core guard then releases in the
            // background or the lease frees the lock.
            let released = catch_unwind(AssertUnwindSafe(move || {
                let _ = runtime.tokio().block_on(inner.give_back());
            }));
            if released.is_err() {
                tracing::warn!("omnilock: could not release on drop; the lease frees the lock");
            }
            return;
        }
        // On a runtime thread (possibly omnilock's own worker, which the
        // release needs), blocking could stall or deadlock: release on a
        // thread of its own. If none can start, the closure and the core
        // guard in it are dropped, and the core guard releases in the
        // background.
        let spawned = std::thread::Builder::new()
            .name("omnilock-release".into())
            .spawn(move || {
                let _ = runtime.tokio().block_on(inner.give_back());
            });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "omnilock: cannot start a thread to release on drop");
        }
    }
}

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

    fn loss(&self) -> Option<Error> {
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
        match &self.holding.inner {
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

impl Locks {
    /// A leader election named `name` on this store: the blocking
    /// counterpart of [`crate::Locks::election`] (same store requirements:
    /// see [`Capabilities::election`]).
    ///
    /// ```
    /// let locks = omnilock::blocking::connect("mem://")?;
    /// let election = locks.election("scheduler")?;
    /// let leadership = election.campaign("10.0.0.7:8080")?;
    /// assert_eq!(election.leader()?.map(|l| l.value), Some("10.0.0.7:8080".to_string()));
    /// leadership.resign()?;
    /// # Ok::<(), omnilock::Error>(())
    /// ```
    pub fn election(&self, name: &str) -> Result<Election> {
        Ok(Election {
            inner: self.inner.election(name)?,
            runtime: self.runtime.clone(),
        })
    }
}

/// A leader election, for synchronous code: the blocking counterpart of
/// [`crate::Election`]. Made by [`Locks::election`]. To follow who leads,
/// call [`leader`](Self::leader) now and then (the async API's `observe`
/// is a loop doing just that).
///
/// ```
/// let locks = omnilock::blocking::connect("mem://")?;
/// let election = locks.election("scheduler")?;
/// assert!(election.leader()?.is_none());
/// # Ok::<(), omnilock::Error>(())
/// ```
#[derive(Clone)]
pub struct Election {
    inner: crate::Election,
    runtime: Arc<Runtime>,
}

impl Election {
    /// Waits to become leader, announcing `value` (at most
    /// [`crate::MAX_ELECTION_VALUE_BYTES`] bytes, no
    /// control characters).
    ///
    /// ```
    /// let locks = omnilock::blocking::connect("mem://")?;
    /// let leadership = locks.election("jobs")?.campaign("worker-1")?;
    /// assert!(leadership.is_leader());
    /// # Ok::<(), omnilock::Error>(())
    /// ```
    pub fn campaign(&self, value: &str) -> Result<Leadership> {
        self.candidate(value).campaign()
    }

    /// A candidacy with options (TTL, timeout, a "now waiting" callback).
    ///
    /// ```
    /// use std::time::Duration;
    /// let locks = omnilock::blocking::connect("mem://")?;
    /// let election = locks.election("jobs")?;
    /// let leader = election.campaign("worker-1")?;
    /// let err = election.candidate("worker-2").timeout(Duration::from_millis(50)).campaign().unwrap_err();
    /// assert_eq!(err.kind(), omnilock::ErrorKind::Timeout);
    /// # drop(leader);
    /// # Ok::<(), omnilock::Error>(())
    /// ```
    pub fn candidate(&self, value: &str) -> Candidate<'_> {
        Candidate {
            election: self,
            value: value.to_string(),
            ttl: None,
            timeout: None,
            on_wait: None,
        }
    }

    /// Who leads now, read from the store.
    ///
    /// ```
    /// let locks = omnilock::blocking::connect("mem://")?;
    /// let election = locks.election("jobs")?;
    /// let me = election.campaign("worker-1")?;
    /// let leader = election.leader()?.expect("someone leads");
    /// assert_eq!(leader.term, me.term());
    /// # Ok::<(), omnilock::Error>(())
    /// ```
    pub fn leader(&self) -> Result<Option<crate::Leader>> {
        self.runtime.block_on(None, self.inner.leader())?
    }
}

impl fmt::Debug for Election {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("blocking::Election")
            .field("inner", &self.inner)
            .finish()
    }
}

/// How one candidate campaigns; see [`Election::candidate`].
#[must_use = "a candidacy does nothing until it campaigns"]
pub struct Candidate<'a> {
    election: &'a Election,
    value: String,
    ttl: Option<Duration>,
    timeout: Option<Duration>,
    on_wait: Option<Box<dyn FnOnce() + Send + 'static>>,
}

impl Candidate<'_> {
    /// The leadership lease: a dead leader is replaced this long after it
    /// stopped renewing (default: the handle's TTL).
    ///
    /// ```
    /// use std::time::Duration;
    /// let locks = omnilock::blocking::connect("mem://")?;
    /// let leadership = locks.election("e")?.candidate("v").ttl(Duration::from_secs(5)).campaign()?;
    /// # drop(leadership);
    /// # Ok::<(), omnilock::Error>(())
    /// ```
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// Gives up after `timeout` with [`ErrorKind::Timeout`] (withdrawing
    /// the candidacy).
    ///
    /// ```
    /// use std::time::Duration;
    /// let locks = omnilock::blocking::connect("mem://")?;
    /// let leadership = locks.election("e")?.candidate("v").timeout(Duration::from_secs(5)).campaign()?;
    /// # drop(leadership);
    /// # Ok::<(), omnilock::Error>(())
    /// ```
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Runs `callback` once the candidate is queued behind a leader. It may
    /// run on the runtime's thread: keep it short and do not block in it.
    ///
    /// ```
    /// let locks = omnilock::blocking::connect("mem://")?;
    /// let leadership = locks.election("e")?.candidate("v").on_wait(|| println!("queued")).campaign()?;
    /// # drop(leadership);
    /// # Ok::<(), omnilock::Error>(())
    /// ```
    pub fn on_wait(mut self, callback: impl FnOnce() + Send + 'static) -> Self {
        self.on_wait = Some(Box::new(callback));
        self
    }

    /// Waits until this candidate leads (up to the timeout, if one is set).
    ///
    /// ```
    /// let locks = omnilock::blocking::connect("mem://")?;
    /// let leadership = locks.election("e")?.candidate("v").campaign()?;
    /// assert_eq!(leadership.value(), "v");
    /// # Ok::<(), omnilock::Error>(())
    /// ```
    pub fn campaign(self) -> Result<Leadership> {
        let election = self.election;
        let mut candidate = election.inner.candidate(&self.value);
        if let Some(ttl) = self.ttl {
            candidate = candidate.ttl(ttl);
        }
        if let Some(callback) = self.on_wait {
            candidate = candidate.on_wait(callback);
        }
        let timeout = self.timeout;
        let campaign = async move {
            match timeout {
                None => candidate.campaign().await,
                Some(limit) => tokio::time::timeout(limit, candidate.campaign())
                    .await
                    .unwrap_or_else(|_| {
                        Err(
                            Error::new(ErrorKind::Timeout, format!("not elected within {limit:?}"))
                                .with_operation(Operation::Acquire),
                        )
                    }),
            }
        };
        let leadership = election.runtime.block_on(Operation::Acquire, campaign)??;
        Ok(Leadership {
            holding: Holding::new(leadership, election.runtime.clone()),
        })
    }
}

impl fmt::Debug for Candidate<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("blocking::Candidate")
            .field("value", &self.value)
            .field("ttl", &self.ttl)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// This client's leadership, for synchronous code: the blocking
/// counterpart of [`crate::Leadership`]. It ends with
/// [`resign`](Self::resign), on drop (resigning before `drop` returns, as
/// [`LockGuard`] releases), or when lost.
///
/// ```
/// use std::time::Duration;
/// let locks = omnilock::blocking::connect("mem://")?;
/// let leadership = locks.election("e")?.campaign("me")?;
/// let lost = leadership.lost_receiver();
/// assert!(lost.recv_timeout(Duration::from_millis(10)).is_err()); // still leading
/// leadership.resign()?;
/// # Ok::<(), omnilock::Error>(())
/// ```
#[must_use = "dropping the leadership resigns at once"]
pub struct Leadership {
    holding: Holding<crate::Leadership>,
}

impl Leadership {
    /// The value this leader campaigned with.
    ///
    /// ```
    /// let locks = omnilock::blocking::connect("mem://")?;
    /// assert_eq!(locks.election("e")?.campaign("me")?.value(), "me");
    /// # Ok::<(), omnilock::Error>(())
    /// ```
    pub fn value(&self) -> &str {
        self.holding.inner().value()
    }

    /// The term: the fencing token of the leadership; it rises with every
    /// new leader.
    ///
    /// ```
    /// let locks = omnilock::blocking::connect("mem://")?;
    /// let election = locks.election("e")?;
    /// let first = election.campaign("a")?.term();
    /// let second = election.campaign("b")?.term();
    /// assert!(second > first);
    /// # Ok::<(), omnilock::Error>(())
    /// ```
    pub fn term(&self) -> u64 {
        self.holding.inner().term()
    }

    /// Whether this client still surely leads.
    ///
    /// ```
    /// let locks = omnilock::blocking::connect("mem://")?;
    /// assert!(locks.election("e")?.campaign("me")?.is_leader());
    /// # Ok::<(), omnilock::Error>(())
    /// ```
    pub fn is_leader(&self) -> bool {
        self.holding.inner().is_leader()
    }

    /// A channel that receives the loss if leadership is lost without
    /// resigning; disconnects after a resignation (see
    /// [`LockGuard::lost_receiver`]).
    ///
    /// ```
    /// use std::time::Duration;
    /// let locks = omnilock::blocking::connect("mem://")?;
    /// let leadership = locks.election("e")?.campaign("me")?;
    /// let lost = leadership.lost_receiver();
    /// locks.break_lock("election/e")?;
    /// assert!(lost.recv_timeout(Duration::from_secs(10)).is_ok());
    /// # Ok::<(), omnilock::Error>(())
    /// ```
    pub fn lost_receiver(&self) -> mpsc::Receiver<Error> {
        self.holding.lost_receiver()
    }

    /// Calls `callback` with the loss if leadership is lost without
    /// resigning, on a thread of its own (see [`LockGuard::on_lost`]).
    ///
    /// ```
    /// let locks = omnilock::blocking::connect("mem://")?;
    /// let leadership = locks.election("e")?.campaign("me")?;
    /// leadership.on_lost(|loss| eprintln!("no longer leader: {loss}"));
    /// # Ok::<(), omnilock::Error>(())
    /// ```
    pub fn on_lost(&self, callback: impl FnOnce(Error) + Send + 'static) {
        self.holding.on_lost(callback)
    }

    /// Steps down and waits for the store to confirm; the next candidate in
    /// line becomes leader.
    ///
    /// ```
    /// let locks = omnilock::blocking::connect("mem://")?;
    /// let election = locks.election("e")?;
    /// election.campaign("me")?.resign()?;
    /// assert!(election.leader()?.is_none());
    /// # Ok::<(), omnilock::Error>(())
    /// ```
    pub fn resign(self) -> Result<()> {
        self.holding.give_back()
    }
}

impl fmt::Debug for Leadership {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.holding.inner {
            Some(inner) => f
                .debug_struct("blocking::Leadership")
                .field("value", &inner.value())
                .field("term", &inner.term())
                .finish(),
            None => f.write_str("blocking::Leadership(resigned)"),
        }
    }
}
