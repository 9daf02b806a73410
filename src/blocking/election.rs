//! Leader elections for synchronous code: [`Election`], [`Candidate`],
//! [`Leadership`] and [`Observer`], each wrapping its async twin.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::holding::Holding;
use super::{Locks, Runtime};
#[cfg(doc)]
use crate::{Capabilities, ErrorKind};
use crate::{Leader, Operation, Result};

impl Locks {
    /// A leader election named `name` on this store: the blocking
    /// counterpart of [`crate::Locks::election`] (lazy like it: an invalid
    /// name is an error from the first call that uses it; same store
    /// requirements: see [`Capabilities::election`]).
    ///
    /// ```
    /// let locks = omnilock::blocking::connect("mem://")?;
    /// let election = locks.election("scheduler");
    /// let leadership = election.campaign("10.0.0.7:8080")?;
    /// assert_eq!(election.leader()?.map(|l| l.value), Some("10.0.0.7:8080".to_string()));
    /// leadership.resign()?;
    /// # Ok::<(), omnilock::Error>(())
    /// ```
    pub fn election(&self, name: &str) -> Election {
        Election {
            inner: self.inner.election(name),
            runtime: self.runtime.clone(),
        }
    }
}

/// A leader election, for synchronous code: the blocking counterpart of
/// [`crate::Election`]. Made by [`Locks::election`]; follow who leads with
/// [`observe`](Self::observe).
///
/// ```
/// let locks = omnilock::blocking::connect("mem://")?;
/// let election = locks.election("scheduler");
/// assert!(election.leader()?.is_none());
/// # Ok::<(), omnilock::Error>(())
/// ```
#[derive(Clone)]
pub struct Election {
    inner: crate::Election,
    runtime: Arc<Runtime>,
}

impl Election {
    /// This election with [`observe`](Self::observe) reading the leader every
    /// `poll` (default 100 ms, at least 10 ms) on a store without a watch
    /// (etcd and ZooKeeper wait on their watch instead).
    ///
    /// ```
    /// use std::time::Duration;
    /// let locks = omnilock::blocking::connect("mem://")?;
    /// let election = locks.election("jobs").with_poll_interval(Duration::from_millis(20));
    /// let mut observer = election.observe();
    /// assert!(observer.changed()?.is_none()); // nobody leads yet
    /// # Ok::<(), omnilock::Error>(())
    /// ```
    pub fn with_poll_interval(self, poll: Duration) -> Self {
        Election {
            inner: self.inner.with_poll_interval(poll),
            ..self
        }
    }

    /// Waits to become leader, announcing `value` (at most
    /// [`crate::MAX_ELECTION_VALUE_BYTES`] bytes, no
    /// control characters).
    ///
    /// ```
    /// let locks = omnilock::blocking::connect("mem://")?;
    /// let leadership = locks.election("jobs").campaign("worker-1")?;
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
    /// let election = locks.election("jobs");
    /// let leader = election.campaign("worker-1")?;
    /// let err = election.candidate("worker-2").timeout(Duration::from_millis(50)).campaign().unwrap_err();
    /// assert_eq!(err.kind(), omnilock::ErrorKind::Timeout);
    /// # drop(leader);
    /// # Ok::<(), omnilock::Error>(())
    /// ```
    pub fn candidate(&self, value: &str) -> Candidate<'_> {
        Candidate {
            election: self,
            inner: self.inner.candidate(value),
        }
    }

    /// Who leads now, read from the store.
    ///
    /// ```
    /// let locks = omnilock::blocking::connect("mem://")?;
    /// let election = locks.election("jobs");
    /// let me = election.campaign("worker-1")?;
    /// let leader = election.leader()?.expect("someone leads");
    /// assert_eq!(leader.term, me.term());
    /// # Ok::<(), omnilock::Error>(())
    /// ```
    pub fn leader(&self) -> Result<Option<Leader>> {
        self.runtime.block_on(None, self.inner.leader())?
    }

    /// Follows the leader: an [`Observer`] whose [`changed`](Observer::changed)
    /// blocks until another leader (or none) is seen. It waits on the
    /// store's watch where there is one (etcd, ZooKeeper) and elsewhere
    /// reads the store every poll interval (see
    /// [`with_poll_interval`](Self::with_poll_interval)), on the handle's
    /// runtime; dropping the observer stops it. Does not block, so it may be
    /// called anywhere.
    ///
    /// ```
    /// let locks = omnilock::blocking::connect("mem://")?;
    /// let election = locks.election("jobs");
    /// let me = election.campaign("worker-1")?;
    /// let mut observer = election.observe();
    /// let leader = observer.changed()?.expect("someone leads");
    /// assert_eq!((leader.value.as_str(), leader.term), ("worker-1", me.term()));
    /// # Ok::<(), omnilock::Error>(())
    /// ```
    pub fn observe(&self) -> Observer {
        // The async observer starts its task on the current runtime.
        let _entered = self.runtime.tokio().enter();
        Observer {
            inner: self.inner.observe(),
            runtime: self.runtime.clone(),
        }
    }
}

impl fmt::Debug for Election {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("blocking::Election")
            .field("inner", &self.inner)
            .finish()
    }
}

/// How one candidate campaigns, for synchronous code: the blocking
/// counterpart of [`crate::Candidate`], with the same options (`ttl`, the
/// leadership lease; `timeout`; `on_wait`). Made by
/// [`Election::candidate`]; finish with [`campaign`](Self::campaign).
///
/// ```
/// use std::time::Duration;
/// let locks = omnilock::blocking::connect("mem://")?;
/// let election = locks.election("jobs");
/// let leadership = election.candidate("worker-1").timeout(Duration::from_secs(5)).campaign()?;
/// assert!(leadership.is_leader());
/// # Ok::<(), omnilock::Error>(())
/// ```
#[must_use = "a candidacy does nothing until it campaigns"]
pub struct Candidate<'a> {
    election: &'a Election,
    inner: crate::Candidate<'a>,
}

