//! [`Locks::lock_all`]: several locks taken as one, all or nothing, without
//! deadlock.
//!
//! Works on every store: the names are taken one after another in one
//! global order (sorted by name), so two clients that ask for the same names
//! in different orders still ask in the same order, and no cycle of waits
//! can form (the classic lock-ordering rule). A part that cannot be taken
//! (busy for `try_acquire`, a timeout, an error, a cancelled future) gives
//! back every part already taken before the call returns.
//!
//! A store with an atomic step for several locks
//! ([`Capabilities::atomic_lock_all`](crate::Capabilities::atomic_lock_all):
//! SQL's one transaction) first tries them all at once, one round trip;
//! when one is busy a `try_acquire` answers `None` at once and an
//! `acquire` waits part by part as above.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::{Duration, Instant};

use crate::backend::{AcquireRequest, LockSpec, Primitive};
use crate::client::Locks;
use crate::error::{Error, ErrorKind, Operation, Result};
use crate::guard::LockGuard;
use crate::name::{LockName, Owner};
use crate::options::AcquireOptions;

impl Locks {
    /// Starts taking every lock in `names` as one: all or nothing. `names`
    /// is any list of names (an array, a slice, a `Vec<String>`, an
    /// iterator); they must be valid lock names, at least one, none twice.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> omnilock_core::Result<()> {
    /// use omnilock_core::{Locks, MemStore};
    /// let locks = Locks::new(MemStore::new());
    /// // A transfer takes both accounts; another transfer the other way
    /// // round asks for them in the same (sorted) order: no deadlock.
    /// let both = locks.lock_all(&["account/17", "account/4"]).acquire().await?;
    /// assert_eq!(both.guards().len(), 2);
    /// both.release().await?;
    /// let accounts: Vec<String> = (1..=3).map(|n| format!("account/{n}")).collect();
    /// let all = locks.lock_all(&accounts).acquire().await?;
    /// assert_eq!(all.guards().len(), 3);
    /// # Ok(()) }
    /// ```
    pub fn lock_all<I>(&self, names: I) -> MultiLockRequest<'_>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        MultiLockRequest {
            locks: self,
            names: sorted_names(names),
            options: AcquireOptions::new(),
        }
    }
}

/// Valid, distinct names in the one global order.
fn sorted_names<I>(names: I) -> Result<Vec<LockName>>
where
    I: IntoIterator,
    I::Item: AsRef<str>,
{
    let mut parsed = names
        .into_iter()
        .map(|name| LockName::new(name.as_ref()))
        .collect::<Result<Vec<_>>>()?;
    if parsed.is_empty() {
        return Err(Error::config("lock_all needs at least one lock name"));
    }
    parsed.sort_by(|a, b| a.as_str().cmp(b.as_str()));
    if let Some(twice) = parsed.windows(2).find(|w| w[0] == w[1]) {
        return Err(Error::config(format!(
            "lock_all got the name {:?} twice",
            twice[0].as_str()
        )));
    }
    Ok(parsed)
}

/// Several locks being configured. Finish with
/// [`acquire`](Self::acquire) or [`try_acquire`](Self::try_acquire).
///
/// Its options are those of [`AcquireOptions`] but `reentrant`, each for
/// every part (the timeout: for the whole set). Those left unset: the
/// handle's TTL, one fresh random owner for all the parts, no timeout.
#[must_use = "a lock request does nothing until acquired"]
pub struct MultiLockRequest<'a> {
    locks: &'a Locks,
    names: Result<Vec<LockName>>,
    options: AcquireOptions,
}

