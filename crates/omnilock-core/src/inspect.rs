//! What an operator asks of a store: who holds a lock, since when, with how
//! much lease left, who waits, and which names are held under a prefix
//! ([`crate::Locks::inspect`], [`crate::Locks::list`]).
//!
//! The answers are read from the store, so they describe every process
//! and machine, not this one's guards; and they are a snapshot: a holder
//! may have gone by the time the caller reads them.

use std::fmt;
use std::time::{Duration, SystemTime};

use crate::backend::Primitive;
use crate::name::Owner;

/// The three kinds of lock a name can carry. They live apart: a mutex, a
/// semaphore and a read-write lock of one name never block each other, so
/// an inspection names the kind it looked at.
///
/// ```
/// use omnilock_core::LockKind;
/// assert_eq!(LockKind::Semaphore.to_string(), "semaphore");
/// assert_eq!("rw".parse::<LockKind>().unwrap(), LockKind::RwLock);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum LockKind {
    /// A mutex: one holder.
    Mutex,
    /// A counting semaphore: up to its permits of holders.
    Semaphore,
    /// A read-write lock: many readers or one writer.
    RwLock,
}

impl LockKind {
    /// Every kind, in the order inspections list them.
    pub const ALL: [LockKind; 3] = [LockKind::Mutex, LockKind::Semaphore, LockKind::RwLock];

    /// The kind that `primitive` is an acquisition of.
    pub fn of(primitive: Primitive) -> LockKind {
        match primitive {
            Primitive::Mutex => LockKind::Mutex,
            Primitive::Semaphore { .. } => LockKind::Semaphore,
            Primitive::Read | Primitive::Write => LockKind::RwLock,
        }
    }

    /// The short name used in messages and JSON: `mutex`, `semaphore`,
    /// `rw`.
    pub fn as_str(self) -> &'static str {
        match self {
            LockKind::Mutex => "mutex",
            LockKind::Semaphore => "semaphore",
            LockKind::RwLock => "rw",
        }
    }
}

impl fmt::Display for LockKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for LockKind {
    type Err = crate::Error;

    fn from_str(s: &str) -> crate::Result<Self> {
        match s {
            "mutex" | "lock" => Ok(LockKind::Mutex),
            "semaphore" => Ok(LockKind::Semaphore),
            "rw" | "rwlock" | "rw-lock" => Ok(LockKind::RwLock),
            other => Err(crate::Error::config(format!(
                "unknown lock kind {other:?}: mutex, semaphore or rw"
            ))),
        }
    }
}

/// Which part of a lock a holder or waiter has or wants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Side {
    /// The mutex.
    Exclusive,
    /// One permit of a semaphore.
    Permit,
    /// The shared side of a read-write lock.
    Read,
    /// The exclusive side of a read-write lock.
    Write,
}

impl Side {
    /// The side an acquisition of `primitive` takes.
    pub fn of(primitive: Primitive) -> Side {
        match primitive {
            Primitive::Mutex => Side::Exclusive,
            Primitive::Semaphore { .. } => Side::Permit,
            Primitive::Read => Side::Read,
            Primitive::Write => Side::Write,
        }
    }

    /// The short name used in messages and JSON: `exclusive`, `permit`,
    /// `read`, `write`.
    pub fn as_str(self) -> &'static str {
        match self {
            Side::Exclusive => "exclusive",
            Side::Permit => "permit",
            Side::Read => "read",
            Side::Write => "write",
        }
    }
}

impl fmt::Display for Side {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One holder of a lock, as the store records it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Held {
    /// Who holds it (see [`crate::Owner`]: by default `host:pid:random`).
    pub owner: Owner,
    /// The hold's fencing token.
    pub token: u64,
    /// What it holds: the mutex, a permit, or a side of a read-write lock.
    pub side: Side,
    /// When the hold began, by the store's clock; `None` where the store
    /// keeps no time of acquisition (see the backend's page).
    pub since: Option<SystemTime>,
    /// How long the lease runs if nobody renews it; `None` where the lease
    /// is a session the store does not time per hold (ZooKeeper).
    pub lease_left: Option<Duration>,
}

impl Held {
    /// A holder with no time of acquisition or lease read yet.
    pub fn new(owner: Owner, token: u64, side: Side) -> Self {
        Held {
            owner,
            token,
            side,
            since: None,
            lease_left: None,
        }
    }