impl Candidate<'_> {
    omnilock_core::option_setters! {
        ttl, timeout, on_wait, options;
        inner(inner): "omnilock",
        "let locks = omnilock::blocking::connect(\"mem://\").unwrap(); \
         let election = locks.election(\"jobs\");",
        "election.candidate(\"worker-2\")"
    }

    /// Waits until this candidate leads (up to the timeout, if one is set).
    ///
    /// ```
    /// let locks = omnilock::blocking::connect("mem://")?;
    /// let leadership = locks.election("e").candidate("v").campaign()?;
    /// assert_eq!(leadership.value(), "v");
    /// # Ok::<(), omnilock::Error>(())
    /// ```
    pub fn campaign(self) -> Result<Leadership> {
        let runtime = &self.election.runtime;
        let leadership = runtime.block_on(Operation::Acquire, self.inner.campaign())??;
        Ok(Leadership {
            holding: Holding::new(leadership, runtime.clone()),
        })
    }
}

impl fmt::Debug for Candidate<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("blocking::Candidate")
            .field(&self.inner)
            .finish()
    }
}

/// This client's leadership, for synchronous code: the blocking
/// counterpart of [`crate::Leadership`]. It ends with
/// [`resign`](Self::resign), on drop (resigning before `drop` returns, as
/// [`LockGuard`](super::LockGuard) releases), or when lost.
///
/// ```
/// use std::time::Duration;
/// let locks = omnilock::blocking::connect("mem://")?;
/// let leadership = locks.election("e").campaign("me")?;
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
    /// assert_eq!(locks.election("e").campaign("me")?.value(), "me");
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
    /// let election = locks.election("e");
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
    /// assert!(locks.election("e").campaign("me")?.is_leader());
    /// # Ok::<(), omnilock::Error>(())
    /// ```
    pub fn is_leader(&self) -> bool {
        self.holding.inner().is_leader()
    }

    super::holding::holding_methods! {
        lost_receiver, on_lost;
        "let locks = omnilock::blocking::connect(\"mem://\")?;\n\
         let name = \"election/e\";\n\
         let held = locks.election(\"e\").campaign(\"me\")?;"
    }

    /// Steps down and waits for the store to confirm; the next candidate in
    /// line becomes leader.
    ///
    /// ```
    /// let locks = omnilock::blocking::connect("mem://")?;
    /// let election = locks.election("e");
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
        match self.holding.get() {
            Some(inner) => f
                .debug_struct("blocking::Leadership")
                .field("value", &inner.value())
                .field("term", &inner.term())
                .finish(),
            None => f.write_str("blocking::Leadership(resigned)"),
        }
    }
}

/// A running observation of an election, for synchronous code: the blocking
/// counterpart of [`crate::Observer`]. Made by [`Election::observe`];
/// dropping it stops the observation. It is also an iterator over the
/// changes, which ends if the observation stops.
///
/// ```
/// let locks = omnilock::blocking::connect("mem://")?;
/// let election = locks.election("jobs");
/// let me = election.campaign("worker-1")?;
/// for change in election.observe() {
///     let leader = change?;
///     assert_eq!(leader.map(|l| l.value), Some("worker-1".to_string()));
///     break;
/// }
/// # drop(me);
/// # Ok::<(), omnilock::Error>(())
/// ```
#[derive(Debug)]
pub struct Observer {
    // Declared before the runtime, so its task stops while the runtime runs.
    inner: crate::Observer,
    runtime: Arc<Runtime>,
}

impl Observer {
    /// Waits for the next change: `Some(leader)`, or `None` when nobody
    /// leads, or the error a read of the store gave (see
    /// [`crate::Election::observe`]: a retryable error is answered once
    /// and the observation goes on; one that cannot pass, such as
    /// `Unsupported` on a store without elections, ends it and is returned
    /// by every later call). The first call returns the state at the start.
    /// Errors also: [`ErrorKind::WouldDeadlock`] inside an async runtime.
    ///
    /// ```
    /// use std::time::Duration;
    /// let locks = omnilock::blocking::connect("mem://")?;
    /// let election = locks.election("jobs").with_poll_interval(Duration::from_millis(10));
    /// let mut observer = election.observe();
    /// assert!(observer.changed()?.is_none()); // the start: nobody leads
    /// let me = election.campaign("worker-1")?;
    /// assert_eq!(observer.changed()?.map(|l| l.term), Some(me.term()));
    /// me.resign()?;
    /// assert!(observer.changed()?.is_none());
    /// # Ok::<(), omnilock::Error>(())
    /// ```
    pub fn changed(&mut self) -> Result<Option<Leader>> {
        self.runtime.block_on(None, self.inner.changed())?
    }

    /// Whether the observation has ended: `changed` has returned the error
    /// that ended it, and returns it again on every call.
    ///
    /// ```
    /// let locks = omnilock::blocking::connect("mem://")?;
    /// let mut observer = locks.election("bad\nname").observe();
    /// assert!(observer.changed().is_err());
    /// assert!(observer.has_ended());
    /// # Ok::<(), omnilock::Error>(())
    /// ```
    pub fn has_ended(&self) -> bool {
        self.inner.has_ended()
    }
}

/// Each item is what [`Observer::changed`] returns. After the error that
/// ends the observation (returned once), the iterator ends.
impl Iterator for Observer {
    type Item = Result<Option<Leader>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.inner.has_ended() {
            return None;
        }
        Some(self.changed())
    }
}