impl MultiLockRequest<'_> {
    crate::option_setters! {
        ttl, owner, timeout, on_wait, options;
        options(options): "omnilock_core",
        "let locks = omnilock_core::Locks::new(omnilock_core::MemStore::new());",
        "locks.lock_all(&[\"a\", \"b\"])"
    }

    /// Waits for every part (up to the timeout, if one is set).
    ///
    /// Cancellation-safe: dropping the future gives back the parts taken so
    /// far (in the background, as dropped guards do).
    pub async fn acquire(self) -> Result<MultiGuard> {
        let taken = self.bounded(true, Operation::Acquire).await?;
        Ok(taken.expect("a waiting acquire returns guards or an error"))
    }

    /// Takes every part only if none needs waiting: `Ok(None)` when one is
    /// busy, and then none is held when this returns. A `timeout` bounds
    /// the whole call here too (a slow or unreachable store).
    pub async fn try_acquire(self) -> Result<Option<MultiGuard>> {
        self.bounded(false, Operation::TryAcquire).await
    }

    /// [`take`](Self::take) within the timeout, if one is set; a timeout is
    /// counted once for the whole call.
    async fn bounded(self, wait: bool, operation: Operation) -> Result<Option<MultiGuard>> {
        let backend = self.locks.backend_kind();
        let labels = match &self.names {
            Ok(names) => names.first().map(|first| {
                let with_name = self.locks.defaults.metrics_names;
                crate::metrics::Labels::new(backend, first.as_str(), with_name)
            }),
            Err(_) => None,
        };
        let timeout = self.options.timeout;
        let taking = self.take(wait);
        let taken = match timeout {
            None => taking.await,
            Some(limit) => match tokio::time::timeout(limit, taking).await {
                Ok(taken) => taken,
                Err(_) => {
                    if let Some(labels) = &labels {
                        crate::metrics::timed_out(labels);
                    }
                    Err(Error::new(
                        ErrorKind::Timeout,
                        format!("locks not all acquired within {limit:?}"),
                    ))
                }
            },
        };
        taken.map_err(|e| e.with_backend(backend).with_operation(operation))
    }

    async fn take(mut self, wait: bool) -> Result<Option<MultiGuard>> {
        let names = std::mem::replace(&mut self.names, Ok(Vec::new()))?;
        self.options.check()?;
        let ttl = self.options.ttl.unwrap_or(self.locks.default_ttl());
        // A named owner may hold some parts already in this process: its
        // reentrancy goes through the per-part path below.
        let fresh = self.options.owner.is_none();
        let owner = self.options.owner.clone().unwrap_or_else(Owner::random);
        if fresh && self.locks.capabilities().atomic_lock_all {
            match self.at_once(&names, &owner, ttl).await {
                Ok(Some(guards)) => return Ok(Some(MultiGuard { guards })),
                Ok(None) if !wait => return Ok(None),
                // Busy: wait part by part. A retryable failure (a rolled
                // back transaction), or a set the step cannot take (too
                // many parts), takes the same path.
                Ok(None) => {}
                Err(err) if err.is_retryable() || err.kind() == ErrorKind::Unsupported => {}
                Err(err) => return Err(err),
            }
        }
        let mut guards: Vec<LockGuard> = Vec::with_capacity(names.len());
        for name in &names {
            let waiting = self.options.waiting();
            let part = self
                .locks
                .lock(name.as_str())
                .ttl(ttl)
                .owner(&owner)
                .on_wait(move || waiting.raise());
            let taken = if wait {
                part.acquire().await.map(Some)
            } else {
                part.try_acquire().await
            };
            match taken {
                Ok(Some(guard)) => guards.push(guard),
                outcome => {
                    give_back(guards).await;
                    return outcome.map(|_| None);
                }
            }
        }
        Ok(Some(MultiGuard { guards }))
    }
}

impl MultiLockRequest<'_> {
    /// Every part in the store's one atomic step, if all are free.
    async fn at_once(
        &self,
        names: &[LockName],
        owner: &Owner,
        ttl: Duration,
    ) -> Result<Option<Vec<LockGuard>>> {
        let requests: Vec<AcquireRequest> = names
            .iter()
            .map(|name| {
                AcquireRequest::new(LockSpec {
                    name: name.clone(),
                    primitive: Primitive::Mutex,
                    owner: owner.clone(),
                    ttl,
                    reentrant: false,
                })
            })
            .collect();
        let started = std::time::Instant::now();
        let Some(grants) = self.locks.backend().try_acquire_all(&requests).await? else {
            return Ok(None);
        };
        if grants.len() != requests.len() {
            return Err(Error::new(
                ErrorKind::Backend,
                "internal: the store granted a different number of locks",
            ));
        }
        Ok(Some(
            requests
                .into_iter()
                .zip(grants)
                .map(|(request, grant)| {
                    // Counted as a grant per part, as the parts taken one
                    // by one are (through their own requests).
                    let labels = crate::metrics::Labels::new(
                        self.locks.backend_kind(),
                        request.name.as_str(),
                        self.locks.defaults.metrics_names,
                    );
                    let (no_wait, _) =
                        crate::metrics::WaitClock::watch(crate::signal::WaitNotice::none());
                    crate::metrics::granted(&labels, started, &no_wait);
                    self.locks.guard_for(request, grant, false)
                })
                .collect(),
        ))
    }
}

