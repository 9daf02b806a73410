//! Leases and their end: expiry of an abandoned holder, renewal, the lost
//! signal, stale guards and fencing tokens.

use std::time::{Duration, Instant};

use omnilock_core::{ErrorKind, LockGuard, Locks};

use super::{PATIENCE, abandon, caps, clients, unique, within};
use crate::Subject;
use crate::registry::{Claim, Scenario, scenario};

/// The scenarios of this module, with what each needs the store to claim: leases, renewal, the lost signal and fencing tokens.
pub(crate) static SCENARIOS: &[Scenario] = &[
    scenario!(abandoned_holder_expires),
    scenario!(renewal_keeps_lock, Claim::LeaseRenewal),
    scenario!(lost_signal_fires, Claim::BreakLock),
    scenario!(release_is_not_a_loss),
    scenario!(stale_release_is_not_owner, Claim::BreakLock),
    scenario!(fencing_tokens_increase, Claim::FencingTokens),
];

/// A holder that vanishes without releasing (its runtime is gone, as if the
/// process died) stops renewing; another client gets the lock within TTL + 1 s.
pub(crate) async fn abandoned_holder_expires(subject: &Subject) {
    let name = unique("abandoned");
    let ttl = Duration::from_secs(2);
    let thief = subject.client().await;
    let acquired_at = abandon(subject, {
        let name = name.clone();
        move |locks| Box::pin(async move { locks.lock(&name).ttl(ttl).acquire().await })
    });
    let guard = thief
        .lock(&name)
        .timeout(ttl + PATIENCE)
        .acquire()
        .await
        .expect("the abandoned lock frees");
    let waited = acquired_at.elapsed();
    assert!(
        waited <= ttl + Duration::from_secs(1),
        "the lock freed {waited:?} after the holder vanished (TTL {ttl:?})"
    );
    guard.release().await.expect("release");
}

/// Renewal keeps a lock held across 2.5 × TTL, past two whole leases. The
/// TTL is 2 s: renewals run every third of it, and a store on a shared
/// 2-core machine stalls half a second now and then (a 1 s TTL lost
/// MariaDB's lock in CI once).
///
/// The same client holds 100 more locks meanwhile, so that renewals go out
/// in batches (`Backend::renew_all`): every one of them must stay held too.
pub(crate) async fn renewal_keeps_lock(subject: &Subject) {
    let name = unique("renewal");
    let ttl = Duration::from_secs(2);
    let [a, b] = <[Locks; 2]>::try_from(clients(subject, 2).await).unwrap();
    let guard = a.lock(&name).ttl(ttl).acquire().await.expect("acquire");
    let others = hold_many(&a, &name, ttl, 100).await;
    let first_deadline = guard.safe_until();
    let lost = guard.lost();
    tokio::pin!(lost);
    let end = Instant::now() + 2 * ttl + ttl / 2;
    while Instant::now() < end {
        tokio::select! {
            loss = &mut lost => panic!("lock lost while renewing: {loss}"),
            _ = tokio::time::sleep(ttl / 2) => {}
        }
        assert!(guard.is_held(), "guard reports the lock not held");
        let stolen = b.lock(&name).ttl(ttl).try_acquire().await.expect("probe");
        assert!(stolen.is_none(), "another owner took a renewed lock");
    }
    assert!(
        guard.safe_until() > first_deadline,
        "safe deadline never moved"
    );
    for (index, other) in others.iter().enumerate() {
        assert!(
            other.is_held(),
            "lock {index} of 100 held beside it was lost"
        );
        assert!(
            other.safe_until() > first_deadline,
            "lock {index} of 100 held beside it was never renewed"
        );
        let stolen = b
            .lock(&format!("{name}/{index}"))
            .ttl(ttl)
            .try_acquire()
            .await
            .expect("probe");
        assert!(stolen.is_none(), "another owner took renewed lock {index}");
    }
    guard.release().await.expect("release");
    for other in others {
        other.release().await.expect("release");
    }
}

/// `count` locks `<name>/<i>` held by `locks`, taken side by side.
async fn hold_many(locks: &Locks, name: &str, ttl: Duration, count: usize) -> Vec<LockGuard> {
    let acquisitions = (0..count).map(|index| {
        let name = format!("{name}/{index}");
        async move { locks.lock(&name).ttl(ttl).acquire().await }
    });
    futures_util::future::join_all(acquisitions)
        .await
        .into_iter()
        .collect::<Result<_, _>>()
        .expect("acquire the locks held beside it")
}

