//! Leader election on every store that can say who holds a lock: the same
//! recipe as the lock.
//!
//! Candidates queue for the lock `election/<name>`; the holder leads. On a
//! fair store the longest-waiting candidate takes over, elsewhere any
//! waiting one may. A candidate's value (an
//! address, an ID) travels in its owner, `leader:<nonce>:<value>`, so anyone
//! can read who leads from the store ([`Backend::holder`](crate::Backend::holder))
//! without a second key to keep in step. The leader's term is its fencing
//! token: it rises with every new leader, so followers and resources can
//! refuse a deposed leader's writes.

use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::client::Locks;
use crate::error::{Error, ErrorKind, Result};
use crate::guard::LockGuard;
use crate::name::{MAX_NAME_BYTES, Owner};
use crate::options::AcquireOptions;

const OWNER_TAG: &str = "leader:";

/// How long an observer waits on a store's watch before it reads the
/// leader anyway.
const WATCH_RESYNC: Duration = Duration::from_secs(10);

/// The longest value a candidate may announce, in bytes: what an owner may
/// hold ([`MAX_NAME_BYTES`]) less the `leader:<16 hex digits>:` around it.
pub const MAX_ELECTION_VALUE_BYTES: usize = MAX_NAME_BYTES - OWNER_TAG.len() - 16 - 1;

/// An election, as seen from one client. See [`Locks::election`].
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> omnilock_core::Result<()> {
/// use omnilock_core::{Locks, MemStore};
/// let locks = Locks::new(MemStore::new());
/// let election = locks.election("scheduler");
/// let leadership = election.campaign("10.0.0.7:8080").await?;
/// let leader = election.leader().await?.expect("someone leads");
/// assert_eq!(leader.value, "10.0.0.7:8080");
/// assert_eq!(leader.term, leadership.term());
/// leadership.resign().await?;
/// assert!(election.leader().await?.is_none());
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Election {
    locks: Locks,
    lock: String,
    poll: Duration,
}

/// Who leads: the value it campaigned with and its term (its fencing token).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Leader {
    /// The value the leader campaigned with.
    pub value: String,
    /// Rises with every new leader.
    pub term: u64,
}

/// This client's leadership, won by [`Election::campaign`]. Leadership ends
/// with [`resign`](Leadership::resign), on drop (resigning in the
/// background), or when the store says it is lost ([`lost`](Leadership::lost)).
#[derive(Debug)]
#[must_use = "dropping a Leadership resigns at once"]
pub struct Leadership {
    guard: LockGuard,
    value: String,
}

impl Leadership {
    /// The value this leader campaigned with.
    pub fn value(&self) -> &str {
        &self.value
    }

    /// The term: the fencing token of the leadership.
    pub fn term(&self) -> u64 {
        self.guard.token()
    }

    /// Whether this client still surely leads (see [`LockGuard::is_held`]).
    pub fn is_leader(&self) -> bool {
        self.guard.is_held()
    }

    /// Completes when leadership is lost without resigning (lease expired,
    /// session lost): stop acting as leader then.
    pub fn lost(&self) -> impl std::future::Future<Output = Error> + Send + 'static + use<> {
        self.guard.lost()
    }

    /// Steps down; the next candidate in line becomes leader.
    pub async fn resign(self) -> Result<()> {
        self.guard.release().await
    }
}

/// How one candidate campaigns; see [`Election::candidate`].
///
/// Its options are `ttl` (the leadership lease: a dead leader is replaced
/// this long after it stopped renewing), `timeout` (withdrawing the
/// candidacy) and `on_wait` (once queued behind a leader), as
/// [`AcquireOptions`] has them; the owner is the candidate's own, never
/// re-entered.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> omnilock_core::Result<()> {
/// use std::time::Duration;
/// use omnilock_core::{ErrorKind, Locks, MemStore};
/// let locks = Locks::new(MemStore::new());
/// let election = locks.election("jobs");
/// let leader = election.campaign("worker-1").await?;
/// let late = election.candidate("worker-2").timeout(Duration::from_millis(50));
/// assert_eq!(late.campaign().await.unwrap_err().kind(), ErrorKind::Timeout);
/// leader.resign().await?;
/// # Ok(()) }
/// ```
#[must_use = "a candidate does nothing until `campaign` is awaited"]
pub struct Candidate<'a> {
    election: &'a Election,
    value: String,
    options: AcquireOptions,
}

impl std::fmt::Debug for Candidate<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Candidate")
            .field("value", &self.value)
            .field("options", &self.options)
            .finish()
    }
}

