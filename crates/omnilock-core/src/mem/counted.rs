//! Semaphores and read-write locks in memory: the reference for the grant
//! rule every store follows (see [`crate::Backend`]).
//!
//! One queue of entries per name, in arrival order. Each entry weighs 1,
//! except a writer, which weighs the whole capacity. Walking the queue from
//! the front, an entry is admitted while the weights so far, its own
//! included, fit the capacity (a semaphore's permits; a read-write lock's is
//! unbounded); the first entry that does not fit stops the walk, so later
//! entries never overtake it. Admitted entries stay at the front until they
//! leave, so admission is FIFO, and a waiting writer holds back every reader
//! behind it.

use std::collections::HashMap;
use std::time::{Instant, SystemTime};

use tokio::sync::oneshot;

use crate::backend::{AcquireRequest, LockSpec, Primitive};
use crate::error::{Error, ErrorKind, Result};
use crate::inspect::{Held, Inspection, Listed, LockKind, Side, Waiting};
use crate::name::{LockName, Owner};
use crate::signal::LostNotifier;

/// Semaphores and read-write locks live apart from mutexes and from each
/// other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Family {
    Semaphore,
    ReadWrite,
}

impl Family {
    pub(super) fn of(primitive: Primitive) -> Option<Family> {
        match primitive {
            Primitive::Mutex => None,
            Primitive::Semaphore { .. } => Some(Family::Semaphore),
            Primitive::Read | Primitive::Write => Some(Family::ReadWrite),
        }
    }
}

/// Every semaphore and read-write lock of one store.
#[derive(Debug, Default)]
pub(super) struct CountedLocks {
    queues: HashMap<(Family, LockName), Queue>,
}

#[derive(Debug)]
struct Queue {
    capacity: u64,
    entries: Vec<Entry>,
}

#[derive(Debug)]
struct Entry {
    id: u64,
    owner: Owner,
    weight: u64,
    side: Side,
    ttl: std::time::Duration,
    lost: LostNotifier,
    state: EntryState,
}

#[derive(Debug)]
enum EntryState {
    Waiting(Option<oneshot::Sender<Admitted>>),
    Admitted {
        token: u64,
        expires: Instant,
        since: SystemTime,
    },
}

/// A grant: its token and lease end.
#[derive(Debug, Clone, Copy)]
pub(super) struct Admitted {
    pub(super) token: u64,
    pub(super) expires: Instant,
}

/// What joining a queue gave.
pub(super) enum Joined {
    Admitted(Admitted),
    Waiting(oneshot::Receiver<Admitted>),
}

fn share(spec: &LockSpec) -> crate::backend::Share {
    spec.primitive
        .share()
        .expect("a semaphore or read-write lock")
}

fn key(spec: &LockSpec) -> (Family, LockName) {
    let family = Family::of(spec.primitive).expect("a semaphore or read-write lock");
    (family, spec.name.clone())
}

impl CountedLocks {
    /// Adds entry `id` for `request` at the back of its queue. A try-acquire
    /// (`wait` false) that is not admitted at once leaves again: `Ok(None)`.
    pub(super) fn join(
        &mut self,
        request: &AcquireRequest,
        id: u64,
        wait: bool,
        now: Instant,
        last_token: &mut u64,
    ) -> Result<Option<Joined>> {
        let key = key(request);
        let capacity = share(request).capacity;
        let queue = self.queues.entry(key.clone()).or_insert_with(|| Queue {
            capacity,
            entries: Vec::new(),
        });
        queue.expire(now, last_token);
        if queue.capacity != capacity {
            let recorded = queue.capacity;
            self.tidy(&key);
            return Err(Error::permits_conflict(recorded, capacity));
        }
        let (tx, rx) = oneshot::channel();
        queue.entries.push(Entry {
            id,
            owner: request.owner.clone(),
            weight: share(request).weight,
            side: Side::of(request.primitive),
            ttl: request.ttl,
            lost: request.lost.clone(),
            state: EntryState::Waiting(Some(tx)),
        });
        queue.admit(now, last_token);
        let last = queue.entries.last().expect("just pushed");
        let joined = match last.state {
            EntryState::Admitted { token, expires, .. } => {
                Some(Joined::Admitted(Admitted { token, expires }))
            }
            EntryState::Waiting(_) if wait => Some(Joined::Waiting(rx)),
            EntryState::Waiting(_) => {
                queue.entries.pop();
                None
            }
        };
        self.tidy(&key);
        Ok(joined)
    }

