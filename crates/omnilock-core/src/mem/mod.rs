//! The in-memory store, `mem://`: locks shared by the tasks of one process.
//!
//! It implements the full contract (fair FIFO queue, push hand-off, fencing,
//! reentrancy, leases, semaphores and read-write locks) and serves as the reference backend of the conformance
//! suite. It cannot coordinate separate processes; use `sqlite://` (or a
//! server store) for that.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use async_trait::async_trait;
use tokio::sync::oneshot;

use crate::backend::{AcquireRequest, Backend, Capabilities, Grant, LockSpec};
use counted::{CountedLocks, Family, Joined, Leaving};

mod backend;
mod counted;
use crate::error::{Error, ErrorKind, Result};
use crate::inspect::{Held, Inspection, Listed, LockKind, Side, Waiting};
use crate::name::{LockName, Owner};
use crate::signal::LostNotifier;
use crate::sync::lock_unpoisoned;
use crate::url::StoreUrl;

/// The URL scheme of the in-memory store.
pub const SCHEME: &str = "mem";

/// How `connect(url)` opens `mem://` URLs.
pub const DRIVER: crate::Driver = crate::Driver {
    feature: None,
    schemes: &[SCHEME],
    connect: |url| Box::pin(async move { Ok(crate::Locks::new(MemStore::from_url(&url)?)) }),
};

/// An in-process lock store.
///
/// `mem://` is the process-wide default store and `mem://NAME` a separate
/// named one: every handle connected to the same URL shares the same locks.
/// [`MemStore::new`] makes a private store shared only by its clones.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> omnilock_core::Result<()> {
/// use omnilock_core::{Locks, MemStore};
/// let a = Locks::new(MemStore::named("example"));
/// let b = Locks::new(MemStore::named("example"));
/// let held = a.acquire("x").await?;
/// assert!(b.try_acquire("x").await?.is_none());
/// drop(held);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct MemStore {
    state: Arc<Mutex<State>>,
}

#[derive(Debug, Default)]
struct State {
    locks: HashMap<LockName, Slot>,
    counted: CountedLocks,
    /// Records by name: the value and when it is dropped.
    records: HashMap<LockName, (String, Instant)>,
    last_token: u64,
    last_grant: u64,
}

#[derive(Debug, Default)]
struct Slot {
    holder: Option<Holder>,
    queue: VecDeque<Waiter>,
}

#[derive(Debug)]
struct Holder {
    owner: Owner,
    holds: u32,
    token: u64,
    grant_id: u64,
    expires: Instant,
    since: SystemTime,
    lost: Vec<LostNotifier>,
}

#[derive(Debug)]
struct Waiter {
    grant_id: u64,
    owner: Owner,
    ttl: Duration,
    lost: LostNotifier,
    tx: oneshot::Sender<Granted>,
}

#[derive(Debug, Clone, Copy)]
struct Granted {
    token: u64,
    expires: Instant,
}

/// A grant of the in-memory store: it carries the acquisition's lost
/// signal (see [`Backend::Hold`] for [`MemStore`]).
type MemGrant = Grant<LostNotifier>;

enum Attempt {
    Taken(Granted),
    Busy,
}

fn registry() -> &'static Mutex<HashMap<String, Arc<Mutex<State>>>> {
    static STORES: OnceLock<Mutex<HashMap<String, Arc<Mutex<State>>>>> = OnceLock::new();
    STORES.get_or_init(Default::default)
}

impl MemStore {
    /// A private store, shared only by clones of this value.
    pub fn new() -> Self {
        MemStore {
            state: Default::default(),
        }
    }

    /// The process-wide store called `name` (`""` is the one `mem://` uses).
    pub fn named(name: &str) -> Self {
        let mut stores = lock_unpoisoned(registry());
        MemStore {
            state: stores.entry(name.to_string()).or_default().clone(),
        }
    }

    /// The store for `mem://[NAME]`. The URL's options must already have
    /// been read by the caller; anything left is an error.
    pub fn from_url(url: &StoreUrl) -> Result<Self> {
        if url.scheme() != SCHEME {
            return Err(Error::config(format!("not a mem:// URL: {url}")));
        }
        if url.hosts().len() > 1 || !url.path().is_empty() || url.password().is_some() {
            return Err(Error::config(
                "a mem:// URL is mem:// or mem://NAME, with no path or credentials",
            ));
        }
        url.finish()?;
        let name = url
            .hosts()
            .first()
            .map(|h| h.to_string())
            .unwrap_or_default();
        Ok(MemStore::named(&name))
    }

