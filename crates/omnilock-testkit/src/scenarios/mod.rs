//! The scenarios, one module per area, and the helpers they share. Each
//! module lists its scenarios in its `SCENARIOS`, beside the functions,
//! with what each needs the store to claim (the runner checks that first);
//! [`crate::registry`] gathers the lists. A scenario is crate-private, so
//! one that no list names is dead code, which the build refuses. Each
//! takes any [`Subject`] and asserts outcomes. Waits are bounded by generous timeouts (shared machines
//! stall now and then) and driven by events, not sleeps, except where the
//! passing of time is the point (leases).

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use omnilock_core::{Capabilities, Error, ErrorKind, LockGuard, LockRequest, Locks, Result};

use crate::Subject;
pub(crate) use crate::{queue_request, queue_waiter, take};

pub(crate) mod contract;
pub(crate) mod elections;
pub(crate) mod exclusion;
pub(crate) mod guarded;
pub(crate) mod herd;
pub(crate) mod hold_bounds;
pub(crate) mod inspect;
pub(crate) mod leases;
pub(crate) mod multi;
pub(crate) mod names;
pub(crate) mod records;
pub(crate) mod reentrancy;
pub(crate) mod release;
pub(crate) mod rw;
pub(crate) mod semaphore;

pub use names::namespaces_are_disjoint;

/// A bound for things that should happen "at once" or "soon": long enough
/// for a stalled store, short enough to catch a hang or a TTL-long delay.
const PATIENCE: Duration = Duration::from_secs(10);

/// The lease of a holder that vanishes in the expiry scenarios.
const ABANDONED_TTL: Duration = Duration::from_secs(3);

/// Asserts that what a vanished holder had (`what`) freed soon after its
/// lease ran out: `waited` since it was taken, at most [`ABANDONED_TTL`]
/// plus two seconds. The slack is for the waiter, not the store: on a
/// 2-core machine running many trials at once a waiter's poll came 1.6 s
/// late. The bound stays under twice the TTL, so a lease that ran double
/// (or one renewal too many after death) still fails it.
fn assert_freed_after_lease(what: &str, waited: Duration) {
    let bound = ABANDONED_TTL + Duration::from_secs(2);
    assert!(
        waited <= bound,
        "{what} freed {waited:?} after its holder vanished (TTL {ABANDONED_TTL:?}, bound {bound:?})"
    );
}

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

/// A waiting acquire given `timeout` failed with `err` after `waited`: a
/// `Timeout`, not before its time and not long after.
pub(crate) fn assert_timed_out(err: &Error, waited: Duration, timeout: Duration) {
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    assert!(
        waited >= timeout,
        "gave up after {waited:?}, before its {timeout:?}"
    );
    assert!(waited < PATIENCE, "timeout took {waited:?}");
}

/// `request` (of a held lock, a full semaphore) waits for `timeout` and
/// fails with a `Timeout` in its time.
async fn times_out(request: LockRequest<'_>, timeout: Duration) {
    let started = Instant::now();
    let err = request
        .timeout(timeout)
        .acquire()
        .await
        .expect_err("a wait for what another holds must time out");
    assert_timed_out(&err, started.elapsed(), timeout);
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
