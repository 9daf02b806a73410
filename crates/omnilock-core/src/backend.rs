//! The contract a store implements. Everything else (reentrancy within a
//! process, renewal, the lost signal, release on drop, timeouts) is built on
//! top of it once, in this crate.

use std::fmt;
use std::ops::Deref;
use std::time::{Duration, Instant};

use async_trait::async_trait;

use crate::error::{Error, ErrorKind, Result};
use crate::inspect::{Inspection, Listed, LockKind};
use crate::name::{LockName, Owner};
use crate::record::Record;
use crate::signal::{LostNotifier, WaitNotice};

pub use crate::capabilities::Capabilities;

/// A read-write lock's capacity, and a writer's weight: readers never add
/// up to it, and stores that compute in doubles (Lua) keep it exact.
pub const RW_CAPACITY: u64 = 1 << 40;

/// How one acquisition of a semaphore or read-write lock counts: its
/// weight against the capacity, under the grant rule every store follows
/// (see [`Backend`] and [`Primitive::share`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Share {
    /// `sem` or `rw`: the key family the entries live under.
    pub family: &'static str,
    /// How much of the capacity the entry takes: 1 for a permit or a
    /// reader, the whole capacity for a writer.
    pub weight: u64,
    /// A semaphore's permits, or [`RW_CAPACITY`].
    pub capacity: u64,
}

/// What an acquisition takes. Each kind has its own namespace in the store:
/// the mutex `a`, the semaphore `a` and the read-write lock `a` are three
/// unrelated things.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Primitive {
    /// The lock: one holder (who may re-enter it).
    #[default]
    Mutex,
    /// One permit of a counting semaphore with this many permits. Every
    /// acquisition is a permit of its own (never reentrant); fencing tokens
    /// rise across all permits of the name. The store records `permits`
    /// while the semaphore has holders or waiters, and refuses a different
    /// number with `Conflict`.
    Semaphore {
        /// How many holders the semaphore admits at once (at least 1).
        permits: u32,
    },
    /// The shared side of a read-write lock: held together with other
    /// readers, never with a writer.
    Read,
    /// The exclusive side of a read-write lock: held alone.
    Write,
}

impl Primitive {
    /// A short name for messages: `mutex`, `semaphore`, `read lock`,
    /// `write lock`.
    pub fn describe(self) -> &'static str {
        match self {
            Primitive::Mutex => "mutex",
            Primitive::Semaphore { .. } => "semaphore",
            Primitive::Read => "read lock",
            Primitive::Write => "write lock",
        }
    }

    /// How an acquisition of a semaphore or a read-write lock counts under
    /// the grant rule (see [`Backend`]); `None` for the mutex. Backends key
    /// their entries by [`Share::family`], so the semaphore and the
    /// read-write lock of one name stay apart.
    ///
    /// ```
    /// use omnilock_core::Primitive;
    /// let permit = Primitive::Semaphore { permits: 4 }.share().unwrap();
    /// assert_eq!((permit.family, permit.weight, permit.capacity), ("sem", 1, 4));
    /// let writer = Primitive::Write.share().unwrap();
    /// assert_eq!(writer.weight, writer.capacity);
    /// assert!(Primitive::Mutex.share().is_none());
    /// ```
    pub fn share(self) -> Option<Share> {
        let (family, weight, capacity) = match self {
            Primitive::Mutex => return None,
            Primitive::Semaphore { permits } => ("sem", 1, u64::from(permits)),
            Primitive::Read => ("rw", 1, RW_CAPACITY),
            Primitive::Write => ("rw", RW_CAPACITY, RW_CAPACITY),
        };
        Some(Share {
            family,
            weight,
            capacity,
        })
    }

    /// Whether `capabilities` offer this primitive.
    pub fn offered_by(self, capabilities: &Capabilities) -> bool {
        match self {
            Primitive::Mutex => true,
            Primitive::Semaphore { .. } => capabilities.semaphore,
            Primitive::Read | Primitive::Write => capabilities.rw_lock,
        }
    }
}