    fn state(&self) -> MutexGuard<'_, State> {
        lock_unpoisoned(&self.state)
    }

    /// How many locks, semaphores and read-write locks have a holder or
    /// waiters (for tests: nothing is left behind).
    pub fn active_locks(&self) -> usize {
        let state = self.state();
        state.locks.len() + state.counted.len()
    }

    /// A semaphore permit or a side of a read-write lock, waiting as long
    /// as it takes.
    async fn acquire_counted(&self, request: &AcquireRequest) -> Result<MemGrant> {
        let (mut rx, entry) = {
            let mut state = self.state();
            match state.join_counted(request, true)? {
                (_, Some(Joined::Admitted(admitted))) => {
                    return Ok(admitted_grant(admitted, request));
                }
                (id, Some(Joined::Waiting(rx))) => (
                    rx,
                    CountedEntry {
                        store: self.clone(),
                        spec: request.spec.clone(),
                        id,
                        armed: true,
                    },
                ),
                (_, None) => unreachable!("a waiting join stays in the queue"),
            }
        };
        request.waiting.raise();
        let mut entry = entry;
        loop {
            let expiry = self.state().counted.next_expiry(request);
            let expiry = expiry.map(tokio::time::Instant::from_std);
            tokio::select! {
                admitted = &mut rx => {
                    entry.armed = false;
                    return match admitted {
                        Ok(admitted) => Ok(admitted_grant(admitted, request)),
                        Err(_) => Err(Error::new(ErrorKind::Backend, "the in-memory queue dropped this waiter")),
                    };
                }
                _ = sleep_until_opt(expiry) => {
                    let mut state = self.state();
                    let (counted, last_token) = state.counted();
                    counted.refresh(request, Instant::now(), last_token);
                }
            }
        }
    }
}

impl Default for MemStore {
    fn default() -> Self {
        MemStore::new()
    }
}

impl State {
    /// The semaphores and read-write locks, with the token counter they
    /// share with the mutexes.
    fn counted(&mut self) -> (&mut CountedLocks, &mut u64) {
        (&mut self.counted, &mut self.last_token)
    }

    /// The mutex `name`'s entry, if it has a holder or waiters, with the
    /// token counter.
    fn existing_slot(&mut self, name: &LockName) -> Option<(&mut Slot, &mut u64)> {
        let State {
            locks, last_token, ..
        } = self;
        Some((locks.get_mut(name)?, last_token))
    }

    /// The mutex `name` as [`crate::Backend::inspect`] reports it.
    fn inspect_mutex(&mut self, name: &LockName, now: Instant) -> Inspection {
        let mut seen = Inspection::free(name.as_str(), LockKind::Mutex);
        let Some((slot, last_token)) = self.existing_slot(name) else {
            return seen;
        };
        slot.expire(now, last_token);
        seen.holders.extend(slot.holder.as_ref().map(|h| {
            Held::new(h.owner.clone(), h.token, Side::Exclusive)
                .since(Some(h.since))
                .lease_left(Some(h.expires.saturating_duration_since(now)))
        }));
        seen.waiters = Some(
            slot.queue
                .iter()
                .filter(|w| !w.tx.is_closed())
                .map(|w| Waiting::new(Some(w.owner.clone()), Side::Exclusive))
                .collect(),
        );
        seen
    }

    /// Every held lock whose name starts with `prefix`.
    fn list(&mut self, prefix: &str, now: Instant) -> Vec<Listed> {
        let State {
            locks,
            counted,
            last_token,
            ..
        } = self;
        let mut listed: Vec<Listed> = locks
            .iter_mut()
            .filter(|(name, _)| name.as_str().starts_with(prefix))
            .filter_map(|(name, slot)| {
                slot.expire(now, last_token);
                slot.holder
                    .as_ref()
                    .map(|_| Listed::new(name.as_str(), LockKind::Mutex))
            })
            .collect();
        listed.extend(counted.list(prefix, now, last_token));
        listed
    }

    /// Joins `request`'s queue as a new entry: its id, and what joining gave
    /// (see [`CountedLocks::join`]).
    fn join_counted(
        &mut self,
        request: &AcquireRequest,
        wait: bool,
    ) -> Result<(u64, Option<Joined>)> {
        self.last_grant += 1;
        let id = self.last_grant;
        let (counted, last_token) = self.counted();
        Ok((
            id,
            counted.join(request, id, wait, Instant::now(), last_token)?,
        ))
    }

    fn slot(&mut self, name: &LockName, now: Instant) -> &mut Slot {
        let State {
            locks, last_token, ..
        } = self;
        let slot = locks.entry(name.clone()).or_default();
        slot.expire(now, last_token);
        slot
    }

    /// Drops the entry of a lock with no holder and no waiters. Fencing
    /// tokens come from one store-wide counter, so nothing needs remembering.
    fn tidy(&mut self, name: &LockName) {
        if let Some(slot) = self.locks.get(name)
            && slot.holder.is_none()
            && slot.queue.is_empty()
        {
            self.locks.remove(name);
        }
    }