    /// Removes entry `id` (a dropped waiter, or a release), admitting those
    /// it held back. With `token`, only an admitted entry with that token
    /// and owner is removed: `Err(NotOwner)` otherwise.
    pub(super) fn leave(
        &mut self,
        spec: &LockSpec,
        entry: Leaving,
        now: Instant,
        last_token: &mut u64,
    ) -> Result<()> {
        let key = key(spec);
        let Some(queue) = self.queues.get_mut(&key) else {
            return match entry {
                Leaving::Waiter(_) => Ok(()),
                Leaving::Holder(_) => Err(Error::not_owner()),
            };
        };
        queue.expire(now, last_token);
        let position = queue.entries.iter().position(|e| match entry {
            Leaving::Waiter(id) => e.id == id,
            Leaving::Holder(token) => {
                e.owner == spec.owner
                    && matches!(e.state, EntryState::Admitted { token: t, .. } if t == token)
            }
        });
        let result = match (position, entry) {
            (Some(at), _) => {
                queue.entries.remove(at);
                queue.admit(now, last_token);
                Ok(())
            }
            (None, Leaving::Waiter(_)) => Ok(()),
            (None, Leaving::Holder(_)) => Err(Error::not_owner()),
        };
        self.tidy(&key);
        result
    }

    /// Removes the admitted entries of `kind` of `name` (only `owner`'s
    /// where given), telling their holders, and admits the next: how many
    /// were removed.
    pub(super) fn break_holds(
        &mut self,
        name: &LockName,
        kind: LockKind,
        owner: Option<&Owner>,
        now: Instant,
        last_token: &mut u64,
    ) -> usize {
        let family = match kind {
            LockKind::Semaphore => Family::Semaphore,
            _ => Family::ReadWrite,
        };
        let key = (family, name.clone());
        let Some(queue) = self.queues.get_mut(&key) else {
            return 0;
        };
        queue.expire(now, last_token);
        let before = queue.entries.len();
        queue.entries.retain(|e| {
            let broken = matches!(e.state, EntryState::Admitted { .. })
                && owner.is_none_or(|owner| &e.owner == owner);
            if broken {
                e.lost
                    .fire(Error::new(ErrorKind::LockLost, "the hold was broken"));
            }
            !broken
        });
        let broken = before - queue.entries.len();
        queue.admit(now, last_token);
        self.tidy(&key);
        broken
    }

    /// Extends the lease of the admitted entry with `token`.
    pub(super) fn renew(
        &mut self,
        spec: &LockSpec,
        token: u64,
        now: Instant,
        last_token: &mut u64,
    ) -> Result<Instant> {
        let key = key(spec);
        let renewed = self.queues.get_mut(&key).and_then(|queue| {
            queue.expire(now, last_token);
            queue.entries.iter_mut().find_map(|e| match &mut e.state {
                EntryState::Admitted {
                    token: t, expires, ..
                } if *t == token && e.owner == spec.owner => {
                    *expires = (*expires).max(now + spec.ttl);
                    Some(now + spec.ttl)
                }
                _ => None,
            })
        });
        self.tidy(&key);
        renewed.ok_or_else(|| Error::new(ErrorKind::LockLost, "the permit is no longer held"))
    }

    /// The earliest lease end among the admitted entries of `spec`'s
    /// queue: when a waiter must look again, as a crashed holder never
    /// releases.
    pub(super) fn next_expiry(&self, spec: &LockSpec) -> Option<Instant> {
        let queue = self.queues.get(&key(spec))?;
        queue
            .entries
            .iter()
            .filter_map(|e| match e.state {
                EntryState::Admitted { expires, .. } => Some(expires),
                EntryState::Waiting(_) => None,
            })
            .min()
    }

    /// Expires lapsed leases of `spec`'s queue (admitting waiters).
    pub(super) fn refresh(&mut self, spec: &LockSpec, now: Instant, last_token: &mut u64) {
        let key = key(spec);
        if let Some(queue) = self.queues.get_mut(&key) {
            queue.expire(now, last_token);
        }
        self.tidy(&key);
    }