/// The identity of one hold: which lock, taken how and by whom. It is all
/// that [`Backend::release`] and [`Backend::renew`] are given besides the
/// grant; an acquisition's callbacks stay with the [`AcquireRequest`] that
/// carries it.
///
/// ```
/// use std::time::Duration;
/// use omnilock_core::{LockName, LockSpec, Owner, Primitive};
/// let spec = LockSpec {
///     name: LockName::new("reports/daily")?,
///     primitive: Primitive::Mutex,
///     owner: Owner::random(),
///     ttl: Duration::from_secs(15),
///     reentrant: true,
/// };
/// assert_eq!(spec.name.as_str(), "reports/daily");
/// # Ok::<(), omnilock_core::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct LockSpec {
    /// The lock.
    pub name: LockName,
    /// What is taken: the mutex (all a backend without semaphores or
    /// read-write locks ever sees), a semaphore permit, or one side of a
    /// read-write lock.
    pub primitive: Primitive,
    /// Who asks. Owners are compared by value in the store.
    pub owner: Owner,
    /// The lease: the store frees the lock this long after the last
    /// acquisition or renewal.
    pub ttl: Duration,
    /// Whether a re-acquire by an owner that already holds the lock in the
    /// store succeeds (hold count + 1) or fails with [`ErrorKind::WouldDeadlock`].
    pub reentrant: bool,
}

/// One acquisition, as the backend sees it: the hold asked for
/// ([`LockSpec`], which the request reads as through `Deref`:
/// `request.name` is `request.spec.name`) and the acquisition's two
/// callbacks. A backend that must fire `lost` after the grant (a session
/// that ends) keeps it in its own [`Backend::Hold`] at acquire time: release
/// and renewal see only the spec.
///
/// ```
/// use std::time::Duration;
/// use omnilock_core::{AcquireRequest, LockName, LockSpec, Owner, Primitive};
/// let request = AcquireRequest::new(LockSpec {
///     name: LockName::new("a")?,
///     primitive: Primitive::Mutex,
///     owner: Owner::random(),
///     ttl: Duration::from_secs(15),
///     reentrant: true,
/// });
/// assert_eq!(request.name.as_str(), "a");
/// assert!(!request.lost.is_fired());
/// # Ok::<(), omnilock_core::Error>(())
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct AcquireRequest {
    /// The hold asked for.
    pub spec: LockSpec,
    /// Fire this when the store reports the lock gone before it is released.
    pub lost: LostNotifier,
    /// Raise this once the acquire starts to wait.
    pub waiting: WaitNotice,
}

impl AcquireRequest {
    /// A request for `spec` with a fresh lost signal and no one listening
    /// for the wait.
    ///
    /// ```
    /// use std::time::Duration;
    /// use omnilock_core::{AcquireRequest, LockName, LockSpec, Owner, Primitive};
    /// let spec = LockSpec {
    ///     name: LockName::new("a")?,
    ///     primitive: Primitive::Mutex,
    ///     owner: Owner::random(),
    ///     ttl: Duration::from_secs(15),
    ///     reentrant: false,
    /// };
    /// let request = AcquireRequest::new(spec);
    /// request.waiting.raise(); // nobody listens: nothing happens
    /// # Ok::<(), omnilock_core::Error>(())
    /// ```
    pub fn new(spec: LockSpec) -> Self {
        AcquireRequest {
            spec,
            lost: LostNotifier::new(),
            waiting: WaitNotice::none(),
        }
    }
}

impl Deref for AcquireRequest {
    type Target = LockSpec;

    fn deref(&self) -> &LockSpec {
        &self.spec
    }
}

/// What a backend returns for a granted lock: the token, how long it
/// stands, and `hold`, the backend's own state for releasing and renewing
/// it ([`Backend::Hold`]: a key, a node path, a revision). Core never looks
/// inside `hold`.
#[non_exhaustive]
pub struct Grant<H = ()> {
    /// The fencing token (see [`Capabilities::fencing`]).
    pub token: u64,
    /// Until when, by this process's clock, the lock is known to be held: at
    /// most the moment the acquire request was sent plus the TTL, minus any
    /// clock-drift allowance the store needs.
    pub valid_until: Instant,
    /// The backend's state for release and renewal.
    pub hold: H,
}