impl Candidate<'_> {
    crate::option_setters! {
        ttl, timeout, on_wait, options;
        options(options): "omnilock_core",
        "let locks = omnilock_core::Locks::new(omnilock_core::MemStore::new()); \
         let election = locks.election(\"jobs\");",
        "election.candidate(\"worker-2\")"
    }

    /// Waits until this candidate leads (up to the timeout, if one is set).
    /// Dropping the future withdraws the candidacy (nothing stays queued).
    pub async fn campaign(self) -> Result<Leadership> {
        let owner = owner_for(&self.value)?;
        let timeout = self.options.timeout;
        // The candidate's options hold no owner nor reentrancy (it has no
        // setter for them, and `options` refuses them).
        let request = self
            .election
            .locks
            .lock(&self.election.lock)
            .options(self.options)
            .owner(&owner)
            .reentrant(false);
        let guard = match (request.acquire().await, timeout) {
            (Err(err), Some(limit)) if err.kind() == crate::ErrorKind::Timeout => {
                let mut timed_out = crate::Error::new(
                    crate::ErrorKind::Timeout,
                    format!("not elected within {limit:?}"),
                )
                .with_operation(crate::Operation::Acquire)
                .with_lock(&self.election.lock);
                if let Some(backend) = err.backend() {
                    timed_out = timed_out.with_backend(backend);
                }
                return Err(timed_out);
            }
            (guard, _) => guard?,
        };
        Ok(Leadership {
            guard,
            value: self.value,
        })
    }
}

impl Election {
    pub(crate) fn new(locks: Locks, name: &str) -> Self {
        Election {
            locks,
            lock: format!("election/{name}"),
            poll: Duration::from_millis(100),
        }
    }

    /// How often [`observe`](Election::observe) reads the leader on a
    /// store without a watch (default 100 ms; etcd and ZooKeeper wait on
    /// their watch instead).
    pub fn with_poll_interval(mut self, poll: Duration) -> Self {
        self.poll = poll.max(Duration::from_millis(10));
        self
    }

    /// Waits to become leader, announcing `value` (at most
    /// [`MAX_ELECTION_VALUE_BYTES`] bytes, no control characters).
    pub async fn campaign(&self, value: &str) -> Result<Leadership> {
        self.candidate(value).campaign().await
    }

    /// A candidacy with options (TTL, timeout, a "now waiting" callback).
    pub fn candidate(&self, value: &str) -> Candidate<'_> {
        Candidate {
            election: self,
            value: value.to_string(),
            options: AcquireOptions::new(),
        }
    }

    /// Who leads now, read from the store.
    pub async fn leader(&self) -> Result<Option<Leader>> {
        let holder = self.locks.holder(&self.lock).await?;
        Ok(holder.map(|h| Leader {
            value: value_of(&h.owner),
            term: h.token,
        }))
    }

    /// Follows the leader: an [`Observer`] whose [`changed`](Observer::changed)
    /// answers each time another leader (or none) is seen. On a store with
    /// a watch (etcd, ZooKeeper) it waits on the watch and reads the leader
    /// when the store reports a change; elsewhere it reads every poll
    /// interval, so it sees every leadership that lasts longer than that.
    /// Either way it reports what it reads, so a jump in [`Leader::term`]
    /// of more than one new leader means a shorter one came and went
    /// between two reads. A failed read is an answer
    /// too: `changed()` returns the error, once per run of failures, and the
    /// observation goes on (the next answer is the leader once the store
    /// answers again). An error that cannot pass (a store without
    /// [`Capabilities::election`](crate::Capabilities::election) answers
    /// `Unsupported`, an invalid name `InvalidName`) ends the observation,
    /// and `changed()` returns it from then on. Dropping the [`Observer`]
    /// stops it.
    pub fn observe(&self) -> Observer {
        let (tx, rx) = watch::channel(None);
        let election = self.clone();
        let task = tokio::spawn(async move {
            // What was last sent: a term (or none) or a failure.
            let mut last: Option<std::result::Result<Option<u64>, ErrorKind>> = None;
            loop {
                // The watch is set before the read, so a change between
                // the two wakes the wait below.
                let change = election.locks.watch_holder(&election.lock).await;
                let read = election.leader().await;
                let seen = read
                    .as_ref()
                    .map(|l| l.as_ref().map(|l| l.term))
                    .map_err(|e| e.kind());
                let ends = read.as_ref().is_err_and(|e| !e.is_retryable());
                if last != Some(seen) {
                    last = Some(seen);
                    if tx.send(Some(read)).is_err() {
                        return;
                    }
                }
                if ends {
                    return;
                }
                match change {
                    // A watch that never fires (a connection gone quiet)
                    // costs at most one read per `WATCH_RESYNC`.
                    Ok(Some(change)) => {
                        let _ = tokio::time::timeout(WATCH_RESYNC, change).await;
                    }
                    Ok(None) | Err(_) => tokio::time::sleep(election.poll).await,
                }
            }
        });
        Observer {
            rx,
            task,
            ended: None,
        }
    }
}

/// A running observation of an election; see [`Election::observe`].
#[derive(Debug)]
pub struct Observer {
    rx: watch::Receiver<Option<Result<Option<Leader>>>>,
    task: JoinHandle<()>,
    /// The error that ended the observation, once `changed` returned it.
    ended: Option<Error>,
}

