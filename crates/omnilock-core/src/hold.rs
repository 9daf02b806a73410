//! A lock held in the store by this process: the grant, its hold count
//! (reentrancy within the process), its place in the renewal schedule and
//! its lost signal.
//! Every [`crate::LockGuard`] for the same acquisition shares one `Hold`.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use tokio::runtime::Handle;

use crate::backend::{AcquireRequest, LockSpec};
use crate::dyn_backend::{DynBackend, ErasedGrant};
use crate::error::{Error, ErrorKind, Operation, Result};
use crate::metrics::HoldMetrics;
use crate::renewal::Renewal;
use crate::retry::{Backoff, retry};
use crate::shared::Shared;
use crate::signal::LostNotifier;
use crate::sync::lock_unpoisoned as lock;

pub(crate) struct Hold {
    pub(crate) shared: Arc<Shared>,
    pub(crate) spec: LockSpec,
    /// Fired when the store reports the lock gone before it is released.
    pub(crate) lost: LostNotifier,
    pub(crate) grant: ErasedGrant,
    pub(crate) valid_until: Mutex<Instant>,
    /// The lease granted at the start: the TTL, or less where the store
    /// granted less (renewal runs on a third of it).
    pub(crate) lease: Duration,
    state: Mutex<HoldState>,
    pub(crate) renewal: Mutex<Renewal>,
    /// The runtime that acquired the lock: background releases, and the
    /// renewal task when none runs, go there.
    pub(crate) runtime: Handle,
    pub(crate) metrics: HoldMetrics,
    /// The owner was lent for this acquisition (none was named): it goes
    /// back to the handle's spare owners once the release succeeds.
    lent_owner: bool,
    /// Set by `min_hold`: a release waits until then.
    keep_until: OnceLock<Instant>,
}

struct HoldState {
    /// Guards alive for this acquisition.
    holds: u32,
    /// The last guard is gone; the store release is under way or done.
    released: bool,
}

impl Hold {
    /// Starts tracking a fresh grant and schedules its renewal. Must run
    /// inside a runtime.
    pub(crate) fn start(
        shared: Arc<Shared>,
        request: AcquireRequest,
        grant: ErasedGrant,
        metrics: HoldMetrics,
        lent_owner: bool,
    ) -> Arc<Self> {
        let runtime = Handle::current();
        // The lease the store granted, if shorter than the TTL asked for;
        // renewal runs on a third of it.
        let lease = grant
            .valid_until
            .saturating_duration_since(Instant::now())
            .min(request.ttl)
            .max(Duration::from_millis(30));
        let renewal = Renewal::new(lease / 3);
        // The wait is over: only the lost signal outlives the acquire.
        let AcquireRequest { spec, lost, .. } = request;
        let hold = Arc::new(Hold {
            valid_until: Mutex::new(grant.valid_until),
            lease,
            shared,
            spec,
            lost,
            grant,
            state: Mutex::new(HoldState {
                holds: 1,
                released: false,
            }),
            renewal: Mutex::new(renewal),
            runtime,
            metrics,
            lent_owner,
            keep_until: OnceLock::new(),
        });
        hold.shared.renewals.start(&hold);
        hold
    }

    /// Applies an acquisition's `max_hold` and `min_hold`, counted from
    /// now (just after the grant).
    pub(crate) fn bound(self: &Arc<Self>, max_hold: Option<Duration>, min_hold: Option<Duration>) {
        let now = Instant::now();
        // Checked to at most 400 days before the acquisition; `checked_add`
        // keeps an `Instant` at the far end of its range from panicking.
        if let Some(until) = min_hold.and_then(|min| now.checked_add(min)) {
            let _ = self.keep_until.set(until);
        }
        if let Some((until, max)) = max_hold.and_then(|max| Some((now.checked_add(max)?, max))) {
            self.shared.renewals.bound(self, until, max);
        }
    }