/// The lost signal fires when the lock is taken away under its holder, and
/// its error names the backend and the lock.
pub(crate) async fn lost_signal_fires(subject: &Subject) {
    let name = unique("lost");
    let [a, admin] = <[Locks; 2]>::try_from(clients(subject, 2).await).unwrap();
    // 2 s, as for renewal: with 1 s, a store stalled a third of a second on
    // a loaded 2-core machine lost the locks held beside the broken one.
    let ttl = Duration::from_secs(2);
    let guard = a.lock(&name).ttl(ttl).acquire().await.expect("acquire");
    // Renewed in the same batches as the broken one: they stay held.
    let others = hold_many(&a, &name, ttl, 20).await;
    assert!(guard.is_held());
    assert!(admin.break_lock(&name).await.expect("break"));
    let loss = within("the lost signal fires", guard.lost()).await;
    for (index, other) in others.iter().enumerate() {
        assert!(
            other.is_held(),
            "lock {index} renewed beside the broken one was reported lost too"
        );
    }
    for other in others {
        other.release().await.expect("release");
    }
    assert_eq!(loss.kind(), ErrorKind::LockLost);
    assert_eq!(loss.backend(), Some(a.backend_kind()), "{loss}");
    assert_eq!(loss.lock(), Some(name.as_str()), "{loss}");
    assert!(!guard.is_held());
    let err = guard.release().await.expect_err("releasing a lost lock");
    assert_eq!(err.kind(), ErrorKind::NotOwner, "{err}");
}

/// A clean release is not a loss: a task watching the lost signal must not
/// wake when its holder releases (a false alarm there makes applications
/// abandon work or page someone).
pub(crate) async fn release_is_not_a_loss(subject: &Subject) {
    let name = unique("release-not-lost");
    let [a, b] = <[Locks; 2]>::try_from(clients(subject, 2).await).unwrap();
    let guard = a.acquire(&name).await.expect("acquire");
    let watcher = tokio::spawn(guard.lost());
    guard.release().await.expect("release");
    // The store has surely finished with the first hold once another client
    // got the lock after it.
    let next = within("another client acquires", b.acquire(&name)).await;
    next.expect("acquire after release")
        .release()
        .await
        .expect("release");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !watcher.is_finished(),
        "the lost signal fired after a clean release: {:?}",
        watcher.await
    );
    watcher.abort();
}

/// A stale guard's release returns NotOwner and leaves the new holder's lock alone.
pub(crate) async fn stale_release_is_not_owner(subject: &Subject) {
    let name = unique("stale");
    let [a, b, c] = <[Locks; 3]>::try_from(clients(subject, 3).await).unwrap();
    let stale = a.acquire(&name).await.expect("first holder");
    assert!(c.break_lock(&name).await.expect("break"));
    let fresh = within("a new holder takes the broken lock", b.acquire(&name))
        .await
        .expect("second holder");
    if caps(subject).await.fencing {
        assert!(fresh.token() > stale.token(), "token did not advance");
    }
    let err = stale.release().await.expect_err("stale release");
    assert_eq!(err.kind(), ErrorKind::NotOwner, "{err}");
    assert!(fresh.is_held());
    let probe = c.try_acquire(&name).await.expect("probe");
    assert!(
        probe.is_none(),
        "the stale release freed the new holder's lock"
    );
    fresh.release().await.expect("new holder releases");
}

/// Fencing tokens strictly increase over 100 acquisitions by rotating owners
/// and clients.
pub(crate) async fn fencing_tokens_increase(subject: &Subject) {
    let name = unique("fencing");
    let clients = clients(subject, 3).await;
    let mut last = 0u64;
    for i in 0..100 {
        let guard = clients[i % clients.len()]
            .acquire(&name)
            .await
            .expect("acquire");
        assert!(guard.token() > last, "token {} after {last}", guard.token());
        last = guard.token();
        if i % 2 == 0 {
            guard.release().await.expect("release");
        } else {
            // Release on drop must free the lock just as well.
            drop(guard);
        }
    }
}