    fn try_take(&mut self, request: &AcquireRequest, now: Instant) -> Result<Attempt> {
        let State {
            locks,
            last_token,
            last_grant,
            ..
        } = self;
        let slot = locks.entry(request.name.clone()).or_default();
        slot.expire(now, last_token);
        match &mut slot.holder {
            Some(holder) if holder.owner == request.owner => {
                if !request.reentrant {
                    return Err(Error::would_deadlock());
                }
                holder.holds += 1;
                holder.expires = holder.expires.max(now + request.ttl);
                holder.lost.push(request.lost.clone());
                Ok(Attempt::Taken(Granted {
                    token: holder.token,
                    expires: holder.expires,
                }))
            }
            Some(_) => Ok(Attempt::Busy),
            None if !slot.queue.is_empty() => Ok(Attempt::Busy),
            None => {
                *last_token += 1;
                *last_grant += 1;
                let granted = Granted {
                    token: *last_token,
                    expires: now + request.ttl,
                };
                slot.holder = Some(Holder {
                    owner: request.owner.clone(),
                    holds: 1,
                    token: granted.token,
                    grant_id: *last_grant,
                    expires: granted.expires,
                    since: SystemTime::now(),
                    lost: vec![request.lost.clone()],
                });
                Ok(Attempt::Taken(granted))
            }
        }
    }
}

impl Slot {
    /// Frees the lock if its lease ran out, telling the holder.
    fn expire(&mut self, now: Instant, last_token: &mut u64) {
        if let Some(holder) = &self.holder
            && holder.expires <= now
        {
            let holder = self.holder.take().expect("checked");
            for lost in &holder.lost {
                lost.fire(Error::new(ErrorKind::LockLost, "the lease expired"));
            }
            self.hand_off(now, last_token);
        }
    }

    /// Grants a free lock to the first waiter still listening: exactly one
    /// waiter is woken per release.
    fn hand_off(&mut self, now: Instant, last_token: &mut u64) {
        while self.holder.is_none() {
            let Some(waiter) = self.queue.pop_front() else {
                return;
            };
            *last_token += 1;
            let granted = Granted {
                token: *last_token,
                expires: now + waiter.ttl,
            };
            if waiter.tx.send(granted).is_ok() {
                self.holder = Some(Holder {
                    owner: waiter.owner,
                    holds: 1,
                    token: granted.token,
                    grant_id: waiter.grant_id,
                    expires: granted.expires,
                    since: SystemTime::now(),
                    lost: vec![waiter.lost],
                });
            }
        }
    }

    /// Drops one hold; at zero the next waiter gets the lock.
    fn release_one(&mut self, now: Instant, last_token: &mut u64) {
        if let Some(holder) = &mut self.holder {
            holder.holds -= 1;
            if holder.holds == 0 {
                self.holder = None;
                self.hand_off(now, last_token);
            }
        }
    }
}

/// Removes a waiter's queue entry if its acquire future is dropped, or
/// releases the lock if it was granted in the same instant.
struct QueueEntry {
    store: MemStore,
    name: LockName,
    grant_id: u64,
    armed: bool,
}

impl Drop for QueueEntry {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let mut state = self.store.state();
        if let Some((slot, last_token)) = state.existing_slot(&self.name) {
            if let Some(pos) = slot.queue.iter().position(|w| w.grant_id == self.grant_id) {
                slot.queue.remove(pos);
            } else if slot.holder.as_ref().map(|h| h.grant_id) == Some(self.grant_id) {
                slot.release_one(Instant::now(), last_token);
            }
        }
        state.tidy(&self.name);
    }
}

/// Leaves the queue of a semaphore or read-write lock if the acquire future
/// is dropped (releasing an admission that raced with the drop).
struct CountedEntry {
    store: MemStore,
    spec: LockSpec,
    id: u64,
    armed: bool,
}

impl Drop for CountedEntry {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let mut state = self.store.state();
        let (counted, last_token) = state.counted();
        let _ = counted.leave(
            &self.spec,
            Leaving::Waiter(self.id),
            Instant::now(),
            last_token,
        );
    }
}

fn grant(granted: Granted, request: &AcquireRequest) -> MemGrant {
    Grant::new(granted.token, granted.expires).with_hold(request.lost.clone())
}

fn admitted_grant(admitted: counted::Admitted, request: &AcquireRequest) -> MemGrant {
    Grant::new(admitted.token, admitted.expires).with_hold(request.lost.clone())
}

/// Sleeps until `at`, or for ever without one.
async fn sleep_until_opt(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