    /// This holder, held since `since`.
    pub fn since(mut self, since: Option<SystemTime>) -> Self {
        self.since = since;
        self
    }

    /// This holder, with `lease_left` of lease.
    pub fn lease_left(mut self, lease_left: Option<Duration>) -> Self {
        self.lease_left = lease_left;
        self
    }
}

/// One waiter of a lock, as the store records it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Waiting {
    /// Who waits; `None` where the store records the place in line but
    /// not the owner.
    pub owner: Option<Owner>,
    /// What it waits for.
    pub side: Side,
}

impl Waiting {
    /// A waiter for `side`.
    pub fn new(owner: Option<Owner>, side: Side) -> Self {
        Waiting { owner, side }
    }
}

/// What a store knows about one lock (one [`LockKind`] of one name) at the
/// moment it was read. Returned by [`crate::Locks::inspect`].
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> omnilock_core::Result<()> {
/// use omnilock_core::{LockKind, Locks, MemStore};
/// let locks = Locks::new(MemStore::new());
/// let _a = locks.semaphore("uploads", 3).try_acquire().await?.unwrap();
/// let _b = locks.semaphore("uploads", 3).try_acquire().await?.unwrap();
/// let seen = locks.inspect("uploads", LockKind::Semaphore).await?;
/// assert_eq!(seen.holders.len(), 2);
/// assert_eq!(seen.permits, Some(3));
/// assert_eq!(seen.free_permits(), Some(1));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Inspection {
    /// The lock's name.
    pub name: String,
    /// Which of the name's locks this is.
    pub kind: LockKind,
    /// A semaphore's permits as the store records them while it has
    /// holders or waiters; `None` for the other kinds and an idle
    /// semaphore.
    pub permits: Option<u32>,
    /// The holders, in the order they were granted where the store keeps
    /// one (by fencing token otherwise).
    pub holders: Vec<Held>,
    /// The waiters, first in line first where [`Inspection::waiters_ordered`];
    /// `None` where the store keeps no record of who waits (waiters that
    /// poll).
    pub waiters: Option<Vec<Waiting>>,
    /// Whether [`Inspection::waiters`] is in the order the store will grant
    /// them (a fair store's line).
    pub waiters_ordered: bool,
    /// Whether the answer is exact: false where the store could only
    /// estimate it (Redlock: the majority view of independent nodes that
    /// may disagree).
    pub exact: bool,
}

impl Inspection {
    /// A free lock: no holders, no waiters, exact.
    pub fn free(name: &str, kind: LockKind) -> Self {
        Inspection {
            name: name.to_string(),
            kind,
            permits: None,
            holders: Vec::new(),
            waiters: Some(Vec::new()),
            waiters_ordered: true,
            exact: true,
        }
    }

    /// Whether nobody holds it.
    pub fn is_free(&self) -> bool {
        self.holders.is_empty()
    }

    /// A semaphore's permits not held now; `None` for the other kinds and
    /// an idle semaphore (whose permits the store does not keep).
    pub fn free_permits(&self) -> Option<u32> {
        let held = u32::try_from(self.holders.len()).unwrap_or(u32::MAX);
        self.permits.map(|permits| permits.saturating_sub(held))
    }
}

/// A lock that has holders, found by [`crate::Locks::list`].
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
#[non_exhaustive]
pub struct Listed {
    /// The lock's name.
    pub name: String,
    /// Which of the name's locks is held.
    pub kind: LockKind,
}

impl Listed {
    /// The lock `kind` of `name`.
    pub fn new(name: impl Into<String>, kind: LockKind) -> Self {
        Listed {
            name: name.into(),
            kind,
        }
    }
}
