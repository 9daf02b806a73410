//! Lease renewal for every lock one [`crate::Locks`] family holds: a single
//! task (not one per lock) sleeps until the earliest renewal is due, then
//! renews every hold due within a quarter of that hold's interval in one
//! batch through [`Backend::renew_all`]. A process holding 100,000 locks
//! thus sends a few hundred store requests per renewal round instead of
//! 100,000, and starting a hold costs an insert into a map, not a task.
//!
//! The same task fires a hold's lost signal when its lease runs out before a
//! renewal succeeded (or at once when the store says the lock is gone).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use std::future::Future;

use futures_util::FutureExt;
use futures_util::future::{Either, join_all, select};
use tokio::sync::Notify;

use crate::backend::LockSpec;
use crate::dyn_backend::ErasedGrant;
use crate::error::{Error, ErrorKind, Result};
use crate::hold::Hold;
use crate::retry::Backoff;
use crate::sync::lock_unpoisoned as lock;

/// Holds renewed by one store call at most (a backend may split further).
pub(crate) const BATCH: usize = 512;

/// How long the task stays up with nothing to renew before it ends (the next
/// hold starts a new one).
const LINGER: Duration = Duration::from_secs(10);

/// A hold's place in the schedule: when it is due, and a tie-breaker.
type Key = (Instant, u64);

/// The schedule of one [`crate::Locks`] family's holds.
#[derive(Default)]
pub(crate) struct Renewals {
    schedule: Mutex<Schedule>,
    /// A hold came due before the time the task sleeps until.
    earlier: Notify,
}

#[derive(Default)]
struct Schedule {
    due: BTreeMap<Key, Weak<Hold>>,
    next_id: u64,
    /// A task is running this schedule.
    running: bool,
    /// When the running task will next look (None: it is renewing).
    wakes_at: Option<Instant>,
}

/// A hold's renewal state, kept in the hold.
pub(crate) struct Renewal {
    /// Its place in the schedule while it waits there.
    key: Option<Key>,
    /// Released: never schedule it again, never report it lost.
    stopped: bool,
    backoff: Backoff,
    /// The end of renewal set by `max_hold`, and that bound (for the
    /// message): at that instant the hold is reported lost.
    until: Option<(Instant, Duration)>,
}

impl Renewal {
    pub(crate) fn new(interval: Duration) -> Self {
        Renewal {
            key: None,
            stopped: false,
            backoff: Backoff::new(interval / 8, interval),
            until: None,
        }
    }
}

/// How often a hold is renewed: every third of its lease (the TTL asked
/// for, or the shorter lease the store granted: a ZooKeeper session the
/// application opened may time out sooner than the TTL).
fn interval(hold: &Hold) -> Duration {
    hold.lease / 3
}

impl Renewals {
    /// Schedules a new hold's first renewal (or its expiry, on a store that
    /// does not renew), starting the task if none runs.
    pub(crate) fn start(self: &Arc<Self>, hold: &Arc<Hold>) {
        let due = if hold.backend().capabilities().lease_renewal {
            (Instant::now() + interval(hold)).min(hold.valid_until())
        } else {
            hold.valid_until()
        };
        let mut renewal = lock(&hold.renewal);
        self.schedule_locked(hold, &mut renewal, due);
    }

    /// Stops renewing `hold` at `until` (`max_hold` after it was taken):
    /// from then on it is reported lost.
    pub(crate) fn bound(self: &Arc<Self>, hold: &Arc<Hold>, until: Instant, max_hold: Duration) {
        let mut renewal = lock(&hold.renewal);
        renewal.until = Some((until, max_hold));
        let due = renewal.key.map_or(until, |(due, _)| due.min(until));
        self.schedule_locked(hold, &mut renewal, due);
    }

    /// Takes a released hold out of the schedule for good.
    pub(crate) fn stop(&self, hold: &Hold) {
        let mut renewal = lock(&hold.renewal);
        renewal.stopped = true;
        if let Some(key) = renewal.key.take() {
            lock(&self.schedule).due.remove(&key);
        }
    }

