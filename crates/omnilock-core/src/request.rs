//! [`LockRequest`], the builder for one acquisition, and
//! [`ReadWriteLock`], which makes the requests of either side.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::Instrument;

use crate::backend::{AcquireRequest, LockSpec, Primitive};
use crate::client::Locks;
use crate::error::{Error, ErrorKind, Operation, Result};
use crate::guard::LockGuard;
use crate::metrics;
use crate::name::{LockName, Owner};
use crate::options::AcquireOptions;
use crate::signal::LostNotifier;

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
    pub(crate) fn new(locks: &'a Locks, name: &str) -> Self {
        ReadWriteLock {
            locks,
            name: name.to_string(),
        }
    }

    /// Starts building an acquisition of the shared (read) side.
    pub fn read(&self) -> LockRequest<'a> {
        self.locks.request(&self.name, Primitive::Read)
    }

    /// Starts building an acquisition of the exclusive (write) side.
    pub fn write(&self) -> LockRequest<'a> {
        self.locks.request(&self.name, Primitive::Write)
    }
}

/// One acquisition being configured (a mutex, a semaphore permit, or one
/// side of a read-write lock). Finish with [`acquire`](Self::acquire) or
/// [`try_acquire`](Self::try_acquire).
///
/// It takes every [`AcquireOptions`] option; those left unset are the
/// handle's: its TTL, its owner (else a random one of its own) and its
/// reentrancy, with no timeout.
#[must_use = "a lock request does nothing until acquired"]
pub struct LockRequest<'a> {
    locks: &'a Locks,
    name: Result<LockName>,
    primitive: Primitive,
    options: AcquireOptions,
}

impl<'a> LockRequest<'a> {
    /// A request for `name`'s `primitive` with `locks`'s defaults.
    pub(crate) fn new(locks: &'a Locks, name: &str, primitive: Primitive) -> Self {
        LockRequest {
            locks,
            name: LockName::new(name),
            primitive,
            options: AcquireOptions::new(),
        }
    }
}