impl Grant {
    /// A grant with no backend state.
    pub fn new(token: u64, valid_until: Instant) -> Self {
        Grant {
            token,
            valid_until,
            hold: (),
        }
    }
}

impl<H> Grant<H> {
    /// The same grant carrying `hold` as its backend state.
    pub fn with_hold<T>(self, hold: T) -> Grant<T> {
        Grant {
            token: self.token,
            valid_until: self.valid_until,
            hold,
        }
    }
}

impl<H> fmt::Debug for Grant<H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Grant")
            .field("token", &self.token)
            .field("valid_until", &self.valid_until)
            .finish_non_exhaustive()
    }
}

/// Who holds a lock, as the store sees it (see [`Backend::holder`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Holder {
    /// The holder's owner.
    pub owner: Owner,
    /// The holder's fencing token.
    pub token: u64,
}

impl Holder {
    /// The holder `owner` with fencing token `token`.
    pub fn new(owner: Owner, token: u64) -> Self {
        Holder { owner, token }
    }
}

/// A store that can hold locks.
///
/// # Contract
/// - `try_acquire` never waits for the lock: `Ok(None)` when another owner
///   holds it (or, on a fair backend, when others are queued).
/// - `acquire` waits as long as it takes; the caller bounds it with a timeout
///   by dropping the future. **Dropping the future at any await point must
///   leave nothing behind** (no queue entry, key, node or row) and must not
///   delay the next waiter; a grant that raced with the drop is released.
/// - An owner that already holds the lock in the store re-enters it when
///   `reentrant` is set (the hold count rises, the token stays) and gets
///   [`ErrorKind::WouldDeadlock`] otherwise.
/// - `release` and `renew` are fenced by owner and token: they never touch a
///   lock that another owner acquired since, and answer
///   [`ErrorKind::NotOwner`] (release) or [`ErrorKind::LockLost`] (renew).
///   `renew` never re-creates a lock that is gone.
/// - Errors carry a kind; connection problems are [`ErrorKind::Unavailable`].
/// - A backend sees a [`Primitive`] other than the mutex only if its
///   capabilities claim it (core refuses the rest with `Unsupported` before
///   any I/O). For those, every acquisition is an entry of its own, even for
///   an owner that already holds one (`reentrant` does not apply: core
///   handles reentrancy of read and write locks within a process), and
///   `release` and `renew` find the entry by owner and token. The grant
///   rule is one for both: entries in arrival order, each admitted while
///   everything before it and itself fit (a semaphore: `permits` entries; a
///   read-write lock: any number of readers, or one writer alone), so a
///   waiting writer holds back the readers behind it on a fair store.
///   `break_lock` and `holder` concern the mutex only.
#[async_trait]
pub trait Backend: Send + Sync + fmt::Debug + 'static {
    /// What a grant of this backend carries for its release and renewal
    /// (`()` when the owner and token are all it needs). Typed: a release
    /// or renewal is handed the very state its acquire made.
    type Hold: Send + Sync + 'static;

    /// A short name for messages and metrics: `"mem"`, `"redis"`, `"etcd"`...
    fn kind(&self) -> &'static str;

    /// What this backend promises.
    fn capabilities(&self) -> Capabilities;

    /// Whether the owner of an acquisition that named none may name a new
    /// acquisition of the same handle once its hold was released
    /// successfully (false by default: every such acquisition gets an owner
    /// of its own). Worth it where entries are keyed by owner and a new
    /// owner costs the store a new key (etcd). Sound only where a
    /// successful release leaves nothing of the owner's behind on any
    /// server.
    fn reuses_owners(&self) -> bool {
        false
    }

    /// Takes the lock if it is free (or already held by the same owner).
    async fn try_acquire(&self, request: &AcquireRequest) -> Result<Option<Grant<Self::Hold>>>;

    /// Waits for the lock. Must be cancellation-safe (see the contract).
    async fn acquire(&self, request: &AcquireRequest) -> Result<Grant<Self::Hold>>;

    /// Releases one hold of the lock.
    async fn release(&self, spec: &LockSpec, grant: &Grant<Self::Hold>) -> Result<()>;

    /// Extends the lease to `spec.ttl` from now; returns the new
    /// [`Grant::valid_until`].
    async fn renew(&self, spec: &LockSpec, grant: &Grant<Self::Hold>) -> Result<Instant>;

    /// Renews several holds (each as [`Backend::renew`] would), answering
    /// in the same order. Core's renewal task calls this with every hold of
    /// a [`crate::Locks`] family that is due, up to a few hundred at a time:
    /// a store that can extend many leases in one request overrides it. The
    /// default runs [`Backend::renew`] for each, side by side.
    async fn renew_all(&self, holds: &[(&LockSpec, &Grant<Self::Hold>)]) -> Vec<Result<Instant>> {
        futures_util::future::join_all(holds.iter().map(|(spec, grant)| self.renew(spec, grant)))
            .await
    }

    /// Takes every mutex of `requests` (distinct names in sorted order, one
    /// owner, none re-entered) in one atomic step if all are free: their
    /// grants in the same order, or `Ok(None)` when any is busy, and then
    /// none is taken. Asked only of stores that claim
    /// [`Capabilities::atomic_lock_all`]. Cancellation-safe like
    /// [`Backend::try_acquire`]: a step that completes after its caller has
    /// gone gives every lock back.
    async fn try_acquire_all(
        &self,
        requests: &[AcquireRequest],
    ) -> Result<Option<Vec<Grant<Self::Hold>>>> {
        let _ = requests;
        Err(Error::new(
            ErrorKind::Unsupported,
            "this backend has no atomic step for several locks",
        ))
    }

    /// Removes the lock whatever its owner (an administrative action: the
    /// holder's lost signal fires when it notices). Returns whether a lock was
    /// held.
    async fn break_lock(&self, name: &LockName) -> Result<bool> {
        let _ = name;
        Err(Error::new(
            ErrorKind::Unsupported,
            "this backend cannot break locks",
        ))
    }

    /// Removes holds of the semaphore or read-write lock `kind` of `name`
    /// whatever their owner (an administrative action, as
    /// [`Backend::break_lock`] is for the mutex): every hold, or only
    /// `owner`'s. Waiters stay in line and are admitted as the freed room
    /// allows; the holders' lost signals fire when they notice. Returns how
    /// many holds were removed. Asked only of stores that claim
    /// [`Capabilities::break_lock`] and offer `kind`, never for
    /// [`LockKind::Mutex`].
    async fn break_holds(
        &self,
        name: &LockName,
        kind: LockKind,
        owner: Option<&Owner>,
    ) -> Result<usize> {
        let _ = (name, kind, owner);
        Err(Error::new(
            ErrorKind::Unsupported,
            "this backend cannot break semaphore or read-write lock holds",
        ))
    }

    /// Stores `value` as the record `name`, replacing any earlier one, for
    /// the store to keep `keep` (timed by the store) and then drop.
    /// Records live apart from locks. Asked only of stores that claim
    /// [`Capabilities::records`], with a value and keep checked by core.
    async fn write_record(&self, name: &LockName, value: &str, keep: Duration) -> Result<()> {
        let _ = (name, value, keep);
        Err(Error::new(
            ErrorKind::Unsupported,
            "this store cannot keep records",
        ))
    }

    /// The record `name` if the store still keeps it.
    async fn read_record(&self, name: &LockName) -> Result<Option<Record>> {
        let _ = name;
        Err(Error::new(
            ErrorKind::Unsupported,
            "this store cannot keep records",
        ))
    }

    /// Drops the record `name`; whether there was one.
    async fn delete_record(&self, name: &LockName) -> Result<bool> {
        let _ = name;
        Err(Error::new(
            ErrorKind::Unsupported,
            "this store cannot keep records",
        ))
    }

    /// Who holds the lock now (not who waits), read from the store. Elections
    /// use it to tell who leads: the leader's value travels in its owner.
    async fn holder(&self, name: &LockName) -> Result<Option<Holder>> {
        let _ = name;
        Err(Error::new(
            ErrorKind::Unsupported,
            "this backend cannot say who holds a lock",
        ))
    }

    /// What the store knows about lock `kind` of `name` now: its holders
    /// and, where [`Capabilities::inspect_waiters`], its waiters. Asked
    /// only of stores that claim [`Capabilities::inspect`], and only for
    /// kinds they offer. Holders whose lease ran out are not reported,
    /// even where the store has not removed them yet.
    async fn inspect(&self, name: &LockName, kind: LockKind) -> Result<Inspection> {
        let _ = (name, kind);
        Err(Error::new(
            ErrorKind::Unsupported,
            "this backend cannot inspect locks",
        ))
    }

    /// The locks with holders whose names start with `prefix` (`""`: all),
    /// sorted by name and kind. Asked only of stores that claim
    /// [`Capabilities::list`]. Like [`Backend::inspect`], a lease that ran
    /// out is no holder.
    async fn list(&self, prefix: &str) -> Result<Vec<Listed>> {
        let _ = prefix;
        Err(Error::new(
            ErrorKind::Unsupported,
            "this backend cannot list locks",
        ))
    }

    /// Whether `token` is the fencing token of the mutex `name`'s holder
    /// now, read from the store. Asked only of stores that claim
    /// [`Capabilities::check`]. The default reads [`Backend::holder`]:
    /// exact where tokens are never issued twice for a name (every store
    /// that claims `fencing`) and a lease that ran out is no holder.
    async fn check(&self, name: &LockName, token: u64) -> Result<bool> {
        Ok(self
            .holder(name)
            .await?
            .is_some_and(|holder| holder.token == token))
    }

    /// A watch of who holds `name`: a future that completes once the
    /// holder may have changed since this call (completing without a
    /// change is allowed; missing one is not). Set before the caller reads
    /// [`Backend::holder`], so a change between the read and the wait wakes
    /// the wait. `Ok(None)` (the default) where the store has no watch: the
    /// caller then reads again at intervals. Election observers use it.
    async fn watch_holder(&self, name: &LockName) -> Result<Option<HolderChange>> {
        let _ = name;
        Ok(None)
    }

    /// Closes connections and background tasks. Guards still alive lose
    /// their locks.
    async fn close(&self) {}
}