/// Releases parts taken before another failed; errors are left to the
/// leases (the caller's own outcome is what it reports).
async fn give_back(guards: Vec<LockGuard>) {
    for guard in guards {
        let _ = guard.release().await;
    }
}

/// Several held locks, taken together by [`Locks::lock_all`]. Dropping it
/// releases every part in the background; each part is renewed like a
/// single [`LockGuard`].
#[must_use = "dropping the guard releases the locks at once"]
pub struct MultiGuard {
    /// Sorted by name.
    guards: Vec<LockGuard>,
}

impl MultiGuard {
    /// The parts, sorted by name: each has its own fencing token.
    pub fn guards(&self) -> &[LockGuard] {
        &self.guards
    }

    /// The fencing token of part `name`, if it is one of the parts.
    pub fn token(&self, name: &str) -> Option<u64> {
        self.guards
            .iter()
            .find(|guard| guard.name().as_str() == name)
            .map(LockGuard::token)
    }

    /// The parts as separate guards, sorted by name: to release or watch
    /// each on its own.
    pub fn into_guards(self) -> Vec<LockGuard> {
        self.guards
    }

    /// Whether every part is still known to be held.
    pub fn is_held(&self) -> bool {
        self.guards.iter().all(LockGuard::is_held)
    }

    /// Until when, by this process's clock, every part is known to be held.
    pub fn safe_until(&self) -> Instant {
        self.guards
            .iter()
            .map(LockGuard::safe_until)
            .min()
            .expect("at least one part")
    }

    /// Completes with the loss of the first part lost (a
    /// [`ErrorKind::LockLost`] error naming that lock).
    pub fn lost(&self) -> impl Future<Output = Error> + Send + 'static + use<> {
        // Polled in turn, not spawned: the future needs no runtime of its
        // own (a blocking caller polls it without one).
        let mut losses: Vec<Pin<Box<dyn Future<Output = Error> + Send>>> = self
            .guards
            .iter()
            .map(|guard| Box::pin(guard.lost()) as Pin<Box<dyn Future<Output = Error> + Send>>)
            .collect();
        std::future::poll_fn(move |context| {
            losses
                .iter_mut()
                .find_map(|loss| match loss.as_mut().poll(context) {
                    Poll::Ready(loss) => Some(loss),
                    Poll::Pending => None,
                })
                .map_or(Poll::Pending, Poll::Ready)
        })
    }

    /// Releases every part; the first error, if any, after trying them all.
    pub async fn release(self) -> Result<()> {
        let mut first = None;
        for guard in self.guards {
            if let Err(err) = guard.release().await {
                first.get_or_insert(err);
            }
        }
        first.map_or(Ok(()), Err)
    }
}

impl fmt::Debug for MultiGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(&self.guards).finish()
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::task::{Context, Waker};

    use crate::{Locks, MemStore};

    /// `lost()` polled on a thread with no runtime (as the blocking API
    /// does) answers instead of panicking.
    #[test]
    fn lost_needs_no_runtime() {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let locks = Locks::new(MemStore::new());
        let all = runtime
            .block_on(locks.lock_all(&["b", "a"]).acquire())
            .expect("lock_all");
        let lost = all.lost();
        let polled = std::thread::spawn(move || {
            let mut lost = Box::pin(lost);
            lost.as_mut()
                .poll(&mut Context::from_waker(Waker::noop()))
                .is_pending()
        })
        .join()
        .expect("no panic off the runtime");
        assert!(polled, "not lost");
        runtime.block_on(all.release()).expect("release");
    }
}