impl Observer {
    /// The next change: `Some(leader)` or `None` when nobody leads, or the
    /// error a read of the store gave. The first call returns the state at
    /// the start. Once the observation has ended (see
    /// [`Election::observe`]), every call returns the error that ended it.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> omnilock_core::Result<()> {
    /// use omnilock_core::{Locks, MemStore};
    /// let locks = Locks::new(MemStore::new());
    /// let mut observer = locks.election("jobs").observe();
    /// assert!(observer.changed().await?.is_none()); // the start: nobody leads
    /// let bad = locks.election("bad\nname").observe().changed().await;
    /// assert_eq!(bad.unwrap_err().kind(), omnilock_core::ErrorKind::InvalidName);
    /// # Ok(()) }
    /// ```
    pub async fn changed(&mut self) -> Result<Option<Leader>> {
        if let Some(err) = &self.ended {
            return Err(err.clone());
        }
        if self.rx.changed().await.is_err() {
            // The task stopped without an error to say why (it panicked).
            let err = Error::new(ErrorKind::Unavailable, "the observer stopped");
            self.ended = Some(err.clone());
            return Err(err);
        }
        let read = self
            .rx
            .borrow_and_update()
            .clone()
            .unwrap_or_else(|| Ok(None));
        if let Err(err) = &read
            && !err.is_retryable()
        {
            self.ended = Some(err.clone());
        }
        read
    }

    /// Whether the observation has ended: `changed` has returned the error
    /// that ended it, and returns it again on every call.
    pub fn has_ended(&self) -> bool {
        self.ended.is_some()
    }
}

impl Drop for Observer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Locks {
    /// An election named `name` on this store. Like [`lock`](Locks::lock),
    /// it does nothing yet: an invalid name is an `InvalidName` error from
    /// the first call that uses it. It works where
    /// [`Capabilities::election`](crate::Capabilities::election) is true;
    /// elsewhere `leader()` answers `Unsupported` and `observe()` ends with
    /// that error. The longest-waiting candidate takes over only on a
    /// [`fair`](crate::Capabilities::fair) store.
    pub fn election(&self, name: &str) -> Election {
        Election::new(self.clone(), name)
    }
}

fn owner_for(value: &str) -> Result<Owner> {
    if value.len() > MAX_ELECTION_VALUE_BYTES {
        return Err(Error::config(format!(
            "an election value is at most {MAX_ELECTION_VALUE_BYTES} bytes; this one is {}",
            value.len()
        )));
    }
    let nonce: u64 = rand::random();
    Owner::new(&format!("{OWNER_TAG}{nonce:016x}:{value}"))
        .map_err(|e| Error::config(format!("invalid election value: {e}")))
}

/// The campaign value inside an owner; a holder that is not a candidate (a
/// plain lock on the same name) shows as its owner.
fn value_of(owner: &Owner) -> String {
    owner
        .as_str()
        .strip_prefix(OWNER_TAG)
        .and_then(|rest| rest.split_once(':'))
        .map(|(_, value)| value.to_string())
        .unwrap_or_else(|| owner.as_str().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemStore;

    /// The documented limit is the enforced one: a value of exactly
    /// `MAX_ELECTION_VALUE_BYTES` campaigns and reads back whole; one byte
    /// more is refused before any store call, with the limit in the message.
    #[tokio::test]
    async fn election_value_limit_is_exact() {
        let locks = Locks::new(MemStore::new());
        let election = locks.election("limits");
        let longest = "v".repeat(MAX_ELECTION_VALUE_BYTES);
        let leadership = election.campaign(&longest).await.unwrap();
        assert_eq!(leadership.value(), longest);
        assert_eq!(election.leader().await.unwrap().unwrap().value, longest);
        leadership.resign().await.unwrap();

        let err = election.campaign(&format!("{longest}v")).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidConfig);
        assert!(
            err.to_string()
                .contains(&MAX_ELECTION_VALUE_BYTES.to_string()),
            "{err}"
        );
    }

    /// A candidate that times out gets `Timeout` naming the election's lock,
    /// leaves nothing queued, and the next candidate leads once the leader
    /// resigns.
    #[tokio::test]
    async fn campaign_timeout_is_typed_and_withdraws() {
        let locks = Locks::new(MemStore::new());
        let election = locks.election("timeout");
        let leader = election.campaign("a").await.unwrap();
        let err = election
            .candidate("b")
            .timeout(Duration::from_millis(50))
            .campaign()
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
        assert_eq!(err.operation(), Some(crate::Operation::Acquire));
        assert_eq!(err.lock(), Some("election/timeout"));
        leader.resign().await.unwrap();
        assert!(
            election.leader().await.unwrap().is_none(),
            "a timed-out candidate leads"
        );
        let next = election
            .candidate("c")
            .timeout(Duration::from_secs(5))
            .campaign()
            .await
            .unwrap();
        assert_eq!(next.value(), "c");
    }
}
