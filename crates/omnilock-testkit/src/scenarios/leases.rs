//! Leases and their end: expiry of an abandoned holder, renewal, the lost
//! signal, stale guards and fencing tokens.

use std::time::{Duration, Instant};

use omnilock_core::{ErrorKind, LockGuard, Locks};

use super::{
    ABANDONED_TTL, PATIENCE, abandon, assert_freed_after_lease, caps, clients, unique, within,
};
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
    scenario!(
        check_is_true_only_for_the_holders_token,
        Claim::Check,
        Claim::BreakLock
    ),
    scenario!(check_is_false_once_the_lease_ran_out, Claim::Check),
];

/// A holder that vanishes without releasing (its runtime is gone, as if the
/// process died) stops renewing; another client gets the lock soon after its lease ends.
pub(crate) async fn abandoned_holder_expires(subject: &Subject) {
    let name = unique("abandoned");
    let ttl = ABANDONED_TTL;
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
    assert_freed_after_lease("the lock", waited);
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

/// `count` locks `<name>/<i>` held by `locks`, taken 4 at a time.
///
/// Not all at once (the default SQL pool has 8 connections): the first
/// locks' renewals would queue for a connection behind the rest of the
/// acquisitions, and under CI load that queue outlasted a 2 s lease
/// (PostgreSQL, once).
async fn hold_many(locks: &Locks, name: &str, ttl: Duration, count: usize) -> Vec<LockGuard> {
    use futures_util::StreamExt;
    let acquisitions = (0..count).map(|index| {
        let name = format!("{name}/{index}");
        async move { locks.lock(&name).ttl(ttl).acquire().await }
    });
    futures_util::stream::iter(acquisitions)
        .buffered(4)
        .collect::<Vec<_>>()
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

/// `check` is true for the holder's token only, seen from any client, and
/// false for the same token after a release, beside a later holder, after
/// a break, and for a token never issued; a semaphore permit answers
/// `Unsupported` where the store has semaphores.
pub(crate) async fn check_is_true_only_for_the_holders_token(subject: &Subject) {
    let name = unique("check");
    let [a, b] = <[Locks; 2]>::try_from(clients(subject, 2).await).unwrap();
    let first = a.acquire(&name).await.expect("acquire");
    let t1 = first.token();
    assert!(
        first.check().await.expect("check"),
        "the holder's own check"
    );
    assert!(
        b.check(&name, t1).await.expect("check"),
        "another client's check"
    );
    assert!(
        !b.check(&name, t1 + 1_000_000).await.expect("check"),
        "a token never issued"
    );
    first.release().await.expect("release");
    assert!(
        !b.check(&name, t1).await.expect("check"),
        "after the release"
    );

    let second = b.acquire(&name).await.expect("acquire");
    let t2 = second.token();
    assert!(b.check(&name, t2).await.expect("check"));
    assert!(
        !a.check(&name, t1).await.expect("check"),
        "beside a later holder"
    );

    assert!(
        a.break_lock(&name).await.expect("break"),
        "the lock was held"
    );
    assert!(
        !a.check(&name, t2).await.expect("check"),
        "after a break, asked anew"
    );
    assert!(
        !second.check().await.expect("check"),
        "after a break, by the guard"
    );
    // The broken guard's release has nothing to give back; either answer
    // leaves the lock free.
    let _ = second.release().await;

    if caps(subject).await.semaphore {
        let permits = format!("{name}-permits");
        let permit = a.semaphore(&permits, 2).acquire().await.expect("permit");
        let err = permit
            .check()
            .await
            .expect_err("a permit cannot be checked");
        assert_eq!(err.kind(), ErrorKind::Unsupported, "{err}");
        permit.release().await.expect("release");
    }
}

/// A holder that vanishes (its process dies) keeps `check` true only until
/// its lease runs out: once the lease has ended with no renewal, its token
/// is no longer the holder's, though nobody else took the lock.
pub(crate) async fn check_is_false_once_the_lease_ran_out(subject: &Subject) {
    let name = unique("check-expiry");
    let ttl = Duration::from_secs(2);
    let observer = subject.client().await;
    let (token_tx, token_rx) = std::sync::mpsc::channel();
    let acquired_at = abandon(subject, {
        let name = name.clone();
        move |locks| {
            Box::pin(async move {
                let guard = locks.lock(&name).ttl(ttl).acquire().await;
                if let Ok(guard) = &guard {
                    let _ = token_tx.send(guard.token());
                }
                guard
            })
        }
    });
    let token = token_rx.recv().expect("the vanished holder's token");
    // Read while the lease surely runs: a store's lease began before the
    // acquisition returned (on etcd, at the shared lease's last renewal,
    // up to a third of the TTL earlier), so only an early read is sure to
    // find it; a slow machine may be past that already, and then only the
    // end is checked.
    if acquired_at.elapsed() < ttl / 4 {
        assert!(
            observer.check(&name, token).await.expect("check"),
            "the vanished holder's lease still runs"
        );
    }
    let deadline = acquired_at + ttl + PATIENCE;
    while observer.check(&name, token).await.expect("check") {
        assert!(
            Instant::now() < deadline,
            "check still true {:?} after the holder vanished (TTL {ttl:?})",
            acquired_at.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
