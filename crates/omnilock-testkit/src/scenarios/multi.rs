//! `lock_all`: several locks as one, all or nothing, without deadlock.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use omnilock_core::{ErrorKind, Locks};
use tokio::sync::oneshot;

use super::{clients, once_free, unique, within};
use crate::Subject;
use crate::registry::{Claim, Scenario, scenario};

/// The scenarios of this module, with what each needs the store to claim: `lock_all`.
pub(crate) static SCENARIOS: &[Scenario] = &[
    scenario!(lock_all_takes_every_name),
    scenario!(lock_all_is_all_or_nothing),
    scenario!(lock_all_in_opposite_orders_never_deadlocks),
    scenario!(lock_all_cancelled_leaves_nothing),
    scenario!(lock_all_lost_fires_when_a_part_is_lost, Claim::BreakLock),
    scenario!(lock_all_rejects_bad_input),
    scenario!(
        lock_all_atomic_step_never_holds_a_part_alone,
        Claim::AtomicLockAll
    ),
];

/// Every part is held (another client finds each busy) until the release,
/// which frees them all; each part has its own token.
pub(crate) async fn lock_all_takes_every_name(subject: &Subject) {
    let base = unique("all");
    let names = [
        format!("{base}/c"),
        format!("{base}/a"),
        format!("{base}/b"),
    ];
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let [a, b] = <[Locks; 2]>::try_from(clients(subject, 2).await).unwrap();
    let all = a.lock_all(&refs).acquire().await.expect("lock_all");
    assert!(all.is_held());
    let held: Vec<&str> = all.guards().iter().map(|g| g.name().as_str()).collect();
    let mut sorted = refs.clone();
    sorted.sort();
    assert_eq!(held, sorted, "one part per name, in name order");
    for name in &names {
        assert!(all.token(name).is_some(), "a token for {name}");
        assert!(
            b.try_acquire(name).await.expect("try_acquire").is_none(),
            "{name} is held by the set"
        );
    }
    all.release().await.expect("release all");
    for name in &names {
        within("a part is free after the release", once_free(&b, name))
            .await
            .release()
            .await
            .expect("release");
    }
}

/// `try_acquire` of a set with one busy part gets nothing and holds
/// nothing: the parts it could take are free again when it returns.
pub(crate) async fn lock_all_is_all_or_nothing(subject: &Subject) {
    let base = unique("all-or-nothing");
    let (first, busy, last) = (
        format!("{base}/1"),
        format!("{base}/2"),
        format!("{base}/3"),
    );
    let [a, b] = <[Locks; 2]>::try_from(clients(subject, 2).await).unwrap();
    let blocker = b.acquire(&busy).await.expect("hold the middle part");
    let got = a
        .lock_all(&[&last, &busy, &first])
        .try_acquire()
        .await
        .expect("try_acquire");
    assert!(got.is_none(), "one part is busy: nothing is taken");
    for name in [&first, &last] {
        let free = b.try_acquire(name).await.expect("try_acquire");
        free.unwrap_or_else(|| panic!("{name} was given back"))
            .release()
            .await
            .expect("release");
    }
    blocker.release().await.expect("release");
}

/// A store with an atomic step for several locks never holds one part of
/// a set alone: while the set's last part is busy and one client tries
/// the set again and again, another client's try of the first part always
/// succeeds (taken one by one, the first part would be held for a moment
/// before the busy one was found).
pub(crate) async fn lock_all_atomic_step_never_holds_a_part_alone(subject: &Subject) {
    let base = unique("atomic");
    let (first, last) = (format!("{base}/a"), format!("{base}/z"));
    let [a, b, c] = <[Locks; 3]>::try_from(clients(subject, 3).await).unwrap();
    let blocker = b.acquire(&last).await.expect("hold the last part");
    let done = Arc::new(AtomicU32::new(0));
    let trying = {
        let (first, last, done) = (first.clone(), last.clone(), done.clone());
        tokio::spawn(async move {
            for _ in 0..200 {
                let got = a
                    .lock_all(&[&last, &first])
                    .try_acquire()
                    .await
                    .expect("try the set");
                assert!(got.is_none(), "the last part is busy: nothing is taken");
            }
            done.store(1, Ordering::SeqCst);
        })
    };
    let mut probes = 0;
    while done.load(Ordering::SeqCst) == 0 {
        let got = c.try_acquire(&first).await.expect("try the first part");
        let guard = got.unwrap_or_else(|| {
            panic!("the first part was held on its own, {probes} probes in: no atomic step")
        });
        guard.release().await.expect("release");
        probes += 1;
    }
    trying.await.expect("the trying task");
    assert!(probes > 0, "the probe never ran beside the tries");
    blocker.release().await.expect("release");
    // Free now: the one step takes the whole set.
    let both = within(
        "a try of the free set takes it",
        once_all(&c, &[&first, &last]),
    )
    .await;
    assert!(both.token(&first).is_some() && both.token(&last).is_some());
    both.release().await.expect("release the set");
}