    /// Waits, still renewing, until `min_hold` has passed since the grant
    /// (or the lock is lost meanwhile).
    async fn keep_for_min_hold(&self) {
        let Some(until) = self.keep_until.get() else {
            return;
        };
        if Instant::now() >= *until {
            return;
        }
        tracing::debug!(lock = %self.spec.name, "omnilock keeps the lock until its min_hold has passed");
        tokio::select! {
            _ = tokio::time::sleep_until((*until).into()) => {}
            _ = self.lost.fired() => {}
        }
    }

    pub(crate) fn backend(&self) -> &Arc<dyn DynBackend> {
        &self.shared.backend
    }

    pub(crate) fn valid_until(&self) -> Instant {
        *lock(&self.valid_until)
    }

    pub(crate) fn hold_count(&self) -> u32 {
        lock(&self.state).holds
    }

    /// Whether the lock is still known to be ours.
    pub(crate) fn is_held(&self) -> bool {
        !lock(&self.state).released && !self.lost.is_fired() && Instant::now() < self.valid_until()
    }

    /// Adds a reentrant hold. `Ok(false)` when this acquisition can no longer
    /// be re-entered (released or lost): the caller goes to the store instead.
    pub(crate) fn enter(&self, reentrant: bool) -> Result<bool> {
        let mut state = lock(&self.state);
        if state.released || state.holds == 0 || !self.is_held_unlocked() {
            return Ok(false);
        }
        if !reentrant {
            return Err(Error::new(
                ErrorKind::WouldDeadlock,
                format!(
                    "owner {} already holds this lock and the acquisition is not reentrant",
                    self.spec.owner
                ),
            ));
        }
        state.holds += 1;
        Ok(true)
    }

    fn is_held_unlocked(&self) -> bool {
        !self.lost.is_fired() && Instant::now() < self.valid_until()
    }

    /// Drops one hold; true when it was the last and the store must be told.
    pub(crate) fn leave(&self) -> bool {
        let mut state = lock(&self.state);
        state.holds = state.holds.saturating_sub(1);
        if state.holds == 0 && !state.released {
            state.released = true;
            self.metrics.released();
            return true;
        }
        false
    }

    /// Releases the lock in the store after the last hold is gone. Transient
    /// errors are retried while the lease is still valid (after that the
    /// store frees the lock by itself).
    pub(crate) async fn release_in_store(self: &Arc<Self>) -> Result<()> {
        self.keep_for_min_hold().await;
        self.shared.renewals.stop(self);
        let deadline = tokio::time::Instant::from_std(self.valid_until());
        let backoff = Backoff::new(Duration::from_millis(20), Duration::from_millis(500));
        let result = retry(backoff, deadline, || {
            self.backend().release(&self.spec, &self.grant)
        })
        .await;
        self.shared.forget(self);
        if result.is_ok() && self.lent_owner {
            self.shared.give_back_owner(self.spec.owner.clone());
        }
        match &result {
            Ok(()) => {
                tracing::debug!(lock = %self.spec.name, token = self.grant.token, "omnilock released")
            }
            Err(e) => {
                tracing::warn!(lock = %self.spec.name, error = %e, "omnilock release failed")
            }
        }
        result.map_err(|e| {
            e.with_backend(self.backend().kind())
                .with_operation(Operation::Release)
                .with_lock(self.spec.name.as_str())
        })
    }

    /// Releases in the background, for `Drop`: never blocks and never panics,
    /// even when the runtime that acquired the lock is gone (the lease then
    /// frees the lock when it expires).
    pub(crate) fn release_in_background(self: Arc<Self>) {
        let runtime = self.runtime.clone();
        let spawn = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
            crate::cleanup::spawn_cleanup_on(&runtime, async move {
                let _ = self.release_in_store().await;
            });
        }));
        if spawn.is_err() {
            tracing::warn!("omnilock: runtime gone; the lock frees when its lease expires");
        }
    }
}