/// What [`Backend::watch_holder`] returns: completes when the holder may
/// have changed.
pub type HolderChange = futures_util::future::BoxFuture<'static, ()>;

/// The store's own grant of `guard`'s hold, for a store crate's guard that
/// works on mutexes of its own store only (a guarded transaction, an owner
/// compare). `Unsupported`, naming the lock and `what` needs, for a
/// semaphore permit, a side of a read-write lock, or a guard another store
/// granted (`store` names the kind it needs, as "a SQL store").
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> omnilock_core::Result<()> {
/// use omnilock_core::{ErrorKind, Locks, LostNotifier, MemStore, mutex_grant};
/// let locks = Locks::new(MemStore::new());
/// let guard = locks.acquire("a").await?;
/// assert!(mutex_grant::<LostNotifier>(&guard, "a check", "a memory store").is_ok());
/// let err = mutex_grant::<String>(&guard, "a check", "an etcd store").unwrap_err();
/// assert_eq!(err.kind(), ErrorKind::Unsupported);
/// # Ok(()) }
/// ```
pub fn mutex_grant<'g, H: 'static>(
    guard: &'g crate::LockGuard,
    what: &str,
    store: &str,
) -> Result<&'g Grant<H>> {
    let unsupported = |needs: &str| {
        Error::new(ErrorKind::Unsupported, format!("{what} needs {needs}"))
            .with_lock(guard.name().as_str())
    };
    if guard.primitive() != Primitive::Mutex {
        return Err(unsupported(
            "a mutex, not a semaphore permit or a side of a read-write lock",
        ));
    }
    guard
        .store_grant()
        .ok_or_else(|| unsupported(&format!("a lock of {store}")))
}