impl LockRequest<'_> {
    crate::option_setters! {
        ttl, owner, reentrant, timeout, on_wait, max_hold, min_hold, options;
        options(options): "omnilock_core",
        "let locks = omnilock_core::Locks::new(omnilock_core::MemStore::new());",
        "locks.lock(\"a\")"
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
        self.options.check().map_err(&context)?;
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
        let (wait_clock, waiting) = metrics::WaitClock::watch(self.options.waiting());
        self.options.waiting = Some(waiting);
        // A try never waits for a holder, but a slow or unreachable store
        // must not keep it past its timeout either.
        let timeout = self.options.timeout;
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

    /// The lease TTL asked for, else the handle's.
    fn lease(&self) -> Duration {
        self.options.ttl.unwrap_or(self.locks.defaults.ttl)
    }

    /// Whether the owner may re-enter, as asked, else as the handle says.
    fn reenters(&self) -> bool {
        self.options
            .reentrant
            .unwrap_or(self.locks.defaults.reentrant)
    }

    fn labels(&self, name: &LockName) -> metrics::Labels {
        let with_name = self.locks.defaults.metrics_names;
        metrics::Labels::new(self.locks.backend_kind(), name.as_str(), with_name)
    }

    async fn attempt(self, name: LockName, wait: bool) -> Result<Option<LockGuard>> {
        let asked = self
            .options
            .owner
            .as_ref()
            .or(self.locks.defaults.owner.as_ref());
        let owner = match (asked, self.primitive) {
            (Some(owner), Primitive::Mutex | Primitive::Read | Primitive::Write) => owner.clone(),
            // A semaphore permit is never re-entered.
            (Some(owner), Primitive::Semaphore { .. }) => {
                return self.in_store(name, owner.clone(), wait, false).await;
            }
            // Lent only where the store asks for it, and given back only
            // by a successful release (`Hold::release_in_store`): a try
            // that found the lock busy may still be deleting what it put.
            (None, _) if self.locks.shared.backend.reuses_owners() => {
                let owner = self.locks.shared.lend_owner();
                return self.in_store(name, owner, wait, true).await;
            }
            (None, _) => return self.in_store(name, Owner::random(), wait, false).await,
        };
        let shared = &self.locks.shared;
        match self.primitive {
            // The write holder may read: the read guard rides on its hold.
            Primitive::Read => {
                if let Some(write) = shared.held(&name, &owner, Primitive::Write)
                    && write.enter(true)?
                {
                    return Ok(Some(LockGuard::new(write)));
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
        // each other in the store. Declared first, so dropped last, after
        // the slot and its lock, whichever way this ends.
        let _prune = PruneSlot {
            shared,
            key: (name.clone(), owner.clone(), self.primitive),
        };
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
        if let Some(hold) = current.upgrade()
            && hold.enter(self.reenters())?
        {
            return Ok(Some(LockGuard::new(hold)));
        }
        let guard = self.in_store(name, owner, wait, false).await?;
        if let Some(guard) = &guard {
            *current = Arc::downgrade(guard.hold());
            shared.remember_rw(guard.hold());
        }
        Ok(guard)
    }

    /// Takes the lock in the store. A grant whose lease ran out before the
    /// store's answer came back (it waited in the database longer than the
    /// TTL, say) is no lock: another client may hold it already. It is given
    /// back, and a waiting acquire asks again; a try answers `None`.
    async fn in_store(
        &self,
        name: LockName,
        owner: Owner,
        wait: bool,
        lent: bool,
    ) -> Result<Option<LockGuard>> {
        let shared = &self.locks.shared;
        let mut requeued = 0;
        loop {
            let request = AcquireRequest {
                spec: LockSpec {
                    name: name.clone(),
                    primitive: self.primitive,
                    owner: owner.clone(),
                    ttl: self.lease(),
                    reentrant: self.reenters() && self.primitive == Primitive::Mutex,
                },
                lost: LostNotifier::new(),
                waiting: self.options.waiting(),
            };
            let grant = if wait {
                match shared.backend.acquire(&request).await {
                    Ok(grant) => Some(grant),
                    // The session or lease the wait stood on ended (a
                    // network cut longer than the TTL, a revoked lease):
                    // nothing was granted, so nothing is lost but the place
                    // in line. Queue again (at the back), a few times at
                    // most (a session that dies at every wait is a store
                    // problem to report), unless the loss was `close`.
                    Err(err)
                        if err.kind() == ErrorKind::LockLost
                            && requeued < MAX_REQUEUES
                            && !shared.closed.load(std::sync::atomic::Ordering::SeqCst) =>
                    {
                        requeued += 1;
                        tracing::warn!(
                            lock = %name,
                            error = %err,
                            "omnilock: the store lost this waiter's place in line; queueing again"
                        );
                        tokio::time::sleep(REQUEUE_PAUSE * requeued).await;
                        continue;
                    }
                    Err(err) => return Err(err),
                }
            } else {
                shared.backend.try_acquire(&request).await?
            };
            // No await between the grant and `Hold::start`: a cancellation
            // here is handled by the backend's own drop path.
            let Some(guard) = grant.map(|grant| self.locks.guard_for(request, grant, lent)) else {
                return Ok(None);
            };
            if guard.hold().valid_until() > std::time::Instant::now() {
                guard
                    .hold()
                    .bound(self.options.max_hold, self.options.min_hold);
                return Ok(Some(guard));
            }
            tracing::warn!(
                lock = %name,
                "omnilock: the store's grant came back after its lease had run out; \
                 giving it back"
            );
            let _ = guard.release().await;
            if !wait {
                return Ok(None);
            }
        }
    }
}

/// Drops a reentrancy slot that ended up unused (see
/// [`Shared::prune_slot`](crate::shared::Shared::prune_slot)).
struct PruneSlot<'a> {
    shared: &'a crate::shared::Shared,
    key: crate::shared::SlotKey,
}

impl Drop for PruneSlot<'_> {
    fn drop(&mut self) {
        self.shared.prune_slot(&self.key);
    }
}

/// How often a waiting acquire queues again after the store lost its place
/// in line ([`ErrorKind::LockLost`] while waiting), and the pause before
/// the first time (doubled, then tripled).
const MAX_REQUEUES: u32 = 3;
const REQUEUE_PAUSE: Duration = Duration::from_millis(100);

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use async_trait::async_trait;

    use crate::backend::{AcquireRequest, Backend, Capabilities, Grant, LockSpec};
    use crate::error::{ErrorKind, Result};
    use crate::{Locks, MemStore};

    /// The in-memory store, whose try-acquire never answers (a store that
    /// stopped answering).
    #[derive(Debug, Default)]
    struct SilentTries(MemStore);

    #[async_trait]
    impl Backend for SilentTries {
        type Hold = <MemStore as Backend>::Hold;
        fn kind(&self) -> &'static str {
            "mem"
        }
        fn capabilities(&self) -> Capabilities {
            self.0.capabilities()
        }
        async fn try_acquire(&self, _: &AcquireRequest) -> Result<Option<Grant<Self::Hold>>> {
            std::future::pending().await
        }
        async fn acquire(&self, request: &AcquireRequest) -> Result<Grant<Self::Hold>> {
            self.0.acquire(request).await
        }
        async fn release(&self, spec: &LockSpec, grant: &Grant<Self::Hold>) -> Result<()> {
            self.0.release(spec, grant).await
        }
        async fn renew(&self, spec: &LockSpec, grant: &Grant<Self::Hold>) -> Result<Instant> {
            self.0.renew(spec, grant).await
        }
    }

    /// The in-memory store, whose first grant comes back with its lease
    /// already run out (as after a long wait in a database).
    #[derive(Debug, Default)]
    struct LateFirstGrant {
        store: MemStore,
        granted: std::sync::atomic::AtomicUsize,
    }

    #[async_trait]
    impl Backend for LateFirstGrant {
        type Hold = <MemStore as Backend>::Hold;
        fn kind(&self) -> &'static str {
            "mem"
        }
        fn capabilities(&self) -> Capabilities {
            self.store.capabilities()
        }
        async fn try_acquire(&self, request: &AcquireRequest) -> Result<Option<Grant<Self::Hold>>> {
            let grant = self.store.try_acquire(request).await?;
            Ok(grant.map(|grant| self.maybe_late(grant)))
        }
        async fn acquire(&self, request: &AcquireRequest) -> Result<Grant<Self::Hold>> {
            let grant = self.store.acquire(request).await?;
            Ok(self.maybe_late(grant))
        }
        async fn release(&self, spec: &LockSpec, grant: &Grant<Self::Hold>) -> Result<()> {
            self.store.release(spec, grant).await
        }
        async fn renew(&self, spec: &LockSpec, grant: &Grant<Self::Hold>) -> Result<Instant> {
            self.store.renew(spec, grant).await
        }
    }

    impl LateFirstGrant {
        fn maybe_late(
            &self,
            grant: Grant<<MemStore as Backend>::Hold>,
        ) -> Grant<<MemStore as Backend>::Hold> {
            use std::sync::atomic::Ordering;
            let mut grant = grant;
            if self.granted.fetch_add(1, Ordering::SeqCst) == 0 {
                grant.valid_until = Instant::now() - Duration::from_millis(1);
            }
            grant
        }
    }

    /// A grant whose lease ran out before it came back is never handed
    /// out: a waiting acquire takes the lock again (the late grant given
    /// back), a try answers `None`.
    #[tokio::test]
    async fn a_grant_that_came_back_too_late_is_not_handed_out() {
        let locks = Locks::new(LateFirstGrant::default());
        let guard = locks.acquire("late").await.expect("acquire");
        assert!(guard.is_held(), "a dead guard was handed out");
        assert_eq!(
            guard.token(),
            2,
            "the second grant, after the late one was given back"
        );
        guard.release().await.expect("release");

        let locks = Locks::new(LateFirstGrant::default());
        assert!(locks.try_acquire("late").await.expect("try").is_none());
        let guard = locks
            .try_acquire("late")
            .await
            .expect("try")
            .expect("free again");
        assert!(guard.is_held());
        guard.release().await.expect("release");
    }

    /// A named owner's attempt that ends without a grant leaves no
    /// reentrancy slot behind, whichever way it ends: busy, timed out,
    /// cancelled, or a `lock_all` whose parts (an owner each) fail.
    #[tokio::test]
    async fn attempts_without_a_grant_leave_no_slot() {
        let locks = Locks::new(MemStore::default());
        let holder = locks.acquire("busy").await.expect("acquire");
        let owner = |name: &str| crate::Owner::new(name).expect("owner");
        let other = locks.lock("busy").owner(&owner("other"));
        assert!(other.try_acquire().await.expect("try").is_none());
        let timed_out = locks
            .lock("busy")
            .owner(&owner("other"))
            .timeout(Duration::from_millis(20))
            .acquire()
            .await;
        assert_eq!(timed_out.err().map(|e| e.kind()), Some(ErrorKind::Timeout));
        let cancelled = tokio::time::timeout(
            Duration::from_millis(20),
            locks.lock("busy").owner(&owner("third")).acquire(),
        )
        .await;
        assert!(cancelled.is_err(), "the lock was busy");
        for _ in 0..10 {
            let all = locks
                .lock_all(["free/a", "busy", "free/b"])
                .timeout(Duration::from_millis(20))
                .acquire()
                .await;
            assert!(all.is_err(), "one part was busy");
        }
        assert_eq!(locks.shared.slots(), 0, "slots left behind");

        // A granted named owner keeps its slot (for re-entry) until released.
        let named = locks
            .lock("mine")
            .owner(&owner("me"))
            .acquire()
            .await
            .expect("acquire");
        assert_eq!(locks.shared.slots(), 1);
        named.release().await.expect("release");
        holder.release().await.expect("release");
        assert_eq!(locks.shared.slots(), 0);
    }

    /// A try-acquire never waits for a holder, and its timeout bounds the
    /// call when the store does not answer: it is honoured, not ignored.
    #[tokio::test]
    async fn a_try_acquire_keeps_to_its_timeout() {
        let locks = Locks::new(SilentTries::default());
        let limit = Duration::from_millis(50);
        let one = locks.lock("silent").timeout(limit).try_acquire();
        let several = locks.lock_all(["silent/a", "silent/b"]).timeout(limit);
        for (what, outcome) in [
            (
                "one lock",
                tokio::time::timeout(Duration::from_secs(10), one)
                    .await
                    .map(|r| r.map(drop)),
            ),
            (
                "lock_all",
                tokio::time::timeout(Duration::from_secs(10), several.try_acquire())
                    .await
                    .map(|r| r.map(drop)),
            ),
        ] {
            let err = outcome
                .unwrap_or_else(|_| panic!("{what}: the try did not keep to its timeout"))
                .expect_err("a store that does not answer");
            assert_eq!(err.kind(), ErrorKind::Timeout, "{what}: {err}");
        }
    }
}