    /// Whether any queue is left (for tests: nothing is left behind).
    pub(super) fn len(&self) -> usize {
        self.queues.len()
    }

    /// Forgets an empty queue, and with it the recorded permits.
    /// The semaphore or read-write lock `name` (by `kind`) as
    /// [`crate::Backend::inspect`] reports it.
    pub(super) fn inspect(
        &mut self,
        name: &LockName,
        kind: LockKind,
        now: Instant,
        last_token: &mut u64,
    ) -> Inspection {
        let mut seen = Inspection::free(name.as_str(), kind);
        let family = match kind {
            LockKind::Semaphore => Family::Semaphore,
            _ => Family::ReadWrite,
        };
        let Some(queue) = self.queues.get_mut(&(family, name.clone())) else {
            return seen;
        };
        queue.expire(now, last_token);
        if family == Family::Semaphore {
            seen.permits = u32::try_from(queue.capacity).ok();
        }
        let mut waiters = Vec::new();
        for entry in &queue.entries {
            match &entry.state {
                EntryState::Admitted {
                    token,
                    expires,
                    since,
                } => seen.holders.push(
                    Held::new(entry.owner.clone(), *token, entry.side)
                        .since(Some(*since))
                        .lease_left(Some(expires.saturating_duration_since(now))),
                ),
                EntryState::Waiting(tx) if tx.as_ref().is_some_and(|tx| !tx.is_closed()) => {
                    waiters.push(Waiting::new(Some(entry.owner.clone()), entry.side));
                }
                EntryState::Waiting(_) => {}
            }
        }
        seen.waiters = Some(waiters);
        self.tidy(&(family, name.clone()));
        seen
    }

    /// The semaphores and read-write locks with holders whose names start
    /// with `prefix`.
    pub(super) fn list(&mut self, prefix: &str, now: Instant, last_token: &mut u64) -> Vec<Listed> {
        let mut listed = Vec::new();
        for ((family, name), queue) in &mut self.queues {
            if !name.as_str().starts_with(prefix) {
                continue;
            }
            queue.expire(now, last_token);
            if queue
                .entries
                .iter()
                .any(|e| matches!(e.state, EntryState::Admitted { .. }))
            {
                let kind = match family {
                    Family::Semaphore => LockKind::Semaphore,
                    Family::ReadWrite => LockKind::RwLock,
                };
                listed.push(Listed::new(name.as_str(), kind));
            }
        }
        listed
    }

    fn tidy(&mut self, key: &(Family, LockName)) {
        if self.queues.get(key).is_some_and(|q| q.entries.is_empty()) {
            self.queues.remove(key);
        }
    }
}

/// Which entry leaves: a waiter by its id, or a holder by its token.
#[derive(Debug, Clone, Copy)]
pub(super) enum Leaving {
    Waiter(u64),
    Holder(u64),
}

impl Queue {
    /// Drops admitted entries whose lease ran out, telling their holders.
    fn expire(&mut self, now: Instant, last_token: &mut u64) {
        let before = self.entries.len();
        self.entries.retain(|e| match e.state {
            EntryState::Admitted { expires, .. } if expires <= now => {
                e.lost
                    .fire(Error::new(ErrorKind::LockLost, "the lease expired"));
                false
            }
            _ => true,
        });
        if self.entries.len() != before {
            self.admit(now, last_token);
        }
    }

    /// Admits waiters from the front while they fit; a waiter whose acquire
    /// is gone (its receiver dropped) leaves instead.
    fn admit(&mut self, now: Instant, last_token: &mut u64) {
        let mut used = 0u64;
        let mut at = 0;
        while at < self.entries.len() {
            let entry = &mut self.entries[at];
            if used + entry.weight > self.capacity {
                return;
            }
            if let EntryState::Waiting(tx) = &mut entry.state {
                *last_token += 1;
                let admitted = Admitted {
                    token: *last_token,
                    expires: now + entry.ttl,
                };
                let tx = tx.take().expect("a waiter is told once");
                if tx.send(admitted).is_err() {
                    self.entries.remove(at);
                    continue;
                }
                entry.state = EntryState::Admitted {
                    token: admitted.token,
                    expires: admitted.expires,
                    since: SystemTime::now(),
                };
            }
            used += entry.weight;
            at += 1;
        }
    }
}
