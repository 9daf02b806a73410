//! `max_hold` and `min_hold`: bounds on how long one acquisition keeps a
//! lock, the same on every store (core enforces them through renewal and
//! release).

use std::time::{Duration, Instant};

use omnilock_core::{ErrorKind, Locks};

use super::{clients, unique, within};
use crate::Subject;
use crate::registry::{Claim, Scenario, scenario};

/// The scenarios of this module, with what each needs the store to claim.
pub(crate) static SCENARIOS: &[Scenario] = &[
    scenario!(
        max_hold_stops_renewal_and_reports_the_loss,
        Claim::LeaseRenewal
    ),
    scenario!(min_hold_keeps_a_released_lock_until_it_passes),
    scenario!(hold_bounds_that_contradict_are_refused),
];

/// A holder that would keep the lock for ever (it never releases) is told
/// it lost the lock once `max_hold` has passed, well before a lease that
/// renewal would have kept alive runs out; dropping the guard then frees
/// the lock for the next client at once.
pub(crate) async fn max_hold_stops_renewal_and_reports_the_loss(subject: &Subject) {
    let [a, b] = <[Locks; 2]>::try_from(clients(subject, 2).await).unwrap();
    let name = unique("max-hold");
    let max_hold = Duration::from_millis(1500);
    let started = Instant::now();
    // A lease longer than three max-holds: the loss must come from the
    // max-hold, before the first renewal is even due (a renewal late on a
    // loaded machine would otherwise report a lease that ran out).
    let guard = a
        .lock(&name)
        .ttl(Duration::from_secs(10))
        .max_hold(max_hold)
        .acquire()
        .await
        .expect("acquire");
    // The grant came between `started` and now: the loss is at least
    // max_hold after the first, and within a second of max_hold after the
    // second (on a loaded machine the acquire itself can take a second).
    let acquired = Instant::now();
    let loss = within("the max_hold loss", guard.lost()).await;
    let (since_asked, since_granted) = (started.elapsed(), acquired.elapsed());
    assert_eq!(loss.kind(), ErrorKind::LockLost, "{loss}");
    assert!(loss.to_string().contains("max_hold"), "{loss}");
    assert!(
        since_asked >= max_hold,
        "reported lost {since_asked:?} after asking, before its max_hold {max_hold:?}"
    );
    assert!(
        since_granted < max_hold + Duration::from_secs(1),
        "reported lost {since_granted:?} after the grant (max_hold {max_hold:?})"
    );
    assert!(!guard.is_held());
    drop(guard);
    let next = within("the next holder", b.acquire(&name)).await;
    next.expect("acquire after the max_hold")
        .release()
        .await
        .expect("release");
}

/// A release before `min_hold` waits until it has passed, the lock still
/// held (another client's try fails meanwhile); then the lock is free.
pub(crate) async fn min_hold_keeps_a_released_lock_until_it_passes(subject: &Subject) {
    let [a, b] = <[Locks; 2]>::try_from(clients(subject, 2).await).unwrap();
    let name = unique("min-hold");
    let min_hold = Duration::from_millis(1500);
    let started = Instant::now();
    let guard = a
        .lock(&name)
        .min_hold(min_hold)
        .acquire()
        .await
        .expect("acquire");
    let releasing = tokio::spawn(guard.release());
    let probe = b.try_acquire(&name).await.expect("try_acquire");
    assert!(
        probe.is_none() || started.elapsed() >= min_hold,
        "the lock was free {:?} after the grant, inside its min_hold",
        started.elapsed()
    );
    drop(probe);
    within("the release", releasing)
        .await
        .expect("join")
        .expect("release");
    assert!(
        started.elapsed() >= min_hold,
        "released after {:?}, inside its min_hold {min_hold:?}",
        started.elapsed()
    );
    let next = b.try_acquire(&name).await.expect("try_acquire");
    next.expect("free once min_hold passed")
        .release()
        .await
        .expect("release");
}

/// Bounds that cannot both hold are refused before any I/O.
pub(crate) async fn hold_bounds_that_contradict_are_refused(subject: &Subject) {
    let locks = subject.client().await;
    let name = unique("hold-bounds");
    let err = locks
        .lock(&name)
        .min_hold(Duration::from_secs(60))
        .max_hold(Duration::from_secs(30))
        .try_acquire()
        .await
        .expect_err("min_hold above max_hold");
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
    assert!(err.to_string().contains("min_hold"), "{err}");
    let err = locks
        .lock(&name)
        .max_hold(Duration::ZERO)
        .try_acquire()
        .await
        .expect_err("a zero max_hold");
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
    let free = locks.try_acquire(&name).await.expect("try_acquire");
    assert!(free.is_some(), "a refused request took the lock");
}