/// try-acquires the set until it is free (a released part may be freed in
/// the background).
async fn once_all(locks: &Locks, names: &[&str]) -> omnilock_core::MultiGuard {
    loop {
        if let Some(all) = locks
            .lock_all(names)
            .try_acquire()
            .await
            .expect("try the set")
        {
            return all;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Two clients that take the same two locks in opposite orders, again and
/// again, never deadlock and never overlap.
pub(crate) async fn lock_all_in_opposite_orders_never_deadlocks(subject: &Subject) {
    let base = unique("opposite");
    let (x, y) = (format!("{base}/x"), format!("{base}/y"));
    let inside = Arc::new(AtomicU32::new(0));
    let mut tasks = Vec::new();
    for (locks, order) in clients(subject, 2)
        .await
        .into_iter()
        .zip([[x.clone(), y.clone()], [y.clone(), x.clone()]])
    {
        let inside = inside.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..10 {
                let both = locks
                    .lock_all(&[&order[0], &order[1]])
                    .acquire()
                    .await
                    .expect("lock_all");
                assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two sets overlap");
                tokio::time::sleep(Duration::from_millis(2)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                both.release().await.expect("release");
            }
        }));
    }
    for task in tasks {
        within("both clients finish (no deadlock)", task)
            .await
            .expect("client task");
    }
}

/// An acquire of a set that waits on a busy part and is dropped (or times
/// out) gives back the parts it had already taken.
pub(crate) async fn lock_all_cancelled_leaves_nothing(subject: &Subject) {
    let base = unique("all-cancel");
    let (first, busy) = (format!("{base}/1"), format!("{base}/2"));
    let [a, b] = <[Locks; 2]>::try_from(clients(subject, 2).await).unwrap();
    let blocker = b.acquire(&busy).await.expect("hold the second part");
    let (waiting_tx, waiting_rx) = oneshot::channel();
    let task = tokio::spawn({
        let (a, first, busy) = (a.clone(), first.clone(), busy.clone());
        async move {
            a.lock_all(&[&first, &busy])
                .on_wait(move || {
                    let _ = waiting_tx.send(());
                })
                .acquire()
                .await
        }
    });
    within("the set waits on its busy part", waiting_rx)
        .await
        .expect("waits");
    task.abort();
    let _ = task.await;
    within("the first part is given back", once_free(&b, &first))
        .await
        .release()
        .await
        .expect("release");
    let err = a
        .lock_all(&[&first, &busy])
        .timeout(Duration::from_millis(300))
        .acquire()
        .await
        .expect_err("the second part stays busy");
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    within("the first part is given back", once_free(&b, &first))
        .await
        .release()
        .await
        .expect("release");
    blocker.release().await.expect("release");
}

/// The set's lost signal fires when any one part is lost.
pub(crate) async fn lock_all_lost_fires_when_a_part_is_lost(subject: &Subject) {
    let base = unique("all-lost");
    let (first, second) = (format!("{base}/1"), format!("{base}/2"));
    let [a, admin] = <[Locks; 2]>::try_from(clients(subject, 2).await).unwrap();
    let all = a
        .lock_all(&[&first, &second])
        .ttl(Duration::from_secs(1))
        .acquire()
        .await
        .expect("lock_all");
    let lost = all.lost();
    assert!(admin.break_lock(&second).await.expect("break"));
    let loss = within("the set's lost signal fires", lost).await;
    assert_eq!(loss.kind(), ErrorKind::LockLost, "{loss}");
    assert_eq!(loss.lock(), Some(second.as_str()), "{loss}");
    assert!(!all.is_held());
    let _ = all.release().await;
}

/// No names, a name twice, or an invalid name: a clear error, nothing
/// taken.
pub(crate) async fn lock_all_rejects_bad_input(subject: &Subject) {
    let locks = subject.client().await;
    let name = unique("all-bad");
    let err = locks
        .lock_all(&[] as &[&str])
        .acquire()
        .await
        .expect_err("no names");
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
    let err = locks
        .lock_all(&[&name, &name])
        .try_acquire()
        .await
        .expect_err("a name twice");
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
    assert!(err.to_string().contains("twice"), "{err}");
    assert_eq!(err.backend(), Some(locks.backend_kind()), "{err}");
    let err = locks
        .lock_all(&[&name, ""])
        .acquire()
        .await
        .expect_err("an empty name");
    assert_eq!(err.kind(), ErrorKind::InvalidName, "{err}");
    locks
        .try_acquire(&name)
        .await
        .expect("try_acquire")
        .expect("nothing was taken")
        .release()
        .await
        .expect("release");
}