    /// Lock order: the hold's renewal state, then the schedule.
    fn schedule_locked(self: &Arc<Self>, hold: &Arc<Hold>, renewal: &mut Renewal, due: Instant) {
        if renewal.stopped {
            return;
        }
        let due = renewal.until.map_or(due, |(until, _)| due.min(until));
        let mut schedule = lock(&self.schedule);
        if let Some(old) = renewal.key.take() {
            schedule.due.remove(&old);
        }
        schedule.next_id += 1;
        let key = (due, schedule.next_id);
        schedule.due.insert(key, Arc::downgrade(hold));
        renewal.key = Some(key);
        if !schedule.running {
            schedule.running = true;
            schedule.wakes_at = None;
            drop(schedule);
            spawn(self.clone(), &hold.runtime, true);
        } else if schedule.wakes_at.is_some_and(|at| due < at) {
            schedule.wakes_at = Some(due);
            drop(schedule);
            self.earlier.notify_one();
        }
    }

    /// The holds due now, or within a quarter interval of now (renewed
    /// early to share the batch); or when to look next; or `Err` when the
    /// task should end.
    fn take_due(&self) -> std::result::Result<Vec<Arc<Hold>>, Option<Instant>> {
        let now = Instant::now();
        let mut schedule = lock(&self.schedule);
        let Some((&(first, _), _)) = schedule.due.first_key_value() else {
            schedule.wakes_at = Some(now + LINGER);
            return Err(None);
        };
        if first > now {
            schedule.wakes_at = Some(first);
            return Err(Some(first));
        }
        let mut taken = Vec::new();
        while let Some(entry) = schedule.due.first_entry() {
            let (due, _) = *entry.key();
            let Some(hold) = entry.get().upgrade() else {
                entry.remove();
                continue;
            };
            if due > now + interval(&hold) / 4 {
                break;
            }
            entry.remove();
            taken.push(hold);
        }
        schedule.wakes_at = None;
        Ok(taken)
    }

    /// Renews `holds` (all due), in batches run side by side, and schedules
    /// each again or reports it lost.
    async fn renew(self: &Arc<Self>, holds: Vec<Arc<Hold>>) {
        let now = Instant::now();
        let mut to_renew = Vec::with_capacity(holds.len());
        for hold in holds {
            // Detach from the schedule: the key is gone from the map.
            let mut renewal = lock(&hold.renewal);
            renewal.key = None;
            if renewal.stopped || hold.lost.is_fired() {
                continue;
            }
            if let Some((until, max_hold)) = renewal.until
                && now >= until
            {
                renewal.stopped = true;
                drop(renewal);
                hold.lost.fire(
                    Error::new(
                        ErrorKind::LockLost,
                        format!(
                            "held for its max_hold of {max_hold:?}; renewal stopped and the \
                             holder must let go"
                        ),
                    )
                    .with_lock(hold.spec.name.as_str()),
                );
                continue;
            }
            if now >= hold.valid_until() {
                renewal.stopped = true;
                drop(renewal);
                hold.lost.fire(
                    Error::new(
                        ErrorKind::LockLost,
                        "the lease expired before it could be renewed",
                    )
                    .with_lock(hold.spec.name.as_str()),
                );
                continue;
            }
            if !hold.backend().capabilities().lease_renewal {
                let due = hold.valid_until();
                self.schedule_locked(&hold, &mut renewal, due);
                continue;
            }
            drop(renewal);
            to_renew.push(hold);
        }
        let batches = to_renew.chunks(BATCH).map(|batch| self.renew_batch(batch));
        join_all(batches).await;
    }

