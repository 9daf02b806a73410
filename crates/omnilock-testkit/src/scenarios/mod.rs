//! The scenarios, one module per area, and the helpers they share. Each
//! takes any [`Subject`] whose store claims what the scenario needs (listed
//! with it in [`crate::registry`], which the runner checks first) and
//! asserts outcomes. Waits are bounded by generous timeouts (shared machines
//! stall now and then) and driven by events, not sleeps, except where the
//! passing of time is the point (leases).

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use omnilock_core::{Capabilities, LockGuard, LockRequest, Locks, Result};

use crate::Subject;
pub(crate) use crate::{queue_request, queue_waiter, take};

mod contract;
mod elections;
mod exclusion;
mod herd;
mod leases;
mod multi;
mod names;
mod reentrancy;
mod release;
mod rw;
mod semaphore;

pub use contract::{
    capabilities_tell_the_truth, errors_name_backend_and_lock, invalid_names_rejected,
};
pub use elections::{
    election_longest_value_round_trips, election_observers_see_every_change,
    election_one_leader_at_a_time, election_successor_takes_over_when_leader_dies,
};
pub use exclusion::{
    cancelled_acquire_leaves_nothing, fifo_order, many_locks_at_once, mutual_exclusion,
    newcomers_never_pass_a_waiter, try_acquire_and_timeout,
};
pub use herd::{handoff_cost_is_flat, rw_handoff_cost_is_flat, semaphore_handoff_cost_is_flat};
pub use leases::{
    abandoned_holder_expires, fencing_tokens_increase, lost_signal_fires, release_is_not_a_loss,
    renewal_keeps_lock, stale_release_is_not_owner,
};
pub use multi::{
    lock_all_atomic_step_never_holds_a_part_alone, lock_all_cancelled_leaves_nothing,
    lock_all_in_opposite_orders_never_deadlocks, lock_all_is_all_or_nothing,
    lock_all_lost_fires_when_a_part_is_lost, lock_all_rejects_bad_input, lock_all_takes_every_name,
};
pub use names::{distinct_names_are_distinct_locks, namespaces_are_disjoint};
pub use reentrancy::{non_reentrant_reacquire_fails, reentrancy, reentrancy_across_clients};
pub use release::{drop_outside_runtime, drop_releases_in_background};
pub use rw::{
    rw_abandoned_writer_expires, rw_cancelled_writer_leaves_nothing,
    rw_readers_never_overlap_a_writer, rw_readers_share_writers_exclude, rw_reentrancy_rules,
    rw_tokens_rise, rw_waiting_writer_blocks_later_readers,
};
pub use semaphore::{
    primitives_have_separate_namespaces, primitives_reject_bad_input_and_report_support,
    semaphore_abandoned_permit_expires, semaphore_cancelled_acquire_leaves_nothing,
    semaphore_fifo_order, semaphore_first_tries_at_once_never_error,
    semaphore_full_refuses_until_release, semaphore_paused_holder_is_told,
    semaphore_permits_mismatch_rejected, semaphore_permits_never_exceeded, semaphore_tokens_rise,
};

/// A bound for things that should happen "at once" or "soon": long enough
/// for a stalled store, short enough to catch a hang or a TTL-long delay.
const PATIENCE: Duration = Duration::from_secs(10);

fn unique(prefix: &str) -> String {
    format!("conformance/{prefix}/{:08x}", rand_u32())
}

fn rand_u32() -> u32 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    nanos ^ std::process::id().rotate_left(16)
}

pub(crate) async fn within<T>(what: &str, future: impl std::future::Future<Output = T>) -> T {
    match tokio::time::timeout(PATIENCE, future).await {
        Ok(value) => value,
        Err(_) => panic!("{what}: did not happen within {PATIENCE:?}"),
    }
}

async fn clients(subject: &Subject, n: usize) -> Vec<Locks> {
    let mut all = Vec::with_capacity(n);
    for _ in 0..n {
        all.push(subject.client().await);
    }
    all
}

async fn caps(subject: &Subject) -> Capabilities {
    subject.client().await.capabilities()
}

/// try-acquires `name` until it succeeds: for a lock that is free but may
/// still have a cancelled waiter's entry, which goes in the background.
async fn once_free(locks: &Locks, name: &str) -> LockGuard {
    once_taken(locks, |locks| locks.lock(name)).await
}

/// try-acquires what `build` makes until it succeeds (a permit, a side of a
/// read-write lock), as [`once_free`] does for a lock.
async fn once_taken<F>(locks: &Locks, build: F) -> LockGuard
where
    F: for<'a> Fn(&'a Locks) -> LockRequest<'a>,
{
    loop {
        if let Some(guard) = build(locks).try_acquire().await.expect("try_acquire") {
            return guard;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A way to take a guard on a client: what [`abandon`] leaks.
type Take =
    Box<dyn FnOnce(Locks) -> Pin<Box<dyn Future<Output = Result<LockGuard>> + Send>> + Send>;

/// Acquires with `take` on a runtime of its own, leaks the guard and drops
/// that runtime: its renewal task and connections die with it, as in a
/// killed process. Returns when it acquired.
fn abandon(
    subject: &Subject,
    take: impl FnOnce(Locks) -> Pin<Box<dyn Future<Output = Result<LockGuard>> + Send>> + Send + 'static,
) -> Instant {
    let take: Take = Box::new(take);
    let victim = subject.clone();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let at = runtime.block_on(async {
            let locks = victim.client().await;
            let guard = take(locks).await.expect("the victim acquires");
            let at = Instant::now();
            std::mem::forget(guard);
            at
        });
        drop(runtime);
        at
    })
    .join()
    .expect("victim thread")
}