    async fn renew_batch(self: &Arc<Self>, batch: &[Arc<Hold>]) {
        let Some(first) = batch.first() else { return };
        let backend = first.backend().clone();
        let pairs: Vec<(&LockSpec, &ErasedGrant)> =
            batch.iter().map(|h| (&h.spec, &h.grant)).collect();
        // A lone hold waits for an answer until its lease runs out (then it
        // is tried again at once, and reported lost). Several holds wait
        // for the one call only until the earliest of them has a third of
        // its TTL left: a call that hangs on one of their locks (one stuck
        // connection or session among several) must not take them all down
        // with it. From then on each hold is also renewed in a call of its
        // own, and takes whichever answer comes first. The batch's call
        // keeps running: on a store that is merely slow (under load), it is
        // usually the first to answer, and cancelling it would leave every
        // hold to a herd of single calls on that same slow store.
        let earliest = batch
            .iter()
            .map(|h| h.valid_until())
            .min()
            .unwrap_or_else(Instant::now);
        let split_at = batch
            .iter()
            .filter_map(|h| h.valid_until().checked_sub(interval(h)))
            .min()
            .filter(|at| batch.len() > 1 && *at > Instant::now());
        let whole = backend.renew_all(&pairs).shared();
        let Some(split_at) = split_at else {
            let outcome = tokio::time::timeout_at(earliest.into(), whole).await;
            for (index, hold) in batch.iter().enumerate() {
                let result = outcome.as_ref().map(|results| answer(results, index));
                self.settle(hold, result.map_err(|_| ()));
            }
            return;
        };
        if let Ok(results) = tokio::time::timeout_at(split_at.into(), whole.clone()).await {
            for (index, hold) in batch.iter().enumerate() {
                self.settle(hold, Ok(answer(&results, index)));
            }
            return;
        }
        tracing::warn!(
            locks = batch.len(),
            "omnilock renewal call is slow; renewing each of its locks on its own as well"
        );
        join_all(batch.iter().enumerate().map(|(index, hold)| {
            let from_whole = whole.clone().map(move |results| answer(&results, index));
            let backend = backend.clone();
            async move {
                // The same call as the batch's, for this hold alone.
                let own = async {
                    let pair = [(&hold.spec, &hold.grant)];
                    answer(&backend.renew_all(&pair).await, 0)
                };
                let result = tokio::time::timeout_at(
                    hold.valid_until().into(),
                    first_answer(from_whole, own),
                )
                .await;
                self.settle(hold, result.map_err(|_| ()));
            }
        }))
        .await;
    }

    /// Applies a renewal's outcome to `hold` (`Err(())`: no answer before
    /// its lease ran out): schedules the next renewal, or a retry, or fires
    /// the lost signal.
    fn settle(
        self: &Arc<Self>,
        hold: &Arc<Hold>,
        result: std::result::Result<Result<Instant>, ()>,
    ) {
        let now = Instant::now();
        let mut renewal = lock(&hold.renewal);
        if renewal.stopped {
            return;
        }
        let due = match hold.metrics.renewal(result) {
            Ok(Ok(until)) => {
                *lock(&hold.valid_until) = until;
                renewal.backoff.reset();
                tracing::trace!(lock = %hold.spec.name, "omnilock renewed");
                now + interval(hold)
            }
            Ok(Err(err)) if err.is_retryable() => {
                tracing::warn!(lock = %hold.spec.name, error = %err, "omnilock renewal failed; retrying");
                now + renewal.backoff.next_delay()
            }
            Ok(Err(err)) => {
                renewal.stopped = true;
                drop(renewal);
                hold.lost.fire(err.with_lock(hold.spec.name.as_str()));
                return;
            }
            // The lease ran out while the store did not answer.
            Err(()) => now,
        };
        let due = due.min(hold.valid_until());
        self.schedule_locked(hold, &mut renewal, due);
    }
}

/// Hold `index`'s answer in a batch's answers.
fn answer(results: &[Result<Instant>], index: usize) -> Result<Instant> {
    results.get(index).cloned().unwrap_or_else(|| {
        Err(Error::new(
            ErrorKind::Backend,
            "internal: the store renewed fewer locks than asked",
        ))
    })
}

/// The first of two renewals of one hold to succeed, or to say for sure
/// that the lock is gone; a retryable failure of one waits for the other.
async fn first_answer(
    one: impl Future<Output = Result<Instant>>,
    other: impl Future<Output = Result<Instant>>,
) -> Result<Instant> {
    tokio::pin!(one, other);
    let (first, rest) = match select(one, other).await {
        Either::Left((first, other)) => (first, Either::Left(other)),
        Either::Right((first, one)) => (first, Either::Right(one)),
    };
    match first {
        Err(err) if err.is_retryable() => match rest {
            Either::Left(other) => other.await,
            Either::Right(one) => one.await,
        },
        decided => decided,
    }
}

/// Starts the task on `runtime` (the runtime of the hold that found none
/// running). `hand_over`: if this task is dropped unfinished, try to start
/// another elsewhere.
fn spawn(renewals: Arc<Renewals>, runtime: &tokio::runtime::Handle, hand_over: bool) {
    let running = Running {
        renewals,
        done: false,
        hand_over,
    };
    let task = async move {
        run(&running.renewals).await;
        running.finish();
    };
    // A runtime that is shutting down drops the task at once (and with it
    // `running`, whose drop clears the flag).
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(runtime.spawn(task)))).is_err()
    {
        tracing::warn!("omnilock: runtime gone; renewals stop and leases run out");
    }
}

async fn run(renewals: &Arc<Renewals>) {
    loop {
        let wake = match renewals.take_due() {
            Ok(holds) => {
                // A round of its own: a store call that hangs until its
                // leases' deadline must not hold back holds that come due
                // meanwhile (with a shorter TTL, say).
                let round = Round {
                    renewals: renewals.clone(),
                    holds,
                    done: false,
                };
                // Inside this task's runtime: spawning cannot fail (at
                // shutdown the round is dropped, and puts its holds back).
                tokio::spawn(async move {
                    round.renewals.renew(round.holds.clone()).await;
                    round.finish();
                });
                continue;
            }
            Err(wake) => wake,
        };
        let earlier = renewals.earlier.notified();
        match wake {
            Some(at) => {
                tokio::select! {
                    _ = tokio::time::sleep_until(at.into()) => {}
                    _ = earlier => {}
                }
            }
            None => {
                let idle = tokio::time::timeout(LINGER, earlier).await.is_err();
                let mut schedule = lock(&renewals.schedule);
                if idle && schedule.due.is_empty() {
                    schedule.running = false;
                    return;
                }
            }
        }
    }
}

/// One round of renewals under way. Dropped unfinished (its runtime shut
/// down), it puts the holds it had taken out of the schedule back in, due at
/// once, so that another runtime's task renews them or reports them lost.
struct Round {
    renewals: Arc<Renewals>,
    holds: Vec<Arc<Hold>>,
    done: bool,
}

impl Round {
    fn finish(mut self) {
        self.done = true;
    }
}

impl Drop for Round {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let now = Instant::now();
        for hold in &self.holds {
            let mut renewal = lock(&hold.renewal);
            if renewal.key.is_none() {
                self.renewals.schedule_locked(hold, &mut renewal, now);
            }
        }
    }
}

/// Owned by the task. If the task is dropped before it is done (its runtime
/// shut down while other runtimes still hold locks), the schedule is handed
/// to a new task on the runtime of a hold still in it.
struct Running {
    renewals: Arc<Renewals>,
    done: bool,
    hand_over: bool,
}

impl Running {
    fn finish(mut self) {
        self.done = true;
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let holds: Vec<Arc<Hold>> = {
            let mut schedule = lock(&self.renewals.schedule);
            schedule.running = false;
            if !self.hand_over {
                return;
            }
            schedule.due.values().filter_map(Weak::upgrade).collect()
        };
        for hold in holds {
            {
                let mut schedule = lock(&self.renewals.schedule);
                if schedule.running {
                    return;
                }
                schedule.running = true;
                schedule.wakes_at = None;
            }
            // Without a hand-over of its own: a runtime that is shutting
            // down drops it at once, and the flag is cleared again.
            spawn(self.renewals.clone(), &hold.runtime, false);
        }
    }
}

#[cfg(test)]
mod tests;
